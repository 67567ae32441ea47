package consumer

import (
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"

	"exacto.dev/pkg/retry"
)

// Breakers holds one circuit breaker per dependency, shared by every consumer of a
// process that calls it. While a dependency's breaker is open its consumers take no
// event for it: events wait in the stream, none is failed because the dependency is
// down; after Open a half-open probe tries one call.
type Breakers struct {
	mu    sync.Mutex
	byDep map[string]*gobreaker.CircuitBreaker[struct{}]
	open  time.Duration
	trips uint32
	// OnChange, if set, hears every state change (for metrics and logs).
	OnChange func(dep string, from, to gobreaker.State)
	// probing names the dependencies whose half-open breaker a parked event has been let
	// through to probe (mayTry), until the breaker's next change.
	pmu     sync.Mutex
	probing map[string]bool
}

// NewBreakers opens a dependency's breaker after trips consecutive transient failures,
// for open at a time.
func NewBreakers(open time.Duration, trips uint32) *Breakers {
	return &Breakers{byDep: map[string]*gobreaker.CircuitBreaker[struct{}]{}, open: open, trips: trips}
}

func (b *Breakers) of(dep string) *gobreaker.CircuitBreaker[struct{}] {
	b.mu.Lock()
	defer b.mu.Unlock()
	cb, ok := b.byDep[dep]
	if !ok {
		cb = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
			Name:         dep,
			MaxRequests:  1,
			Timeout:      b.open,
			ReadyToTrip:  func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= b.trips },
			IsSuccessful: answered,
			OnStateChange: func(name string, from, to gobreaker.State) {
				b.pmu.Lock()
				delete(b.probing, name)
				b.pmu.Unlock()
				if b.OnChange != nil {
					b.OnChange(name, from, to)
				}
			},
		})
		b.byDep[dep] = cb
	}
	return cb
}

// State is dep's breaker state.
func (b *Breakers) State(dep string) gobreaker.State { return b.of(dep).State() }

// mayTry reports whether an event parked for dep may be tried now: its breaker closed,
// or half-open and no other parked event let through to probe it (the half-open
// breaker takes one call; the others would be refused, each spending an attempt).
func (b *Breakers) mayTry(dep string) bool {
	switch b.State(dep) {
	case gobreaker.StateClosed:
		return true
	case gobreaker.StateHalfOpen:
		b.pmu.Lock()
		defer b.pmu.Unlock()
		if b.probing[dep] {
			return false
		}
		if b.probing == nil {
			b.probing = map[string]bool{}
		}
		b.probing[dep] = true
		return true
	}
	return false
}

// answered reports whether the dependency answered as a live one does: only one that
// does not answer trips its breaker. A permanent error is the event's fault, a 429 a
// live dependency asking for patience (the pacer holds its calls), and a call that
// never left (its rate limit's wait ran out) says nothing of it.
func answered(err error) bool {
	if err == nil {
		return true
	}
	e := retry.Of(err)
	return e.Class == retry.Permanent || e.Unsent || e.Status == http.StatusTooManyRequests
}

// errRefused means the breaker refused the call: it says nothing of the event.
var errRefused = errors.New("circuit breaker refused the call")

// call runs fn through dep's breaker.
func (b *Breakers) call(dep string, fn func() error) error {
	_, err := b.of(dep).Execute(func() (struct{}, error) { return struct{}{}, fn() })
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return errRefused
	}
	return err
}
