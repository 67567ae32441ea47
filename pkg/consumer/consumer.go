// Package consumer runs a consumer service's durable JetStream consumer through
// watermill-nats: each event passes the effect-once guard, then the service's handler;
// its error is classified (transient: redeliver with backoff; permanent or out of
// attempts: dead letter with the reason), and every outcome is published to
// EXACTO_OUTCOMES.
package consumer

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/textproto"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmjs "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/privacy"
	"exacto.dev/pkg/retry"
	"exacto.dev/pkg/stream"
	"exacto.dev/pkg/telemetry"
)

var tracer = telemetry.Tracer("consumer")

// Event is one delivery as a handler sees it.
type Event struct {
	Envelope envelope.Envelope
	Attempt  int // 1 for the first attempt
	// Resumed: an earlier attempt died mid-effect, so the effect may have happened:
	// look its external key up before making it again.
	Resumed bool
	// New: no attempt can have come before this one — the event's first delivery, and
	// new to its consumer (guard.BeginNew). Only then may a handler skip a look that
	// guards against an earlier attempt's write. (A first attempt that is not New may
	// follow one that died leaving no record: Attempt 1 alone does not say so.)
	New bool
	// FirstAttempt is when this consumer first tried the event (zero when unknown);
	// Last says this attempt is the last one a transient failure leaves it before
	// it is dead-lettered. A handler that waits on a platform bounds its wait by them.
	FirstAttempt time.Time
	Last         bool

	pacer    *retry.Pacer
	breakers *Breakers
	runner   *runner
}

// Call runs fn, one call to dependency dep, through dep's pacer (a Retry-After it
// answered holds every event's calls) and circuit breaker (while it is open no call is
// made and the event is retried later). Handlers make every outside call through it.
// An urgent consumer's calls are timed too (callsInFlight): a slow platform holds its
// events, not the cores, and Precedence then defers no one to it.
func (ev Event) Call(ctx context.Context, dep string, fn func(ctx context.Context) error) error {
	if ev.pacer == nil { // an Event built by hand, outside a runner (tests)
		return fn(ctx)
	}
	if ev.runner != nil {
		ev.runner.gated.Add(1) // a Retry-After holds it, not the cores (Precedence)
	}
	err := ev.pacer.Wait(ctx, dep)
	if ev.runner != nil {
		ev.runner.gated.Add(-1)
	}
	if err != nil {
		return retry.Transiently(dep, err)
	}
	if ev.runner != nil && ev.runner.calls != nil {
		var end func()
		ctx, end = ev.runner.calls.trace(ctx, dep)
		defer end()
	}
	err = ev.breakers.call(dep, func() error { return fn(ctx) })
	if errors.Is(err, errRefused) {
		// The breaker opened between the runner's check and this call.
		return retry.Transiently(dep, err)
	}
	ev.pacer.Observe(err)
	return err
}

// Awaiting marks the event as waiting for dep's answer to a request another worker
// sent for it (a question the process asks once for all its consumers, pkg/confirm),
// until the func it returns is called: Precedence counts the wait as a request of its
// own to dep.
func (ev Event) Awaiting(dep string) (done func()) {
	if ev.runner == nil || ev.runner.calls == nil {
		return func() {}
	}
	return ev.runner.calls.await(dep)
}

// Dependencies names, for each event, the dependencies its handler may call: the runner
// holds the event in the stream (no attempt spent) while any of them is paused or
// its breaker is open.
type Dependencies func(env envelope.Envelope) []string

// On is the Dependencies of a handler that calls deps for every event.
func On(deps ...string) Dependencies {
	return func(envelope.Envelope) []string { return deps }
}

// Handler makes a service's effect for one event. Its error should be classified with
// pkg/retry; an unclassified error counts as transient.
type Handler func(ctx context.Context, ev Event) error

// Options configure one consumer service's runner.
type Options struct {
	// NC is the runner's own connection: watermill's subscriber drains it on close.
	NC  *nats.Conn
	Sub stream.Subscription
	// Workers is how many events this process handles at once (default 1).
	Workers int
	Handle  Handler
	// Acts, when set, tells the events the handler makes an effect of; for the others
	// it must do nothing (log at most). Those claim nothing (no contact lease, no guard
	// read) and their plain success has no outcome and no guard record: Status tells
	// them completed once the ack floor passes them, Statuses.OfEvent once delivered
	// where the service declared its Acts (DeclareActs). A classification the suppressor does
	// nothing with cost it three round trips, the guard's read and record and its
	// outcome, then one (the record), now none.
	Acts func(envelope.Envelope) bool
	// Dependencies, when set, say what the handler calls for an event (through
	// Event.Call): their Retry-After pauses (Pacer) and circuit breakers (Breakers)
	// gate the event before an attempt is spent on it.
	Dependencies Dependencies
	Pacer        *retry.Pacer
	Breakers     *Breakers
	// Ready, if set, is called once the consumer is bound and taking events.
	Ready func()
	// Owner names who answers for a dead letter of tenant's event type.
	Owner func(tenant, typ string) string
	Log   *slog.Logger
	// WorkflowVersion labels every metric of the consumer (config workflow_version).
	WorkflowVersion string
	// SLO gives an event's SLO class and target (config slos); nil: no SLO accounting.
	SLO func(env envelope.Envelope) (class string, target time.Duration)
	// Checkpoints, when set (one embedded node), keeps the consumer's state in the
	// server's memory and its ack floor here (checkpoint.go).
	Checkpoints jetstream.KeyValue
	// Solo, when set, is shared by the process's runners of the service (its events'
	// and its replays'), which are one member of the solo protocol (solo.go); unset,
	// the runner is a member of its own.
	Solo *Solo
	// Precedence, when set, is the process's: an urgent subscription's runner tells it
	// when it is behind, and another's workers defer to it then (precedence.go).
	Precedence *Precedence
}

