// Package guard is the effect-once guard every consumer passes before an effect: it
// records (consumer, event id) in a KV bucket with an atomic create, so that of all
// deliveries of one event — redeliveries, replicas, replays — exactly one proceeds at a
// time, and none proceeds once the effect is completed.
//
// The resume rule. A record is in one of these states, and Begin decides:
//
//	no record            → Proceed (attempt 1): the create is the claim
//	completed            → Skip: ack without effect
//	dead_letter          → Skip: the DLQ owns it now; a replay resets it first
//	processing, lease on → Busy: another worker is mid-effect; retry after the lease
//	processing, expired  → Proceed (resumed): the worker died mid-effect, so the effect
//	                       may have happened: the effect must look its external key up
//	                       before making it again (Attempt.Resumed says so)
//	retryable_failed     → Proceed (next attempt)
//
// Every change after the create is a compare-and-set on the record's revision, so two
// workers can never both proceed.
package guard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/internal/jsonenc"
)

// Statuses of an event in one consumer.
const (
	Received        = "received"
	Processing      = "processing"
	Completed       = "completed"
	RetryableFailed = "retryable_failed"
	DeadLetter      = "dead_letter"
)

// Record is what the guard keeps per consumer and event.
type Record struct {
	Status        string    `json:"status"`
	Attempts      int       `json:"attempt_count"`
	LastError     string    `json:"last_error,omitempty"`
	FirstAttempt  time.Time `json:"first_attempt,omitzero"`
	LastAttempt   time.Time `json:"last_attempt"`
	NextAttemptAt time.Time `json:"next_attempt_at,omitzero"`
	LeaseUntil    time.Time `json:"lease_until,omitzero"`
}

// Decision is what Begin tells the consumer to do.
type Decision int

const (
	// Proceed: make the effect, then Complete or Fail.
	Proceed Decision = iota
	// Skip: the effect is done (or dead-lettered); ack without effect.
	Skip
	// Busy: another worker holds the event; redeliver after Attempt.Wait.
	Busy
)

func (d Decision) String() string {
	return [...]string{"proceed", "skip", "busy"}[d]
}

// Attempt is one claim on an event.
type Attempt struct {
	Decision Decision
	Record   Record
	// Resumed is true when the previous attempt died mid-effect: look the effect's
	// external key up before making it again.
	Resumed bool
	// Wait is how long a Busy event should wait before its redelivery.
	Wait time.Duration
	// New: no attempt can have come before this one (BeginNew found no record).
	New bool
	// Assumed: made by Assume, nothing read or claimed.
	Assumed bool

	key  string
	rev  uint64
	prev *Record // what Begin found (nil: no record), for Undo
	// unclaimed: made by Assume, claimed by no record; Complete and Fail write the
	// record whatever it holds.
	unclaimed bool
}

// Guard is the guard bucket, seen by one consumer.
type Guard struct {
	kv       jetstream.KeyValue
	consumer string
	lease    time.Duration
	now      func() time.Time
}

// New binds consumer's guard over the bucket. lease bounds how long one attempt may
// hold an event before another worker may resume it: longer than the slowest effect.
func New(kv jetstream.KeyValue, consumer string, lease time.Duration) *Guard {
	return &Guard{kv: kv, consumer: consumer, lease: lease, now: time.Now}
}

// Key is the bucket key of an event in a consumer.
func Key(consumer, eventID string) string { return consumer + "." + eventID }

// Begin claims eventID for an attempt, or says why not.
func (g *Guard) Begin(ctx context.Context, eventID string) (Attempt, error) {
	key := Key(g.consumer, eventID)
	now := g.now().UTC()
	rec := Record{Status: Processing, Attempts: 1, FirstAttempt: now, LastAttempt: now, LeaseUntil: now.Add(g.lease)}
	rev, err := g.kv.Create(ctx, key, mustJSON(rec))
	if err == nil {
		return Attempt{Decision: Proceed, Record: rec, key: key, rev: rev}, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return Attempt{}, fmt.Errorf("guard create %s: %w", key, err)
	}
	cur, curRev, err := g.get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) { // gone since the create (a reset): tried again
		return Attempt{}, fmt.Errorf("guard read %s: %w", key, err)
	}
	if err != nil {
		return Attempt{}, err
	}
	return g.decide(ctx, key, cur, curRev, now)
}

