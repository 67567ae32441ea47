package consumer

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Alone on a consumer, no lease per contact. A contact lease costs two writes per
// event (create, delete) and exists only to keep two replicas off one contact at
// once. A runner that is the only process bound to its consumer — the common case:
// `exacto up` on one machine — holds the consumer's solo claim instead, one key
// rewritten every soloRefresh, and keeps its contacts' leases in memory. Every runner
// also rewrites a membership key every soloRefresh while it runs, so that a runner
// that starts beside it is seen. A claim or a membership not rewritten for soloStale
// is taken for dead; each runner judges that by its own clock, from when it saw the
// key change (no two machines' clocks are compared).
//
//   - A runner alone takes new attempts only while its last rewrite of the claim is
//     less than soloValid old. Seeing another live member, it yields: it takes no new
//     attempt, lets those under way end (their leases are in its memory only) while it
//     keeps the claim alive, then deletes the claim and goes on shared.
//   - A shared runner takes a lease per contact in the bucket, and takes attempts only
//     while no live claim is held by another; one that finds one waits (its attempts
//     are put back) until the holder yields or is taken for dead.
//   - A runner that sees no other live member and no live claim creates the claim (or
//     takes over a dead one), goes on shared meanwhile, and looks at the members again
//     soloSettle later: a member that started in between either saw the claim or is seen
//     now, and the claim goes. Only then does it stop taking attempts, let its shared
//     ones end, and work alone.
//   - A runner decides first once it has read every membership there is (its watch's
//     first values), and takes for alive, until soloStale shows otherwise, every key it
//     finds then: a process that died holding the claim, before a restart, costs
//     soloStale.
//
// A process paused longer than soloStale (a frozen machine) may find another runner
// took over while its attempts were under way: for that long, two events of one contact
// may run at once, which is also what a contact lease allows once its own time runs
// out. The guard still makes each event's effect once.
const (
	soloRefresh = time.Second
	soloValid   = 2 * time.Second
	soloStale   = 3 * time.Second
	soloSettle  = 200 * time.Millisecond
)

// soloMode is what an attempt does with its contact's lease now.
type soloMode int

const (
	soloDeciding soloMode = iota // wait: not known yet, changing over, or another works alone
	soloAlone                    // in memory
	soloShared                   // in the bucket
)

// soloPhase is where the protocol is, for its loop.
type soloPhase int

const (
	phaseDeciding soloPhase = iota // looking at the claim and the members
	phaseShared
	phaseClaiming  // claim taken, members looked at again at settleAt
	phaseSwitching // no new attempt; the shared ones end, then alone
	phaseAlone
	phaseYielding // no new attempt; the alone ones end, then the claim goes
)

// solo is one runner's side of the solo protocol over the lease bucket.
type solo struct {
	kv       jetstream.KeyValue
	scope    string // the consumer
	instance string

	mu      sync.Mutex
	mode    soloMode
	changed chan struct{} // closed when mode changes
	wrote   time.Time     // the claim's last rewrite, while held
	held    map[string]chan struct{}
	members map[string]time.Time // other runners, by instance: when their key last changed
	claimed struct {             // the claim seen when not held: revision, and since when
		rev   uint64
		since time.Time
	}
	alone, shared int           // attempts under way in each mode
	idle          chan struct{} // told when either count reaches 0

	// The loop's own (one goroutine).
	phase    soloPhase
	rev      uint64 // the claim's revision, while held
	settleAt time.Time
}

func soloKey(scope string) string             { return "_solo." + scope }
func memberPrefix(scope string) string        { return "_members." + scope + "." }
func memberKey(scope, instance string) string { return memberPrefix(scope) + instance }

func newSolo(kv jetstream.KeyValue, scope string) *solo {
	return &solo{kv: kv, scope: scope, instance: nuid.Next(), changed: make(chan struct{}),
		held: map[string]chan struct{}{}, members: map[string]time.Time{}, idle: make(chan struct{}, 1)}
}

// acquire takes contact key's lease in memory when this runner works alone (handled
// true), waiting at most wait while the mode is being decided or another attempt of
// the process holds the contact: a contact's events wait their turn in memory, not in
// a redelivery. Handled false: the runner is shared, the lease is the bucket's to take,
// and the returned func must be called when the attempt ends.
func (s *solo) acquire(ctx context.Context, key string, wait time.Duration) (release func(), handled, ok bool) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		mode, changed := s.mode, s.changed
		switch {
		case mode == soloShared:
			s.shared++
			s.mu.Unlock()
			return func() { s.done(&s.shared) }, false, false
		case s.aloneNow():
			if busy, ok := s.held[key]; ok {
				s.mu.Unlock()
				select { // the contact's other attempt ends, then try again
				case <-busy:
					continue
				case <-deadline.C:
					return nil, true, false
				case <-ctx.Done():
					return nil, true, false
				}
			}
			release := s.hold(key)
			s.mu.Unlock()
			return release, true, true
		}
		s.mu.Unlock()
		select { // deciding, or a claim not rewritten lately: wait for news
		case <-changed:
		case <-deadline.C:
			return nil, true, false
		case <-ctx.Done():
			return nil, true, false
		}
	}
}

