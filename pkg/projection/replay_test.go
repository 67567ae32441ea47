package projection

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/kvstore"
	"exacto.dev/pkg/stream"
)

// emptyPulls is a JetStream whose replay consumers answer their first `empty` pulls (all of
// them when empty < 0) with nothing, as a pull does across an ordered consumer reset, a
// reconnect or a leader change while events are still stored.
type emptyPulls struct {
	jetstream.JetStream
	empty int64
	pulls *atomic.Int64
}

func (j emptyPulls) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	st, err := j.JetStream.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return emptyPullsStream{Stream: st, j: j}, nil
}

type emptyPullsStream struct {
	jetstream.Stream
	j emptyPulls
}

func (s emptyPullsStream) OrderedConsumer(ctx context.Context, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	c, err := s.Stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return emptyPullsConsumer{Consumer: c, j: s.j}, nil
}

type emptyPullsConsumer struct {
	jetstream.Consumer
	j emptyPulls
}

func (c emptyPullsConsumer) empty() bool {
	n := c.j.pulls.Add(1)
	return c.j.empty < 0 || n <= c.j.empty
}

func (c emptyPullsConsumer) FetchNoWait(batch int) (jetstream.MessageBatch, error) {
	if c.empty() {
		return emptyBatch(), nil
	}
	return c.Consumer.FetchNoWait(batch)
}

func (c emptyPullsConsumer) Fetch(batch int, opts ...jetstream.FetchOpt) (jetstream.MessageBatch, error) {
	if c.empty() {
		time.Sleep(10 * time.Millisecond) // as a pull waiting in vain would
		return emptyBatch(), nil
	}
	return c.Consumer.Fetch(batch, opts...)
}

type noMsgs struct{ msgs chan jetstream.Msg }

func (b noMsgs) Messages() <-chan jetstream.Msg { return b.msgs }
func (b noMsgs) Error() error                   { return jetstream.ErrNoMessages }

func emptyBatch() jetstream.MessageBatch {
	b := noMsgs{msgs: make(chan jetstream.Msg)}
	close(b.msgs)
	return b
}

