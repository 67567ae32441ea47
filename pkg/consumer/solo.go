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
//     attempt, lets those under way end (their leases are in its memory only), then
//     deletes the claim and goes on shared.
//   - A shared runner takes a lease per contact in the bucket, and takes attempts only
//     while no live claim is held by another; one that finds one waits (its attempts
//     are put back) until the holder yields or is taken for dead.
//   - A runner that sees no other live member and no live claim creates the claim (or
//     takes over a dead one), lets its own shared attempts end, and looks at the
//     members again soloSettle later before it works alone: a member that started
//     meanwhile either saw the claim or is seen now, and the claim goes. A newly
//     started runner decides only soloSettle after writing its membership, for the
//     same reason, and takes for alive, until soloStale shows otherwise, every key it
//     finds then (a process that died holding one, before a restart, costs soloStale).
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

type soloMode int

const (
	soloDeciding soloMode = iota // not known yet, yielding, or another process works alone
	soloAlone                    // this runner holds the claim: leases in memory
	soloShared                   // leases in the bucket
)

// solo is one runner's side of the solo protocol over the lease bucket.
type solo struct {
	kv       jetstream.KeyValue
	scope    string // the consumer
	instance string

	mu      sync.Mutex
	mode    soloMode
	changed chan struct{}            // closed when mode changes
	rev     uint64                   // the claim's revision, alone
	wrote   time.Time                // the claim's last rewrite, alone
	held    map[string]chan struct{} // contacts leased in memory: closed when released
	members map[string]time.Time     // other runners, by instance: when their key last changed
	claimed struct {                 // the claim seen when not alone: revision, and since when
		rev   uint64
		since time.Time
	}
	alone, shared sync.WaitGroup // attempts under way in each mode
}

func soloKey(scope string) string             { return "_solo." + scope }
func memberPrefix(scope string) string        { return "_members." + scope + "." }
func memberKey(scope, instance string) string { return memberPrefix(scope) + instance }

func newSolo(kv jetstream.KeyValue, scope string) *solo {
	return &solo{kv: kv, scope: scope, instance: nuid.Next(), changed: make(chan struct{}),
		held: map[string]chan struct{}{}, members: map[string]time.Time{}}
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
			s.shared.Add(1)
			s.mu.Unlock()
			return s.shared.Done, false, false
		case mode == soloAlone && time.Since(s.wrote) < soloValid:
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
			free := make(chan struct{})
			s.held[key] = free
			s.alone.Add(1)
			s.mu.Unlock()
			return func() {
				s.mu.Lock()
				delete(s.held, key)
				s.mu.Unlock()
				close(free)
				s.alone.Done()
			}, true, true
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

func (s *solo) setMode(m soloMode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mode != m {
		s.mode = m
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

func (s *solo) modeNow() soloMode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mode
}

// run keeps the membership and decides the mode until ctx ends; then it gives up the
// claim and the membership.
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
	settle := time.After(soloSettle) // others' memberships are seen by then
	for {
		select {
		case e := <-w.Updates():
			s.seen(e)
			continue
		case <-settle:
		case <-t.C:
			s.heartbeat(ctx)
		case <-ctx.Done():
			s.leave()
			return
		}
		s.step(ctx)
	}
}

// seen notes a membership the watch delivered (nil: the initial values are all in).
func (s *solo) seen(e jetstream.KeyValueEntry) {
	if e == nil {
		return
	}
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

func (s *solo) heartbeat(ctx context.Context) {
	s.kv.Put(ctx, memberKey(s.scope, s.instance), []byte(time.Now().UTC().Format(time.RFC3339Nano)))
}

// step decides the mode from the claim and the members.
func (s *solo) step(ctx context.Context) {
	if s.modeNow() == soloAlone {
		if !s.others() && s.rewrite(ctx) {
			return
		}
		s.yield(ctx)
	}
	rev, live, err := s.claim(ctx)
	switch {
	case err != nil:
		s.setMode(soloDeciding)
	case live:
		s.setMode(soloDeciding) // another works alone: wait for it to yield
	case s.others():
		s.setMode(soloShared)
	default:
		s.takeClaim(ctx, rev)
	}
}

// claim reads the consumer's solo claim: its revision (0: none) and whether it is
// alive — held by another runner and rewritten less than soloStale ago, as far as this
// runner has seen.
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

// takeClaim creates the claim (over rev, a dead one, when not 0), lets this runner's
// shared attempts end, and works alone only if no other member appeared meanwhile.
func (s *solo) takeClaim(ctx context.Context, rev uint64) {
	s.setMode(soloDeciding) // no new attempt while changing over
	value := []byte(s.instance)
	var err error
	if rev == 0 {
		rev, err = s.kv.Create(ctx, soloKey(s.scope), value)
	} else {
		rev, err = s.kv.Update(ctx, soloKey(s.scope), value, rev)
	}
	if err != nil {
		return // another took it first, or the bucket is away: decided again next step
	}
	wrote := time.Now()
	s.shared.Wait()
	select {
	case <-time.After(soloSettle):
	case <-ctx.Done():
	}
	if s.others() || ctx.Err() != nil {
		s.kv.Delete(context.WithoutCancel(ctx), soloKey(s.scope), jetstream.LastRevision(rev))
		s.setMode(soloShared)
		return
	}
	s.mu.Lock()
	s.rev, s.wrote = rev, wrote
	s.mu.Unlock()
	s.setMode(soloAlone)
}

// rewrite renews the claim; false when it was lost (taken over as dead).
func (s *solo) rewrite(ctx context.Context) bool {
	s.mu.Lock()
	rev := s.rev
	s.mu.Unlock()
	wrote := time.Now()
	rev, err := s.kv.Update(ctx, soloKey(s.scope), []byte(s.instance), rev)
	if err != nil {
		return false
	}
	s.mu.Lock()
	s.rev, s.wrote = rev, wrote
	s.mu.Unlock()
	return true
}

// yield stops working alone: no new attempt, those under way end, then the claim goes
// (unless another took it over); the next mode is decided from there.
func (s *solo) yield(ctx context.Context) {
	s.setMode(soloDeciding)
	s.alone.Wait()
	s.mu.Lock()
	rev := s.rev
	s.mu.Unlock()
	s.kv.Delete(context.WithoutCancel(ctx), soloKey(s.scope), jetstream.LastRevision(rev))
}

// leave gives up the claim (if held) and the membership; the attempts under way have
// ended (Run waits for them first).
func (s *solo) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.mu.Lock()
	mode, rev := s.mode, s.rev
	s.mu.Unlock()
	if mode == soloAlone {
		s.alone.Wait()
		s.kv.Delete(ctx, soloKey(s.scope), jetstream.LastRevision(rev))
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