// hold takes key's lease in memory, free, while alone (s.mu held), and returns its
// release.
func (s *solo) hold(key string) (release func()) {
	free := make(chan struct{})
	s.held[key] = free
	s.alone++
	return func() {
		s.mu.Lock()
		delete(s.held, key)
		s.mu.Unlock()
		close(free)
		s.done(&s.alone)
	}
}

// tryAcquire takes key's lease in memory if this runner works alone and no other
// attempt holds it, without waiting: ok false says nothing of why (acquire tells).
func (s *solo) tryAcquire(key string) (release func(), ok bool) {
	if s == nil {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.aloneNow() {
		return nil, false
	}
	if _, busy := s.held[key]; busy {
		return nil, false
	}
	return s.hold(key), true
}

// isAlone reports whether this runner works alone on its consumer now: every delivery
// of the consumer comes to this process.
func (s *solo) isAlone() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.aloneNow()
}

// aloneNow: alone, and the claim rewritten lately enough to be sure of it (s.mu held).
func (s *solo) aloneNow() bool {
	return s.mode == soloAlone && time.Since(s.wrote) < soloValid
}

// done ends an attempt counted in n, telling the loop when none is left.
func (s *solo) done(n *int) {
	s.mu.Lock()
	*n--
	left := *n
	s.mu.Unlock()
	if left == 0 {
		select {
		case s.idle <- struct{}{}:
		default:
		}
	}
}

func (s *solo) setMode(m soloMode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mode != m {
		s.mode = m
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

// run keeps the membership and moves through the phases until ctx ends; then it gives
// up the claim and the membership.
func (s *solo) run(ctx context.Context) {
	w, err := s.kv.Watch(ctx, memberPrefix(s.scope)+"*")
	if err != nil {
		s.setMode(soloShared) // no way to see the others: the bucket's leases
		return
	}
	defer w.Stop()
	s.heartbeat(ctx)
	t := time.NewTicker(soloRefresh)
	defer t.Stop()
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	known := false // every membership there was at the start is read
	for {
		select {
		case e := <-w.Updates():
			if e != nil {
				s.seen(e)
				continue
			}
			known = true
		case <-settle.C:
		case <-s.idle:
			if s.phase != phaseSwitching && s.phase != phaseYielding {
				continue // only a change of mode waits for the attempts to end; alone, the claim is rewritten on the tick
			}
		case <-t.C:
			s.heartbeat(ctx)
		case <-ctx.Done():
			s.leave()
			return
		}
		if known {
			s.step(ctx)
		}
		if s.phase == phaseClaiming {
			settle.Reset(time.Until(s.settleAt))
		}
	}
}

// seen notes a membership the watch delivered.
func (s *solo) seen(e jetstream.KeyValueEntry) {
	id := strings.TrimPrefix(e.Key(), memberPrefix(s.scope))
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case id == s.instance:
	case e.Operation() == jetstream.KeyValuePut:
		s.members[id] = time.Now()
	default:
		delete(s.members, id) // it left
	}
}

// others reports whether another runner's membership is alive.
func (s *solo) others() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, at := range s.members {
		if time.Since(at) < soloStale {
			return true
		}
		delete(s.members, id)
	}
	return false
}

// running is how many attempts are under way alone and shared.
func (s *solo) running() (alone, shared int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.alone, s.shared
}

func (s *solo) heartbeat(ctx context.Context) {
	s.kv.Put(ctx, memberKey(s.scope, s.instance), []byte(time.Now().UTC().Format(time.RFC3339Nano)))
}

// step moves the protocol on from its phase.
func (s *solo) step(ctx context.Context) {
	switch s.phase {
	case phaseAlone:
		if !s.rewrite(ctx) || s.others() {
			s.phase = phaseYielding
			s.setMode(soloDeciding) // no new attempt alone
		}
	case phaseClaiming:
		if time.Now().Before(s.settleAt) {
			s.rewrite(ctx)
			return
		}
		if s.others() || !s.rewrite(ctx) {
			s.drop(ctx) // another started meanwhile: both share
			return
		}
		s.phase = phaseSwitching
		s.setMode(soloDeciding) // no new attempt while the shared ones end
	case phaseSwitching:
		if !s.rewrite(ctx) || s.others() {
			s.drop(ctx)
			return
		}
	case phaseYielding:
		s.rewrite(ctx) // kept alive while the attempts alone end
	default: // deciding, shared
		s.decide(ctx)
	}
	alone, shared := s.running()
	switch {
	case s.phase == phaseSwitching && shared == 0:
		s.phase = phaseAlone
		s.setMode(soloAlone)
	case s.phase == phaseYielding && alone == 0:
		s.drop(ctx)
		s.decide(ctx)
	}
}