// decide is Begin's choice on the record cur (at revision curRev) that eventID's key
// holds.
func (g *Guard) decide(ctx context.Context, key string, cur Record, curRev uint64, now time.Time) (Attempt, error) {
	switch {
	case cur.Status == Completed || cur.Status == DeadLetter:
		return Attempt{Decision: Skip, Record: cur, key: key, rev: curRev}, nil
	case cur.Status == Processing && now.Before(cur.LeaseUntil):
		return Attempt{Decision: Busy, Record: cur, Wait: cur.LeaseUntil.Sub(now), key: key, rev: curRev}, nil
	}
	resumed := cur.Status == Processing // its lease ran out: the worker died mid-effect
	next := cur
	next.Status, next.Attempts, next.LastAttempt, next.LeaseUntil, next.NextAttemptAt = Processing, cur.Attempts+1, now, now.Add(g.lease), time.Time{}
	rev, err := g.kv.Update(ctx, key, mustJSON(next), curRev)
	if conflict(err) { // another worker claimed it between our read and write
		return Attempt{Decision: Busy, Record: cur, Wait: g.lease, key: key, rev: curRev}, nil
	}
	if err != nil {
		return Attempt{}, fmt.Errorf("guard claim %s: %w", key, err)
	}
	return Attempt{Decision: Proceed, Record: next, Resumed: resumed, key: key, rev: rev, prev: &cur}, nil
}

// Assume is an attempt at eventID, its attempt-th delivery, that claims nothing: for a
// consumer whose effect is idempotent (stream.Subscription.Idempotent), where two
// attempts at once or one again change nothing. No record is read or written; its
// Complete and Fail put the record, over whatever it held.
func (g *Guard) Assume(eventID string, attempt int) Attempt {
	now := g.now().UTC()
	return Attempt{Decision: Proceed, Record: Record{Status: Processing, Attempts: attempt, LastAttempt: now},
		key: Key(g.consumer, eventID), unclaimed: true, Assumed: true}
}

// BeginNew is Begin for an attempt that nothing else can be making at the same time
// (the caller holds the event alone: consumer.fresh): the record is read, not claimed.
// With none, the attempt is New — no record is written until Complete or Fail writes
// its first; were the process to die in the middle, the redelivery finds no record, is
// not told Resumed, and its handler looks before it writes, as every handler does.
// With one (an earlier copy of the event, stored twice), Begin's rules decide.
func (g *Guard) BeginNew(ctx context.Context, eventID string) (Attempt, error) {
	key := Key(g.consumer, eventID)
	now := g.now().UTC()
	cur, rev, err := g.get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return Attempt{Decision: Proceed, Record: Record{Status: Processing, Attempts: 1, FirstAttempt: now, LastAttempt: now},
			New: true, key: key, unclaimed: true}, nil
	case err != nil:
		return Attempt{}, err
	}
	return g.decide(ctx, key, cur, rev, now)
}

// Undo gives back a claim whose attempt never began its effect (the runner claims the
// event and its contact's lease at once, and the lease was busy): the record returns
// to what Begin found, so the attempt is neither counted nor held. A claim taken over
// meanwhile is left alone. If Undo fails, the claim stays until its lease runs out and
// the next attempt is told Resumed: it looks before it acts, which is always safe.
func (g *Guard) Undo(ctx context.Context, a *Attempt) error {
	if a.unclaimed { // nothing was written
		return nil
	}
	var err error
	if a.prev == nil {
		err = g.kv.Delete(ctx, a.key, jetstream.LastRevision(a.rev))
	} else {
		_, err = g.kv.Update(ctx, a.key, mustJSON(*a.prev), a.rev)
	}
	if err != nil && !conflict(err) {
		return fmt.Errorf("guard undo %s: %w", a.key, err)
	}
	return nil
}

// Complete records that a's effect is done. A write whose answer is lost (not a lost
// claim) is read back: the record as written means it landed.
func (g *Guard) Complete(ctx context.Context, a *Attempt) error {
	rec := a.Record
	rec.Status, rec.LeaseUntil, rec.LastError, rec.NextAttemptAt = Completed, time.Time{}, "", time.Time{}
	err := g.update(ctx, a, rec)
	if err == nil || errors.Is(err, ErrLost) {
		return err
	}
	// The write may have landed with its answer lost (a timeout): the record read back
	// as written says so, and the attempt is completed — not sent round again to find
	// itself done.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readBackWait)
	defer cancel()
	if e, rerr := g.kv.Get(rctx, a.key); rerr == nil && bytes.Equal(e.Value(), mustJSON(rec)) {
		a.Record, a.rev = rec, e.Revision()
		return nil
	}
	return err
}

// readBackWait bounds the read of a record whose write's answer was lost.
const readBackWait = 5 * time.Second

// Fail records a failed attempt: retryable (next attempt after next) or dead-lettered.
func (g *Guard) Fail(ctx context.Context, a *Attempt, cause error, retryable bool, next time.Time) error {
	rec := a.Record
	rec.Status, rec.LeaseUntil, rec.LastError = DeadLetter, time.Time{}, cause.Error()
	if retryable {
		rec.Status, rec.NextAttemptAt = RetryableFailed, next.UTC()
	}
	return g.update(ctx, a, rec)
}

