package ingest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/stream"
)

func eventMsg(i int) *nats.Msg {
	m := &nats.Msg{Subject: fmt.Sprintf("events.acme.instantly.n%d.received", i), Data: fmt.Appendf(nil, `{"n":%d}`, i), Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("ev_%04d", i))
	return m
}

// stored reads EXACTO_EVENTS: message id -> subject, and how many times each id is there.
func storedMsgs(t *testing.T, js jetstream.JetStream) (subjects map[string]string, counts map[string]int) {
	t.Helper()
	ctx := context.Background()
	c, err := js.OrderedConsumer(ctx, stream.Events, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	subjects, counts = map[string]string{}, map[string]int{}
	for {
		batch, err := c.FetchNoWait(500)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			id := m.Headers().Get(jetstream.MsgIDHeader)
			subjects[id], counts[id] = m.Subject(), counts[id]+1
			n++
		}
		if n == 0 {
			return subjects, counts
		}
	}
}

// Concurrent events are coalesced into batches; each caller learns its event is stored
// only once it is, on its own subject with its own Nats-Msg-Id, exactly once.
func TestGroupCommitCoalescesConcurrentEvents(t *testing.T) {
	conn := brokertest.Start(t, "")
	var mu sync.Mutex
	var sizes []int
	c := NewCommitter(conn.JS, 64, 50*time.Millisecond, 5*time.Second)
	c.observe = func(n int) { mu.Lock(); sizes = append(sizes, n); mu.Unlock() }
	defer c.Close()
	st, err := conn.JS.Stream(context.Background(), stream.Events)
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			dup, err := publishAndWait(context.Background(), c, eventMsg(i))
			if err != nil || dup {
				errs <- fmt.Errorf("event %d: duplicate=%v err=%v", i, dup, err)
				return
			}
			// Answered: it must be in the stream now.
			m, err := st.GetLastMsgForSubject(context.Background(), eventMsg(i).Subject)
			if err != nil || m.Header.Get(jetstream.MsgIDHeader) != eventMsg(i).Header.Get(jetstream.MsgIDHeader) {
				errs <- fmt.Errorf("event %d answered but not readable: %v", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	subjects, counts := storedMsgs(t, conn.JS)
	if len(counts) != n {
		t.Fatalf("stream holds %d events, want %d", len(counts), n)
	}
	for i := range n {
		m := eventMsg(i)
		id := m.Header.Get(jetstream.MsgIDHeader)
		if counts[id] != 1 || subjects[id] != m.Subject {
			t.Fatalf("%s: stored %d times on %q, want once on %q", id, counts[id], subjects[id], m.Subject)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if slices.Max(sizes) < 2 || len(sizes) >= n {
		t.Fatalf("batch sizes %v: 200 concurrent events were not coalesced", sizes)
	}
	if slices.Max(sizes) > 64 {
		t.Fatalf("a batch of %d events, over the limit of 64", slices.Max(sizes))
	}
}

// A batch that holds an event the stream already has is refused whole by the server;
// its events are then stored one by one: the old one is a duplicate, the rest stored.
// The same event twice in one batch is stored once, the second a duplicate.
func TestGroupCommitDuplicates(t *testing.T) {
	conn := brokertest.Start(t, "")
	if _, err := conn.JS.PublishMsg(context.Background(), eventMsg(3)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sizes []int
	c := NewCommitter(conn.JS, 16, 200*time.Millisecond, 5*time.Second)
	c.observe = func(n int) { mu.Lock(); sizes = append(sizes, n); mu.Unlock() }
	defer c.Close()
	// Six distinct events (more than atomicOver: the batch goes atomic and is refused
	// for ev_0003) and ev_0004 twice.
	msgs := []*nats.Msg{eventMsg(1), eventMsg(2), eventMsg(3), eventMsg(4), eventMsg(4), eventMsg(5), eventMsg(6)}
	type result struct {
		dup bool
		err error
	}
	results := make([]result, len(msgs))
	var wg sync.WaitGroup
	for i, m := range msgs {
		wg.Go(func() {
			dup, err := publishAndWait(context.Background(), c, m)
			results[i] = result{dup, err}
		})
	}
	wg.Wait()
	dups := 0
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("event %d: %v", i, r.err)
		}
		if r.dup {
			dups++
		}
	}
	if !results[2].dup || dups != 2 || (results[3].dup == results[4].dup) {
		t.Fatalf("results %+v: want ev_0003 and one of the two ev_0004 reported duplicates", results)
	}
	_, counts := storedMsgs(t, conn.JS)
	for _, id := range []string{"ev_0001", "ev_0002", "ev_0003", "ev_0004", "ev_0005", "ev_0006"} {
		if counts[id] != 1 {
			t.Fatalf("%s stored %d times", id, counts[id])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(sizes, len(msgs)) {
		t.Fatalf("batch sizes %v: the %d events did not meet in one batch", sizes, len(msgs))
	}
}

// With the stream gone, every waiting caller gets an error (the gateway's 503): none is
// told its event is stored.
func TestGroupCommitFailsWithoutTheStream(t *testing.T) {
	conn := brokertest.Start(t, "")
	if err := conn.JS.DeleteStream(context.Background(), stream.Events); err != nil {
		t.Fatal(err)
	}
	c := NewCommitter(conn.JS, 16, 20*time.Millisecond, 2*time.Second)
	defer c.Close()
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			if _, err := publishAndWait(context.Background(), c, eventMsg(i)); err == nil {
				t.Errorf("event %d acknowledged with no stream to hold it", i)
			}
		})
	}
	wg.Wait()
}

// publishAndWait publishes msg through c and waits for its result.
func publishAndWait(ctx context.Context, c *Committer, msg *nats.Msg) (duplicate bool, err error) {
	wait, err := c.Publish(ctx, msg)
	if err != nil {
		return false, err
	}
	return wait()
}
