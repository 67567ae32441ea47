package consumer

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/stream"
)

// leaseKeys are the contact leases ever written to the bucket by sub's consumer (the
// bucket's stream keeps one message per key: a deleted lease leaves its marker).
func leaseKeys(t *testing.T, conn *broker.Conn) []string {
	t.Helper()
	s, err := conn.JS.Stream(context.Background(), "KV_"+stream.ContactLocks)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter("$KV."+stream.ContactLocks+"."+sub.Durable+".>"))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for subject := range info.State.Subjects {
		keys = append(keys, strings.TrimPrefix(subject, "$KV."+stream.ContactLocks+"."))
	}
	return keys
}

// One runner alone on its consumer keeps its contacts' leases in memory: events of one
// contact still run one at a time — the next waits for the one under way, in memory, not
// in a redelivery — and the bucket holds no lease of theirs.
func TestAloneLeasesInMemory(t *testing.T) {
	conn := brokertest.Start(t, "")
	c := runAlone(t, conn, 4)
	ids := publishFor(t, conn, 12, func(i int) string { return []string{"ana@example.com", "bo@example.com"}[i%2] })
	waitFor(t, "every event handled", func() bool { return c.handled(ids) })
	if c.overlapped() {
		t.Fatal("two events of one contact ran at once")
	}
	if keys := leaseKeys(t, conn); len(keys) != 0 {
		t.Fatalf("a runner alone wrote contact leases to the bucket: %v", keys)
	}
	cons, err := conn.JS.Consumer(context.Background(), stream.Events, sub.Durable)
	if err != nil {
		t.Fatal(err)
	}
	if d := cons.CachedInfo().Delivered.Consumer; d != uint64(len(ids)) {
		t.Fatalf("%d deliveries of %d events: a busy contact's event went back to the stream", d, len(ids))
	}
}

// A second runner that starts while the first works alone on a contact's long event
// does not start that contact's next event until the long one has ended, however long
// that takes; once both run, the leases are the bucket's.
func TestJoinerWaitsForTheLoneRunnersAttempts(t *testing.T) {
	conn := brokertest.Start(t, "")
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	var c contention
	var long string
	var mu sync.Mutex
	h := c.handler(func(id string) {
		mu.Lock()
		isLong := id == long
		mu.Unlock()
		if isLong {
			<-release // holds ana for as long as the test says
		}
	})
	sp := &Solo{}
	run(t, conn, h, func(o *Options) { o.Solo = sp })
	waitAlone(t, sp)
	mu.Lock()
	long = publishFor(t, conn, 1, func(int) string { return "ana@example.com" })[0]
	mu.Unlock()
	t.Cleanup(free) // before the runner stops, which waits for the long event
	waitFor(t, "the long event under way", func() bool { return c.running("email:ana@example.com") })
	run(t, conn, h) // a second replica joins
	next := publishEvents(t, conn, 1, 4, func(int) string { return "ana@example.com" })
	// Both have seen each other and the first is yielding, for longer than a claim
	// lives unrewritten: it keeps it alive while its attempt lasts.
	time.Sleep(soloStale + 2*soloRefresh)
	if n := c.count(next); n != 0 {
		t.Fatalf("%d of ana's next events ran while her first was under way", n)
	}
	free()
	waitFor(t, "every event handled", func() bool { return c.handled(append(next, long)) })
	if c.overlapped() {
		t.Fatal("two events of one contact ran at once")
	}
	more := publishEvents(t, conn, 5, 4, func(int) string { return "bo@example.com" })
	waitFor(t, "bo's events handled", func() bool { return c.handled(more) })
	if keys := leaseKeys(t, conn); len(keys) == 0 {
		t.Fatal("two runners took no lease in the bucket")
	}
}

// A runner that died working alone (no goodbye: its claim and membership stay in the
// bucket) holds the consumer no longer than soloStale: the next one takes over.
func TestDeadLoneRunnerIsTakenOver(t *testing.T) {
	conn := brokertest.Start(t, "")
	kv, err := conn.JS.KeyValue(context.Background(), stream.ContactLocks)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{soloKey(sub.Durable), memberKey(sub.Durable, "dead")} {
		if _, err := kv.Put(context.Background(), k, []byte("dead")); err != nil {
			t.Fatal(err)
		}
	}
	var c contention
	run(t, conn, c.handler(nil))
	start := time.Now()
	ids := publishFor(t, conn, 3, func(int) string { return "ana@example.com" })
	waitFor(t, "the events handled", func() bool { return c.handled(ids) })
	if took := time.Since(start); took < soloStale {
		t.Fatalf("handled %v after start, before the dead runner's claim was stale", took)
	}
	waitFor(t, "the claim taken over", func() bool {
		e, err := kv.Get(context.Background(), soloKey(sub.Durable))
		return err == nil && string(e.Value()) != "dead"
	})
}

