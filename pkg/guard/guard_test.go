package guard

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/stream"
)

func bucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	conn := brokertest.Start(t, "")
	kv, err := conn.JS.KeyValue(context.Background(), stream.Guards)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

type clock struct{ t atomic.Pointer[time.Time] }

func (c *clock) now() time.Time  { return *c.t.Load() }
func (c *clock) set(t time.Time) { c.t.Store(&t) }

func guarded(kv jetstream.KeyValue, consumer string, c *clock) *Guard {
	g := New(kv, consumer, 30*time.Second)
	g.now = c.now
	return g
}

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	kv := bucket(t)
	c := &clock{}
	c.set(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	g := guarded(kv, "stopper", c)

	a, err := g.Begin(ctx, "ev_1")
	if err != nil || a.Decision != Proceed || a.Record.Attempts != 1 || a.Resumed {
		t.Fatalf("first: %+v %v", a, err)
	}
	// A redelivery while the first attempt holds its lease.
	b, err := g.Begin(ctx, "ev_1")
	if err != nil || b.Decision != Busy || b.Wait != 30*time.Second {
		t.Fatalf("while held: %+v %v", b, err)
	}
	if err := g.Complete(ctx, &a); err != nil {
		t.Fatal(err)
	}
	// Any later delivery is skipped: the effect is done.
	s, err := g.Begin(ctx, "ev_1")
	if err != nil || s.Decision != Skip || s.Record.Status != Completed {
		t.Fatalf("after completion: %+v %v", s, err)
	}
	// Another consumer's guard is its own.
	other, err := guarded(kv, "crmwriter", c).Begin(ctx, "ev_1")
	if err != nil || other.Decision != Proceed {
		t.Fatalf("other consumer: %+v %v", other, err)
	}
	rec, ok, err := Status(ctx, kv, "stopper", "ev_1")
	if err != nil || !ok || rec.Status != Completed || rec.Attempts != 1 {
		t.Fatalf("status: %+v %v %v", rec, ok, err)
	}
	if _, ok, _ := Status(ctx, kv, "stopper", "ev_none"); ok {
		t.Fatal("status of an unknown event")
	}
}

