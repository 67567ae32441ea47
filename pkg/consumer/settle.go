package consumer

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/stream"
)

// Settling in batches. An event's bookkeeping after its effect — its derived events
// stored, its guard completed, its ack — is what costs fsyncs, and none of it needs to
// hold a worker: the worker hands the attempt over and takes its next event, the
// derived events of every attempt of the process share a commit (the derived
// committer's window), and the acks of a consumer go to the server together, so the
// server writes the consumer's state (an fsync under sync always) once per batch,
// not up to ten times a second. Nothing is acked before it is settled: a crash
// before the ack only means a redelivery, which the guard skips.

// held is an attempt's derived events still being committed. Deriver.Publish through
// a committer leaves their waits here instead of waiting; the attempt is completed
// once every one is stored (or fails as a transient error if one is not).
type held struct {
	ctx context.Context // the attempt's: a wait outlives the handler's context
	// New (Event.New): no attempt of consumer at the event cause came before this one.
	new             bool
	cause, consumer string
	mu              sync.Mutex
	waits           []func() (bool, error)
	// completed run once the attempt's event is completed (Event.Completed).
	completed []func(context.Context)
}

// first reports whether env can have been stored by no one before: h's attempt is New,
// still within its time (its context's deadline, the ack wait), and env's id is the one
// its consumer derives from the event it attempts (envelope.Derive). Only an attempt of
// the same consumer at the same event makes that id: none came before a New one, and
// one that follows it (a redelivery once its ack wait ran out) is not New and looks.
// An attempt past its time (its process frozen, then resumed) may follow such a
// redelivery's publish by more than the duplicate window: it looks too.
func (h *held) first(env envelope.Envelope) bool {
	if h == nil || !h.new || env.ID != stream.DerivedID(env.Tenant, h.consumer, env.Type, h.cause) {
		return false
	}
	deadline, ok := h.ctx.Deadline()
	return ok && time.Now().Before(deadline)
}

type heldKey struct{}

func holding(ctx context.Context, h *held) context.Context {
	return context.WithValue(ctx, heldKey{}, h)
}

func heldOf(ctx context.Context) *held {
	h, _ := ctx.Value(heldKey{}).(*held)
	return h
}

func (h *held) add(wait func() (bool, error)) {
	h.mu.Lock()
	h.waits = append(h.waits, wait)
	h.mu.Unlock()
}

// done runs what the attempt left for its event's completion (Event.Completed).
func (h *held) done(ctx context.Context) {
	h.mu.Lock()
	fns := h.completed
	h.completed = nil
	h.mu.Unlock()
	for _, fn := range fns {
		fn(ctx)
	}
}

// wait waits for every held derived event (a duplicate is stored already) and says
// how many there were.
func (h *held) wait() (int, error) {
	h.mu.Lock()
	waits := h.waits
	h.waits = nil
	h.mu.Unlock()
	var first error
	for _, w := range waits {
		if _, err := w(); err != nil && first == nil {
			first = err
		}
	}
	return len(waits), first
}

// derivedDurableWithin bounds how long a settled attempt's derived events wait for a
// sync someone else asks for before the attempt asks for one (stream.WaitDurable): under
// load a webhook's round comes first; at a trickle the derived events of the attempts of
// these milliseconds share one. It also bounds how fast a consumer settles a backlog
// with no webhook coming in: MaxAckPending attempts per wait.
const derivedDurableWithin = 20 * time.Millisecond

// acker sends a consumer's acks together: every `every`, or as soon as max are held.
type acker struct {
	nc    *nats.Conn
	every time.Duration
	max   int
	log   *slog.Logger
	name  string

	mu   sync.Mutex
	msgs []jetstream.Msg
	full chan struct{}
	stop chan struct{}
	done chan struct{}
}

// ackEvery is how long an ack is held at most: the consumer's state is written to
// disk about once per batch of acks instead of up to ten times a second.
const ackEvery = time.Second

func newAcker(nc *nats.Conn, ackWait time.Duration, maxAckPending int, log *slog.Logger, name string) *acker {
	a := &acker{nc: nc, every: min(ackEvery, ackWait/10), max: 256, log: log, name: name,
		full: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if maxAckPending > 0 { // never hold back so many acks that delivery stalls
		a.max = max(1, min(a.max, maxAckPending/4))
	}
	go a.run()
	return a
}

func (a *acker) add(m jetstream.Msg) {
	a.mu.Lock()
	a.msgs = append(a.msgs, m)
	n := len(a.msgs)
	a.mu.Unlock()
	if n >= a.max {
		select {
		case a.full <- struct{}{}:
		default:
		}
	}
}

func (a *acker) run() {
	defer close(a.done)
	t := time.NewTicker(a.every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-a.full:
		case <-a.stop:
			a.flush()
			return
		}
		a.flush()
	}
}

// flush sends the held acks; a lost one only means a redelivery, which the guard skips.
func (a *acker) flush() {
	a.mu.Lock()
	msgs := a.msgs
	a.msgs = nil
	a.mu.Unlock()
	for _, m := range msgs {
		if err := m.Ack(); err != nil {
			a.log.Warn("ack not sent", "consumer", a.name, "err", err)
		}
	}
}

// close sends every held ack and waits until the server has them.
func (a *acker) close() {
	close(a.stop)
	<-a.done
	if err := a.nc.FlushTimeout(5 * time.Second); err != nil {
		a.log.Warn("acks not flushed", "consumer", a.name, "err", err)
	}
}
