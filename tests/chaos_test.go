package tests

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/projection"
	"exacto.dev/pkg/stream"
	"exacto.dev/pkg/suppression"
	crmwriter "exacto.dev/services/crmwriter/handler"
	"exacto.dev/services/gateway/server"
	projector "exacto.dev/services/projector/handler"
	stopper "exacto.dev/services/stopper/handler"
	suppressor "exacto.dev/services/suppressor/handler"
)

// The fault scenarios of the reliability suite. `make test` runs each at a size that
// takes seconds; `make chaos` (EXACTO_CHAOS=full) at full size. Each prints one row of
// the table `make chaos` shows: scenario, events sent, effects expected, effects seen,
// lost, duplicated, p99 of the gateway's answers.

// size is n in `make test`, full in `make chaos`.
func size(n, full int) int {
	if os.Getenv("EXACTO_CHAOS") == "full" {
		return full
	}
	return n
}

// row prints a scenario's figures in the form `make chaos` collects.
func row(t *testing.T, scenario string, sent, expected, seen, lost, duplicated int, p99 time.Duration) {
	t.Helper()
	line := fmt.Sprintf("CHAOS|%s|%d|%d|%d|%d|%d|%s", scenario, sent, expected, seen, lost, duplicated, p99.Round(100*time.Microsecond))
	fmt.Println(line)
	t.Log(line)
	if lost != 0 || duplicated != 0 || seen != expected {
		t.Errorf("%s: %d effects expected, %d seen, %d lost, %d duplicated", scenario, expected, seen, lost, duplicated)
	}
}

// gateway starts another gateway replica over the same stream; its URL.
func (p *pipeline) gateway() string {
	p.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		server.Run(ctx, p.env.Config, p.conn.JS, p.env.Log, func(a string) { addr <- a })
	}()
	p.mu.Lock()
	p.stopParts = append(p.stopParts, func() { cancel(); <-done })
	p.mu.Unlock()
	return "http://" + <-addr
}