// prefetch is how many events each worker's pull asks for at a time: the next events
// wait in the client while the workers are busy, so a pull request's round trip is
// paid once per few events, not per event. When the process stops, those it buffers go
// back to the server at once (Run: the drain passes them through Unmarshal, which naks
// them), so a replica or the next start gets them without waiting out the ack wait. One
// held past its ack wait behind a slow attempt is redelivered meanwhile, and its copy
// here is then skipped or found busy by the guard.
const prefetch = 4

// Run consumes until ctx ends.
func Run(ctx context.Context, o Options) error {
	js, err := jetstream.New(o.NC)
	if err != nil {
		return err
	}
	if o.Workers < 1 {
		o.Workers = 1
	}
	if o.Pacer == nil {
		o.Pacer = retry.NewPacer()
	}
	if o.Breakers == nil {
		o.Breakers = NewBreakers(30*time.Second, 5)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.WorkflowVersion == "" {
		o.WorkflowVersion = "v1"
	}
	guards, err := js.KeyValue(ctx, stream.Guards)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", stream.Guards, err)
	}
	locks, err := js.KeyValue(ctx, stream.ContactLocks)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", stream.ContactLocks, err)
	}
	forgotten, err := privacy.WatchForgotten(ctx, js)
	if err != nil {
		return err
	}
	name := o.Sub.Name()
	cl := contactLocks{kv: locks, scope: name, lease: o.Sub.AckWait}
	if !o.Sub.Idempotent { // an idempotent service takes no lease
		if o.Solo == nil {
			o.Solo = &Solo{}
		}
		cl.solo = o.Solo.join(locks, name)
		defer o.Solo.leave() // after every attempt has ended
	}
	r := &runner{o: o, name: name, js: js, guard: guard.New(guards, name, o.Sub.AckWait),
		locks:     cl,
		forgotten: forgotten,
		settlers:  newSettlers(4 * o.Workers),
		stopped:   func() bool { return ctx.Err() != nil },
		backoff:   retry.Backoff{Base: o.Sub.BackoffBase, Max: o.Sub.BackoffMax}}
	if o.Precedence != nil && o.Sub.Urgent {
		r.calls = newCallsInFlight()
	}
	sub, err := wmjs.NewSubscriber(wmjs.SubscriberConfig{
		Conn:   o.NC,
		Logger: watermill.NopLogger{},
		// watermill-nats waits this long for a handed-over message's ack before it
		// forgets it, and acks or naks it itself if it comes sooner: a nanosecond makes
		// it forget every message as soon as a worker takes it. The runner answers each
		// JetStream message itself (delivered), when its attempt is settled: a worker
		// takes its next event meanwhile, and acks go to the server in batches.
		AckWaitTimeout:      time.Nanosecond,
		ResourceInitializer: r.bind,
		NakDelay:            backoff{r.backoff},
		Unmarshaler:         withMetadata{delivered: &r.delivered, stopping: &r.stopping, received: &r.received},
		// Short pull requests: after a pause is lifted, delivery restarts within one.
		ConsumeOptions: []jetstream.PullConsumeOpt{jetstream.PullExpiry(2 * time.Second), jetstream.PullMaxMessages(prefetch)},
	})
	if err != nil {
		return err
	}
	r.zero(ctx)
	stopObserving, err := r.observeQueue(o.Sub.Durable, o.Sub.StreamName())
	if err != nil {
		return err
	}
	defer stopObserving()
	// Shutdown drains, then goes through sub.Close, never through the subscription's
	// context: watermill-nats closes a subscription's output channel when its context
	// ends while NATS may still hand it a message, and that message's send then panics
	// (send on closed channel) half the time. When ctx ends the workers take no new
	// event, finish the ones they hold, settle and ack them, hand back the ones they did
	// not take, and only then is the subscriber closed.
	subCtx := context.WithoutCancel(ctx)
	r.acks = newAcker(o.NC, o.Sub.AckWait, o.Sub.MaxAckPending, o.Log, name)
	ctx, stopWorkers := context.WithCancel(ctx) // ends with Run's, or when a worker cannot start
	defer stopWorkers()
	var wg sync.WaitGroup
	// Each worker's subscription pulls prefetch events at a time, and every worker takes
	// from one queue they all feed: an event waits only while every worker is busy,
	// never behind one slow attempt while another worker is idle. An event a feeder
	// holds when the process stops is in delivered, handed back below.
	r.queue = make(chan *message.Message)
	for range o.Workers {
		msgs, err := sub.Subscribe(subCtx, o.Sub.StreamName())
		if err != nil {
			// The workers started settle and ack what they took before it stops.
			stopWorkers()
			wg.Wait()
			r.parking.Wait()
			r.settling.Wait()
			r.settlers.stop()
			r.acks.close()
			r.handBack()
			sub.Close()
			return err
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case m, ok := <-msgs:
					if !ok {
						return
					}
					select {
					case <-ctx.Done():
						return
					case r.queue <- m:
					}
				}
			}
		}()
		go func() {
			defer wg.Done()
			// A CPU profile of the process tells each consumer's share (pprof -tagfocus).
			pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels("consumer", o.Sub.Durable)))
			for {
				if o.Precedence != nil && !o.Sub.Urgent {
					o.Precedence.hold(ctx) // the urgent consumers first while they are behind
				}
				select {
				case <-ctx.Done():
					return
				case m := <-r.queue:
					r.taken.Add(1)
					r.handle(ctx, m)
					r.handled.Add(1)
				}
			}
		}()
	}
	if o.Precedence != nil && o.Sub.Urgent {
		wctx, stopWatch := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			o.Precedence.watch(wctx, o.Sub.Durable, func() jetstream.Consumer {
				if c := r.consumer.Load(); c != nil {
					return *c
				}
				return nil
			}, inHand{
				waiting:  func() int64 { return r.received.Load() - r.taken.Load() },
				handling: func() int64 { return r.taken.Load() - r.handled.Load() + r.parked.Load() },
				heldBack: func() int64 { return r.gated.Load() + r.calls.slow(slowCall) },
			}, processShare())
		}()
		defer func() { stopWatch(); <-watched }()
	}
	var stopCheckpoints, checkpointsDone chan struct{}
	if o.Checkpoints != nil {
		stopCheckpoints, checkpointsDone = make(chan struct{}), make(chan struct{})
		go func() { defer close(checkpointsDone); r.checkpoints(stopCheckpoints) }()
	}
	if o.Ready != nil {
		o.Ready()
	}
	<-ctx.Done()
	wg.Wait()
	r.parking.Wait() // parked events handed back
	r.settling.Wait()
	r.settlers.stop()
	r.acks.close() // every settled event acked before anything is handed back
	if stopCheckpoints != nil {
		close(stopCheckpoints)
		<-checkpointsDone
	}
	// The client still buffers events, which the subscriber's drain passes through
	// Unmarshal (stopping: handed back) before it closes the connection — so wait for that.
	r.handBack()
	err = sub.Close()
	for deadline := time.Now().Add(5 * time.Second); !o.NC.IsClosed() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	return err
}

