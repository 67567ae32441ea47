package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/stream"
)

// sigtermConfig: one tenant whose Instantly endpoint takes replies and unsubscribes;
// every platform is the sandbox the test runs (EXACTO_SANDBOX_URL), so its records
// outlive the `exacto up` processes. The reconciler is off: its passes would write to
// the platforms too.
const sigtermConfig = `
tenants:
  - id: acme
    reconcile: {every: "off"}
    owners: {default: revops@acme.example}
    routing:
      - {owner: "303"}
    endpoints:
      - {id: instantly, provider: instantly, path_token: tok-sigterm-0123456789, secrets: [sigterm-instantly-secret]}
`

// sigtermConsumers are the durable consumers `exacto up` runs.
var sigtermConsumers = []string{stream.Classifier, stream.Stopper, stream.CRMWriter, stream.Suppressor, stream.Projector}

// SIGTERM to `exacto up` while its consumers are mid-flow under a burst of replies and
// unsubscribes: it exits 0 without a panic; restarted on the same store, every event
// answered 200 is stored once, and every effect (the stop of each replying lead at
// Instantly, one HubSpot note per reply, one suppression per unsubscribe) happened
// exactly once, every event completed in every consumer that takes it, none
// dead-lettered.
func TestSIGTERMDuringLoadLosesNothingAndAppliesNothingTwice(t *testing.T) {
	interruptUnderLoad(t, false)
}

// The same burst cut by a power cut (tests/powercut_test.go's model: kill -9 under
// strace, every store file cut back to what its fsyncs made durable): the derived
// stores — guards, leases, outcomes, the index — are persisted asynchronously on one
// node and may lose their last writes, and still every event answered 200 is stored
// once and every effect happened exactly once after recovery.
func TestPowerCutDuringLoadLosesNothingAndAppliesNothingTwice(t *testing.T) {
	interruptUnderLoad(t, true)
}