// Reset forgets a dead-lettered event's record, so a replay from the DLQ proceeds as a
// first attempt; it reports the status it found. Only a dead letter is reset — or a
// record left processing whose lease ran out (its worker died, or stored the letter
// and could not record it): a record that a previous replay completed (or is still
// processing) stays, so replaying twice makes the effect once. The replayed effect
// still looks its external key up.
func (g *Guard) Reset(ctx context.Context, eventID string) (was string, reset bool, err error) {
	key := Key(g.consumer, eventID)
	e, err := g.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("guard read %s: %w", key, err)
	}
	var rec Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return "", false, fmt.Errorf("guard record %s: %w", key, err)
	}
	if !rec.Resettable(g.now()) {
		return rec.Status, false, nil
	}
	if err := g.kv.Delete(ctx, key, jetstream.LastRevision(e.Revision())); err != nil {
		if conflict(err) {
			return rec.Status, false, fmt.Errorf("guard %s changed while being reset: try again", key)
		}
		return rec.Status, false, err
	}
	return rec.Status, true, nil
}

// Resettable says whether a replay may reset r at now: a dead letter, or a record left
// processing whose lease ran out.
func (r Record) Resettable(now time.Time) bool {
	return r.Status == DeadLetter || (r.Status == Processing && !now.Before(r.LeaseUntil))
}

// Status reads the record of eventID in consumer; ok is false when there is none.
func Status(ctx context.Context, kv jetstream.KeyValue, consumer, eventID string) (rec Record, ok bool, err error) {
	e, err := kv.Get(ctx, Key(consumer, eventID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, err
	}
	return rec, true, json.Unmarshal(e.Value(), &rec)
}

// ErrLost means the record changed under an attempt that held it: its lease ran out and
// another worker resumed the event. The effect must not be recorded twice.
var ErrLost = errors.New("guard: the attempt lost its claim (lease expired and the event was resumed)")

func (g *Guard) update(ctx context.Context, a *Attempt, rec Record) error {
	if a.unclaimed {
		rev, err := g.kv.Put(ctx, a.key, mustJSON(rec))
		if err != nil {
			return fmt.Errorf("guard put %s: %w", a.key, err)
		}
		a.Record, a.rev = rec, rev
		return nil
	}
	rev, err := g.kv.Update(ctx, a.key, mustJSON(rec), a.rev)
	if conflict(err) {
		return ErrLost
	}
	if err != nil {
		return fmt.Errorf("guard update %s: %w", a.key, err)
	}
	a.Record, a.rev = rec, rev
	return nil
}

func (g *Guard) get(ctx context.Context, key string) (Record, uint64, error) {
	e, err := g.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Record{}, 0, err // a new event's, the common case: callers test for it alone
	}
	if err != nil {
		return Record{}, 0, fmt.Errorf("guard read %s: %w", key, err)
	}
	var rec Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return Record{}, 0, fmt.Errorf("guard record %s: %w", key, err)
	}
	return rec, e.Revision(), nil
}

// conflict reports a compare-and-set that lost: the record's revision moved on.
func conflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// mustJSON encodes r as encoding/json does (the same fields, order, omissions and
// time format), by hand: two records are written per event and consumer, and the
// reflection of json.Marshal was a sizeable share of a consumer's CPU.
func mustJSON(r Record) []byte {
	b := make([]byte, 0, 192)
	b = append(b, `{"status":`...)
	b = jsonenc.String(b, r.Status)
	b = append(b, `,"attempt_count":`...)
	b = strconv.AppendInt(b, int64(r.Attempts), 10)
	if r.LastError != "" {
		b = append(b, `,"last_error":`...)
		b = jsonenc.String(b, r.LastError)
	}
	b = appendTime(b, "first_attempt", r.FirstAttempt, true)
	b = appendTime(b, "last_attempt", r.LastAttempt, false)
	b = appendTime(b, "next_attempt_at", r.NextAttemptAt, true)
	b = appendTime(b, "lease_until", r.LeaseUntil, true)
	return append(b, '}')
}

// appendTime appends `,"name":"<RFC 3339 time>"`, or nothing for a zero time when
// omitzero.
func appendTime(b []byte, name string, t time.Time, omitzero bool) []byte {
	if omitzero && t.IsZero() {
		return b
	}
	b = append(append(append(b, `,"`...), name...), `":`...)
	b, ok := jsonenc.Time(b, t)
	if !ok { // never a clock's time; still valid JSON, read back as a zero time
		b = append(b, "null"...)
	}
	return b
}