// publish stores evs on EXACTO_EVENTS, a few milliseconds apart, and returns the stream.
func publish(t *testing.T, conn *broker.Conn, evs []envelope.Envelope) jetstream.Stream {
	t.Helper()
	ctx := context.Background()
	for _, env := range evs {
		msg, err := stream.EventMessage(ctx, env)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.JS.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	st, err := conn.JS.Stream(ctx, stream.Events)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func shorten(t *testing.T, stall, wait time.Duration) {
	s, w := stallAfter, retryWait
	stallAfter, retryWait = stall, wait
	t.Cleanup(func() { stallAfter, retryWait = s, w })
}

// Pulls that come back empty while events are still stored do not end the replay: it
// pulls again and applies every event, as one with no empty pull does.
func TestReplayDoesNotEndAtAnEmptyPull(t *testing.T) {
	shorten(t, 10*time.Second, 50*time.Millisecond)
	ctx := context.Background()
	conn := brokertest.Start(t, "")
	evs := history()
	publish(t, conn, evs)
	pulls := &atomic.Int64{}
	got := Memories()
	p, err := Replay(ctx, emptyPulls{JetStream: conn.JS, empty: 3, pulls: pulls}, got, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Done != uint64(len(evs)) || p.Total != p.Done || p.LastSeq != p.End || pulls.Load() <= 3 {
		t.Fatalf("after 3 empty pulls: %+v (%d pulls), want all %d events", p, pulls.Load(), len(evs))
	}
	want := Memories()
	for _, env := range evs {
		if _, err := Apply(ctx, want, nil, env); err != nil {
			t.Fatal(err)
		}
	}
	if err := sameProjections(ctx, want, got); err != nil {
		t.Fatal(err)
	}
}

// A replay whose pulls never deliver the events the stream holds fails with an error
// after stallAfter, rather than ending as if it were done, or hanging.
func TestReplayFailsWhenStalled(t *testing.T) {
	shorten(t, 300*time.Millisecond, 20*time.Millisecond)
	conn := brokertest.Start(t, "")
	publish(t, conn, history()[:3])
	began := time.Now()
	p, err := Replay(context.Background(), emptyPulls{JetStream: conn.JS, empty: -1, pulls: &atomic.Int64{}}, Memories(), ReplayOptions{})
	if err == nil || !strings.Contains(err.Error(), "stalled") || p.Done != 0 || p.LastSeq != 0 {
		t.Fatalf("stalled replay: %+v %v, want an error and nothing done", p, err)
	}
	if el := time.Since(began); el > 10*time.Second {
		t.Fatalf("gave up after %s", el)
	}
}

// Events deleted at the end of the stream: the empty pull after the last one stored ends
// the replay, at the end it fixed.
func TestReplayEndsWhereTheRestWasDeleted(t *testing.T) {
	ctx := context.Background()
	conn := brokertest.Start(t, "")
	evs := history()[:5]
	st := publish(t, conn, evs)
	for _, seq := range []uint64{4, 5} {
		if err := st.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	p, err := Replay(ctx, conn.JS, Memories(), ReplayOptions{})
	if err != nil || p.Done != 3 || p.LastSeq != p.End {
		t.Fatalf("replay: %+v %v, want 3 events done, up to the end", p, err)
	}
}

// FirstSince finds the first event stored at or after a time from the stream, deleted
// events skipped, and 0 when none is.
func TestFirstSince(t *testing.T) {
	ctx := context.Background()
	conn := brokertest.Start(t, "")
	st := publish(t, conn, history()[:4])
	at := map[uint64]time.Time{}
	for seq := uint64(1); seq <= 4; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		at[seq] = m.Time
	}
	if err := st.DeleteMsg(ctx, 3); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		t    time.Time
		want uint64
	}{
		{at[1].Add(-time.Hour), 1},
		{at[1], 1},
		{at[1].Add(time.Nanosecond), 2},
		{at[2], 2},
		{at[3], 4}, // deleted
		{at[4], 4},
		{at[4].Add(time.Nanosecond), 0},
	} {
		if seq, err := FirstSince(ctx, st, c.t); err != nil || seq != c.want {
			t.Errorf("since %s: %d %v, want %d", c.t.Format(time.RFC3339Nano), seq, err, c.want)
		}
	}
}

// countedPulls is a JetStream whose replay consumers count their pulls.
type countedPulls struct {
	jetstream.JetStream
	pulls *atomic.Int64
}

func (j countedPulls) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	st, err := j.JetStream.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return emptyPullsStream{Stream: st, j: emptyPulls{JetStream: j.JetStream, empty: 0, pulls: j.pulls}}, nil
}

// slowLoad is a directory bucket (without JS: loaded by listing its keys) whose load
// begins only once ready is closed, or fails when fail is set.
type slowLoad struct {
	jetstream.KeyValue
	ready <-chan struct{}
	fail  error
}

func (w slowLoad) ListKeysFiltered(ctx context.Context, filters ...string) (jetstream.KeyLister, error) {
	if w.fail != nil {
		return nil, w.fail
	}
	select {
	case <-w.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return w.KeyValue.ListKeysFiltered(ctx, filters...)
}

// storeMany stores n events of n/3 leads (sent, delivered, a reply) at once.
func storeMany(t *testing.T, conn *broker.Conn, n int) []envelope.Envelope {
	t.Helper()
	types := []string{envelope.TypeEmailSent, envelope.TypeEmailDelivered, envelope.TypeReplyReceived}
	var evs []envelope.Envelope
	for i := range n {
		env := event(i, types[i%3], fmt.Sprintf("lead%d@northwind.example", i/3), fmt.Sprint("camp-", i%7), time.Duration(i)*time.Second)
		msg, err := stream.EventMessage(context.Background(), env)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.JS.PublishMsgAsync(msg); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, env)
	}
	select {
	case <-conn.JS.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("events not stored")
	}
	return evs
}

// The directory loads while the first chunks are pulled: here its load waits until the
// replay has pulled four chunks, and the replay still names and applies every event in
// order, as the live projector does through the same directory.
func TestReplayPullsWhileTheDirectoryLoads(t *testing.T) {
	ctx := context.Background()
	conn := brokertest.Start(t, "")
	evs := storeMany(t, conn, 4*batchSize+500)
	kv, err := conn.JS.KeyValue(ctx, stream.ContactIDs)
	if err != nil {
		t.Fatal(err)
	}
	live := contacts.New(kvstore.KV{KV: kv}) // names every contact first, as the live projector did
	want := Memories()
	for _, env := range evs {
		if _, err := Apply(ctx, want, live, env); err != nil {
			t.Fatal(err)
		}
	}
	pulls, ready := &atomic.Int64{}, make(chan struct{})
	var ahead atomic.Int64 // pulls made before the directory began to load
	go func() {
		defer close(ready)
		for deadline := time.Now().Add(10 * time.Second); pulls.Load() < 4 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		ahead.Store(pulls.Load())
	}()
	got := Memories()
	var seqs []uint64 // the last applied, as progress tells it: never back
	p, err := Replay(ctx, countedPulls{JetStream: conn.JS, pulls: pulls}, got,
		ReplayOptions{Dir: contacts.New(kvstore.KV{KV: slowLoad{KeyValue: kv, ready: ready}}),
			Every: time.Nanosecond, OnProgress: func(p Progress) { seqs = append(seqs, p.LastSeq) }})
	if !slices.IsSorted(seqs) {
		t.Fatalf("applied out of stream order: progress went %v", seqs)
	}
	if err != nil || p.Done != uint64(len(evs)) {
		t.Fatalf("replay: %+v %v, want all %d events", p, err, len(evs))
	}
	if n := ahead.Load(); n < 4 {
		t.Fatalf("%d pulls before the directory loaded, want 4: the replay waited for it", n)
	}
	if err := sameProjections(ctx, want, got); err != nil {
		t.Fatal(err)
	}
}

// A directory that cannot be loaded fails the replay with its error, nothing applied.
func TestReplayFailsWhenTheDirectoryCannotLoad(t *testing.T) {
	ctx := context.Background()
	conn := brokertest.Start(t, "")
	storeMany(t, conn, batchSize+10)
	kv, err := conn.JS.KeyValue(ctx, stream.ContactIDs)
	if err != nil {
		t.Fatal(err)
	}
	got := Memories()
	p, err := Replay(ctx, conn.JS, got, ReplayOptions{Dir: contacts.New(kvstore.KV{KV: slowLoad{KeyValue: kv, fail: errors.New("bucket unreadable")}})})
	if err == nil || !strings.Contains(err.Error(), "bucket unreadable") || p.Done != 0 {
		t.Fatalf("replay: %+v %v, want the directory's error and nothing done", p, err)
	}
	if keys, _ := got.Contacts.Keys(ctx, ""); len(keys) != 0 {
		t.Fatalf("%d contacts stored by a failed replay", len(keys))
	}
}

// The replay's memo keeps of a contact only what naming reads — its ids and the ids
// merged into it — and answers with the directory's: a history's worth of whole
// records would be live heap for the collector to mark again and again.
func TestMemoKeepsOnlyWhatNamingReads(t *testing.T) {
	ctx := context.Background()
	dir := contacts.New(kvstore.NewMemory())
	m := &memo{dir: dir, seen: map[memoKey]contacts.Record{}}
	ana := contacts.Seen{Email: "ana@acme.example", External: map[string]string{contacts.SendingPlatformContactID: "instantly:lead-1"}}
	// Another contact merged into ana's: her phone first, then an event linking both.
	if _, err := m.Record(ctx, "t", contacts.Seen{Phone: "+1 555 010 0000"}); err != nil {
		t.Fatal(err)
	}
	ana.Phone = "+1 555 010 0000"
	got, err := m.Record(ctx, "t", ana)
	if err != nil {
		t.Fatal(err)
	}
	want, err := dir.Record(ctx, "t", ana) // nothing new: the directory's record as it is
	if err != nil {
		t.Fatal(err)
	}
	if got.ContactID != want.ContactID || got.AccountID != want.AccountID || !slices.Equal(got.Merged, want.Merged) || len(want.Merged) != 1 {
		t.Fatalf("memo named %+v, the directory %+v (one contact merged in)", got, want)
	}
	for k, rec := range m.seen {
		if rec.Keys != nil || rec.Emails != nil || rec.Phones != nil || rec.External != nil || !rec.Updated.IsZero() {
			t.Errorf("memo keeps %+v for %v: more than the ids", rec, k)
		}
	}
	if again, err := m.Record(ctx, "t", ana); err != nil || again.ContactID != want.ContactID {
		t.Fatalf("from the memo: %+v, %v", again, err)
	}
}

// A replay into memory read for one projection (ReplayOptions.Only) builds that one as
// a full replay does, and the contact records, and leaves the other derived one empty,
// also where it folds merged contacts; one asked for a projection there is not is
// refused before it reads anything. Each replay names the contacts afresh (a server of
// its own), as the first replay after the merges does.
func TestReplayBuildsOnlyWhatItIsReadFor(t *testing.T) {
	ctx := context.Background()
	evs := identityHistory() // merges: the folds derive entries too
	for i := range 60 {
		types := []string{envelope.TypeEmailSent, envelope.TypeReplyReceived, envelope.TypeLeadUnsubscribed, envelope.TypeEmailBounced}
		evs = append(evs, event(100+i, types[i%4], fmt.Sprintf("lead%d@northwind.example", i/2), fmt.Sprint("camp-", i%3), time.Duration(i)*time.Second))
	}
	replay := func(only string) (Stores, error) {
		conn := brokertest.Start(t, "")
		publish(t, conn, evs)
		kv, err := conn.JS.KeyValue(ctx, stream.ContactIDs)
		if err != nil {
			t.Fatal(err)
		}
		s := Memories()
		_, err = Replay(ctx, conn.JS, s, ReplayOptions{Dir: contacts.New(kvstore.KV{KV: kv}), Only: only})
		return s, err
	}
	all, err := replay("")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range Names {
		s, _ := all.Of(name)
		if keys, err := s.Keys(ctx, ""); err != nil || len(keys) == 0 {
			t.Fatalf("the full replay built no %s (%v): the history does not test it", name, err)
		}
	}
	for _, only := range Names {
		got, err := replay(only)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range Names {
			a, _ := got.Of(name)
			b, _ := all.Of(name)
			keys, err := a.Keys(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			switch d, err := Diff(ctx, name, a, b); {
			case err != nil:
				t.Fatal(err)
			case name == only || name == Contacts:
				if !d.Equal() {
					t.Errorf("replay for %s: its %s differs from a full replay's: %+v", only, name, d)
				}
			case len(keys) > 0:
				t.Errorf("replay for %s built %d keys of %s, which nothing reads", only, len(keys), name)
			}
		}
	}
	s, err := replay("contact")
	if err == nil || !strings.Contains(err.Error(), "want one of") {
		t.Fatalf("a replay for projection %q: %v, want it refused", "contact", err)
	}
	if keys, _ := s.Contacts.Keys(ctx, ""); len(keys) > 0 {
		t.Fatalf("a refused replay built %d contacts", len(keys))
	}
}