// deliveries posts every body to the gateways, concurrently from senders, each until
// it is answered 200 (a provider retries); it returns the answers' latencies and how
// many deliveries were made.
func deliveries(t *testing.T, gateways []string, bodies [][]byte, senders int) (latencies []time.Duration, sent int) {
	t.Helper()
	var mu sync.Mutex
	work := make(chan []byte)
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 30 * time.Second}
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range work {
				for try := 0; try < 10; try++ {
					url := gateways[(s+try)%len(gateways)] + "/hooks/instantly/tok-instantly-0123456789"
					began := time.Now()
					resp, err := client.Post(url, "application/json", bytes.NewReader(b))
					took := time.Since(began)
					mu.Lock()
					sent++
					latencies = append(latencies, took)
					mu.Unlock()
					if err == nil {
						resp.Body.Close()
						if resp.StatusCode == 200 {
							break
						}
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	for _, b := range bodies {
		work <- b
	}
	close(work)
	wg.Wait()
	return latencies, sent
}

func p99(l []time.Duration) time.Duration {
	if len(l) == 0 {
		return 0
	}
	l = slices.Clone(l)
	slices.Sort(l)
	return l[len(l)*99/100]
}

// equalsRebuild checks the live projections against a rebuild from the stream.
func (p *pipeline) equalsRebuild() {
	p.t.Helper()
	ctx := context.Background()
	live, err := projection.Open(ctx, p.conn.JS, "", 1)
	if err != nil {
		p.t.Fatal(err)
	}
	dir, _ := contacts.Open(ctx, p.conn.JS)
	rebuilt := projection.Memories()
	if _, err := projection.Replay(ctx, p.conn.JS, rebuilt, projection.ReplayOptions{Dir: dir}); err != nil {
		p.t.Fatal(err)
	}
	for _, name := range projection.Names {
		a, _ := rebuilt.Of(name)
		b, _ := live.Of(name)
		if d, err := projection.Diff(ctx, name, a, b); err != nil || !d.Equal() {
			p.t.Errorf("%s: live differs from a rebuild: %+v %v", name, d, err)
		}
	}
}

// unfinished counts the ids that are neither completed nor dead-lettered in consumer.
func (p *pipeline) unfinished(consumer string, ids []string) int {
	n := 0
	for _, id := range ids {
		if s := p.status(consumer, id).Status; s != guard.Completed && s != guard.DeadLetter {
			n++
		}
	}
	return n
}

// Duplicate storm: every reply delivered 3 to 5 times, concurrently, through two
// gateway replicas: one stop and one CRM activity per reply, nothing lost.
func TestChaosDuplicateStorm(t *testing.T) {
	t.Parallel()
	n := size(60, 10000)
	p := startPipeline(t)
	p.start(stream.Stopper, stopper.Run)
	p.start(stream.CRMWriter, crmwriter.Run)
	p.start(stream.Projector, projector.Run)
	second := p.gateway()
	var bodies [][]byte
	emails := make([]string, n)
	at := time.Now().Add(-time.Hour)
	for i := range n {
		emails[i] = fmt.Sprintf("storm%d@northwind.example", i)
		p.sb.AddInstantlyLead(campaign, emails[i])
		b := instantlyEvent("reply_received", emails[i], campaign, fmt.Sprint("em-", i), "Can you send pricing?", at.Add(time.Duration(i)*time.Second))
		for range 3 + rand.IntN(3) {
			bodies = append(bodies, b)
		}
	}
	rand.Shuffle(len(bodies), func(i, j int) { bodies[i], bodies[j] = bodies[j], bodies[i] })
	p.mu.Lock()
	first := p.gwURL
	p.mu.Unlock()
	lat, sent := deliveries(t, []string{first, second}, bodies, 16)
	for _, c := range []string{stream.Stopper, stream.CRMWriter, stream.Projector} {
		settled(t, p.conn.JS, c)
	}
	ids := storedIDs(t, p.conn.JS)
	var replies []string
	for _, env := range p.read(stream.Events, "events.*.*.reply.received") {
		replies = append(replies, env["id"].(string))
	}
	stops, notes, dup := 0, len(p.sb.Notes()), 0
	for _, e := range emails {
		s := len(p.sb.Stops(e))
		stops += min(s, 1)
		dup += max(0, s-1)
	}
	byReply := map[string]int{}
	for _, note := range p.sb.Notes() {
		byReply[note.Properties["exacto_event_id"]]++
	}
	for _, c := range byReply {
		dup += max(0, c-1)
	}
	lost := p.unfinished(stream.Stopper, replies) + p.unfinished(stream.CRMWriter, replies)
	lost += n - len(byReply)
	t.Logf("%d deliveries of %d replies; %d events stored (replies and their sequence.stopped)", sent, n, len(ids))
	row(t, "duplicate storm", sent, 2*n, stops+notes-dup, lost, dup, p99(lat))
	p.equalsRebuild()
}

// Reordering: each lead's history (sent, opened, a reply or an unsubscribe and a late
// follow-up) delivered shuffled, with delays, some twice: every unsubscribed contact is
// suppressed and stopped, only replies and unsubscribes stop, and the projection equals
// a rebuild.
func TestChaosReordering(t *testing.T) {
	t.Parallel()
	n := size(60, 3000)
	p := startPipeline(t)
	p.start(stream.Stopper, stopper.Run)
	p.start(stream.Suppressor, suppressor.Run)
	p.start(stream.Projector, projector.Run)
	var bodies [][]byte
	at := time.Now().Add(-24 * time.Hour)
	replied := map[string]bool{}
	unsubscribed := map[string]string{} // email -> lead id
	for i := range n {
		email := fmt.Sprintf("shuffle%d@northwind.example", i)
		lead := p.sb.AddInstantlyLead(campaign, email)
		t0 := at.Add(time.Duration(i) * time.Minute)
		story := []string{"email_sent", "email_opened"}
		switch i % 3 {
		case 0:
			story = append(story, "reply_received")
			replied[email] = true
		case 1:
			story = append(story, "lead_unsubscribed", "email_sent")
			unsubscribed[email] = lead
		}
		for j, typ := range story {
			b := instantlyEvent(typ, email, campaign, fmt.Sprintf("em-%d-%d", i, j), "Can you send pricing?", t0.Add(time.Duration(j)*time.Hour))
			bodies = append(bodies, b)
			if rand.IntN(4) == 0 {
				bodies = append(bodies, b)
			}
		}
	}
	rand.Shuffle(len(bodies), func(i, j int) { bodies[i], bodies[j] = bodies[j], bodies[i] })
	p.mu.Lock()
	gw := p.gwURL
	p.mu.Unlock()
	lat, sent := deliveries(t, []string{gw}, bodies, 8)
	for _, c := range []string{stream.Stopper, stream.Suppressor, stream.Projector} {
		settled(t, p.conn.JS, c)
	}
	kv, _ := p.conn.JS.KeyValue(context.Background(), stream.Suppression)
	list := suppression.New(kv)
	// Effects: a reply stops its lead once; an unsubscribe suppresses the contact and
	// leaves its lead stopped at the platform (blocked by the suppressor, or stopped by
	// the stopper: whichever came first, the other finds it stopped and writes nothing);
	// the rest are left alone.
	lost, dup, seen := 0, 0, 0
	for i := range n {
		email := fmt.Sprintf("shuffle%d@northwind.example", i)
		stops := len(p.sb.Stops(email))
		lead, unsub := unsubscribed[email]
		switch {
		case replied[email]:
			seen += min(stops, 1)
			if stops == 0 {
				lost++
			}
			dup += max(0, stops-1)
		case unsub:
			if _, on, _ := list.Lookup(context.Background(), "acme", "email:"+email); on {
				seen++
			} else {
				lost++
			}
			if l, _ := p.sb.InstantlyLeadState(lead); l.Status != sandbox.InstantlyActive {
				seen++
			} else {
				lost++
				t.Errorf("%s is active at the platform after its unsubscribe", email)
			}
			dup += max(0, stops-1)
		default:
			dup += stops // a stop nothing asked for
		}
	}
	row(t, "reordering", sent, len(replied)+2*len(unsubscribed), seen, lost, dup, p99(lat))
	p.equalsRebuild()
	if strings.Contains(fmt.Sprint(p.deadLetters(stream.Stopper)), "event_id") {
		t.Errorf("dead letters in the stopper: %v", p.deadLetters(stream.Stopper))
	}
}

// Dependency faults: HubSpot and the sending platform time out after committing,
// answer 429 with Retry-After, and are down for a while (5 s here, 60 s in `make
// chaos`) under a steady flow: one note and one stop per reply, every note with its
// owner, none lost, none dead-lettered.
func TestChaosDependencyFaults(t *testing.T) {
	t.Parallel()
	n := size(30, 600)
	down := time.Duration(size(5, 60)) * time.Second
	p := startPipeline(t)
	p.sb.SetFault(sandbox.RouteHubSpotNoteCreate, sandbox.Fault{TimeoutAfterCommit: 12 * time.Second, Count: 2})
	p.sb.SetFault(sandbox.RouteHubSpotContactSearch, sandbox.Fault{Status: 429, RetryAfter: 2 * time.Second, Count: 3})
	p.sb.SetFault(sandbox.RouteInstantlyInterest, sandbox.Fault{TimeoutAfterCommit: 12 * time.Second, Count: 2})
	p.sb.SetFault(sandbox.RouteInstantlyLeadList, sandbox.Fault{Status: 429, RetryAfter: 2 * time.Second, Count: 3})
	p.start(stream.CRMWriter, crmwriter.Run)
	p.start(stream.Stopper, stopper.Run)
	var bodies [][]byte
	emails := make([]string, n)
	for i := range n {
		emails[i] = fmt.Sprintf("dep%d@northwind.example", i)
		p.sb.AddInstantlyLead(campaign, emails[i])
		bodies = append(bodies, instantlyEvent("reply_received", emails[i], campaign, fmt.Sprint("em-", i), "Can you send pricing?", time.Now()))
	}
	p.mu.Lock()
	gw := p.gwURL
	p.mu.Unlock()
	var lat []time.Duration
	sent := 0
	// A third of the flow, then both dependencies down under the rest of it.
	l1, s1 := deliveries(t, []string{gw}, bodies[:n/3], 4)
	for _, r := range append([]string{sandbox.RouteInstantlyInterest, sandbox.RouteInstantlyLeadList, sandbox.RouteInstantlyLeadGet}, hubspotRoutes...) {
		p.sb.SetFault(r, sandbox.Fault{DownFor: down})
	}
	for _, b := range bodies[n/3:] {
		l, s := deliveries(t, []string{gw}, [][]byte{b}, 1)
		lat, sent = append(lat, l...), sent+s
		time.Sleep(down / time.Duration(n))
	}
	lat, sent = append(lat, l1...), sent+s1
	for _, c := range []string{stream.CRMWriter, stream.Stopper} {
		settledWithin(t, p.conn.JS, c, down+3*time.Minute)
	}
	byReply := map[string]int{}
	for _, note := range p.sb.Notes() {
		byReply[note.Properties["exacto_event_id"]]++
		if note.Properties["hubspot_owner_id"] == "" {
			t.Errorf("a reply's note has no owner: %v", note.Properties)
		}
	}
	dup, stops := 0, 0
	for _, c := range byReply {
		dup += max(0, c-1)
	}
	for _, e := range emails {
		s := len(p.sb.Stops(e))
		stops += min(s, 1)
		dup += max(0, s-1)
	}
	lost := 2*n - len(byReply) - stops + len(p.deadLetters(stream.CRMWriter)) + len(p.deadLetters(stream.Stopper))
	row(t, "dependency faults", sent, 2*n, len(byReply)+stops, lost, dup, p99(lat))
}