func TestRetryableThenDeadLetter(t *testing.T) {
	ctx := context.Background()
	c := &clock{}
	c.set(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	g := guarded(bucket(t), "crmwriter", c)
	a, _ := g.Begin(ctx, "ev_2")
	next := c.now().Add(4 * time.Second)
	if err := g.Fail(ctx, &a, errors.New("hubspot: 503"), true, next); err != nil {
		t.Fatal(err)
	}
	if a.Record.Status != RetryableFailed || a.Record.LastError != "hubspot: 503" || !a.Record.NextAttemptAt.Equal(next) {
		t.Fatalf("retryable: %+v", a.Record)
	}
	b, err := g.Begin(ctx, "ev_2")
	if err != nil || b.Decision != Proceed || b.Record.Attempts != 2 || b.Resumed {
		t.Fatalf("next attempt: %+v %v", b, err)
	}
	if err := g.Fail(ctx, &b, errors.New("hubspot: 400 invalid"), false, time.Time{}); err != nil {
		t.Fatal(err)
	}
	d, _ := g.Begin(ctx, "ev_2")
	if d.Decision != Skip || d.Record.Status != DeadLetter || d.Record.Attempts != 2 {
		t.Fatalf("dead letter: %+v", d)
	}
	// A replay from the DLQ resets the record and proceeds as a first attempt.
	if was, _, err := g.Reset(ctx, "ev_2"); err != nil || was != DeadLetter {
		t.Fatalf("reset: %q %v", was, err)
	}
	r, _ := g.Begin(ctx, "ev_2")
	if r.Decision != Proceed || r.Record.Attempts != 1 {
		t.Fatalf("after reset: %+v", r)
	}
	// While the replay runs, or once it completed, a second replay resets nothing.
	if was, _, err := g.Reset(ctx, "ev_2"); err != nil || was != Processing {
		t.Fatalf("reset while processing: %q %v", was, err)
	}
	if err := g.Complete(ctx, &r); err != nil {
		t.Fatal(err)
	}
	if was, _, err := g.Reset(ctx, "ev_2"); err != nil || was != Completed {
		t.Fatalf("reset of a completed event: %q %v", was, err)
	}
	if again, _ := g.Begin(ctx, "ev_2"); again.Decision != Skip {
		t.Fatalf("a completed event proceeds after a reset: %+v", again)
	}
	if was, _, err := g.Reset(ctx, "ev_never"); err != nil || was != "" {
		t.Fatalf("reset of an unknown event: %q %v", was, err)
	}
}

// A worker that dies mid-effect leaves a record in processing; once its lease runs out
// another worker resumes, told that the effect may have happened, and the dead
// worker's late Complete is refused.
func TestResumeAfterLeaseExpiry(t *testing.T) {
	ctx := context.Background()
	kv := bucket(t)
	c := &clock{}
	c.set(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	g := guarded(kv, "stopper", c)
	dead, _ := g.Begin(ctx, "ev_3")
	c.set(c.now().Add(31 * time.Second))
	r, err := g.Begin(ctx, "ev_3")
	if err != nil || r.Decision != Proceed || !r.Resumed || r.Record.Attempts != 2 {
		t.Fatalf("resume: %+v %v", r, err)
	}
	if err := g.Complete(ctx, &dead); !errors.Is(err, ErrLost) {
		t.Fatalf("the dead attempt's Complete: %v, want ErrLost", err)
	}
	if err := g.Complete(ctx, &r); err != nil {
		t.Fatal(err)
	}
}

// A record left processing (its worker stored a dead letter and could not record it,
// or died) is reset by a replay once its lease ran out, never while it runs.
func TestResetOfAnAbandonedAttempt(t *testing.T) {
	ctx := context.Background()
	c := &clock{}
	c.set(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	g := guarded(bucket(t), "stopper", c)
	if _, err := g.Begin(ctx, "ev_5"); err != nil {
		t.Fatal(err)
	}
	if was, reset, err := g.Reset(ctx, "ev_5"); err != nil || reset || was != Processing {
		t.Fatalf("reset while the lease holds: %q %v %v", was, reset, err)
	}
	c.set(c.now().Add(31 * time.Second))
	if was, reset, err := g.Reset(ctx, "ev_5"); err != nil || !reset || was != Processing {
		t.Fatalf("reset after the lease: %q %v %v", was, reset, err)
	}
	if a, _ := g.Begin(ctx, "ev_5"); a.Decision != Proceed || a.Record.Attempts != 1 || a.Resumed {
		t.Fatalf("after the reset: %+v", a)
	}
}

// Of many concurrent deliveries of one event, exactly one proceeds.
func TestConcurrentClaimsOneProceeds(t *testing.T) {
	ctx := context.Background()
	kv := bucket(t)
	c := &clock{}
	c.set(time.Now())
	var proceeded, busy atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := guarded(kv, "suppressor", c).Begin(ctx, "ev_4")
			if err != nil {
				t.Error(err)
				return
			}
			switch a.Decision {
			case Proceed:
				proceeded.Add(1)
			case Busy:
				busy.Add(1)
			}
		}()
	}
	wg.Wait()
	if proceeded.Load() != 1 || busy.Load() != 15 {
		t.Fatalf("proceeded %d, busy %d", proceeded.Load(), busy.Load())
	}
}

// An attempt given back before its effect leaves the record as Begin found it: gone
// for a first claim, the last attempt's for a retry; the next claim counts from there.
// A claim taken over meanwhile is not undone.
func TestUndoGivesTheClaimBack(t *testing.T) {
	ctx := context.Background()
	kv := bucket(t)
	c := &clock{}
	c.set(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	g := guarded(kv, "stopper", c)

	a, err := g.Begin(ctx, "ev_1")
	if err != nil || a.Decision != Proceed {
		t.Fatalf("first: %+v %v", a, err)
	}
	if err := g.Undo(ctx, &a); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := Status(ctx, kv, "stopper", "ev_1"); ok || err != nil {
		t.Fatalf("after undoing the first claim a record is left (%v)", err)
	}
	a, err = g.Begin(ctx, "ev_1")
	if err != nil || a.Decision != Proceed || a.Record.Attempts != 1 || a.Resumed {
		t.Fatalf("claimed again: %+v %v", a, err)
	}
	if err := g.Fail(ctx, &a, errors.New("503"), true, c.now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	b, err := g.Begin(ctx, "ev_1")
	if err != nil || b.Decision != Proceed || b.Record.Attempts != 2 {
		t.Fatalf("retry: %+v %v", b, err)
	}
	if err := g.Undo(ctx, &b); err != nil {
		t.Fatal(err)
	}
	if rec, _, _ := Status(ctx, kv, "stopper", "ev_1"); rec.Status != RetryableFailed || rec.Attempts != 1 || rec.LastError != "503" {
		t.Fatalf("after undoing the retry: %+v", rec)
	}
	// Taken over after its lease ran out: the stale attempt's Undo leaves the new one.
	b, _ = g.Begin(ctx, "ev_1")
	c.set(c.now().Add(time.Minute))
	d, err := g.Begin(ctx, "ev_1")
	if err != nil || d.Decision != Proceed || !d.Resumed {
		t.Fatalf("takeover: %+v %v", d, err)
	}
	if err := g.Undo(ctx, &b); err != nil {
		t.Fatal(err)
	}
	if rec, _, _ := Status(ctx, kv, "stopper", "ev_1"); rec.Status != Processing || rec.Attempts != d.Record.Attempts {
		t.Fatalf("a stale undo changed the new claim: %+v", rec)
	}
}

// The hand-made encoding of a record is the one encoding/json makes.
func TestRecordEncodesAsJSONDoes(t *testing.T) {
	at := time.Date(2026, 12, 4, 10, 11, 12, 345678900, time.UTC)
	for _, r := range []Record{
		{Status: Processing, Attempts: 1, FirstAttempt: at, LastAttempt: at, LeaseUntil: at.Add(time.Minute)},
		{Status: Completed, Attempts: 2, FirstAttempt: at, LastAttempt: at.Add(time.Second)},
		{Status: RetryableFailed, Attempts: 3, LastError: "503 \"unavailable\" <html> & \x00 é", LastAttempt: at, NextAttemptAt: at.Add(time.Hour)},
		{Status: DeadLetter, Attempts: 5, LastError: "plain ascii: a/b_c-d (e) [f] {g} 'h' \\ \t \x7f \u2028 \xff", LastAttempt: at.Add(-time.Nanosecond)},
		{Status: Completed, Attempts: 1, LastAttempt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
		{Status: RetryableFailed, Attempts: 2, LastError: "hubspot: 429 Too Many Requests (retry after 2s): rate limited, a/b_c-d=e", LastAttempt: at},
		{Status: Processing, Attempts: 1, LastAttempt: at.In(time.FixedZone("x", 3600))},
		{},
	} {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := mustJSON(r); string(got) != string(want) {
			t.Errorf("mustJSON:\n got %s\nwant %s", got, want)
		}
	}
}

// answerLost is a bucket whose writes may land with their answer lost (write) or not
// land at all (!write): either way the writer is told of an error.
type answerLost struct {
	jetstream.KeyValue
	t     *testing.T
	write bool
}

var errAnswerLost = errors.New("nats: timeout")

func (b answerLost) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	if b.write {
		if _, err := b.KeyValue.Update(ctx, key, value, last); err != nil {
			b.t.Fatal(err)
		}
	}
	return 0, errAnswerLost
}

func (b answerLost) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	if b.write {
		if _, err := b.KeyValue.Put(ctx, key, value); err != nil {
			b.t.Fatal(err)
		}
	}
	return 0, errAnswerLost
}

// A completion whose write landed but whose answer was lost is a completion (read
// back); one that did not land is an error, and the record is as it was.
func TestCompletionWhoseAnswerIsLost(t *testing.T) {
	ctx := context.Background()
	kv := bucket(t)
	c := &clock{}
	c.set(time.Date(2026, 12, 7, 20, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		write   bool
		fresh   bool // the record written whatever it holds (BeginNew's), not updated
		id      string
		wantErr bool
	}{{true, false, "ev_landed", false}, {false, false, "ev_lost", true}, {true, true, "ev_new_landed", false}, {false, true, "ev_new_lost", true}} {
		g := guarded(kv, "stopper", c)
		var a Attempt
		var err error
		if tc.fresh {
			a, err = g.BeginNew(ctx, tc.id)
		} else {
			a, err = g.Begin(ctx, tc.id)
		}
		if err != nil || a.Decision != Proceed {
			t.Fatalf("%s: %+v %v", tc.id, a, err)
		}
		g.kv = answerLost{KeyValue: kv, t: t, write: tc.write}
		err = g.Complete(ctx, &a)
		rec, ok, serr := Status(ctx, kv, "stopper", tc.id)
		if serr != nil {
			t.Fatal(serr)
		}
		switch {
		case tc.wantErr && !errors.Is(err, errAnswerLost):
			t.Errorf("%s: a completion that did not land returned %v", tc.id, err)
		case tc.wantErr && ok && rec.Status == Completed:
			t.Errorf("%s: not written, yet the record says completed", tc.id)
		case !tc.wantErr && (err != nil || a.Record.Status != Completed || !ok || rec.Status != Completed):
			t.Errorf("%s: a completion that landed: err %v, attempt %+v, record %+v", tc.id, err, a.Record, rec)
		case !tc.wantErr:
			if e, err := kv.Get(ctx, a.key); err != nil || e.Revision() != a.rev {
				t.Errorf("%s: the attempt's revision %d, the record's %v (%v)", tc.id, a.rev, e, err)
			}
		}
	}
	// A write whose answer was lost while another worker's record stands (its claim,
	// once this attempt's lease ran out): the error, and the other's record untouched.
	g := guarded(kv, "stopper", c)
	a, err := g.Begin(ctx, "ev_taken")
	if err != nil || a.Decision != Proceed {
		t.Fatalf("%+v %v", a, err)
	}
	c.set(c.now().Add(time.Minute)) // past the lease
	other, err := guarded(kv, "stopper", c).Begin(ctx, "ev_taken")
	if err != nil || other.Decision != Proceed || !other.Resumed {
		t.Fatalf("the other worker: %+v %v", other, err)
	}
	g.kv = answerLost{KeyValue: kv, t: t}
	if err := g.Complete(ctx, &a); !errors.Is(err, errAnswerLost) {
		t.Errorf("a completion read back over another's record: %v", err)
	}
	if rec, _, _ := Status(ctx, kv, "stopper", "ev_taken"); rec.Status != Processing || rec.Attempts != 2 {
		t.Errorf("the other worker's record became %+v", rec)
	}
}