// handBack makes every event this process fetched and no worker took go back to the
// server now, so that another replica (or this one restarted) gets it at once, not
// after the ack wait: those waiting for a worker here (a feeder's included), and from
// now on those Unmarshal is given (stopping).
func (r *runner) handBack() {
	r.stopping.Store(true)
	r.delivered.Range(func(k, v any) bool {
		v.(jetstream.Msg).Nak()
		r.delivered.Delete(k)
		return true
	})
}

type runner struct {
	o     Options
	name  string // the service: its guards, outcomes and dead letters
	js    jetstream.JetStream
	guard *guard.Guard
	locks contactLocks
	// forgotten are the people erased: an event about one of them that a gateway
	// stored before it learnt of the erasure is anonymized before anyone sees it.
	forgotten *privacy.Forgotten
	// delivered maps each watermill message to its JetStream message, which the
	// runner alone answers (watermill forgets a message once a worker takes it).
	delivered sync.Map
	// stopping: no worker takes events any more; Unmarshal hands each one back.
	stopping atomic.Bool
	stopped  func() bool // the process is stopping (Run's context ended)
	backoff  retry.Backoff
	// settling counts the attempts handed over to settle (on settlers); acks holds
	// their acks.
	settling sync.WaitGroup
	settlers *settlers
	acks     *acker
	consumer atomic.Pointer[jetstream.Consumer] // as bound
	// attrs are the metric label sets made so far (eventAttrs), attrCount their number.
	attrs     sync.Map
	attrCount atomic.Int64
	// unclaimed holds the ids of the New attempts under way (guard.BeginNew), until
	// their record is written: another copy of the event waits meanwhile.
	unclaimed sync.Map
	// received and taken count the deliveries to this process and those a worker took:
	// the difference waits in the client or a feeder; handled those a worker is done
	// with; gated those held at a dependency's gate, parked at its open breaker or
	// waiting out its Retry-After (Precedence).
	received, taken, handled, gated atomic.Int64
	// queue is where its workers take events: its subscriptions feed it, and park puts
	// back an event whose dependency is up again. parked counts the events park holds,
	// parking the goroutines holding them.
	queue   chan *message.Message
	parked  atomic.Int64
	parking sync.WaitGroup
	// calls are its workers' requests to dependencies under way, when it is urgent
	// (Precedence: a slow platform holds them, not the cores).
	calls *callsInFlight
}

// bind creates or updates the service's durable consumer from the topology (each
// worker's subscription binds it).
func (r *runner) bind(ctx context.Context, js jetstream.JetStream, _ string) (jetstream.Consumer, func(context.Context, watermill.LoggerAdapter), error) {
	c, err := Bind(ctx, js, r.o.Sub.StreamName(), r.o.Sub.ConsumerConfig(), r.o.Checkpoints)
	if err == nil {
		r.consumer.Store(&c)
	}
	return c, nil, err
}

