package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"exacto.dev/pkg/providers/providertest"
	"exacto.dev/pkg/providers/stripe"
)

// The README's path: `exacto up` with the built-in demo, `exacto send`, one message.
func TestDemoUpSendStoresOne(t *testing.T) {
	n := newNode(t, "")
	began := time.Now()
	n.start()
	t.Logf("exacto up ready in %v", time.Since(began))
	if !strings.Contains(n.out.String(), "point providers at") {
		t.Fatalf("banner missing:\n%s", n.out.String())
	}
	// An hour ago: the gateway takes no event older than Instantly still retries.
	at := time.Now().UTC().Add(-time.Hour).Format(time.RFC3339)
	send := []string{"send", "--provider", "instantly", "--event", "email_opened", "--at", at, "--to", "http://" + n.http + "/hooks/instantly/demo-instantly-token"}
	out, err := n.run(send...)
	if err != nil || !strings.HasPrefix(out, "200 ") {
		t.Fatalf("exacto send: %v\n%s", err, out)
	}
	ids := storedIDs(t, n.js())
	if len(ids) != 1 {
		t.Fatalf("stream holds %d events, want 1", len(ids))
	}
	// The stock nats CLI sees the same, as the README says.
	info, err := exec.Command(natsCLI(t), "--server", "nats://"+n.natsAddr, "stream", "info", "EXACTO_EVENTS", "--json").CombinedOutput()
	if err != nil {
		t.Fatalf("nats stream info: %v\n%s", err, info)
	}
	var si struct {
		State struct {
			Messages uint64 `json:"messages"`
		} `json:"state"`
	}
	if err := json.Unmarshal(info, &si); err != nil || si.State.Messages != 1 {
		t.Fatalf("nats stream info: %d messages (%v)\n%s", si.State.Messages, err, info)
	}
	// `exacto events show` finds it, with one arrival.
	var id string
	for k := range ids {
		id = k
	}
	// The index is written from the stream, asynchronously: wait until it has the event.
	var show string
	for deadline := time.Now().Add(10 * time.Second); ; {
		if show, err = n.run("events", "show", id, "--nats-url", "nats://"+n.natsAddr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || !strings.Contains(show, `"arrivals": 1`) || !strings.Contains(show, id) || !strings.Contains(show, `"stopper": {`) {
		t.Fatalf("events show: %v\n%s", err, show)
	}
	// The same event again is a duplicate: 200, nothing stored, two arrivals.
	if out, err := n.run(send...); err != nil || !strings.HasPrefix(out, `200 {"stored":0,"duplicates":1`) {
		t.Fatalf("second send: %v %s", err, out)
	}
	if got := storedIDs(t, n.js()); len(got) != 1 {
		t.Fatalf("after a duplicate the stream holds %d events", len(got))
	}
	show, err = n.run("events", "show", id, "--nats-url", "nats://"+n.natsAddr)
	if err != nil || !strings.Contains(show, `"arrivals": 2`) {
		t.Fatalf("events show after a duplicate: %v\n%s", err, show)
	}
	// Both deliveries are counted, the second as a duplicate, on /metrics.
	resp, err := http.Get("http://" + n.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`exacto_gateway_events_received_total{`, `exacto_gateway_duplicates_total{`} {
		line := ""
		for _, l := range strings.Split(string(metrics), "\n") {
			if strings.HasPrefix(l, want) && strings.Contains(l, `provider="instantly"`) {
				line = l
			}
		}
		if line == "" {
			t.Fatalf("/metrics has no %s for instantly:\n%s", want, metrics)
		}
	}
	// The operator console is on the admin address, behind the demo's token.
	for _, tc := range []struct {
		token string
		want  int
	}{{"", 401}, {"wrong", 401}, {"demo-console-token", 200}} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+n.admin+"/console/", nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || (tc.want == 200 && !strings.Contains(string(page), "Overview")) {
			t.Fatalf("console with token %q: %d, want %d", tc.token, resp.StatusCode, tc.want)
		}
	}
	if err := n.stop(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, n.out.String())
	}
}

func TestBadConfigRefusesToStart(t *testing.T) {
	n := newNode(t, `
tenants:
  - id: acme
    endpoints:
      - id: pay
        provider: stripe
        path_token: tok-0123456789abcdef
`)
	out, err := n.run("up")
	if err == nil {
		t.Fatalf("exacto up started with an endpoint without secret:\n%s", out)
	}
	if !strings.Contains(out, "exacto.yaml:5: endpoint pay: provider stripe signs its webhooks; at least one secret is required") {
		t.Fatalf("refusal does not name the line:\n%s", out)
	}
	// A log format that does not exist refuses too, naming what it wants.
	n = newNode(t, "")
	n.extraEnv = append(n.extraEnv, "EXACTO_LOG_FORMAT=xml")
	if out, err := n.run("up"); err == nil || !strings.Contains(out, `EXACTO_LOG_FORMAT: want json or text, not "xml"`) {
		t.Fatalf("exacto up with EXACTO_LOG_FORMAT=xml: %v\n%s", err, out)
	}
}

