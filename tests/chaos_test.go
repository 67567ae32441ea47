package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
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
// it is answered 200 (a provider retries), each attempt after a random pause of up to
// jitter; it returns the answers' latencies and how many deliveries were made.
func deliveries(t *testing.T, gateways []string, bodies [][]byte, senders int, jitter time.Duration) (latencies []time.Duration, sent int) {
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
					if jitter > 0 {
						time.Sleep(rand.N(jitter + 1))
					}
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
func (p *pipeline) equalsRebuild() { equalsRebuild(p.t, p.conn.JS) }

// equalsRebuild checks the live projections on js against a rebuild from its stream.
func equalsRebuild(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	live, err := projection.Open(ctx, js, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	dir, _ := contacts.Open(ctx, js)
	rebuilt := projection.Memories()
	if _, err := projection.Replay(ctx, js, rebuilt, projection.ReplayOptions{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	for _, name := range projection.Names {
		a, _ := rebuilt.Of(name)
		b, _ := live.Of(name)
		if d, err := projection.Diff(ctx, name, a, b); err != nil || !d.Equal() {
			t.Errorf("%s: live differs from a rebuild: %+v %v", name, d, err)
		}
	}
}

// storedSubjects reads every envelope of EXACTO_EVENTS: its id, and the subject it was
// stored on.
func storedSubjects(t *testing.T, js jetstream.JetStream) map[string]storedAt {
	t.Helper()
	out := map[string]storedAt{}
	eachMsg(t, js, stream.Events, func(msg jetstream.Msg) {
		md, err := msg.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		var env envelope.Envelope
		if err := json.Unmarshal(msg.Data(), &env); err != nil {
			t.Fatal(err)
		}
		out[msg.Headers().Get(jetstream.MsgIDHeader)] = storedAt{msg.Subject(), md.Sequence.Stream, env}
	})
	return out
}

// storedAt is where an event is stored: its subject and stream sequence, and the
// event.
type storedAt struct {
	subject string
	seq     uint64
	env     envelope.Envelope
}

// unfinishedIn checks that every stored event each consumer takes is completed, or
// dead-lettered with its reason, in that consumer's guard; it returns how many are not.
func unfinishedIn(t *testing.T, js jetstream.JetStream, consumers ...string) (unfinished int) {
	t.Helper()
	stored := storedSubjects(t, js)
	guards, err := js.KeyValue(context.Background(), stream.Guards)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	defer func() {
		t.Logf("%d stored events: %d (event, consumer) pairs checked, %d unfinished", len(stored), checked, unfinished)
	}()
	statuses := consumer.NewStatuses(js, guards)
	for _, c := range consumers {
		sub, ok := stream.SubscriptionOf(c)
		if !ok {
			t.Fatalf("no consumer %s", c)
		}
		var open []string
		for id, at := range stored {
			if !sub.Takes(at.subject) {
				continue
			}
			checked++
			rec, _, err := statuses.OfEvent(context.Background(), sub, at.env, at.seq)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case rec.Status == guard.DeadLetter && rec.LastError == "":
				t.Errorf("%s: %s dead-lettered without a reason", c, id)
			case rec.Status != guard.Completed && rec.Status != guard.DeadLetter:
				open = append(open, fmt.Sprintf("%s (%s): %q", id, at.subject, rec.Status))
			}
		}
		if len(open) > 0 {
			t.Errorf("%s: %d stored events neither completed nor dead-lettered, first %v", c, len(open), open[:min(5, len(open))])
		}
		unfinished += len(open)
	}
	if checked == 0 {
		t.Errorf("none of the %d stored events is taken by %v: nothing was checked", len(stored), consumers)
	}
	return unfinished
}

// invariants checks what every scenario must end with, for the consumers it ran: every
// stored event each of them subscribes to is completed or dead-lettered in it (nothing
// lost); with the crmwriter, every HubSpot note has its owner (every reply of the
// pipeline's config routes to one); with the projector, the projection equals a
// rebuild from the stream. It returns how many (event, consumer) pairs are unfinished.
func (p *pipeline) invariants(consumers ...string) (unfinished int) {
	p.t.Helper()
	for _, c := range consumers {
		settled(p.t, p.conn.JS, c)
	}
	unfinished = unfinishedIn(p.t, p.conn.JS, consumers...)
	if slices.Contains(consumers, stream.CRMWriter) {
		without := 0
		for _, note := range p.sb.Notes() {
			if note.Properties["hubspot_owner_id"] == "" {
				without++
			}
		}
		if without > 0 {
			p.t.Errorf("%d of %d notes have no owner", without, len(p.sb.Notes()))
		}
	}
	if slices.Contains(consumers, stream.Projector) {
		p.equalsRebuild()
	}
	return unfinished
}

// byEmail is the envelope ids stored on subject filter, by their contact's e-mail.
func (p *pipeline) byEmail(filter string) map[string][]string {
	out := map[string][]string{}
	for _, env := range p.read(stream.Events, filter) {
		data, _ := env["data"].(map[string]any)
		contact, _ := data["contact"].(map[string]any)
		email, _ := contact["email"].(string)
		out[email] = append(out[email], env["id"].(string))
	}
	return out
}

// effects counts a scenario's effects against what it expected: each one seen once is
// seen, never seen is lost, seen again is duplicated.
type effects struct{ expected, seen, lost, dup int }

// once counts an effect expected once that was seen n times.
func (e *effects) once(n int) {
	e.expected++
	e.seen += min(n, 1)
	e.dup += max(0, n-1)
	if n == 0 {
		e.lost++
	}
}

// replies counts, for each of emails (a contact that sent one reply), one stored reply,
// one stop of its lead at the platform and one HubSpot note of that reply; a note of no
// such reply is duplicated.
func (p *pipeline) replies(e *effects, emails []string) {
	stored := p.byEmail("events.*.*.reply.received")
	notes := map[string]int{} // reply envelope id → its notes
	for _, note := range p.sb.Notes() {
		notes[note.Properties["exacto_event_id"]]++
	}
	for _, email := range emails {
		ids := stored[email]
		e.dup += max(0, len(ids)-1) // one provider event stored twice
		e.once(len(p.sb.Stops(email)))
		if len(ids) == 0 {
			e.once(0)
			continue
		}
		e.once(notes[ids[0]])
		delete(notes, ids[0])
	}
	for _, n := range notes {
		e.dup += n // a note nothing asked for
	}
}

// unsubscribes counts, for each contact of leads (e-mail → its Instantly lead) that
// unsubscribed once, one stored unsubscribe; one suppression, by that event; one entry
// on the platform's block list with its lead no longer active; at most one stop. Each
// unsubscribe writes the block list at most once (the suppressor, its one writer, reads
// it first), so more requests than that are duplicates.
func (p *pipeline) unsubscribes(e *effects, leads map[string]string) {
	ctx := context.Background()
	kv, err := p.conn.JS.KeyValue(ctx, stream.Suppression)
	if err != nil {
		p.t.Fatal(err)
	}
	list := suppression.New(kv)
	stored := p.byEmail("events.*.*.lead.unsubscribed")
	blocked := map[string]int{}
	for _, b := range p.sb.Blocklist() {
		blocked[b]++
	}
	for email, lead := range leads {
		ids := stored[email]
		e.dup += max(0, len(ids)-1)
		entry, on, err := list.Lookup(ctx, "acme", "email:"+email)
		if err != nil {
			p.t.Fatal(err)
		}
		switch {
		case on && len(ids) > 0 && entry.EventID == ids[0]:
			e.once(1)
		case on:
			p.t.Errorf("%s suppressed by %s, not by its unsubscribe %v", email, entry.EventID, ids)
			e.once(0)
		default:
			e.once(0)
		}
		if l, _ := p.sb.InstantlyLeadState(lead); l.Status == sandbox.InstantlyActive {
			p.t.Errorf("%s is active at the platform after its unsubscribe", email)
			e.once(0)
		} else {
			e.once(blocked[email])
		}
		e.dup += max(0, len(p.sb.Stops(email))-1)
	}
	if n, most := p.sb.Requests(sandbox.RouteInstantlyBlocklist), len(leads); n > most {
		p.t.Errorf("%d block-list requests for %d unsubscribes", n, len(leads))
		e.dup += n - most
	}
}

// Duplicate storm: every reply and every unsubscribe delivered 3 to 5 times,
// concurrently, through two gateway replicas: one stop and one CRM activity (with its
// owner) per reply, one suppression and one block per unsubscribe, nothing lost in any
// consumer, and the projection equals a rebuild.
func TestChaosDuplicateStorm(t *testing.T) {
	t.Parallel()
	n := size(60, 10000)
	u := n / 10
	p := startPipeline(t)
	consumers := []string{stream.Stopper, stream.CRMWriter, stream.Suppressor, stream.Projector}
	p.start(stream.Stopper, stopper.Run)
	p.start(stream.CRMWriter, crmwriter.Run)
	p.start(stream.Suppressor, suppressor.Run)
	p.start(stream.Projector, projector.Run)
	second := p.gateway()
	var bodies [][]byte
	emails := make([]string, n)
	unsubscribed := map[string]string{} // email → its lead
	at := time.Now().Add(-time.Hour)
	copies := func(b []byte) {
		for range 3 + rand.IntN(3) {
			bodies = append(bodies, b)
		}
	}
	for i := range n {
		emails[i] = fmt.Sprintf("storm%d@northwind.example", i)
		p.sb.AddInstantlyLead(campaign, emails[i])
		copies(instantlyEvent("reply_received", emails[i], campaign, fmt.Sprint("em-", i), "Can you send pricing?", at.Add(time.Duration(i)*time.Second)))
	}
	for i := range u {
		email := fmt.Sprintf("stormunsub%d@northwind.example", i)
		unsubscribed[email] = p.sb.AddInstantlyLead(campaign, email)
		copies(instantlyEvent("lead_unsubscribed", email, campaign, fmt.Sprint("em-u-", i), "", at.Add(time.Duration(i)*time.Second)))
	}
	rand.Shuffle(len(bodies), func(i, j int) { bodies[i], bodies[j] = bodies[j], bodies[i] })
	p.happened(bodies...)
	p.mu.Lock()
	first := p.gwURL
	p.mu.Unlock()
	lat, sent := deliveries(t, []string{first, second}, bodies, 16, 0)
	var e effects
	e.lost += p.invariants(consumers...)
	p.replies(&e, emails)
	p.unsubscribes(&e, unsubscribed)
	t.Logf("%d deliveries of %d replies and %d unsubscribes; %d events stored", sent, n, u, len(storedIDs(t, p.conn.JS)))
	row(t, "duplicate storm", sent, e.expected, e.seen, e.lost, e.dup, p99(lat))
}

// Reordering: each lead's history (sent, opened, a reply or an unsubscribe and a late
// follow-up) delivered shuffled, some deliveries twice, each after a random pause of up
// to 50 ms; a tenth of the leads have part of their history held back until the
// consumers have settled the rest, then delivered late. Every unsubscribed contact is
// suppressed and blocked, only replies and unsubscribes stop, nothing is lost in any
// consumer, and the projection equals a rebuild.
func TestChaosReordering(t *testing.T) {
	t.Parallel()
	n := size(60, 3000)
	p := startPipeline(t)
	consumers := []string{stream.Stopper, stream.Suppressor, stream.Projector}
	p.start(stream.Stopper, stopper.Run)
	p.start(stream.Suppressor, suppressor.Run)
	p.start(stream.Projector, projector.Run)
	var bodies, late [][]byte
	at := time.Now().Add(-24 * time.Hour)
	var replied []string
	unsubscribed := map[string]string{} // email → its lead
	others := map[string]bool{}
	for i := range n {
		email := fmt.Sprintf("shuffle%d@northwind.example", i)
		lead := p.sb.AddInstantlyLead(campaign, email)
		t0 := at.Add(time.Duration(i) * time.Minute)
		story := []string{"email_sent", "email_opened"}
		switch i % 3 {
		case 0:
			story = append(story, "reply_received")
			replied = append(replied, email)
		case 1:
			story = append(story, "lead_unsubscribed", "email_sent")
			unsubscribed[email] = lead
		default:
			others[email] = true
		}
		held := i%10 == 9
		for j, typ := range story {
			b := instantlyEvent(typ, email, campaign, fmt.Sprintf("em-%d-%d", i, j), "Can you send pricing?", t0.Add(time.Duration(j)*time.Hour))
			to := &bodies
			if held && rand.IntN(2) == 0 {
				to = &late
			}
			*to = append(*to, b)
			if rand.IntN(4) == 0 {
				*to = append(*to, b)
			}
		}
	}
	shuffle := func(b [][]byte) { rand.Shuffle(len(b), func(i, j int) { b[i], b[j] = b[j], b[i] }) }
	shuffle(bodies)
	shuffle(late)
	p.happened(append(slices.Clone(bodies), late...)...) // the held-back ones happened too: only their webhooks are late
	p.mu.Lock()
	gw := p.gwURL
	p.mu.Unlock()
	lat, sent := deliveries(t, []string{gw}, bodies, 8, 50*time.Millisecond)
	for _, c := range consumers {
		settled(t, p.conn.JS, c)
	}
	l2, s2 := deliveries(t, []string{gw}, late, 8, 50*time.Millisecond)
	lat, sent = append(lat, l2...), sent+s2
	var e effects
	e.lost += p.invariants(consumers...)
	// A reply stops its lead once; an unsubscribe suppresses the contact and leaves its
	// lead stopped at the platform (blocked by the suppressor, or stopped by the
	// stopper: whichever came first, the other finds it stopped and writes nothing); the
	// rest are left alone.
	for _, email := range replied {
		e.once(len(p.sb.Stops(email)))
	}
	p.unsubscribes(&e, unsubscribed)
	for email := range others {
		e.dup += len(p.sb.Stops(email)) // a stop nothing asked for
	}
	t.Logf("%d deliveries, %d of them held back until the rest had settled", sent, len(late))
	row(t, "reordering", sent, e.expected, e.seen, e.lost, e.dup, p99(lat))
	if dl := p.deadLetters(stream.Stopper); len(dl) != 0 {
		t.Errorf("dead letters in the stopper: %v", dl)
	}
}

// Dependency faults: HubSpot and the sending platform time out after committing and
// answer 429 with Retry-After (each fault seen to fire, and the events it hit retried),
// then are down for a while (5 s here, 60 s in `make chaos`) under a steady flow: one
// note (with its owner) and one stop per reply, nothing lost in any consumer, none
// dead-lettered, and the projection equals a rebuild.
func TestChaosDependencyFaults(t *testing.T) {
	t.Parallel()
	n := size(30, 600)
	down := time.Duration(size(5, 60)) * time.Second
	p := startPipeline(t)
	faults := map[string]sandbox.Fault{
		sandbox.RouteHubSpotNoteUpsert: {TimeoutAfterCommit: 12 * time.Second, Count: 2},
		sandbox.RouteHubSpotNoteCreate: {TimeoutAfterCommit: 12 * time.Second, Count: 2},
		sandbox.RouteHubSpotContactGet: {Status: 429, RetryAfter: 2 * time.Second, Count: 3},
		sandbox.RouteInstantlyInterest: {TimeoutAfterCommit: 12 * time.Second, Count: 2},
		sandbox.RouteInstantlyLeadList: {Status: 429, RetryAfter: 2 * time.Second, Count: 3},
	}
	for r, f := range faults {
		p.sb.SetFault(r, f)
	}
	// Each worker may have one request under way when another's 429 comes back: the
	// most that may reach a route within its Retry-After.
	workers := map[string]int{stream.CRMWriter: 2, stream.Stopper: 4}
	p.env.Config.Consumers = map[string]config.ConsumerTuning{}
	for c, w := range workers {
		p.env.Config.Consumers[c] = config.ConsumerTuning{Workers: w}
	}
	limited := map[string]string{sandbox.RouteHubSpotContactGet: stream.CRMWriter, sandbox.RouteInstantlyLeadList: stream.Stopper}
	consumers := []string{stream.CRMWriter, stream.Stopper, stream.Projector}
	p.start(stream.CRMWriter, crmwriter.Run)
	p.start(stream.Stopper, stopper.Run)
	p.start(stream.Projector, projector.Run)
	var bodies [][]byte
	emails := make([]string, n)
	for i := range n {
		emails[i] = fmt.Sprintf("dep%d@northwind.example", i)
		p.sb.AddInstantlyLead(campaign, emails[i])
		bodies = append(bodies, instantlyEvent("reply_received", emails[i], campaign, fmt.Sprint("em-", i), "Can you send pricing?", time.Now()))
	}
	p.happened(bodies...)
	p.mu.Lock()
	gw := p.gwURL
	p.mu.Unlock()
	// A third of the flow meets the timeouts and the 429s; once every one of them has
	// fired (the sandbox took its faulted requests), both dependencies go down under
	// the rest of the flow.
	lat, sent := deliveries(t, []string{gw}, bodies[:n/3], 4, 0)
	// A note is written by create on its event's first delivery and by upsert on a
	// later one (after a 429 or a timeout): which route meets the timeouts depends on
	// how far each first delivery got, so two faulted note writes on either route will
	// do (each route faults its first two: two writes in all were faulted).
	for r, f := range faults {
		if !slices.Contains(sandbox.NoteWriteRoutes, r) {
			eventually(t, 2*time.Minute, fmt.Sprintf("the %d faulted requests to %s", f.Count, r), func() bool { return p.sb.Requests(r) >= f.Count })
		}
	}
	eventually(t, 2*time.Minute, "two faulted note writes", func() bool { return p.sb.NoteWrites() >= 2 })
	for _, r := range append([]string{sandbox.RouteInstantlyInterest, sandbox.RouteInstantlyLeadList, sandbox.RouteInstantlyLeadGet}, hubspotRoutes...) {
		p.sb.SetFault(r, sandbox.Fault{DownFor: down})
	}
	for _, b := range bodies[n/3:] {
		l, s := deliveries(t, []string{gw}, [][]byte{b}, 1, 0)
		lat, sent = append(lat, l...), sent+s
		time.Sleep(down / time.Duration(n))
	}
	for _, c := range consumers {
		settledWithin(t, p.conn.JS, c, down+3*time.Minute)
	}
	var e effects
	e.lost += p.invariants(consumers...)
	p.replies(&e, emails)
	for _, c := range []string{stream.CRMWriter, stream.Stopper} {
		dl := p.deadLetters(c)
		e.lost += len(dl)
		// The timeouts after commit failed an attempt of some reply: it was retried.
		retried := 0
		for _, ids := range p.byEmail("events.*.*.reply.received") {
			if p.status(c, ids[0]).Attempts >= 2 {
				retried++
			}
		}
		if retried == 0 {
			t.Errorf("%s: no reply took more than one attempt, though its dependency timed out after commit", c)
		}
		t.Logf("%s: %d replies retried, %d dead letters", c, retried, len(dl))
	}
	faultedNotes := 0
	for r, f := range faults {
		if slices.Contains(sandbox.NoteWriteRoutes, r) {
			faultedNotes += min(p.sb.Requests(r), f.Count)
		} else if got := p.sb.Requests(r); got <= f.Count {
			t.Errorf("%s: %d requests, none after its %d faulted ones", r, got, f.Count)
		}
	}
	if got := p.sb.NoteWrites(); got <= faultedNotes {
		t.Errorf("note writes: %d requests, none after the %d faulted ones", got, faultedNotes)
	}
	// After each 429, only requests already under way reach its route before its
	// Retry-After has passed.
	for r, c := range limited {
		times, f := p.sb.RequestTimes(r), faults[r]
		for k := range min(f.Count, len(times)) {
			early := 0
			for _, at := range times[k+1:] {
				if at.Before(times[k].Add(f.RetryAfter)) {
					early++
				}
			}
			if early > workers[c]-1 {
				t.Errorf("%s: %d requests within %v of its 429 number %d, more than the %d other workers of the %s had under way", r, early, f.RetryAfter, k+1, workers[c]-1, c)
			}
		}
	}
	row(t, "dependency faults", sent, e.expected, e.seen, e.lost, e.dup, p99(lat))
}