// checkpoints writes the consumer's ack floor every checkpointEvery until stop, and
// once more then.
func (r *runner) checkpoints(stop <-chan struct{}) {
	KeepCheckpoints(r.js, r.o.Checkpoints, r.o.Sub.Durable, func() jetstream.Consumer {
		if c := r.consumer.Load(); c != nil {
			return *c
		}
		return nil
	}, stop)
}

// backoff paces transient redeliveries: watermill-nats asks it with the delivery count.
type backoff struct{ b retry.Backoff }

func (b backoff) WaitTime(delivered uint64) time.Duration { return b.b.Delay(int(delivered)) }

// withMetadata keeps JetStream's delivery count and sequence on the watermill message,
// and the JetStream message itself in delivered.
type withMetadata struct {
	wmjs.DefaultUnmarshaler
	delivered *sync.Map
	stopping  *atomic.Bool
	received  *atomic.Int64
}

const (
	mdDelivered = "exacto-delivered"
	mdSeq       = "exacto-seq"
	mdPending   = "exacto-pending" // what the consumer had pending after it: stored too
	mdStored    = "exacto-stored"  // when the stream stored it (the server's clock)
)

func (u withMetadata) Unmarshal(msg jetstream.Msg) (*message.Message, error) {
	m, err := u.DefaultUnmarshaler.Unmarshal(msg)
	if err != nil {
		return nil, err
	}
	if md, err := msg.Metadata(); err == nil {
		m.Metadata.Set(mdDelivered, strconv.FormatUint(md.NumDelivered, 10))
		m.Metadata.Set(mdSeq, strconv.FormatUint(md.Sequence.Stream, 10))
		m.Metadata.Set(mdPending, strconv.FormatUint(md.NumPending, 10))
		m.Metadata.Set(mdStored, md.Timestamp.Format(time.RFC3339Nano))
	}
	if u.stopping.Load() {
		msg.Nak() // nobody will take it: the subscriber drops it after this
		return m, nil
	}
	u.delivered.Store(m, msg)
	u.received.Add(1)
	if u.stopping.Load() && u.delivered.CompareAndDelete(m, msg) {
		msg.Nak() // the stop's hand-back swept before it was stored: back now, not after the ack wait
	}
	return m, nil
}