// runAlone runs a runner of workers on conn, with the contention handler, and waits
// until it works alone.
func runAlone(t *testing.T, conn *broker.Conn, workers int) *contention {
	t.Helper()
	c := &contention{}
	sp := &Solo{}
	run(t, conn, c.handler(nil), func(o *Options) { o.Workers, o.Solo = workers, sp })
	waitAlone(t, sp)
	return c
}

// waitAlone waits until the runners of sp work alone.
func waitAlone(t *testing.T, sp *Solo) {
	t.Helper()
	waitFor(t, "the runner alone", func() bool {
		sp.mu.Lock()
		s := sp.s
		sp.mu.Unlock()
		if s == nil {
			return false
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.mode == soloAlone
	})
}

// contention tracks a handler's events per contact: which ran, and whether two of one
// contact ever ran at once.
type contention struct {
	mu      sync.Mutex
	now     map[string]int
	done    map[string]int
	overlap bool
}

func (c *contention) handler(during func(id string)) Handler {
	return func(ctx context.Context, ev Event) error {
		key := ev.Envelope.ContactKey()
		c.mu.Lock()
		if c.now == nil {
			c.now, c.done = map[string]int{}, map[string]int{}
		}
		c.now[key]++
		c.overlap = c.overlap || c.now[key] > 1
		c.mu.Unlock()
		if during != nil {
			during(ev.Envelope.ID)
		}
		time.Sleep(5 * time.Millisecond)
		c.mu.Lock()
		c.now[key]--
		c.done[ev.Envelope.ID]++
		c.mu.Unlock()
		return nil
	}
}

func (c *contention) running(contact string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now[contact] > 0
}

func (c *contention) count(ids []string) (n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		n += c.done[id]
	}
	return n
}

func (c *contention) handled(ids []string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if c.done[id] == 0 {
			return false
		}
	}
	return true
}

func (c *contention) overlapped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.overlap
}

// A runner alone rewrites its claim once a soloRefresh, however often its attempts come
// and go: an attempt that leaves none under way writes nothing to the bucket.
func TestAloneClaimIsRewrittenOnTheTickOnly(t *testing.T) {
	conn := brokertest.Start(t, "")
	c := runAlone(t, conn, 1)
	kv, err := conn.JS.KeyValue(context.Background(), stream.ContactLocks)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(context.Background(), soloKey(sub.Durable), jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	start := time.Now()
	// One at a time: each event handled before the next is stored, so the runner has
	// none under way between two.
	const n = 60
	for i := range n {
		ids := publishEvents(t, conn, i, 1, func(int) string { return "ana@example.com" })
		waitFor(t, "the event handled", func() bool { return c.handled(ids) })
	}
	took := time.Since(start)
	time.Sleep(100 * time.Millisecond) // the watch delivers what was written by then
	rewrites := 0
	for done := false; !done; {
		select {
		case e := <-w.Updates():
			if e != nil {
				rewrites++
			}
		default:
			done = true
		}
	}
	if most := int(took/soloRefresh) + 2; rewrites > most {
		t.Fatalf("the claim was rewritten %d times in %v for %d attempts (at most %d: one a %v)", rewrites, took.Round(time.Millisecond), n, most, soloRefresh)
	}
}

// tryAcquire takes a free contact's lease in memory only while the runner works alone
// (its claim rewritten lately), never one another attempt holds, and its release frees it.
func TestTryAcquireOnlyAloneAndFree(t *testing.T) {
	s := newSolo(nil, "c")
	if _, ok := s.tryAcquire("k"); ok {
		t.Fatal("taken while deciding")
	}
	s.mode = soloShared
	if _, ok := s.tryAcquire("k"); ok {
		t.Fatal("taken in memory while shared")
	}
	s.mode, s.wrote = soloAlone, time.Now().Add(-soloValid)
	if _, ok := s.tryAcquire("k"); ok {
		t.Fatal("taken with the claim not rewritten lately")
	}
	s.wrote = time.Now()
	release, ok := s.tryAcquire("k")
	if !ok {
		t.Fatal("not taken alone and free")
	}
	if _, ok := s.tryAcquire("k"); ok {
		t.Fatal("taken while another attempt holds it")
	}
	if _, ok := s.tryAcquire("other"); !ok {
		t.Fatal("another contact not taken")
	}
	release()
	if _, ok := s.tryAcquire("k"); !ok {
		t.Fatal("not taken once released")
	}
	if _, ok := (*solo)(nil).tryAcquire("k"); ok {
		t.Fatal("taken without the solo protocol")
	}
}