const stripeConfig = `
tenants:
  - id: acme
    endpoints:
      - id: pay
        provider: stripe
        path_token: tok-0123456789abcdef
        secrets: [whsec_test_secret]
`

// stripeDelivery is a distinct Stripe-style event, signed.
func stripeDelivery(t *testing.T, url string, i int, now time.Time) *http.Request {
	t.Helper()
	body := fmt.Sprintf(`{"id":"evt_restart_%06d","object":"event","type":"customer.updated","created":%d,"data":{"object":{"id":"cus_%06d","object":"customer","email":"lead%d@example.com"}}}`, i, now.Unix(), i, i)
	h, b, err := stripe.Spec.Sign(http.MethodPost, url, []byte(body), "whsec_test_secret", now)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	return req
}

// kill -9 in the middle of a burst: every event answered 200 is in the stream after
// restart, exactly once, and redelivering everything stores nothing new.
func TestKill9LosesNoAcknowledgedEvent(t *testing.T) {
	n := newNode(t, stripeConfig)
	n.start()
	url := "http://" + n.http + "/hooks/pay/tok-0123456789abcdef"
	const total = 400
	acked := burstAndCut(t, url, total, total/4, n.kill)
	if len(acked) == total {
		t.Fatal("the kill came after the burst; nothing was tested")
	}
	n.start()
	lost := verifyAcknowledged(t, n, url, total, acked)
	for _, i := range lost {
		t.Errorf("event %d was answered 200 before the kill but is not in the stream after restart", i)
	}
	t.Logf("acknowledged before kill -9: %d of %d; lost: %d", len(acked), total, len(lost))
}

// natsCLI is the stock nats CLI that `make test` installs into bin/.
func natsCLI(t *testing.T) string {
	p := os.Getenv("EXACTO_TEST_NATS_CLI")
	if p == "" {
		p = "../bin/nats"
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the nats CLI is missing (%v): run `make test`, which installs it into bin/", err)
	}
	return p
}

// `exacto gateway` runs alone against EXACTO_NATS_URL, beside the gateway of `exacto
// up`: two replicas receiving the same deliveries concurrently store each event once.
func TestTwoGatewayReplicasStoreOnce(t *testing.T) {
	a := newNode(t, stripeConfig)
	a.start()
	b := newNode(t, stripeConfig)
	b.natsURL = "nats://" + a.natsAddr
	b.startCmd("gateway")
	if out, err := newNode(t, stripeConfig).run("gateway"); err == nil || !strings.Contains(out, "EXACTO_NATS_URL is required") {
		t.Fatalf("gateway without EXACTO_NATS_URL: %v\n%s", err, out)
	}
	urls := []string{"http://" + a.http + "/hooks/pay/tok-0123456789abcdef", "http://" + b.http + "/hooks/pay/tok-0123456789abcdef"}
	const events, copies = 50, 4
	client := &http.Client{Timeout: 10 * time.Second}
	var wg sync.WaitGroup
	var failed atomic.Int64
	now := time.Now()
	for i := 1; i <= events; i++ {
		for c := 0; c < copies; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := client.Do(stripeDelivery(t, urls[c%2], i, now))
				if err != nil || resp.StatusCode != 200 {
					failed.Add(1)
				}
				if err == nil {
					resp.Body.Close()
				}
			}()
		}
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d deliveries failed", failed.Load())
	}
	ids := storedIDs(t, a.js())
	if len(ids) != events {
		t.Fatalf("%d distinct events stored, want %d", len(ids), events)
	}
	for id, c := range ids {
		if c != 1 {
			t.Fatalf("%s stored %d times", id, c)
		}
	}
}

