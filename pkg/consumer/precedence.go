package consumer

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Precedence: safety first when a process cannot keep up with everything. The urgent
// consumers (stream.Subscription.Urgent: the stopper and the suppressor, whose effects
// keep a person from being e-mailed again) share the process's cores with the others
// (the classifier, the crmwriter, the projector), and in a campaign's burst the
// process may not have the cores for all of them at once. While an urgent consumer has
// events waiting that none of its workers has taken (more than urgentBehind), the
// others take an event at most every deferredPace per worker, so the cores go to the
// stops; once it is back under urgentCaughtUp, they go on at full speed and work off
// what waited. Nothing is dropped: the deferred events wait in the stream, durably.
// The held workers' prefetched events are held less than their ack wait.
//
// The thresholds are a few of its 32 workers' worth, read ten times a second: at 500
// replies/s a stop waited behind 64 events and a quarter second of not knowing it
// (receipt to sequence.stopped p99 221 to 415 ms in three runs of BenchmarkEndToEnd,
// 154 to 210 ms in five at these; docs/performance.md).
const (
	urgentBehind   = 16
	urgentCaughtUp = 4
	deferredPace   = 5 * time.Second
	// precedenceEvery is how often an urgent runner reads its consumer's backlog.
	precedenceEvery = 100 * time.Millisecond
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

// watch reads c's backlog every precedenceEvery until ctx ends and tells p whether
// urgent consumer name is behind (with hysteresis): its undelivered events, and those
// delivered to this process that no worker has taken yet (waiting: the workers'
// prefetched events, up to a hundred and more, which the server counts as delivered).
func (p *Precedence) watch(ctx context.Context, name string, c func() jetstream.Consumer, waiting func() int64) {
	defer p.set(name, false)
	t := time.NewTicker(precedenceEvery)
	defer t.Stop()
	behind := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cons := c()
		if cons == nil {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		info, err := cons.Info(rctx)
		cancel()
		if err != nil {
			continue
		}
		backlog := info.NumPending + uint64(max(waiting(), 0))
		switch {
		case backlog > urgentBehind:
			behind = true
		case backlog < urgentCaughtUp:
			behind = false
		}
		p.set(name, behind)
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
