// Package ratelimit paces the calls Exacto makes to a platform at the rate the
// platform documents, for every process that calls it with the same account: the
// limit is the account's (Smartlead's 60 requests per 60 s per API key, HubSpot's
// search 5 per second per account, Instantly's 100 per second per workspace), so
// replicas must share one budget, or each would spend it in full and collect 429s.
//
// A limit is a set of Rates, each "at most N calls in any window of Per" — a sliding
// window, as the platforms count, not a token bucket that would let a burst through
// at a window's edge. Its state is the time of each of the last N calls per rate, and
// a hold (a 429's Retry-After, which stops every caller of the account until it ends).
// Shared keeps that state in a JetStream key-value bucket (stream.RateLimits, memory
// storage: a lost state costs at most one window of the platform's own 429s, never an
// fsync per call) and takes a call with compare-and-set, so any number of workers and
// replicas pace as one. Local keeps it in the process, for callers without NATS.
//
// Every window is widened by Headroom: a call reserved at the window's edge reaches
// the platform a little later, and replicas' clocks differ a little, so pacing at
// exactly N per Per would now and then be N+1 in the platform's own window.
package ratelimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Rate is at most N calls in any window of Per.
type Rate struct {
	N   int
	Per time.Duration
}

func (r Rate) String() string { return fmt.Sprintf("%d per %s", r.N, r.Per) }

// Headroom widens every window by this fraction of Per (see the package comment).
const Headroom = 10 // percent

func (r Rate) window() time.Duration { return r.Per + r.Per*Headroom/100 }

// Limiter paces calls to one account.
type Limiter interface {
	// Wait blocks until a call may be made now and counts it, or ctx ends.
	Wait(ctx context.Context) error
	// Hold makes every caller wait d from now (extending, never shortening, a hold).
	Hold(ctx context.Context, d time.Duration) error
}

// All paces with every limiter given, in order (nil ones are skipped): a call that
// counts against two limits.
func All(ls ...Limiter) Limiter {
	var out all
	for _, l := range ls {
		if l != nil {
			out = append(out, l)
		}
	}
	switch len(out) {
	case 0:
		return nil
	case 1:
		return out[0]
	}
	return out
}

type all []Limiter

