package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/config"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/dlq/dlqtest"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/retry"
	"exacto.dev/pkg/service"
	"exacto.dev/pkg/stream"
)

// rig runs the crmwriter's subscriptions (events and replays) with a handler that
// rejects what broken says, counting effects.
type rig struct {
	conn    *broker.Conn
	env     *service.Env
	q       *Queue
	broken  sync.Map // event id -> true: rejected permanently
	effects sync.Map // event id -> *atomic.Int64
	stop    func()   // stops the consumer (once started)
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{conn: brokertest.Start(t, "")}
	cfg, err := config.Parse([]byte("tenants:\n  - id: acme\n    owners: {default: revops@acme.example}\n    endpoints: [{id: ep, provider: instantly, path_token: tok-0123456789abcdef}]\n"), "test", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	r.env = &service.Env{Config: cfg, Conn: r.conn, Log: slog.New(slog.DiscardHandler)}
	r.start(t)
	t.Cleanup(func() { r.stop() })
	if r.q, err = New(context.Background(), r.conn.JS, config.DLQ{SLO: time.Minute, Freshness: map[string]time.Duration{"default": 72 * time.Hour, "meeting.booked": 24 * time.Hour}}); err != nil {
		t.Fatal(err)
	}
	return r
}

// start runs the consumer until stop.
func (r *rig) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	up := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.env.Consume(ctx, stream.CRMWriter, func() { close(up) }, consumer.Options{Handle: func(ctx context.Context, ev consumer.Event) error {
			if _, bad := r.broken.Load(ev.Envelope.ID); bad {
				return retry.Permanently("hubspot", errors.New("HTTP 400: property exacto_event_id does not exist"))
			}
			n, _ := r.effects.LoadOrStore(ev.Envelope.ID, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			return nil
		}})
	}()
	r.stop = sync.OnceFunc(func() { cancel(); <-done })
	<-up
}

func (r *rig) effect(id string) int64 {
	n, ok := r.effects.Load(id)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

// publish stores an event of typ that happened at, rejected by the handler.
func (r *rig) publish(t *testing.T, n int, typ string, at time.Time) string {
	t.Helper()
	env := envelope.Envelope{SpecVersion: "1.0", ID: envelope.ID("acme", "instantly", fmt.Sprint(typ, n)), Type: typ,
		Tenant: "acme", Provider: "instantly", Endpoint: "ep", Time: at,
		Data: envelope.Data{ProviderType: typ, Contact: &envelope.Contact{Email: fmt.Sprintf("lead%d@example.com", n)}}}
	r.broken.Store(env.ID, true)
	msg, _ := stream.EventMessage(context.Background(), env)
	if _, err := r.conn.JS.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	return env.ID
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
	}
}