// decide looks at the claim and the members: wait for another that works alone, share
// with others, or take the claim.
func (s *solo) decide(ctx context.Context) {
	rev, live, err := s.claim(ctx)
	switch {
	case err != nil || live:
		s.phase = phaseDeciding
		s.setMode(soloDeciding) // another works alone (or cannot be told): wait
	case s.others():
		s.phase = phaseShared
		s.setMode(soloShared)
	default:
		// Shared meanwhile: the claim was free, so no other works alone.
		s.setMode(soloShared)
		s.phase = phaseShared
		value := []byte(s.instance)
		if rev == 0 {
			rev, err = s.kv.Create(ctx, soloKey(s.scope), value)
		} else {
			rev, err = s.kv.Update(ctx, soloKey(s.scope), value, rev)
		}
		if err != nil {
			return // another took it first, or the bucket is away: decided again next step
		}
		s.mu.Lock()
		s.wrote = time.Now()
		s.mu.Unlock()
		s.rev, s.phase, s.settleAt = rev, phaseClaiming, time.Now().Add(soloSettle)
	}
}

// claim reads the consumer's solo claim: its revision (0: none) and whether it is
// alive — rewritten less than soloStale ago, as far as this runner has seen (a claim
// read again and again with one revision is not being rewritten).
func (s *solo) claim(ctx context.Context) (rev uint64, live bool, err error) {
	e, err := s.kv.Get(ctx, soloKey(s.scope))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.claimed.rev != e.Revision() {
		s.claimed.rev, s.claimed.since = e.Revision(), time.Now()
	}
	return e.Revision(), time.Since(s.claimed.since) < soloStale, nil
}

// rewrite renews the claim held; false when it was lost (taken over as dead).
func (s *solo) rewrite(ctx context.Context) bool {
	wrote := time.Now()
	rev, err := s.kv.Update(ctx, soloKey(s.scope), []byte(s.instance), s.rev)
	if err != nil {
		return false
	}
	s.rev = rev
	s.mu.Lock()
	if time.Since(s.wrote) >= soloValid && s.mode == soloAlone {
		// Attempts waiting for a claim not rewritten lately (acquire) go on now.
		close(s.changed)
		s.changed = make(chan struct{})
	}
	s.wrote = wrote
	s.mu.Unlock()
	return true
}

// drop gives up the claim (unless another took it over) and goes on shared.
func (s *solo) drop(ctx context.Context) {
	s.kv.Delete(context.WithoutCancel(ctx), soloKey(s.scope), jetstream.LastRevision(s.rev))
	s.phase = phaseShared
	s.setMode(soloShared)
}

// leave gives up the claim (if held) and the membership; the attempts under way have
// ended (Run waits for them first).
func (s *solo) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s.phase != phaseDeciding && s.phase != phaseShared {
		s.kv.Delete(ctx, soloKey(s.scope), jetstream.LastRevision(s.rev))
	}
	s.kv.Delete(ctx, memberKey(s.scope, s.instance))
}

// soloWait is how long an attempt waits for the mode to be decided before its event is
// put back: long enough for a start after a crash (soloStale) to decide.
const soloWait = soloStale + soloSettle

// Solo is a service's side of the solo protocol in one process, shared by its runners
// there (its events' and its replays'): one process is one member, whose runners keep
// each other off a contact in memory.
type Solo struct {
	mu     sync.Mutex
	s      *solo
	users  int
	cancel context.CancelFunc
	done   chan struct{}
}

// join starts the protocol over kv for consumer scope if no runner of the process has.
func (p *Solo) join(kv jetstream.KeyValue, scope string) *solo {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.users++
	if p.s == nil {
		ctx, cancel := context.WithCancel(context.Background())
		p.s, p.cancel, p.done = newSolo(kv, scope), cancel, make(chan struct{})
		go func() { defer close(p.done); p.s.run(ctx) }()
	}
	return p.s
}

// leave ends the protocol once the process's last runner of the service stops: the
// claim and the membership are given up.
func (p *Solo) leave() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.users--; p.users == 0 && p.s != nil {
		p.cancel()
		<-p.done
		p.s = nil
	}
}

// Alone reports whether the process's runners of the service work alone on its
// consumer now: their contacts' leases in memory, none in the bucket.
func (p *Solo) Alone() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.s.isAlone()
}