// handle makes one attempt at one delivery. ctx ends at shutdown: until the contact's
// lease is taken an ended ctx puts the event back untouched; from the lease on, the
// attempt runs to its end on a context of its own (bounded by the ack wait), so a
// shutdown never leaves an effect made and its guard or ack unrecorded.
func (r *runner) handle(ctx context.Context, m *message.Message) {
	delivered, _ := strconv.Atoi(m.Metadata.Get(mdDelivered))
	var env envelope.Envelope
	if err := envelope.Decode(m.Payload, &env); err != nil || env.ID == "" {
		// Not an envelope: nothing to guard, nothing to retry.
		r.o.Log.ErrorContext(ctx, "undecodable event", "consumer", r.name, "seq", m.Metadata.Get(mdSeq), "err", err)
		if derr := r.deadLetter(ctx, env, m.Payload, fmt.Errorf("not an envelope: %v", err), retry.Permanent, guard.Record{Attempts: delivered}); derr != nil {
			r.nack(m) // not in the DLQ yet: keep it in the stream
			return
		}
		r.ack(ctx, m)
		return
	}
	// Nothing is made of an event that is not on disk yet (its publisher may still wait
	// for its sync): a power cut must not leave a guard, a projection or a derived event
	// of an event the log lost.
	if r.o.Sub.StreamName() == stream.Events {
		seq, _ := strconv.ParseUint(m.Metadata.Get(mdSeq), 10, 64)
		pending, _ := strconv.ParseUint(m.Metadata.Get(mdPending), 10, 64)
		if err := stream.DurableThrough(ctx, r.js, seq, seq+pending); err != nil {
			r.o.Log.WarnContext(ctx, "event not known to be on disk; redelivering", "consumer", r.name, "id", env.ID, "err", err)
			r.nack(m)
			return
		}
	}
	// The webhook's trace continues here (the gateway put it in the event's headers).
	ctx = telemetry.Extract(ctx, func(k string) string { return m.Metadata.Get(textproto.CanonicalMIMEHeaderKey(k)) })
	ctx, span := tracer.Start(ctx, "consume "+r.name, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("exacto.event_id", env.ID), attribute.String("exacto.type", env.Type), attribute.Int("exacto.delivery", delivered)))
	handedOver := false // the attempt went on to settle in a goroutine of its own
	defer func() {
		if !handedOver {
			span.End()
		}
	}()
	var deps []string
	if r.o.Dependencies != nil {
		deps = r.o.Dependencies(env)
	}
	for _, dep := range deps {
		if r.o.Breakers.State(dep) == gobreaker.StateOpen {
			r.park(ctx, m, deps) // off the worker: the events behind it, of other platforms, go on
			return
		}
	}
	if ctx.Err() != nil { // stopping: the event goes back untouched
		r.nack(m)
		return
	}
	// From here the attempt runs to its end on its own context: a lease taken on the
	// shutdown context could be stored by the server while its caller sees "canceled",
	// and then never be released.
	stopping := ctx.Done()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.o.Sub.AckWait)
	// The contact's lease goes when handle returns, or first thing when a made effect is
	// handed over to settle (below). The attempt's context lasts until it is settled.
	release := func() {}
	defer func() { release() }()
	defer func() {
		if !handedOver {
			cancel()
		}
	}()
	var a guard.Attempt
	r.forgotten.Anonymize(&env)
	leftAlone := leavesAlone(r.o.Sub, env)
	if leftAlone && m.Metadata.Get(privacy.ErasedFromHeader) != "" {
		// A copy stored in place of an event that was handled as it came (or, about a
		// forgotten person, is never to be): that event's guard record stays as it is.
		r.ack(ctx, m)
		return
	}
	if r.o.Sub.Idempotent || leftAlone || (r.o.Acts != nil && !r.o.Acts(env)) {
		a = r.guard.Assume(env.ID, delivered) // nothing to claim
	} else {
		claimed, rel, ok := r.claim(ctx, stopping, m, env)
		if !ok {
			return
		}
		a, release = claimed, rel
	}
	crashPoint(CrashAfterGuard)
	ev := Event{Envelope: env, Attempt: a.Record.Attempts, Resumed: a.Resumed, New: a.New, FirstAttempt: a.Record.FirstAttempt,
		Last: r.o.Sub.MaxDeliver > 0 && a.Record.Attempts >= r.o.Sub.MaxDeliver, pacer: r.o.Pacer, breakers: r.o.Breakers, runner: r}
	// The handler gets the ack wait less a reserve: what follows (guard, dead letter,
	// outcome, ack) must still have time when the handler used all of its own.
	derived := &held{ctx: ctx, new: a.New, cause: env.ID, consumer: r.name}
	hctx, hcancel := context.WithTimeout(holding(ctx, derived), r.o.Sub.AckWait-r.o.Sub.AckWait/6)
	var herr error
	if !leftAlone {
		herr = r.call(hctx, ev)
	}
	hcancel()
	if herr == nil {
		// The effect is made; its derived events (if any) are being committed with
		// others'. The attempt is settled (the contact released, the guard completed,
		// the event acked) once they are stored, and the worker goes on meanwhile: its
		// next event costs it no wait for this one's bookkeeping.
		handedOver = true
		releaseContact := release
		release = func() {}
		r.settling.Add(1)
		r.settlers.run(func() {
			defer r.settling.Done()
			defer cancel()
			defer span.End()
			releaseContact()
			n, err := derived.wait()
			if err == nil && n > 0 {
				// Its guard says completed only once its derived events are on disk: a
				// guard that outlived them in a power cut would skip the attempt that
				// derives them again.
				err = stream.WaitDurable(ctx, r.js, derivedDurableWithin)
			}
			if err != nil {
				r.settle(ctx, m, env, &a, retry.Transiently("derived events", err))
				return
			}
			if r.settle(ctx, m, env, &a, nil) {
				derived.done(ctx)
			}
		})
		return
	}
	// Derived events a failed handler left are dropped here: their ids are fixed, so
	// the next attempt's are the same events.
	r.settle(ctx, m, env, &a, herr)
}

// leavesAlone reports whether sub's runner leaves env alone, its handler not called: an
// event an erasure or the retention rewrote, for a service that does not take those
// (stream.Subscription.Forgotten).
func leavesAlone(sub stream.Subscription, env envelope.Envelope) bool {
	return env.Rewritten() && !sub.Forgotten
}