// interruptUnderLoad runs the burst, interrupts `exacto up` mid-flow (SIGTERM, or a
// power cut), restarts it and checks that nothing was lost or applied twice.
func interruptUnderLoad(t *testing.T, powerCut bool) {
	replies, unsubs, senders := 200, 100, 8
	var strace string
	if powerCut {
		strace = straceForPowerCut(t)
		replies, unsubs = 120, 60 // every write is traced: a slower burst
	}
	sb := sandbox.StartWith(t, sandbox.Options{}) // no AutoEnroll: every lead is seeded
	type hook struct {
		email, kind string
		body        []byte
	}
	var hooks []hook
	for i := range replies + unsubs {
		h := hook{kind: "reply", email: fmt.Sprintf("reply%03d@northwind.example", i)}
		if i%3 == 2 { // interleaved: one unsubscribe in three
			h = hook{kind: "unsub", email: fmt.Sprintf("unsub%03d@northwind.example", i)}
		}
		sb.AddInstantlyLead(campaign, h.email)
		at := time.Now().Add(-time.Duration(i) * time.Second)
		if h.kind == "reply" {
			h.body = instantlyEvent("reply_received", h.email, campaign, fmt.Sprint("em-sigterm-", i), "Can you send pricing for 20 seats?", at)
		} else {
			h.body = instantlyEvent("lead_unsubscribed", h.email, campaign, fmt.Sprint("em-sigterm-", i), "", at)
		}
		if err := sb.Happened("instantly", h.body); err != nil { // Instantly holds it before its webhook fires
			t.Fatal(err)
		}
		hooks = append(hooks, h)
	}
	kinds := map[string]int{}
	for _, h := range hooks {
		kinds[h.kind]++
	}
	if kinds["reply"] != replies || kinds["unsub"] != unsubs {
		t.Fatalf("test set-up: %v", kinds)
	}

	n := newNode(t, sigtermConfig)
	n.extraEnv = []string{"EXACTO_SANDBOX_URL=" + sb.URL}
	var traced *tracedUp
	var model *powerCutModel
	if powerCut {
		traced, model = n.startUnderStrace(strace, nil)
	} else {
		n.start()
	}
	url := "http://" + n.http + "/hooks/instantly/tok-sigterm-0123456789"
	client := &http.Client{Timeout: 10 * time.Second}
	post := func(body []byte) (int, []string, error) {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Exacto-Secret", "sigterm-instantly-secret")
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var ans struct {
			IDs []string `json:"ids"`
		}
		if resp.StatusCode == 200 {
			if err := json.Unmarshal(data, &ans); err != nil || len(ans.IDs) != 1 {
				return resp.StatusCode, nil, fmt.Errorf("answer %s: %v", data, err)
			}
		}
		return resp.StatusCode, ans.IDs, nil
	}

	// The burst: several senders, paced so that webhooks are still arriving when the
	// SIGTERM comes (those not answered 200 are redelivered after the restart).
	ids := make([]string, len(hooks)) // "" until answered 200
	var mu sync.Mutex
	var next atomic.Int64
	var wg sync.WaitGroup
	began := time.Now()
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(hooks) {
					return
				}
				status, got, err := post(hooks[i].body)
				if err == nil && status == 200 {
					mu.Lock()
					ids[i] = got[0]
					mu.Unlock()
				}
				time.Sleep(60 * time.Millisecond)
			}
		}()
	}
	replyStops := func() int {
		s := 0
		for _, h := range hooks {
			if h.kind == "reply" {
				s += len(sb.Stops(h.email))
			}
		}
		return s
	}
	// Interrupted once a fair share of the replies has been stopped: the consumers are
	// mid-flow (each consumer's stop is the slowest of several effects).
	deadline := time.Now().Add(120 * time.Second)
	for replyStops() < replies/8 {
		if time.Now().After(deadline) {
			t.Fatalf("after 120s only %d replies stopped\n%s", replyStops(), n.out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	sentAtTerm := min(int(next.Load()), len(hooks))
	stopsAtTerm, notesAtTerm := replyStops(), sb.NoteWrites()
	termAt := time.Now()
	firstOut := n.out
	var exitIn time.Duration
	var exitErr error
	if powerCut {
		traced.kill()
		cuts := model.cutThePower(t, model.alias)
		t.Logf("power cut: %d files cut back (%s)", len(cuts), describeCuts(cuts))
		if len(cuts) == 0 {
			t.Error("the power cut took nothing from any store file: nothing was tested")
		}
	} else {
		exitIn, exitErr = sigterm(n, 60*time.Second)
	}
	stopsAtExit, notesAtExit := replyStops(), sb.NoteWrites()
	wg.Wait()
	t.Logf("interrupted %v after the burst began (%d of %d webhooks sent): exited in %v (%v); reply stops %d at the interruption, %d at exit; notes %d at the interruption, %d at exit",
		termAt.Sub(began).Round(time.Millisecond), sentAtTerm, len(hooks), exitIn.Round(time.Millisecond), exitErr, stopsAtTerm, stopsAtExit, notesAtTerm, notesAtExit)
	if exitErr != nil {
		t.Fatalf("exacto up after SIGTERM: %v\n%s", exitErr, firstOut.String())
	}
	if stopsAtExit == replies && notesAtExit == replies {
		t.Fatal("every effect happened before the process exited: the SIGTERM came after the flow; nothing was tested")
	}
	if stopsAtExit == 0 && notesAtExit == 0 {
		t.Fatal("no effect before the SIGTERM: nothing was tested")
	}
	if !powerCut {
		checkCleanLog(t, "exacto up (SIGTERMed)", firstOut.String())
	}

	// Restart on the same store; a provider redelivers what was not answered 200.
	restartAt := time.Now()
	n.start()
	readyIn := time.Since(restartAt)
	js := n.js()
	acked := map[string]bool{}
	resent := 0
	for i, h := range hooks {
		if ids[i] != "" {
			acked[ids[i]] = true
			continue
		}
		status, got, err := post(h.body)
		if err != nil || status != 200 {
			t.Fatalf("redelivery of webhook %d after restart: %d %v", i, status, err)
		}
		ids[i] = got[0]
		resent++
	}
	early := consumerStates(t, js)
	// Contact locks the SIGTERMed process left behind (it releases each lock it took;
	// one left holds its contact's events in every consumer until its lease ends).
	var leftLocks []string
	if locks, err := js.KeyValue(context.Background(), stream.ContactLocks); err == nil {
		if keys, err := locks.ListKeys(context.Background()); err == nil {
			for k := range keys.Keys() {
				if e, err := locks.Get(context.Background(), k); err == nil && e.Created().Before(termAt.Add(exitIn)) {
					leftLocks = append(leftLocks, k)
				}
			}
		}
	}
	if len(leftLocks) > 0 {
		t.Logf("NOTE: %d contact locks taken before the exit were still held after it: %v", len(leftLocks), leftLocks)
	}
	t.Logf("restarted in %v; %d webhooks answered 200 before the SIGTERM, %d redelivered after; consumers just after restart: %s",
		readyIn.Round(time.Millisecond), len(acked), resent, early)

	// Drain: every durable consumer has nothing pending and nothing unacknowledged.
	// Events the SIGTERMed process had fetched but no worker had taken are not handed
	// back: they are redelivered only after their consumer's ack wait (30s, the
	// crmwriter's 60s). Meanwhile the reply.classified of those replies reach the
	// crmwriter before their reply.received and fail (no note yet), retried with
	// backoff 1-2s, 2-4s, … 32-64s: the drain typically ends 85-100s after restart, and
	// can take up to ~160s. The bound allows for that; the log shows the backlog.
	const drainBound = 180 * time.Second
	drained := map[string]time.Duration{}
	var trace []string // the backlog every 5s, for the log
	var lastTrace time.Time
	for {
		states := consumerStates(t, js)
		if time.Since(lastTrace) >= 5*time.Second {
			lastTrace = time.Now()
			trace = append(trace, fmt.Sprintf("  +%v %v", time.Since(restartAt).Round(time.Second), states))
		}
		for name, st := range states {
			if st.settled() {
				if _, ok := drained[name]; !ok {
					drained[name] = time.Since(restartAt).Round(100 * time.Millisecond)
				}
			} else {
				delete(drained, name) // a derived event arrived after all
			}
		}
		if len(drained) == len(sigtermConsumers) {
			break
		}
		if time.Since(restartAt) > drainBound {
			t.Fatalf("consumers not drained %v after restart: %v\n%s", drainBound, states, n.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("drained %v after restart; each consumer settled (for good) at %v; backlog:\n%s",
		time.Since(restartAt).Round(time.Millisecond), drained, strings.Join(trace, "\n"))

	// Every webhook answered 200 is stored exactly once.
	stored := storedIDs(t, js)
	for id := range acked {
		if stored[id] != 1 {
			t.Errorf("event %s was answered 200 before the SIGTERM; stored %d times", id, stored[id])
		}
	}
	for id, c := range stored {
		if c != 1 {
			t.Errorf("envelope %s stored %d times", id, c)
		}
	}
	// The stream: the webhooks, one classification per reply, one stop per cause.
	events := sigtermEvents(t, js)
	byType := map[string]int{}
	for _, e := range events {
		byType[e.Type]++
	}
	// Each reply's note also links its contact to HubSpot's (contact.identified).
	want := map[string]int{envelope.TypeReplyReceived: replies, envelope.TypeLeadUnsubscribed: unsubs,
		envelope.TypeReplyClassified: replies, envelope.TypeSequenceStopped: replies + unsubs, envelope.TypeContactIdentified: replies}
	for typ, w := range want {
		if byType[typ] != w {
			t.Errorf("%d %s in the stream, want %d", byType[typ], typ, w)
		}
	}
	if len(events) != replies*3+unsubs+replies+unsubs {
		t.Errorf("%d events in the stream, want %d: %v", len(events), replies*3+unsubs+replies+unsubs, byType)
	}

	// Effects, counted at the platforms (write calls, not state).
	notes := map[string]int{}
	for _, o := range sb.Notes() {
		notes[o.Properties[sandbox.NoteExternalIDProperty]]++
	}
	contactsByEmail := map[string]int{}
	for _, c := range sb.Contacts() {
		contactsByEmail[c.Properties["email"]]++
	}
	blocked := map[string]bool{}
	for _, b := range sb.Blocklist() {
		blocked[b] = true
	}
	suppressed := suppressionEntries(t, js)
	doubled, missing := 0, 0
	for i, h := range hooks {
		stops := len(sb.Stops(h.email))
		switch h.kind {
		case "reply":
			if stops != 1 {
				t.Errorf("reply %d (%s, %s): %d stop writes at Instantly, want 1", i, h.email, ids[i], stops)
			}
			if notes[ids[i]] != 1 {
				t.Errorf("reply %d (%s, %s): %d HubSpot notes, want 1", i, h.email, ids[i], notes[ids[i]])
			}
			if contactsByEmail[h.email] != 1 {
				t.Errorf("reply %d (%s): %d HubSpot contacts, want 1", i, h.email, contactsByEmail[h.email])
			}
			if _, ok := suppressed[h.email]; ok {
				t.Errorf("reply %d (%s), a pricing question, suppressed its contact", i, h.email)
			}
			doubled += max(0, stops-1, notes[ids[i]]-1)
			if stops == 0 || notes[ids[i]] == 0 {
				missing++
			}
		case "unsub":
			// The stopper writes the stop unless the suppressor's block reached
			// Instantly first (a blocked lead is stopped): at most once.
			if stops > 1 {
				t.Errorf("unsubscribe %d (%s, %s): %d stop writes at Instantly, want at most 1", i, h.email, ids[i], stops)
			}
			if !blocked[h.email] {
				t.Errorf("unsubscribe %d (%s): not on Instantly's block list", i, h.email)
			}
			e, ok := suppressed[h.email]
			if !ok || e.EventID != ids[i] || e.Reason != "unsubscribed" {
				t.Errorf("unsubscribe %d (%s, %s): suppression %+v (present %v)", i, h.email, ids[i], e, ok)
			}
			doubled += max(0, stops-1)
			if !ok {
				missing++
			}
		}
	}
	if len(suppressed) != unsubs {
		t.Errorf("%d suppression entries, want %d", len(suppressed), unsubs)
	}
	// After a power cut a reply whose guard was lost is written again, by upsert on
	// its key: more requests, still one note (above).
	if c := sb.NoteWrites(); c != replies && !(powerCut && c > replies) {
		t.Errorf("%d HubSpot note writes (creates and upserts) for %d replies", c, replies)
	}
	if c := sb.ContactCreates(); c != replies {
		t.Errorf("%d HubSpot contact creates for %d replies", c, replies)
	}

	// Every event completed in every consumer that takes it, per the guard (or, for an
	// idempotent one, its ack floor; for one a handler does nothing with, its
	// delivery); none dead.
	guards, err := js.KeyValue(context.Background(), stream.Guards)
	if err != nil {
		t.Fatal(err)
	}
	retried := map[string]map[string]int{} // consumer -> last error -> records with more than one attempt
	checked := 0
	statuses := consumer.NewStatuses(js, guards)
	for _, e := range events {
		for _, sub := range stream.Subscriptions {
			if sub.StreamName() != stream.Events || !sub.Takes(e.Subject) {
				continue
			}
			rec, ok, err := statuses.OfEvent(context.Background(), sub, e.Env, e.Seq)
			checked++
			if powerCut && err == nil && (!ok || rec.Status == guard.Completed) {
				// A power cut may take a guard record (persisted asynchronously) with
				// its event's ack or without it; the effects above are the truth.
				continue
			}
			if err != nil || !ok || rec.Status != guard.Completed {
				t.Errorf("%s %s in %s: %+v (record %v, %v)", e.Type, e.ID, sub.Name(), rec, ok, err)
				continue
			}
			if rec.Attempts > 1 { // 0: an idempotent consumer's first success, unrecorded
				if retried[sub.Name()] == nil {
					retried[sub.Name()] = map[string]int{}
				}
				retried[sub.Name()][rec.LastError]++
				// Only the crmwriter's update of a reply's note may legitimately wait
				// for that note (a classification that overtook its reply); anything
				// else needing a second attempt means one was cut short.
				if !(sub.Name() == stream.CRMWriter && e.Type == envelope.TypeReplyClassified) {
					t.Errorf("%s %s in %s took %d attempts: %+v", e.Type, e.ID, sub.Name(), rec.Attempts, rec)
				}
			}
		}
	}
	if dl := streamMsgs(t, js, stream.DLQ); dl != 0 {
		t.Errorf("%d dead letters:\n%s", dl, strings.Join(dumpStream(t, js, stream.DLQ), "\n"))
	}
	// The outcomes: no event completed twice in one consumer.
	completed := map[string]int{}
	for _, o := range outcomes(t, js) {
		if o.Status == guard.Completed {
			completed[o.Consumer+" "+o.EventID]++
		}
	}
	lostOutcomes := 0
	for _, e := range events {
		for _, sub := range stream.Subscriptions {
			if sub.StreamName() != stream.Events || !sub.Takes(e.Subject) {
				continue
			}
			switch c := completed[sub.Name()+" "+e.ID]; {
			case c > 1 && !powerCut: // after a cut, a lost guard means a second (harmless) completion
				t.Errorf("%s %s completed %d times in %s (EXACTO_OUTCOMES)", e.Type, e.ID, c, sub.Name())
			case c == 0:
				lostOutcomes++
			}
		}
	}
	if lostOutcomes > 0 {
		t.Logf("%d completions have no outcome in EXACTO_OUTCOMES (published asynchronously; the guard is the record)", lostOutcomes)
	}
	if powerCut {
		// The projections (persisted asynchronously, rebuilt by the projector's
		// recovery) equal a rebuild from the stream.
		equalsRebuild(t, js)
	}
	t.Logf("checked %d (consumer, event) guard records; records with more than one attempt: %v", checked, retried)
	t.Logf("effects: %d reply stops, %d notes, %d suppressions, %d blocked; %d doubled, %d missing",
		replyStops(), len(notes), len(suppressed), len(blocked), doubled, missing)

	// The restarted process stops cleanly too.
	secondOut := n.out
	if in, err := sigterm(n, 60*time.Second); err != nil {
		t.Fatalf("second SIGTERM: %v after %v\n%s", err, in, secondOut.String())
	}
	checkCleanLog(t, "exacto up (restarted)", secondOut.String())
}

// A worker alone (`exacto worker stopper` against EXACTO_NATS_URL) answers /readyz 503
// until its consumer is bound, then 200; on SIGTERM with an event in flight it finishes
// the event, acknowledges it and exits 0, leaving nothing unacknowledged. With a
// backlog, SIGTERM cuts no attempt short and loses no ack: what is left is exactly the
// events it did not complete.
func TestSIGTERMWorkerAloneReadiness(t *testing.T) {
	conn := brokertest.Start(t, "")
	sb := sandbox.Start(t)
	// Between the worker and NATS, a proxy that holds every connection but the first
	// for a second: the worker's own (service.Start) goes through, the consumer's
	// (service.Consume dials one per subscription) wait, so there is a window in which
	// the admin server answers and the consumer is not bound. The NATS client waits 2s
	// for the server's INFO, so a 1s hold connects.
	proxy := holdingProxy(t, strings.TrimPrefix(conn.Embedded.ClientURL(), "nats://"), 1, time.Second)
	admin := freePort(t)
	dir := t.TempDir()
	type worker struct {
		cmd    *exec.Cmd
		out    *syncBuffer
		exited chan error
	}
	startWorker := func() worker {
		w := worker{cmd: exec.Command(exactoBin, "worker", "stopper"), out: &syncBuffer{}, exited: make(chan error, 1)}
		w.cmd.Dir = dir
		w.cmd.Env = append(w.cmd.Environ(), "EXACTO_NATS_URL=nats://"+proxy, "EXACTO_SANDBOX_URL="+sb.URL,
			"EXACTO_ADMIN_ADDR="+admin, "EXACTO_CONFIG=", "EXACTO_DATA_DIR="+filepath.Join(dir, "data"))
		w.cmd.Stdout, w.cmd.Stderr = w.out, w.out
		if err := w.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if w.cmd.ProcessState == nil {
				w.cmd.Process.Kill()
				<-w.exited
			}
		})
		go func() { w.exited <- w.cmd.Wait() }()
		return w
	}
	// stop sends SIGTERM and wants exit status 0 within bound, with a clean log.
	stop := func(w worker, bound time.Duration) time.Duration {
		t.Helper()
		began := time.Now()
		w.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-w.exited:
			if err != nil {
				t.Fatalf("the worker after SIGTERM: %v\n%s", err, w.out.String())
			}
		case <-time.After(bound):
			t.Fatalf("the worker did not exit within %v of SIGTERM\n%s", bound, w.out.String())
		}
		checkCleanLog(t, "exacto worker stopper", w.out.String())
		return time.Since(began)
	}
	stopperInfo := func() *jetstream.ConsumerInfo {
		t.Helper()
		c, err := conn.JS.Consumer(context.Background(), stream.Events, stream.Stopper)
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	bound := func() bool {
		_, err := conn.JS.Consumer(context.Background(), stream.Events, stream.Stopper)
		return err == nil
	}
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	publish := func(i int, email string) string {
		t.Helper()
		env := envelope.Envelope{SpecVersion: "1.0", ID: envelope.ID("demo", "instantly", fmt.Sprint("sigterm-worker-", i)), Type: envelope.TypeReplyReceived,
			Tenant: "demo", Provider: "instantly", Endpoint: "instantly", Time: time.Now(), ReceivedAt: time.Now(),
			Data: envelope.Data{ProviderType: "reply_received", Contact: &envelope.Contact{Email: email},
				Campaign: &envelope.Campaign{ID: campaign}, Message: &envelope.Message{ID: fmt.Sprint("m-sigterm-", i), Text: "Can you send pricing?"}}}
		sb.AddInstantlyReply(campaign, email, env.Data.Message.ID, env.Data.Message.Text, false, env.Time) // Instantly holds it
		msg, _ := stream.EventMessage(context.Background(), env)
		if _, err := conn.JS.PublishMsg(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
		return env.ID
	}
	guards, err := conn.JS.KeyValue(context.Background(), stream.Guards)
	if err != nil {
		t.Fatal(err)
	}

	w := startWorker()
	var sawNotReady, sawReady bool
	var notReadyBody string
	for deadline := time.Now().Add(30 * time.Second); !sawReady; time.Sleep(10 * time.Millisecond) {
		select {
		case err := <-w.exited:
			t.Fatalf("the worker exited before it was ready: %v\n%s", err, w.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker not ready after 30s (503 seen: %v)\n%s", sawNotReady, w.out.String())
		}
		status, body := readyz()
		switch status {
		case http.StatusServiceUnavailable:
			// Checked after the answer: the worker never deletes its consumer, so
			// absent now means absent when it answered 503.
			if bound() {
				continue
			}
			sawNotReady, notReadyBody = true, body
		case http.StatusOK:
			if !bound() {
				t.Fatalf("/readyz answered 200 and the stopper's consumer does not exist")
			}
			sawReady = true
		}
	}
	if !sawNotReady {
		t.Fatalf("/readyz never answered 503 while the consumer was unbound\n%s", w.out.String())
	}
	if !strings.Contains(notReadyBody, "started") {
		t.Errorf("503 body does not say what is missing: %s", notReadyBody)
	}
	// Bound means pulling: the consumer has the worker's pull requests waiting.
	eventually(t, 10*time.Second, "the stopper's consumer has a pull request waiting", func() bool {
		return stopperInfo().NumWaiting > 0
	})
	t.Logf("readyz: 503 (%s) while unbound, 200 once bound", strings.TrimSpace(notReadyBody))

	// An event in flight at SIGTERM: the stop write at Instantly takes 3s.
	email := "inflight@northwind.example"
	sb.AddInstantlyLead(campaign, email)
	sb.SetFault(sandbox.RouteInstantlyInterest, sandbox.Fault{Latency: 3 * time.Second, Count: 1})
	id := publish(0, email)
	eventually(t, 20*time.Second, "the stop write reached Instantly", func() bool {
		return sb.Requests(sandbox.RouteInstantlyInterest) == 1
	})
	exitIn := stop(w, 30*time.Second)
	// It finished the event before exiting: one stop, completed, acknowledged.
	if s := sb.Stops(email); len(s) != 1 {
		t.Errorf("%d stop writes, want 1", len(s))
	}
	if rec, _, err := guard.Status(context.Background(), guards, stream.Stopper, id); err != nil || rec.Status != guard.Completed || rec.Attempts != 1 {
		t.Errorf("the in-flight event in the stopper: %+v %v", rec, err)
	}
	info := stopperInfo()
	if info.NumPending != 0 || info.NumAckPending != 0 || info.NumRedelivered != 0 {
		t.Errorf("after the worker's exit the stopper's consumer has %d pending, %d unacknowledged, %d redelivered: want none (no ack wait to sit out)",
			info.NumPending, info.NumAckPending, info.NumRedelivered)
	}
	if ss := readStream(t, conn.JS, stream.Events, "events.*.*.sequence.stopped"); len(ss) != 1 {
		t.Errorf("%d sequence.stopped, want 1", len(ss))
	}
	t.Logf("in flight: exited 0 %v after SIGTERM (the write had up to 3s to go); consumer: %d pending, %d ack pending",
		exitIn.Round(time.Millisecond), info.NumPending, info.NumAckPending)

	// A backlog at SIGTERM: every stop write takes 200ms, so the two workers are mid-way
	// through it.
	w = startWorker()
	eventually(t, 30*time.Second, "ready again", func() bool { s, _ := readyz(); return s == 200 })
	const backlog = 60
	sb.SetFault(sandbox.RouteInstantlyInterest, sandbox.Fault{Latency: 200 * time.Millisecond})
	emails, ids := map[string]string{}, []string{}
	for i := 1; i <= backlog; i++ {
		e := fmt.Sprintf("backlog%02d@northwind.example", i)
		sb.AddInstantlyLead(campaign, e)
		id := publish(i, e)
		emails[id] = e
		ids = append(ids, id)
	}
	eventually(t, 30*time.Second, "a few stops made", func() bool { return sb.Requests(sandbox.RouteInstantlyInterest) >= 1+6 })
	stopsAtTerm := sb.Requests(sandbox.RouteInstantlyInterest) - 1
	exitIn = stop(w, 30*time.Second)
	sb.ClearFaults()
	info = stopperInfo()
	completed, untouched := 0, 0
	for _, id := range ids {
		rec, ok, err := guard.Status(context.Background(), guards, stream.Stopper, id)
		stops := len(sb.Stops(emails[id]))
		switch {
		case err != nil:
			t.Fatal(err)
		case !ok:
			untouched++
			if stops != 0 {
				t.Errorf("%s: %d stops and no guard record", id, stops)
			}
		case rec.Status == guard.Completed && rec.Attempts == 1 && stops == 1:
			completed++
		default:
			// processing: an attempt cut short; anything else: not what a clean stop leaves
			t.Errorf("%s after SIGTERM: %+v, %d stops", id, rec, stops)
		}
	}
	// No ack lost: what the consumer still holds (undelivered, or delivered and not
	// acknowledged) is exactly what was not completed.
	if left := int(info.NumPending) + info.NumAckPending; left != backlog-completed {
		t.Errorf("after SIGTERM %d of %d completed, but the consumer holds %d (%d pending, %d unacknowledged)",
			completed, backlog, left, info.NumPending, info.NumAckPending)
	}
	// What is left, is it handed back (nak: redelivered at once, to a replica or the
	// next start) or held until the ack wait? A fetch on the durable tells: it gets only
	// what the server may deliver now.
	c, err := conn.JS.Consumer(context.Background(), stream.Events, stream.Stopper)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.Fetch(backlog, jetstream.FetchMaxWait(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	now := 0
	for range batch.Messages() { // not acknowledged: the test ends here
		now++
	}
	held := backlog - completed - now
	t.Logf("backlog: exited 0 %v after SIGTERM; %d stop writes begun at SIGTERM, %d completed by exit, %d never started; of the %d left, %d were redeliverable at once and %d are held until the %v ack wait runs out",
		exitIn.Round(time.Millisecond), stopsAtTerm, completed, untouched, backlog-completed, now, held, info.Config.AckWait)
	if held > 0 {
		t.Logf("NOTE: %d events the worker had fetched but not started were neither handled nor handed back: a restart (or another replica) gets them only after the ack wait", held)
	}
}

// sigterm sends SIGTERM to n's process and waits up to bound for it to exit: how long
// it took and the exit error (nil: status 0). Past bound it is killed.
func sigterm(n *node, bound time.Duration) (time.Duration, error) {
	began := time.Now()
	n.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- n.cmd.Wait() }()
	select {
	case err := <-done:
		return time.Since(began), err
	case <-time.After(bound):
		n.cmd.Process.Signal(syscall.SIGQUIT) // its goroutines, in the log
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			n.kill()
		}
		return time.Since(began), fmt.Errorf("did not exit within %v of SIGTERM", bound)
	}
}

// checkCleanLog fails on a panic, a data race report or a fatal error in a process's
// output, and on the consumer warnings a clean shutdown must not cause (an ack the
// server did not confirm, a guard record not written); it logs the other warnings.
func checkCleanLog(t *testing.T, what, out string) {
	t.Helper()
	for _, bad := range []string{"panic:", "fatal error:", "WARNING: DATA RACE", "goroutine "} {
		if i := strings.Index(out, bad); i >= 0 {
			t.Errorf("%s: its output has %q:\n%s", what, bad, out[max(0, i-2000):min(len(out), i+4000)])
			return
		}
	}
	counts := map[string]int{}
	for _, l := range strings.Split(out, "\n") {
		var rec struct {
			Level, Msg, Err string
		}
		if json.Unmarshal([]byte(l), &rec) == nil && (rec.Level == "WARN" || rec.Level == "ERROR") &&
			!strings.Contains(rec.Msg, "is a literal secret") {
			k := rec.Level + " " + rec.Msg
			if rec.Err != "" {
				k += ": " + rec.Err
			}
			counts[k]++
			switch rec.Msg {
			case "ack not confirmed", "guard complete failed; redelivering", "guard fail", "guard unavailable", "dead letter not stored; redelivering", "outcome not published":
				t.Errorf("%s: %s", what, l)
			}
		}
	}
	if len(counts) > 0 {
		t.Logf("%s: warnings and errors in its log: %v", what, counts)
	}
}

// sigtermEvent is what the test needs of a stored event.
type sigtermEvent struct {
	Subject, ID, Type string
	Seq               uint64
	Env               envelope.Envelope
}

// sigtermEvents reads every event of EXACTO_EVENTS.
func sigtermEvents(t *testing.T, js jetstream.JetStream) []sigtermEvent {
	t.Helper()
	var out []sigtermEvent
	eachMsg(t, js, stream.Events, func(m jetstream.Msg) {
		var env envelope.Envelope
		if err := json.Unmarshal(m.Data(), &env); err != nil {
			t.Fatalf("%s: %v", m.Subject(), err)
		}
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, sigtermEvent{Subject: m.Subject(), ID: env.ID, Type: env.Type, Seq: md.Sequence.Stream, Env: env})
	})
	return out
}

// outcomes reads every outcome of EXACTO_OUTCOMES.
func outcomes(t *testing.T, js jetstream.JetStream) []consumer.Outcome {
	t.Helper()
	var out []consumer.Outcome
	eachMsg(t, js, stream.Outcomes, func(m jetstream.Msg) {
		var o consumer.Outcome
		if err := json.Unmarshal(m.Data(), &o); err != nil {
			t.Fatalf("%s: %v", m.Subject(), err)
		}
		out = append(out, o)
	})
	return out
}

// eachMsg calls fn with every message of stream name, in order, in batches.
func eachMsg(t *testing.T, js jetstream.JetStream, name string, fn func(jetstream.Msg)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if streamMsgs(t, js, name) == 0 {
		return
	}
	c, err := js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		batch, err := c.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		var pending uint64 = 1
		for m := range batch.Messages() {
			got++
			fn(m)
			if md, err := m.Metadata(); err == nil {
				pending = md.NumPending
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			t.Fatal(err)
		}
		if pending == 0 {
			return
		}
		if got == 0 {
			t.Fatalf("%s: no message in 2s with some pending", name)
		}
	}
}

func streamMsgs(t *testing.T, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func dumpStream(t *testing.T, js jetstream.JetStream, name string) []string {
	var out []string
	eachMsg(t, js, name, func(m jetstream.Msg) { out = append(out, string(m.Data())) })
	return out
}

// suppressionEntries is the suppression list by e-mail.
func suppressionEntries(t *testing.T, js jetstream.JetStream) map[string]struct{ EventID, Reason string } {
	t.Helper()
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, stream.Suppression)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]struct{ EventID, Reason string }{}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		var entry struct {
			Contact string `json:"contact"`
			EventID string `json:"event_id"`
			Reason  string `json:"reason"`
		}
		if err := json.Unmarshal(e.Value(), &entry); err != nil {
			t.Fatalf("suppression %s: %v", k, err)
		}
		out[strings.TrimPrefix(entry.Contact, "email:")] = struct{ EventID, Reason string }{entry.EventID, entry.Reason}
	}
	return out
}

// consumerState is a durable consumer's backlog.
type consumerState struct {
	Pending, AckPending uint64
	Redelivered         int
	Err                 string
}

func (c consumerState) settled() bool { return c.Err == "" && c.Pending == 0 && c.AckPending == 0 }

func (c consumerState) String() string {
	if c.Err != "" {
		return c.Err
	}
	return fmt.Sprintf("%d pending/%d ack pending/%d redelivered", c.Pending, c.AckPending, c.Redelivered)
}

// consumerStates reads every durable consumer's backlog. They are read upstream first
// (the classifier and the stopper before the consumers of what they derive), and a
// derived event is stored before its cause is acknowledged: when all are settled in
// one pass, nothing is left anywhere.
func consumerStates(t *testing.T, js jetstream.JetStream) map[string]consumerState {
	t.Helper()
	out := map[string]consumerState{}
	for _, name := range sigtermConsumers {
		c, err := js.Consumer(context.Background(), stream.Events, name)
		if err != nil {
			out[name] = consumerState{Err: err.Error()}
			continue
		}
		info, err := c.Info(context.Background())
		if err != nil {
			out[name] = consumerState{Err: err.Error()}
			continue
		}
		out[name] = consumerState{Pending: info.NumPending, AckPending: uint64(info.NumAckPending), Redelivered: info.NumRedelivered}
	}
	return out
}

// holdingProxy forwards loopback TCP connections to target; every connection after
// the first pass ones is held for hold before it is forwarded.
func holdingProxy(t *testing.T, target string, pass int, hold time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close() })
	go func() {
		for i := 0; ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer c.Close()
				if i >= pass {
					time.Sleep(hold)
				}
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { io.Copy(up, c); done <- struct{}{} }()
				go func() { io.Copy(c, up); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return ln.Addr().String()
}