func (a all) Wait(ctx context.Context) error {
	for _, l := range a {
		if err := l.Wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (a all) Hold(ctx context.Context, d time.Duration) error {
	var errs []error
	for _, l := range a {
		errs = append(errs, l.Hold(ctx, d))
	}
	return errors.Join(errs...)
}

// state is one account's pacing: the call times of each rate (Unix milliseconds,
// oldest first, at most N each) and the end of a hold.
type state struct {
	Until int64     `json:"until,omitempty"`
	Calls [][]int64 `json:"calls"`
}

// wait is how long a call at now must wait (0: it may go now).
func (s *state) wait(now time.Time, rates []Rate) time.Duration {
	ms := now.UnixMilli()
	var d time.Duration
	if s.Until > ms {
		d = time.Duration(s.Until-ms) * time.Millisecond
	}
	for i, r := range rates {
		if i >= len(s.Calls) || len(s.Calls[i]) < r.N {
			continue
		}
		// The window holds N calls: the next may go once the oldest of them leaves it.
		oldest := s.Calls[i][len(s.Calls[i])-r.N]
		if free := time.UnixMilli(oldest).Add(r.window()); free.After(now) {
			d = max(d, free.Sub(now))
		}
	}
	return d
}

// take counts a call at now.
func (s *state) take(now time.Time, rates []Rate) {
	for len(s.Calls) < len(rates) {
		s.Calls = append(s.Calls, nil)
	}
	s.Calls = s.Calls[:len(rates)]
	for i, r := range rates {
		c := append(s.Calls[i], now.UnixMilli())
		s.Calls[i] = c[max(0, len(c)-r.N):]
	}
}

// hold extends the hold to now+d.
func (s *state) hold(now time.Time, d time.Duration) bool {
	until := now.Add(d).UnixMilli()
	if until <= s.Until {
		return false
	}
	s.Until = until
	return true
}

// WaitError says a turn would come later than the caller's deadline: the caller is
// told at once, with the wait, instead of sleeping until its deadline for nothing.
type WaitError struct{ Wait time.Duration }

func (e *WaitError) Error() string {
	return fmt.Sprintf("the rate limit's next turn is in %v, past the deadline", e.Wait.Round(time.Millisecond))
}

// sleep waits d or until ctx ends; a d past ctx's deadline is a *WaitError at once.
func sleep(ctx context.Context, d time.Duration) error {
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d {
		return &WaitError{Wait: d}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Local paces the callers of one process.
type Local struct {
	rates []Rate
	now   func() time.Time
	mu    sync.Mutex
	st    state
}

// NewLocal returns a limiter held in this process.
func NewLocal(rates ...Rate) *Local { return &Local{rates: rates, now: time.Now} }

// Wait implements Limiter.
func (l *Local) Wait(ctx context.Context) error {
	for {
		l.mu.Lock()
		now := l.now()
		d := l.st.wait(now, l.rates)
		if d == 0 {
			l.st.take(now, l.rates)
		}
		l.mu.Unlock()
		if d == 0 {
			return nil
		}
		if err := sleep(ctx, d); err != nil {
			return err
		}
	}
}

// Hold implements Limiter.
func (l *Local) Hold(_ context.Context, d time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st.hold(l.now(), d)
	return nil
}

// Shared paces every caller of one account, in every process, through a key of kv.
type Shared struct {
	kv    jetstream.KeyValue
	key   string
	rates []Rate
	now   func() time.Time
}

// Key names an account in the bucket: the platform and a digest of the credential, so
// the bucket never holds a key, and every process using the same credential shares it.
func Key(platform, credential string) string {
	sum := sha256.Sum256([]byte(credential))
	return strings.ToLower(platform) + "." + hex.EncodeToString(sum[:12])
}

// NewShared returns the limiter of the account key (see Key) in kv.
func NewShared(kv jetstream.KeyValue, key string, rates ...Rate) *Shared {
	return &Shared{kv: kv, key: key, rates: rates, now: time.Now}
}

// maxConflicts bounds compare-and-set retries in one Wait: past it, the bucket is
// contended beyond reason and the caller gets an error (transient to its consumer).
const maxConflicts = 1000

// Wait implements Limiter.
func (s *Shared) Wait(ctx context.Context) error {
	return s.update(ctx, func(st *state, now time.Time) (time.Duration, bool) {
		if d := st.wait(now, s.rates); d > 0 {
			return d, false
		}
		st.take(now, s.rates)
		return 0, true
	})
}

// Hold implements Limiter.
func (s *Shared) Hold(ctx context.Context, d time.Duration) error {
	return s.update(ctx, func(st *state, now time.Time) (time.Duration, bool) {
		return 0, st.hold(now, d)
	})
}

// update applies change to the stored state with compare-and-set until it sticks.
// change returns how long to wait before trying again (wait > 0), or whether it
// changed the state (write false: nothing to store).
func (s *Shared) update(ctx context.Context, change func(*state, time.Time) (wait time.Duration, write bool)) error {
	for range maxConflicts {
		var st state
		var rev uint64
		e, err := s.kv.Get(ctx, s.key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return fmt.Errorf("rate limit %s: %w", s.key, err)
		default:
			if err := json.Unmarshal(e.Value(), &st); err != nil {
				return fmt.Errorf("rate limit %s: %w", s.key, err)
			}
			rev = e.Revision()
		}
		wait, write := change(&st, s.now())
		if wait > 0 {
			if err := sleep(ctx, wait); err != nil {
				return err
			}
			continue
		}
		if !write {
			return nil
		}
		data, err := json.Marshal(st)
		if err != nil {
			return err
		}
		if rev == 0 {
			_, err = s.kv.Create(ctx, s.key, data)
		} else {
			_, err = s.kv.Update(ctx, s.key, data, rev)
		}
		if err == nil {
			return nil
		}
		if !conflict(err) {
			return fmt.Errorf("rate limit %s: %w", s.key, err)
		}
	}
	return fmt.Errorf("rate limit %s: too much contention", s.key)
}

// conflict: another caller wrote first.
func conflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || (errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant))
}

// Parse reads rates written as "60/1m,1000/1h" (N per duration), for config.
func Parse(s string) ([]Rate, error) {
	var out []Rate
	for part := range strings.SplitSeq(s, ",") {
		n, per, ok := strings.Cut(strings.TrimSpace(part), "/")
		var r Rate
		if _, err := fmt.Sscan(n, &r.N); err != nil || !ok || r.N < 1 {
			return nil, fmt.Errorf("rate %q: want N/DURATION such as 60/1m", part)
		}
		d, err := time.ParseDuration(per)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("rate %q: want N/DURATION such as 60/1m", part)
		}
		r.Per = d
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Rate) int { return int(a.Per - b.Per) })
	return out, nil
}