// claim takes the contact's lease and the event's guard for an attempt: ok with the
// attempt and the lease's release, or not ok once m is answered (skipped: done
// already; put back: busy, the guard away, or the process stopping).
func (r *runner) claim(ctx context.Context, stopping <-chan struct{}, m *message.Message, env envelope.Envelope) (a guard.Attempt, release func(), ok bool) {
	release = func() {}
	// The contact's lease and the event's claim are taken at once: one round trip of
	// waiting, not two. A claim whose lease turns out busy is given back (guard.Undo).
	// Alone, a free contact's lease is taken in memory here and now (no goroutine).
	var leased chan leaseTaken
	if contact := env.ContactKey(); contact != "" {
		leased = make(chan leaseTaken, 1)
		if rel, ok := r.locks.tryAcquire(env.Tenant, contact); ok {
			leased <- leaseTaken{rel, true}
		} else {
			go func() {
				rel, ok, err := r.locks.acquire(ctx, env.Tenant, contact)
				leased <- leaseTaken{rel, ok && err == nil}
			}()
		}
	}
	var err error
	fresh := r.fresh(m) && r.locks.solo.isAlone()
	if _, busy := r.unclaimed.Load(env.ID); busy || (fresh && !r.claimUnclaimed(env.ID)) {
		// A New attempt at this event is under way here and has no record yet: this
		// delivery (a copy of the event stored twice, or its redelivery) waits for it.
		if leased != nil {
			if l := <-leased; l.ok {
				l.release()
			}
		}
		r.nack(m)
		return a, nil, false
	}
	if fresh {
		// Nothing else attempts it: no other process (alone), no other copy of it here
		// (unclaimed); its record is read, not claimed (guard.BeginNew).
		a, err = r.guard.BeginNew(ctx, env.ID)
		if err != nil || !a.New {
			r.unclaimed.Delete(env.ID)
		}
	} else {
		a, err = r.guard.Begin(ctx, env.ID)
	}
	free := true // the contact is ours (or needs no lease)
	if leased != nil {
		l := <-leased
		if free = l.ok; free {
			release = l.release
		}
	}
	if err != nil {
		release()
		r.o.Log.WarnContext(ctx, "guard unavailable", "consumer", r.name, "id", env.ID, "err", err)
		r.nack(m)
		return a, nil, false
	}
	switch a.Decision {
	case guard.Skip:
		release()
		duplicates.Add(ctx, 1, r.eventAttrs(env))
		r.ack(ctx, m)
		return a, nil, false
	case guard.Busy:
		release()
		r.nack(m)
		return a, nil, false
	}
	select {
	case <-stopping: // stopped while claiming: nothing done yet
		free = false
	default:
	}
	if !free {
		// The contact is busy in another attempt (or the bucket is away), or the
		// process is stopping: the event goes back, its claim too.
		release()
		if err := r.guard.Undo(ctx, &a); err != nil {
			r.o.Log.WarnContext(ctx, "guard claim not given back; the next attempt resumes it", "consumer", r.name, "id", env.ID, "err", err)
		}
		if a.New {
			r.unclaimed.Delete(env.ID)
		}
		r.nack(m)
		return a, nil, false
	}
	return a, release, true
}

// completeWait bounds the write that completes an attempt's guard record (a write whose
// answer is lost is then read back, within guard.Complete's own 5 s more).
const completeWait = 10 * time.Second

// settle records an attempt's end: completed (herr nil) or failed. It reports whether
// the event is completed (its guard says so and its ack is handed to the acker).
func (r *runner) settle(ctx context.Context, m *message.Message, env envelope.Envelope, a *guard.Attempt, herr error) (completed bool) {
	if a.New { // its record is written (below): another copy of the event reads it
		defer r.unclaimed.Delete(env.ID)
	}
	if herr == nil {
		crashPoint(CrashAfterEffect)
		// An attempt that claimed nothing (an idempotent consumer's, or one at an event
		// its handler does nothing with) has no record and no outcome the first time:
		// its ack tells it (Status), and a guard record kept for ever to say that nothing
		// was done would cost a write and a subject in the bucket's memory per event.
		// After a failure, or replayed from the DLQ, both say completed.
		if !a.Assumed || a.Record.Attempts > 1 || r.o.Sub.StreamName() == stream.Replays {
			// On a context of its own: an attempt that used its whole ack wait would
			// otherwise fail to complete on every delivery, and come back for ever.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), completeWait)
			err := r.guard.Complete(cctx, a)
			cancel()
			if err != nil {
				// Acked now, the event would be done with no record saying so (a consumer
				// made again from the stream's start would make its effect again) or with
				// one saying processing for ever: it comes back instead, and its next
				// attempt finds the effect made (every handler looks before it writes) and
				// completes it.
				r.o.Log.WarnContext(ctx, "guard complete failed; redelivering", "consumer", r.name, "id", env.ID, "err", err)
				r.attempted(ctx, env, a.Record.Attempts, "retry")
				r.nack(m)
				return false
			}
			r.outcome(ctx, env, a.Record)
		}
		r.ack(ctx, m)
		r.attempted(ctx, env, a.Record.Attempts, "completed")
		r.completed(ctx, env)
		crashPoint(CrashAfterAck)
		return true
	}
	class := retry.Of(herr).Class
	// A call the breaker refused says the dependency is down, nothing of the event: it
	// waits for the dependency however long that takes, never dead-lettered for it.
	refused := errors.Is(herr, errRefused)
	if class == retry.Permanent || (a.Record.Attempts >= r.o.Sub.MaxDeliver && !refused) {
		// The dead letter is stored before the guard says so: if it cannot be, the
		// event stays retryable and in the stream, never marked dead and lost.
		if err := r.deadLetter(ctx, env, m.Payload, herr, class, a.Record); err != nil {
			r.o.Log.WarnContext(ctx, "dead letter not stored; redelivering", "consumer", r.name, "id", env.ID, "err", err)
			if err := r.guard.Fail(ctx, a, herr, true, time.Now()); err != nil {
				r.o.Log.WarnContext(ctx, "guard fail", "consumer", r.name, "id", env.ID, "err", err)
			}
			r.nack(m)
			return false
		}
		if err := r.guard.Fail(ctx, a, herr, false, time.Time{}); err != nil {
			// Acked now, the event would stay "processing" for ever and a replay of
			// its letter would find nothing to reset: it comes back instead, is
			// resumed once its lease runs out, and is dead-lettered again (the same
			// letter: one Nats-Msg-Id per attempt history).
			r.o.Log.WarnContext(ctx, "dead letter stored but not recorded in the guard; redelivering", "consumer", r.name, "id", env.ID, "err", err)
			r.nack(m)
			return false
		}
		r.outcome(ctx, env, a.Record)
		r.ack(ctx, m)
		r.attempted(ctx, env, a.Record.Attempts, "dead_letter")
		return false
	}
	// next_attempt_at is the redelivery the nak asks for: the same jittered delay.
	delay := r.retryDelay(m)
	if err := r.guard.Fail(ctx, a, herr, true, time.Now().Add(delay)); err != nil {
		r.o.Log.WarnContext(ctx, "guard fail", "consumer", r.name, "id", env.ID, "err", err)
	}
	r.outcome(ctx, env, a.Record)
	r.nackAfter(m, delay)
	r.attempted(ctx, env, a.Record.Attempts, "retry")
	return false
}

