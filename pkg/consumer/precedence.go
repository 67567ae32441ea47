package consumer

import (
	"context"
	"net/http/httptrace"
	"runtime"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Precedence: safety first when a process cannot keep up with everything. The urgent
// consumers (stream.Subscription.Urgent: the stopper and the suppressor, whose effects
// keep a person from being e-mailed again) share the process's cores with the others
// (the classifier, the crmwriter, the projector), and in a campaign's burst the
// process may not have the cores for all of them at once. An urgent consumer is behind
// while more than urgentBehind of its events wait that none of its workers has taken;
// or, while the process uses at least busyShare of its cores, while more than that are
// in its hands (waiting or being handled: with 32 workers a burst seldom leaves an
// event waiting for a worker; it makes each one slower instead, every step of every
// worker queueing for the cores the others use). Then the others take an event at most
// every deferredPace per worker, so the cores go to the urgent ones. They go on at full
// speed, and work off what waited, once caughtUpFor of reads in a row have found fewer
// than urgentCaughtUp waiting for a worker and, while the cores are short, fewer than
// that in its hands: events in hand count only while the cores are short, to fall
// behind as to catch up (a slow platform holds the stopper's workers without using a
// core, and must not hold the CRM back). Nor does an urgent consumer fall behind,
// however many of its events wait, while the process leaves most of its cores idle
// (under idleShare: deferring the others would give it nothing); idle cores do not end
// a time behind, since the deferral may be what idles them. And it is not behind while
// its dependencies hold it: at least half of the events in its workers' hands waiting
// at a dependency's gate (its breaker open, a Retry-After not passed) or for the answer
// of a slow one (slowCall), for caughtUpFor, and a second more of that ends a time
// behind. Else an Instantly outage, or an Instantly answering in a second, would make
// the classifier, the CRM writer and the projector crawl for as long as it lasts
// (TestAnUrgentConsumerHeldByItsPlatformHoldsNoOneBack,
// TestASlowPlatformHoldsOnlyItsUrgentConsumer). A paused urgent consumer is
// never behind: its backlog waits for the operator. Nothing is dropped: the deferred
// events wait in the stream, durably. The held workers' prefetched events are held
// less than their ack wait. The classifier defers too: a reply asking to be left alone
// is stopped at once and suppressed after the burst (an urgent classifier slowed the
// stops tenfold).
//
// At 500 replies/s (BenchmarkEndToEnd; docs/performance.md "Precedence by the cores")
// receipt to sequence.stopped had a p99 of 160 to 477 ms, p50 62 to 78 ms, when only
// the events waiting for a worker counted (the others seldom deferred); 79 to 130 ms,
// p50 4.5 to 12 ms, as it is now; 119 to 162 ms, p50 32 to 46 ms, with the others going
// on at the first calm read.
const (
	urgentBehind   = 16
	urgentCaughtUp = 4
	deferredPace   = 5 * time.Second
	// precedenceEvery is how often an urgent runner reads its consumer's backlog.
	precedenceEvery = 100 * time.Millisecond
	// busyShare is the share of the process's cores (GOMAXPROCS), used over the last
	// precedenceEvery, from which the cores are short; under idleShare they are idle.
	busyShare = 0.75
	idleShare = 0.25
	// caughtUpFor is how long, read after read, an urgent consumer must be found caught
	// up before the others go on: they would take the cores back at once.
	caughtUpFor = time.Second
	// slowCall: a request to a dependency unanswered for longer, or to one whose last
	// answer took longer, waits for the platform, not for the cores: at 500 replies/s on
	// two busy cores, the others deferred, a stop's two to four requests to the sandbox
	// in the process took 30 to 37 ms together at the p99 (docs/performance.md, "Where a
	// stop's tail is spent"). Where a platform answers this slowly, deferring the others
	// would buy a stop little of its time.
	slowCall = 200 * time.Millisecond
)

// Precedence is one process's: its urgent runners report, its other runners defer.
type Precedence struct {
	mu     sync.Mutex
	behind map[string]bool // urgent consumers behind now
}

// Behind reports whether an urgent consumer of the process is behind.
func (p *Precedence) Behind() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.behind {
		if b {
			return true
		}
	}
	return false
}

func (p *Precedence) set(name string, behind bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.behind == nil {
		p.behind = map[string]bool{}
	}
	p.behind[name] = behind
}

// inHand is what an urgent runner holds in this process: events delivered to it that
// no worker has taken yet (waiting: what its subscriptions handed over and no worker
// took, up to two a worker, which the server counts as delivered), and those its
// workers handle now, of which heldBack wait for a dependency: at its gate, or for the
// answer to a request to a slow one (slowCall).
type inHand struct{ waiting, handling, heldBack func() int64 }

// callsInFlight are a runner's workers' calls to dependencies under way, each with when
// its request went out, if it has one out, and how long each dependency took to answer
// last (Precedence: a slow platform holds the events, not the cores). Requests are HTTP
// requests (every platform's client makes its calls so), seen through an
// httptrace.ClientTrace in the call's context; one counts from when it asks for a
// connection, so a wait for the account's rate limit before it, which the others'
// calls may cause, does not, unless the platform's last answer was slow.
type callsInFlight struct {
	mu   sync.Mutex
	next uint64
	out  map[uint64]call
	took map[string]time.Duration // by dependency: its last answer's wait
}

// call is one under way: its dependency, and when its request went out (zero while it
// has none out).
type call struct {
	dep  string
	sent time.Time
}

func newCallsInFlight() *callsInFlight {
	return &callsInFlight{out: map[uint64]call{}, took: map[string]time.Duration{}}
}

