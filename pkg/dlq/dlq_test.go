package dlq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/config"
	"exacto.dev/pkg/consumer"
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
	q       *Queue
	broken  sync.Map // event id -> true: rejected permanently
	effects sync.Map // event id -> *atomic.Int64
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{conn: brokertest.Start(t, "")}
	cfg, err := config.Parse([]byte("tenants:\n  - id: acme\n    owners: {default: revops@acme.example}\n    endpoints: [{id: ep, provider: instantly, path_token: tok-0123456789abcdef}]\n"), "test", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	env := &service.Env{Config: cfg, Conn: r.conn, Log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	up := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		env.Consume(ctx, stream.CRMWriter, func() { close(up) }, consumer.Options{Handle: func(ctx context.Context, ev consumer.Event) error {
			if _, bad := r.broken.Load(ev.Envelope.ID); bad {
				return retry.Permanently("hubspot", errors.New("HTTP 400: property exacto_event_id does not exist"))
			}
			n, _ := r.effects.LoadOrStore(ev.Envelope.ID, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			return nil
		}})
	}()
	t.Cleanup(func() { cancel(); <-done })
	<-up
	if r.q, err = New(context.Background(), r.conn.JS, config.DLQ{SLO: time.Minute, Freshness: map[string]time.Duration{"default": 72 * time.Hour, "meeting.booked": 24 * time.Hour}}); err != nil {
		t.Fatal(err)
	}
	return r
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
	if _, err := r.q.Replay(ctx, l, "", "", false); err == nil {
		t.Fatal("a replay by nobody")
	}
	a, err := r.q.Replay(ctx, l, "ana", "HubSpot property created", false)
	if err != nil || a.Result != guard.DeadLetter {
		t.Fatalf("replay: %+v %v", a, err)
	}
	waitFor(t, "the replayed effect", func() bool { return r.effect(reply) == 1 })
	l, _ = r.q.Get(ctx, l.Seq)
	second, err := r.q.Replay(ctx, l, "ben", "to be sure", false)
	if err != nil || second.Result != guard.Completed {
		t.Fatalf("second replay: %+v %v", second, err)
	}
	time.Sleep(300 * time.Millisecond)
	if n := r.effect(reply); n != 1 {
		t.Fatalf("%d effects after two replays", n)
	}
	if l, _ = r.q.Get(ctx, l.Seq); l.Status != Replayed || len(l.Actions) != 2 || l.Actions[0].By != "ana" || l.Actions[1].Why != "to be sure" {
		t.Fatalf("recorded: %+v", l)
	}
	if got := r.letters(t, Filter{}); len(got) != 2 {
		t.Fatalf("%d open after the replay, want 2", len(got))
	}

	// The stale meeting is refused with its reason; forcing needs a why.
	sl := r.letters(t, Filter{Type: envelope.TypeMeetingBooked})[0]
	r.broken.Delete(stale)
	_, err = r.q.Replay(ctx, sl, "ana", "", false)
	if !errors.Is(err, ErrStale) || !strings.Contains(err.Error(), "its freshness limit is 24h0m0s") {
		t.Fatalf("stale replay: %v", err)
	}
	if _, err := r.q.Replay(ctx, sl, "ana", "", true); err == nil {
		t.Fatal("forced without a why")
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
	if _, err := r.q.Discard(ctx, nl, "ana", ""); err == nil {
		t.Fatal("discarded without a why")
	}
	if _, err := r.q.Discard(ctx, nl, "ana", "opens are not worth a replay"); err != nil {
		t.Fatal(err)
	}
	nl, _ = r.q.Get(ctx, nl.Seq)
	if _, err := r.q.Replay(ctx, nl, "ana", "", false); err == nil || !strings.Contains(err.Error(), "discarded") {
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