// fresh reports whether m's event can never have been tried by this consumer: its
// first delivery, of an event of EXACTO_EVENTS stored after the consumer as bound
// was created. No earlier delivery of this consumer was made (JetStream counts them),
// and none by an earlier consumer of the same name (one recreated from its checkpoint
// after a restart, or on another node), which would have been created before, so no
// guard record can hold it but an earlier copy's (the event stored twice): its attempt
// reads the record instead of claiming it, and writes it once, when it ends
// (guard.BeginNew). A redelivery — after a nak, past the ack wait, after a
// restart — reads and claims the record as every attempt did.
func (r *runner) fresh(m *message.Message) bool {
	if r.o.Sub.StreamName() != stream.Events || m.Metadata.Get(mdDelivered) != "1" {
		return false
	}
	c := r.consumer.Load()
	if c == nil {
		return false
	}
	created := (*c).CachedInfo().Created
	stored, err := time.Parse(time.RFC3339Nano, m.Metadata.Get(mdStored))
	return err == nil && !created.IsZero() && stored.After(created)
}

// claimUnclaimed notes a New attempt at id under way; false when one already is.
func (r *runner) claimUnclaimed(id string) bool {
	_, busy := r.unclaimed.LoadOrStore(id, struct{}{})
	return !busy
}

// leaseTaken is a contact lease's acquisition: ok with its release, or not ours.
type leaseTaken struct {
	release func()
	ok      bool
}

// call runs the handler. A handler that panics has failed permanently: its event is
// dead-lettered with the panic and its stack, and the process (the gateway with it,
// under exacto up) lives on instead of crash-looping on the redelivery.
func (r *runner) call(ctx context.Context, ev Event) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.o.Log.ErrorContext(ctx, "handler panicked", "consumer", r.name, "id", ev.Envelope.ID, "panic", fmt.Sprint(p))
			err = retry.Permanently(r.name, fmt.Errorf("handler panicked: %v\n%s", p, debug.Stack()))
		}
	}()
	return r.o.Handle(ctx, ev)
}

// ack acknowledges m with the consumer's next batch of acks (Run sends those held when
// it stops, before it returns); a lost ack only means a redelivery, which the guard
// skips.
func (r *runner) ack(_ context.Context, m *message.Message) {
	if jm, ok := r.delivered.LoadAndDelete(m); ok {
		r.acks.add(jm.(jetstream.Msg))
	}
}

// park holds m, an event one of whose dependencies' breakers is open, off the workers,
// so that the events behind it, of other platforms, go on: it waits, at most half the
// ack wait (the event is not attempted, so no attempt is spent), until each of those
// dependencies may be tried (Breakers.mayTry: closed, or half-open and this event its
// one probe), and then puts m back in the queue for a worker, or hands it back to the
// stream when they stayed open, no worker took it within a quarter of the ack wait, or
// the runner is stopping. Precedence counts a parked event as in the runner's hands,
// held by its dependencies. Parked events take delivery slots (MaxAckPending): past
// that many, an outage holds the consumer's other platforms' events in the stream again.
func (r *runner) park(ctx context.Context, m *message.Message, deps []string) {
	r.parked.Add(1)
	r.gated.Add(1)
	r.parking.Add(1)
	go func() {
		defer r.parking.Done()
		deadline := time.Now().Add(r.o.Sub.AckWait / 2)
		ready := func() bool {
			for _, dep := range deps {
				if !r.o.Breakers.mayTry(dep) {
					return false
				}
			}
			return true
		}
		t := time.NewTicker(parkedEvery)
		defer t.Stop()
		tried := ready()
		for !tried && time.Now().Before(deadline) && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-t.C:
				tried = ready()
			}
		}
		r.received.Add(1) // waiting for a worker again, or counted out below
		r.gated.Add(-1)
		r.parked.Add(-1)
		if tried && ctx.Err() == nil {
			if jm, ok := r.delivered.Load(m); ok {
				_ = jm.(jetstream.Msg).InProgress() // its ack wait starts again: a worker takes it next
			}
			wait := time.NewTimer(r.o.Sub.AckWait / 4)
			defer wait.Stop()
			select {
			case r.queue <- m:
				return
			case <-wait.C:
			case <-ctx.Done():
			}
		}
		// The dependency is still down, no worker took it, or we are stopping: the event
		// waits in the stream.
		r.received.Add(-1)
		r.nack(m)
	}()
}

// parkedEvery is how often a parked event looks at its dependencies' breakers.
const parkedEvery = 250 * time.Millisecond