func (r *rig) letters(t *testing.T, f Filter) []Letter {
	t.Helper()
	l, err := r.q.List(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A dead letter replayed twice gives one effect; a stale one is refused with its reason
// unless forced with a why; a discarded one is not replayed; every action is recorded.
func TestReplayDiscardFreshness(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	now := time.Now()
	reply := r.publish(t, 1, envelope.TypeReplyReceived, now.Add(-time.Hour))
	stale := r.publish(t, 2, envelope.TypeMeetingBooked, now.Add(-30*time.Hour)) // 30 h late
	noise := r.publish(t, 3, envelope.TypeOpportunityCreated, now)
	waitFor(t, "three dead letters", func() bool { return len(r.letters(t, Filter{})) == 3 })
	var l Letter
	for _, x := range r.letters(t, Filter{}) {
		if x.EventID == reply {
			l = x
		}
	}
	if l.EventID != reply || l.Consumer != stream.CRMWriter || l.Class != "permanent" || l.Attempts != 1 ||
		l.Owner != "revops@acme.example" || !strings.Contains(l.Error, "400") || l.Status != Open {
		t.Fatalf("dead letter %+v", l)
	}
	// Filters.
	if got := r.letters(t, Filter{Type: envelope.TypeMeetingBooked}); len(got) != 1 || got[0].EventID != stale {
		t.Fatalf("by type: %+v", got)
	}
	if got := r.letters(t, Filter{Consumer: "stopper"}); len(got) != 0 {
		t.Fatalf("by consumer: %+v", got)
	}
	if got := r.letters(t, Filter{Class: "transient"}); len(got) != 0 {
		t.Fatalf("by class: %+v", got)
	}
	if got := r.letters(t, Filter{OlderThan: time.Hour}); len(got) != 0 {
		t.Fatalf("older than an hour: %+v", got)
	}

	// The cause is fixed; the reply is replayed twice: one effect.
	r.broken.Delete(reply)
	// Who and why are required.
	for _, c := range []struct {
		by, why string
		want    error
	}{{"", "fixed", ErrNoWho}, {"  ", "fixed", ErrNoWho}, {"ana", "", ErrNoWhy}, {"ana", " \t", ErrNoWhy}} {
		if _, err := r.q.Replay(ctx, l, c.by, c.why, false); !errors.Is(err, c.want) {
			t.Fatalf("a replay by %q for %q: %v, want %v", c.by, c.why, err, c.want)
		}
	}
	if got, _ := r.q.Get(ctx, l.Seq); got.Status != Open || len(got.Actions) != 0 || r.effect(reply) != 0 {
		t.Fatalf("a refused replay changed the letter: %+v", got)
	}
	a, err := r.q.Replay(ctx, l, "ana", "HubSpot property created", false)
	if err != nil || a.Result != SentBack || a.ResultText() != "sent back" {
		t.Fatalf("replay: %+v %v", a, err)
	}
	waitFor(t, "the replayed effect", func() bool { return r.effect(reply) == 1 })
	// and its guard completed, which comes after the effect (under load, a while after)
	waitFor(t, "the replay's guard completed", func() bool {
		rec, _, _ := guard.Status(ctx, r.q.guards, l.Consumer, l.EventID)
		return rec.Status == guard.Completed
	})
	l, _ = r.q.Get(ctx, l.Seq)
	second, err := r.q.Replay(ctx, l, "ben", "to be sure", false)
	if err != nil || second.Result != AlreadyCompleted || second.ResultText() != "nothing sent: the consumer had completed the event" {
		t.Fatalf("second replay: %+v %v", second, err)
	}
	// The second found the first's completed record and sent nothing: no delivery to
	// wait for.
	if n, sent := r.effect(reply), brokertest.Count(t, r.conn, stream.Replays); n != 1 || sent != 1 {
		t.Fatalf("%d effects and %d replays sent after two replays", n, sent)
	}
	if l, _ = r.q.Get(ctx, l.Seq); l.Status != Replayed || len(l.Actions) != 2 || l.Actions[0].By != "ana" || l.Actions[1].Why != "to be sure" {
		t.Fatalf("recorded: %+v", l)
	}
	// Its effect made, the letter has nothing left to discard: refused, nothing recorded.
	if _, err := r.q.Discard(ctx, l, "cy", "not needed"); err == nil || !strings.Contains(err.Error(), "has completed its event since it was replayed: nothing to discard") {
		t.Fatalf("discarding a letter whose effect was made: %v", err)
	}
	if got, _ := r.q.Get(ctx, l.Seq); got.Status != Replayed || len(got.Actions) != 2 {
		t.Fatalf("a refused discard changed the letter: %+v", got)
	}
	if got := r.letters(t, Filter{}); len(got) != 2 {
		t.Fatalf("%d open after the replay, want 2", len(got))
	}

	// The stale meeting is refused with its reason; forcing needs a why.
	sl := r.letters(t, Filter{Type: envelope.TypeMeetingBooked})[0]
	r.broken.Delete(stale)
	_, err = r.q.Replay(ctx, sl, "ana", "the calendar is fixed", false)
	if !errors.Is(err, ErrStale) || !strings.Contains(err.Error(), "its freshness limit is 24h0m0s") {
		t.Fatalf("stale replay: %v", err)
	}
	if _, err := r.q.Replay(ctx, sl, "ana", "", true); !errors.Is(err, ErrNoWhy) {
		t.Fatalf("forced without a why: %v", err)
	}
	if r.effect(stale) != 0 {
		t.Fatal("a refused replay made its effect")
	}
	forced, err := r.q.Replay(ctx, sl, "ana", "the customer asked for it", true)
	if err != nil || !forced.Forced {
		t.Fatalf("forced: %+v %v", forced, err)
	}
	waitFor(t, "the forced effect", func() bool { return r.effect(stale) == 1 })

	// Discard: needs a why; then it is closed and cannot be replayed.
	nl := r.letters(t, Filter{Type: envelope.TypeOpportunityCreated})[0]
	if _, err := r.q.Discard(ctx, nl, "ana", " "); !errors.Is(err, ErrNoWhy) {
		t.Fatalf("discarded without a why: %v", err)
	}
	if _, err := r.q.Discard(ctx, nl, "", "noise"); !errors.Is(err, ErrNoWho) {
		t.Fatalf("discarded by nobody: %v", err)
	}
	if got, _ := r.q.Get(ctx, nl.Seq); got.Status != Open || len(got.Actions) != 0 {
		t.Fatalf("a refused discard changed the letter: %+v", got)
	}
	if _, err := r.q.Discard(ctx, nl, "ana", "opens are not worth a replay"); err != nil {
		t.Fatal(err)
	}
	nl, _ = r.q.Get(ctx, nl.Seq)
	if _, err := r.q.Replay(ctx, nl, "ana", "second thoughts", false); err == nil || !strings.Contains(err.Error(), "discarded") {
		t.Fatalf("replay of a discarded letter: %v", err)
	}
	if r.effect(noise) != 0 {
		t.Fatal("a discarded letter made its effect")
	}
	if got := r.letters(t, Filter{}); len(got) != 0 {
		t.Fatalf("%d still open", len(got))
	}
	if got := r.letters(t, Filter{All: true}); len(got) != 3 {
		t.Fatalf("--all shows %d", len(got))
	}
	if _, err := r.q.Get(ctx, 999); err == nil {
		t.Fatal("a dead letter that does not exist")
	}
}

// The summary the alert watches: open letters by consumer and the oldest's age.
func TestSummary(t *testing.T) {
	r := newRig(t)
	r.publish(t, 1, envelope.TypeReplyReceived, time.Now())
	r.publish(t, 2, envelope.TypeReplyReceived, time.Now())
	waitFor(t, "two dead letters", func() bool { return len(r.letters(t, Filter{})) == 2 })
	r.q.now = func() time.Time { return time.Now().Add(2 * time.Minute) }
	s, err := r.q.Summarize(context.Background())
	if err != nil || s.Open != 2 || s.ByConsumer[stream.CRMWriter] != 2 || s.Oldest < 2*time.Minute {
		t.Fatalf("summary %+v %v", s, err)
	}
}

// Every filter, alone and combined, selects exactly its subset of letters across two
// consumers, tenants and providers, three types, both classes and different ages.
func TestFilters(t *testing.T) {
	r := newRig(t)
	now := time.Now()
	r.q.now = func() time.Time { return now }
	ids := dlqtest.Publish(t, r.conn.JS, now)
	for _, c := range dlqtest.Cases {
		f := Filter{Consumer: c.Consumer, Tenant: c.Tenant, Provider: c.Provider, Type: c.Type, Class: c.Class, OlderThan: c.OlderThan, NewerThan: c.NewerThan}
		var seqs []uint64
		for _, l := range r.letters(t, f) {
			seqs = append(seqs, l.Seq)
		}
		if got := dlqtest.Names(ids, seqs); !slices.Equal(got, c.Want) && len(got)+len(c.Want) > 0 {
			t.Errorf("%+v selects %v, want %v", f, got, c.Want)
		}
	}
	// A replayed letter leaves the open list and stays in --all.
	l, err := r.q.Get(context.Background(), ids["globex-instantly-bounce"])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.q.Discard(context.Background(), l, "ana", "sample"); err != nil {
		t.Fatal(err)
	}
	if got := r.letters(t, Filter{Tenant: "globex", Provider: "instantly"}); len(got) != 0 {
		t.Errorf("a discarded letter is still open: %+v", got)
	}
	if got := r.letters(t, Filter{Tenant: "globex", Provider: "instantly", All: true}); len(got) != 1 || got[0].Status != Discarded {
		t.Errorf("--all: %+v", got)
	}
}

// A preview (the dry run) gives the freshness verdict and the consumer's guard status,
// and changes nothing: no guard reset, no message on EXACTO_REPLAYS, no action, no
// effect.
func TestPreviewChangesNothing(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	now := time.Now()
	fresh := r.publish(t, 1, envelope.TypeReplyReceived, now.Add(-2*time.Hour))
	stale := r.publish(t, 2, envelope.TypeMeetingBooked, now.Add(-30*time.Hour))
	// The guard says dead_letter just after the letter is stored: wait for both.
	waitFor(t, "two dead letters, recorded in their guards", func() bool {
		letters := r.letters(t, Filter{})
		for _, l := range letters {
			if rec, _, _ := guard.Status(ctx, r.q.guards, l.Consumer, l.EventID); rec.Status != guard.DeadLetter {
				return false
			}
		}
		return len(letters) == 2
	})
	fl := r.letters(t, Filter{Type: envelope.TypeReplyReceived})[0]
	sl := r.letters(t, Filter{Type: envelope.TypeMeetingBooked})[0]
	r.broken.Delete(fresh)
	r.broken.Delete(stale)

	preview := func(l Letter, force bool) Preview {
		t.Helper()
		p, err := r.q.Preview(ctx, l, force)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := preview(fl, false); p.Stale != nil || p.Refused != nil || p.Guard != guard.DeadLetter || !p.Send ||
		p.Limit != 72*time.Hour || p.Age < 2*time.Hour || p.Age > 3*time.Hour {
		t.Errorf("fresh: %+v", p)
	}
	if p := preview(sl, false); !errors.Is(p.Stale, ErrStale) || !errors.Is(p.Refused, ErrStale) || p.Send || p.Limit != 24*time.Hour {
		t.Errorf("stale: %+v", p)
	}
	if p := preview(sl, true); !errors.Is(p.Stale, ErrStale) || p.Refused != nil || !p.Send {
		t.Errorf("stale, forced: %+v", p)
	}
	for _, l := range []Letter{fl, sl} {
		if rec, _, _ := guard.Status(ctx, r.q.guards, l.Consumer, l.EventID); rec.Status != guard.DeadLetter {
			t.Errorf("a preview changed %s's guard: %+v", l.EventID, rec)
		}
		if got, _ := r.q.Get(ctx, l.Seq); got.Status != Open || len(got.Actions) != 0 {
			t.Errorf("a preview changed the letter: %+v", got)
		}
	}
	if n := brokertest.Count(t, r.conn, stream.Replays); n != 0 {
		t.Errorf("%d replays sent by previews", n)
	}
	if r.effect(fresh)+r.effect(stale) != 0 {
		t.Error("a preview made an effect")
	}
	// After a replay completes, the preview finds the completed guard: nothing to send.
	if _, err := r.q.Replay(ctx, fl, "ana", "fixed", false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the replayed effect", func() bool { return r.effect(fresh) == 1 })
	waitFor(t, "the completed guard", func() bool {
		rec, _, _ := guard.Status(ctx, r.q.guards, fl.Consumer, fl.EventID)
		return rec.Status == guard.Completed
	})
	fl, _ = r.q.Get(ctx, fl.Seq)
	if p := preview(fl, false); p.Guard != guard.Completed || p.Send || p.Refused != nil {
		t.Errorf("after the replay: %+v", p)
	}
}

// Two replays sent before the consumer takes the first (it is stopped, so the second
// finds no guard record and sends too) both reach the consumer; its effect-once guard
// makes the effect once.
func TestReplayTwiceInFlight(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	id := r.publish(t, 1, envelope.TypeReplyReceived, time.Now())
	waitFor(t, "a dead letter", func() bool { return len(r.letters(t, Filter{})) == 1 })
	l := r.letters(t, Filter{})[0]
	r.stop()
	r.broken.Delete(id)
	for _, by := range []string{"ana", "ben"} {
		l, _ = r.q.Get(ctx, l.Seq)
		if a, err := r.q.Replay(ctx, l, by, "fixed", false); err != nil || a.Result != SentBack {
			t.Fatalf("replay by %s: %+v %v", by, a, err)
		}
	}
	if n := brokertest.Count(t, r.conn, stream.Replays); n != 2 {
		t.Fatalf("%d replays sent, want 2 in flight", n)
	}
	r.start(t)
	var replays stream.Subscription
	for _, s := range stream.Subscriptions {
		if s.Durable == stream.CRMWriter {
			replays = s.Replays()
		}
	}
	waitFor(t, "both replays handled", func() bool {
		c, err := r.conn.JS.Consumer(ctx, replays.StreamName(), replays.Durable)
		if err != nil {
			return false
		}
		ci, err := c.Info(ctx)
		return err == nil && ci.Delivered.Consumer >= 2 && ci.NumPending == 0 && ci.NumAckPending == 0
	})
	if n := r.effect(id); n != 1 {
		t.Fatalf("%d effects from two replays in flight", n)
	}
	if rec, _, _ := guard.Status(ctx, r.q.guards, stream.CRMWriter, id); rec.Status != guard.Completed {
		t.Fatalf("guard after the replays: %+v", rec)
	}
}

// syncLog collects log output across goroutines.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Watch feeds the gauges the DLQ alerts read (every consumer has an open-letters
// series, at 0 when it has none) and logs an error while the oldest open letter is
// past the SLO.
func TestWatchGauges(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	r := newRig(t)
	r.publish(t, 1, envelope.TypeReplyReceived, time.Now())
	r.publish(t, 2, envelope.TypeReplyReceived, time.Now())
	waitFor(t, "two dead letters", func() bool { return len(r.letters(t, Filter{})) == 2 })
	r.q.now = func() time.Time { return time.Now().Add(20 * time.Minute) } // the rig's SLO is 1m
	var logs syncLog
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.q.Watch(ctx, time.Hour, slog.New(slog.NewTextHandler(&logs, nil))) }()
	waitFor(t, "the past-SLO log line", func() bool { return strings.Contains(logs.String(), "dead letters waiting past their SLO") })
	cancel()
	<-done
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "open=2") || !strings.Contains(l, "slo=1m0s") {
		t.Errorf("log: %s", l)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	open := map[string]int64{}
	var oldest, slo float64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch g := m.Data.(type) {
			case metricdata.Gauge[int64]:
				if m.Name == "exacto_dlq_open" {
					for _, dp := range g.DataPoints {
						c, _ := dp.Attributes.Value("consumer")
						open[c.AsString()] = dp.Value
					}
				}
			case metricdata.Gauge[float64]:
				for _, dp := range g.DataPoints {
					switch m.Name {
					case "exacto_dlq_oldest_open_seconds":
						oldest = dp.Value
					case "exacto_dlq_slo_seconds":
						slo = dp.Value
					}
				}
			}
		}
	}
	if len(open) != len(stream.Subscriptions) || open[stream.CRMWriter] != 2 || open[stream.Stopper] != 0 {
		t.Errorf("exacto_dlq_open: %v", open)
	}
	if oldest < 20*60 || oldest > 30*60 || slo != 60 {
		t.Errorf("exacto_dlq_oldest_open_seconds %v, exacto_dlq_slo_seconds %v", oldest, slo)
	}
}

// NeedWhoWhy is the one who-and-why check: blanks are missing, who is asked first.
func TestNeedWhoWhy(t *testing.T) {
	for _, c := range []struct {
		by, why string
		want    error
	}{{"ana", "fixed", nil}, {"", "fixed", ErrNoWho}, {" \t", "fixed", ErrNoWho}, {"", "", ErrNoWho},
		{"ana", "", ErrNoWhy}, {"ana", "  ", ErrNoWhy}} {
		if err := NeedWhoWhy(c.by, c.why); err != c.want {
			t.Errorf("NeedWhoWhy(%q, %q) = %v, want %v", c.by, c.why, err, c.want)
		}
	}
}

// A letter whose event its consumer completed without a replay (the guard's Fail lost,
// the event redelivered and handled) may be discarded, the action saying the event was
// completed; it is then no longer open.
func TestDiscardOfALetterCompletedWithoutReplay(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	id := r.publish(t, 1, "reply.received", time.Now().Add(-100*time.Hour)) // past its freshness
	waitFor(t, "a dead letter", func() bool { return len(r.letters(t, Filter{})) == 1 })
	l := r.letters(t, Filter{})[0]
	kv, _ := r.conn.JS.KeyValue(ctx, stream.Guards)
	data, _ := json.Marshal(guard.Record{Status: guard.Completed, Attempts: 2})
	if _, err := kv.Put(ctx, guard.Key(stream.CRMWriter, id), data); err != nil {
		t.Fatal(err)
	}
	a, err := r.q.Discard(ctx, l, "ana", "obsolete")
	if err != nil || a.Result != AlreadyCompleted || a.ResultText() != "the consumer had completed the event" {
		t.Fatalf("discard: %+v %v", a, err)
	}
	if s, _ := r.q.Summarize(ctx); s.Open != 0 {
		t.Fatalf("%d open after the discard", s.Open)
	}
}