// begin records a call to dep beginning now (sent: its request out now, as for another
// worker's request it waits for) and returns its id.
func (c *callsInFlight) begin(dep string, sent time.Time) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	c.out[c.next] = call{dep, sent}
	return c.next
}

// trace begins a call to dep and returns ctx with an HTTP client trace that records
// each request it makes, from when it asks for a connection (a dial that hangs is the
// platform's time too) to the first byte of its answer, and a func that ends the call.
// The trace's hooks may run on net/http's own goroutines, even after the call has
// ended (an HTTP/2 write cut short): they do nothing then.
func (c *callsInFlight) trace(ctx context.Context, dep string) (context.Context, func()) {
	id := c.begin(dep, time.Time{})
	// settle ends the request out, if any: its wait is dep's last answer's when it was
	// answered, or, unanswered, when it has waited longer than slowCall already.
	settle := func(answered bool) {
		if cl, ok := c.out[id]; ok && !cl.sent.IsZero() {
			if waited := time.Since(cl.sent); answered || waited > slowCall {
				c.took[dep] = waited
			}
			c.out[id] = call{dep, time.Time{}}
		}
	}
	sent := func(string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.out[id]; ok { // not ended
			settle(false) // a request made again (a redirect, a retry) ends the one before
			c.out[id] = call{dep, time.Now()}
		}
	}
	answered := func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		settle(true)
	}
	end := func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		settle(false)
		delete(c.out, id)
	}
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GetConn: sent, GotFirstResponseByte: answered}), end
}

// await records a wait for dep's answer to a request another worker sent, until the
// func it returns is called: counted as a request out of its own.
func (c *callsInFlight) await(dep string) (done func()) {
	id := c.begin(dep, time.Now())
	return func() {
		c.mu.Lock()
		delete(c.out, id)
		c.mu.Unlock()
	}
}

// slow counts the calls under way to a dependency whose last answer took longer than d,
// and those whose request out has waited longer than d for its answer.
func (c *callsInFlight) slow(d time.Duration) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, cl := range c.out {
		if c.took[cl.dep] > d || (!cl.sent.IsZero() && time.Since(cl.sent) > d) {
			n++
		}
	}
	return n
}

// watch reads c's backlog every precedenceEvery until ctx ends and tells p whether
// urgent consumer name is behind (with hysteresis), share being the process's use of
// its cores since its last call (ok false when unknown).
func (p *Precedence) watch(ctx context.Context, name string, c func() jetstream.Consumer, held inHand, share func() (float64, bool)) {
	defer p.set(name, false)
	t := time.NewTicker(precedenceEvery)
	defer t.Stop()
	behind, low := false, 0
	at := metric.WithAttributes(attribute.String("consumer", name))
	deferred.Add(ctx, 0, at) // seen at 0 from the start: an alert on its rate works at once
	last := time.Now()
	ungated := last // when its events in hand were last found not held by its dependencies
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		if behind {
			deferred.Add(ctx, now.Sub(last).Seconds(), at)
		}
		last = now
		used, known := share()
		busy, idle := known && used >= busyShare, known && used < idleShare
		cons := c()
		if cons == nil {
			continue
		}
		waiting, handling := held.waiting(), held.handling() // as the cores were used
		if back := min(held.heldBack(), handling); handling <= 0 || 2*back < handling {
			ungated = now
		}
		stalled := now.Sub(ungated) >= caughtUpFor // its dependencies hold it, not the cores
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		info, err := cons.Info(rctx)
		cancel()
		if err != nil {
			continue
		}
		if info.Paused {
			// Paused (`exacto worker pause`, an erasure): its backlog waits for the
			// operator, not for cores, and deferring the others to it would only stall
			// them for as long as the pause lasts.
			behind, low = false, 0
			p.set(name, false)
			continue
		}
		queued := info.NumPending + uint64(max(waiting, 0))
		all := queued + uint64(max(handling, 0))
		switch {
		case stalled:
			// Deferring the others would give it nothing: a second of such reads in a
			// row, as for catching up, and they go on.
			if low++; time.Duration(low)*precedenceEvery >= caughtUpFor {
				behind = false
			}
		case !idle && queued > urgentBehind, busy && all > urgentBehind:
			behind, low = true, 0
		case queued < urgentCaughtUp && (all < urgentCaughtUp || !busy):
			if low++; time.Duration(low)*precedenceEvery >= caughtUpFor {
				behind = false
			}
		default:
			low = 0
		}
		p.set(name, behind)
	}
}

// processShare is what an urgent runner reads the process's use of its cores with (a
// test stands in for the process's cores here).
var processShare = coreShare

// coreShare returns a func that tells the share of the process's cores (GOMAXPROCS)
// it used since the func's last call, from the process's CPU time (processCPU).
func coreShare() func() (float64, bool) {
	lastCPU, known := processCPU()
	lastAt := time.Now()
	return func() (float64, bool) {
		cpu, ok := processCPU()
		now := time.Now()
		used := float64(cpu-lastCPU) / (float64(now.Sub(lastAt)) * float64(runtime.GOMAXPROCS(0)))
		valid := known && ok && now.After(lastAt)
		lastCPU, lastAt, known = cpu, now, ok
		return used, valid
	}
}

// hold waits, while an urgent consumer is behind, at most deferredPace before a
// deferred worker takes its next event.
func (p *Precedence) hold(ctx context.Context) {
	if !p.Behind() {
		return
	}
	deadline := time.Now().Add(deferredPace)
	t := time.NewTicker(precedenceEvery)
	defer t.Stop()
	for p.Behind() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