// nack hands m back for redelivery after the backoff, or at once when the process is
// stopping (nobody here will take it; another replica may). The nak is sent here, not
// by watermill, which drops it when the subscriber closes first.
func (r *runner) nack(m *message.Message) { r.nackAfter(m, r.retryDelay(m)) }

// retryDelay is the backoff of m's delivery count, jittered.
func (r *runner) retryDelay(m *message.Message) time.Duration {
	delivered, _ := strconv.Atoi(m.Metadata.Get(mdDelivered))
	return r.backoff.Delay(delivered)
}

// nackAfter hands m back for redelivery after delay (at once when stopping).
func (r *runner) nackAfter(m *message.Message, delay time.Duration) {
	if jm, ok := r.delivered.LoadAndDelete(m); ok {
		var err error
		if r.stopping.Load() || r.stopped() {
			err = jm.(jetstream.Msg).Nak()
		} else {
			err = jm.(jetstream.Msg).NakWithDelay(delay)
		}
		if err != nil {
			r.o.Log.Warn("nak not sent", "consumer", r.name, "seq", m.Metadata.Get(mdSeq), "err", err)
		}
	}
}

// DeadLetter is what EXACTO_DLQ holds per dead event and consumer.
type DeadLetter struct {
	Consumer     string          `json:"consumer"`
	EventID      string          `json:"event_id"`
	Tenant       string          `json:"tenant"`
	Provider     string          `json:"provider"`
	Type         string          `json:"type"`
	Error        string          `json:"error"`
	Class        string          `json:"class"`
	Attempts     int             `json:"attempt_count"`
	FirstAttempt time.Time       `json:"first_attempt,omitzero"`
	LastAttempt  time.Time       `json:"last_attempt,omitzero"`
	Owner        string          `json:"owner,omitempty"`
	Event        json.RawMessage `json:"event"`
}

func (r *runner) deadLetter(ctx context.Context, env envelope.Envelope, raw []byte, cause error, class retry.Class, rec guard.Record) error {
	dl := DeadLetter{
		Consumer: r.name, EventID: env.ID, Tenant: env.Tenant, Provider: env.Provider, Type: env.Type,
		Error: cause.Error(), Class: class.String(), Attempts: rec.Attempts,
		FirstAttempt: rec.FirstAttempt, LastAttempt: rec.LastAttempt, Event: json.RawMessage(raw),
	}
	if !json.Valid(raw) {
		dl.Event, _ = json.Marshal(string(raw))
	}
	if r.o.Owner != nil {
		dl.Owner = r.o.Owner(env.Tenant, env.Type)
	}
	data, err := json.Marshal(dl)
	if err != nil {
		return err
	}
	subj := stream.DLQSubject(r.name, token(env.Tenant), token(env.Provider), token(env.Type))
	msg := &nats.Msg{Subject: subj, Data: data, Header: nats.Header{}}
	if env.ID != "" {
		// One dead letter per attempt history: a replay that dies again is a new one.
		history := cmp.Or(rec.FirstAttempt, rec.LastAttempt) // an idempotent consumer's attempts keep no first
		msg.Header.Set(jetstream.MsgIDHeader, "dlq."+r.name+"."+env.ID+"."+strconv.FormatInt(history.UnixNano(), 10))
	}
	if _, err = r.js.PublishMsg(ctx, msg); err != nil {
		return err
	}
	if err := stream.Durable(ctx, r.js, stream.DLQ); err != nil { // before its event is acked
		return err
	}
	deadLetters.Add(ctx, 1, r.eventAttrs(env, attribute.String("class", class.String())))
	return nil
}

// Outcome is one status change of an event in a consumer.
type Outcome struct {
	Consumer      string    `json:"consumer"`
	EventID       string    `json:"event_id"`
	Status        string    `json:"status"`
	Attempts      int       `json:"attempt_count"`
	LastError     string    `json:"last_error,omitempty"`
	NextAttemptAt time.Time `json:"next_attempt_at,omitzero"`
	At            time.Time `json:"at"`
}

// outcome publishes what an attempt did: completed, failed and retried, or dead-lettered.
// Its start is not published (the guard record tells an attempt under way, and
// `exacto events show` reads it): two more writes per event and consumer that nobody
// would see before the result. It is a plain publish, stored by the stream without an
// acknowledgement: nobody waited for the PubAck (a lost outcome is not fatal, the guard
// record stays the truth of the event's status), and receiving and parsing one per event
// and consumer cost every consumer about a tenth of its allocations. A publish the
// connection refuses is logged.
func (r *runner) outcome(ctx context.Context, env envelope.Envelope, rec guard.Record) {
	data, _ := json.Marshal(Outcome{Consumer: r.name, EventID: env.ID, Status: rec.Status, Attempts: rec.Attempts,
		LastError: rec.LastError, NextAttemptAt: rec.NextAttemptAt, At: time.Now().UTC()})
	subj := stream.OutcomeSubject(r.name, token(env.Tenant), token(env.Provider), token(env.Type))
	if err := r.js.Conn().Publish(subj, data); err != nil {
		r.o.Log.Warn("outcome not published", "consumer", r.name, "id", env.ID, "status", rec.Status, "err", err)
	}
}

// token keeps a subject token non-empty.
func token(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