// `exacto up` runs the suppressor: an Instantly unsubscribe suppresses its contact, and
// `exacto events show` reports the event completed there. A paused suppressor holds
// the next one until it is resumed.
func TestUpSuppressesAnUnsubscribe(t *testing.T) {
	n := newNode(t, "")
	n.start()
	natsURL := "nats://" + n.natsAddr
	send := func(at string) string {
		out, err := n.run("send", "--provider", "instantly", "--event", "lead_unsubscribed", "--at", at, "--to", "http://"+n.http+"/hooks/instantly/demo-instantly-token")
		if err != nil || !strings.HasPrefix(out, "200 ") {
			t.Fatalf("send: %v %s", err, out)
		}
		var ans struct {
			IDs []string `json:"ids"`
		}
		json.Unmarshal([]byte(strings.TrimPrefix(out, "200 ")), &ans)
		return ans.IDs[0]
	}
	status := func(id string) string {
		out, _ := n.run("events", "show", id, "--nats-url", natsURL)
		var shown struct {
			Consumers map[string]struct {
				Status string `json:"status"`
			} `json:"consumers"`
		}
		json.Unmarshal([]byte(out), &shown)
		return shown.Consumers["suppressor"].Status
	}
	waitStatus := func(id, want string) {
		deadline := time.Now().Add(20 * time.Second)
		for status(id) != want {
			if time.Now().After(deadline) {
				t.Fatalf("event %s: suppressor status %q, want %q\n%s", id, status(id), want, n.out.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	hourAgo := time.Now().UTC().Truncate(time.Second).Add(-time.Hour)
	id := send(hourAgo.Format(time.RFC3339))
	waitStatus(id, "completed")
	kv, err := n.js().KeyValue(context.Background(), "EXACTO_SUPPRESSION")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(context.Background())
	if err != nil || len(keys) != 1 || !strings.HasPrefix(keys[0], "demo.") {
		t.Fatalf("suppression list: %v %v", keys, err)
	}

	if out, err := n.run("worker", "pause", "suppressor", "--nats-url", natsURL); err != nil {
		t.Fatalf("pause: %v %s", err, out)
	}
	held := send(hourAgo.Add(time.Minute).Format(time.RFC3339))
	time.Sleep(time.Second)
	if s := status(held); s != "received" {
		t.Fatalf("held by a paused suppressor, the event is %q there, want received (stored, not attempted)", s)
	}
	if out, err := n.run("worker", "resume", "suppressor", "--nats-url", natsURL); err != nil {
		t.Fatalf("resume: %v %s", err, out)
	}
	waitStatus(held, "completed")
}

// A reply asking to be left alone: the classifier labels it, its reply.classified is
// stored (schema-valid, once), and the suppressor suppresses the contact from it.
func TestUpClassifiesAReplyAndSuppressesOnRequest(t *testing.T) {
	n := newNode(t, "")
	n.start()
	body := `{"timestamp":"` + time.Now().UTC().Add(-time.Hour).Format("2006-01-02T15:04:05.000Z") + `","event_type":"reply_received","workspace":"ws_1","campaign_id":"cmp_1","campaign_name":"Q4","lead_email":"Rosa.Diaz@example.com","email_account":"sam@outbound.example","step":2,"variant":1,"email_id":"em_77","reply_subject":"Re: quick question","reply_text":"Please remove me from your list. I do not want any more emails.\n\nOn Mon, Dec 1, 2026 Sam wrote:\n> Hi Rosa, quick question"}`
	n.happened("instantly", body)
	req, _ := http.NewRequest(http.MethodPost, "http://"+n.http+"/hooks/instantly/demo-instantly-token", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Exacto-Secret", "demo-instantly-secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("webhook: %d", resp.StatusCode)
	}
	js := n.js()
	ctx := context.Background()
	st, err := js.Stream(ctx, "EXACTO_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	var classified []byte
	for classified == nil && time.Now().Before(deadline) {
		if m, err := st.GetLastMsgForSubject(ctx, "events.demo.instantly.reply.classified"); err == nil {
			classified = m.Data
		}
		time.Sleep(50 * time.Millisecond)
	}
	if classified == nil {
		t.Fatalf("no reply.classified stored\n%s", n.out.String())
	}
	if err := providertest.Validate(classified); err != nil {
		t.Fatalf("reply.classified: %v\n%s", err, classified)
	}
	var env struct {
		Data struct {
			Classification struct{ Label, Action string } `json:"classification"`
		} `json:"data"`
	}
	json.Unmarshal(classified, &env)
	if env.Data.Classification.Label != "unsubscribe_request" || env.Data.Classification.Action != "suppress" {
		t.Fatalf("classification: %s", classified)
	}
	kv, _ := js.KeyValue(ctx, "EXACTO_SUPPRESSION")
	for {
		keys, _ := kv.Keys(ctx)
		if len(keys) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not suppressed: %v", keys)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The stopper stops the (sandboxed) sequence whatever the label: one sequence.stopped;
	// the crmwriter links the contact to HubSpot's: one contact.identified.
	for {
		if c := storedIDs(t, js); len(c) == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream holds %d events, want the reply, its classification, its stop and its contact's link", len(storedIDs(t, js)))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := st.GetLastMsgForSubject(ctx, "events.demo.instantly.sequence.stopped"); err != nil {
		t.Fatalf("no sequence.stopped: %v", err)
	}
	// `exacto events show` reports the reply completed in every consumer that takes it.
	reply, err := st.GetLastMsgForSubject(ctx, "events.demo.instantly.reply.received")
	if err != nil {
		t.Fatal(err)
	}
	waitCompleted(t, n, reply.Header.Get("Nats-Msg-Id"), "classifier", "stopper", "crmwriter")
}
