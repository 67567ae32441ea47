// Package retry classifies errors and paces retries. Every consumer error is either
// transient (redeliver with exponential backoff and jitter) or permanent (dead letter
// at once with the reason). A 429's Retry-After pauses the whole dependency, not just
// the message that got it.
package retry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Class is what a consumer does with a failed attempt.
type Class int

const (
	// Transient: redeliver later (timeouts, connection errors, 429, 500/502/503/504).
	Transient Class = iota
	// Permanent: dead-letter now (4xx auth, invalid payload, object confirmed absent,
	// forbidden transition); retrying cannot help.
	Permanent
)

func (c Class) String() string {
	if c == Permanent {
		return "permanent"
	}
	return "transient"
}

// Error is a classified error of one dependency.
type Error struct {
	Class      Class
	Dependency string        // hubspot, instantly, smartlead, classifier, …
	Status     int           // the HTTP status, when there was one
	RetryAfter time.Duration // from a 429 or 503's Retry-After
	// Unsent: the call never reached the dependency (its rate limit's wait ran out).
	Unsent bool
	Err    error
}

func (e *Error) Error() string {
	dep := e.Dependency
	if dep == "" {
		dep = "dependency"
	}
	if e.Status != 0 {
		return fmt.Sprintf("%s: %s (HTTP %d): %v", dep, e.Class, e.Status, e.Err)
	}
	return fmt.Sprintf("%s: %s: %v", dep, e.Class, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Permanently marks err as permanent.
func Permanently(dep string, err error) error {
	return &Error{Class: Permanent, Dependency: dep, Err: err}
}

// Transiently marks err as transient.
func Transiently(dep string, err error) error {
	return &Error{Class: Transient, Dependency: dep, Err: err}
}

// Classified is an error type of another package that knows its class (the platform
// clients' errors): Of asks it.
type Classified interface {
	Retry() *Error
}

// Of classifies err. Errors not classified by their source are judged by what they
// are: timeouts, refused or reset connections and unexpected EOFs are transient; so is
// anything else unclassified, because a wrongly permanent error sends an effect to the
// DLQ for good, while a wrongly transient one costs retries bounded by max deliveries.
func Of(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var c Classified
	if errors.As(err, &c) {
		return c.Retry()
	}
	return &Error{Class: Transient, Err: err}
}

// StatusClass is the class of an HTTP error status: 408, 429, 500, 502, 503 and 504
// are transient; every other status will not change by retrying the same request.
func StatusClass(status int) Class {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return Transient
	}
	return Permanent
}

// ParseRetryAfter reads delay-seconds or an HTTP-date; 0 when absent or unreadable.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now).Round(time.Second)
	}
	return 0
}

// Backoff is exponential with jitter: attempt n waits between half and all of
// min(Max, Base·2^(n-1)), so retries of many messages spread out.
type Backoff struct {
	Base, Max time.Duration
}

// Delay is the wait before attempt n+1 after n failed attempts (n ≥ 1).
func (b Backoff) Delay(n int) time.Duration {
	d := b.Max
	if n < 1 {
		n = 1
	}
	if n < 32 {
		if x := b.Base << (n - 1); x > 0 && x < b.Max {
			d = x
		}
	}
	return d/2 + rand.N(d/2+1)
}

// Pacer pauses a dependency for every message at once: after a 429 with Retry-After,
// no call to it is made until the time is up.
type Pacer struct {
	mu    sync.Mutex
	until map[string]time.Time
	now   func() time.Time
}

// NewPacer returns a pacer with no dependency paused.
func NewPacer() *Pacer { return &Pacer{until: map[string]time.Time{}, now: time.Now} }

// Pause holds dep for d (extending, never shortening, a pause already running).
func (p *Pacer) Pause(dep string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t := p.now().Add(d); t.After(p.until[dep]) {
		p.until[dep] = t
	}
}

// Remaining is how long dep is still paused.
func (p *Pacer) Remaining(dep string) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d := p.until[dep].Sub(p.now()); d > 0 {
		return d
	}
	return 0
}

// Wait blocks until dep is not paused, or ctx ends.
func (p *Pacer) Wait(ctx context.Context, dep string) error {
	for {
		d := p.Remaining(dep)
		if d == 0 {
			return nil
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Observe pauses the dependency of err when it carried a Retry-After.
func (p *Pacer) Observe(err error) {
	if e := Of(err); e.RetryAfter > 0 && e.Dependency != "" {
		p.Pause(e.Dependency, e.RetryAfter)
	}
}
