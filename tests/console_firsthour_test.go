package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"exacto.dev/pkg/reconcile"
	"exacto.dev/pkg/stream"
	classifier "exacto.dev/services/classifier/handler"
	stopper "exacto.dev/services/stopper/handler"
)

// A reply leads to its classification (label, evidence, confidence, action) and to
// the sequence stopped for it, and each of those back to the reply: in the console and
// in `exacto events show`.
func TestCausalChainBothWays(t *testing.T) {
	p := startPipeline(t)
	p.start(stream.Classifier, classifier.Run)
	p.start(stream.Stopper, stopper.Run)
	p.sb.AddInstantlyLead(campaign, "noor@northwind.example")
	id := p.post(instantlyEvent("reply_received", "noor@northwind.example", campaign, "em-chain-1",
		"Yes, this is exactly what we need. I'm interested.", time.Now()))[0]
	var classified, stopped string
	eventually(t, 30*time.Second, "the reply classified and its sequence stopped", func() bool {
		c, s := p.derived("reply.classified", id), p.derived("sequence.stopped", id)
		if len(c) == 1 && len(s) == 1 {
			classified, stopped = c[0]["id"].(string), s[0]["id"].(string)
		}
		return classified != "" && stopped != ""
	})

	// `exacto events show`: derived events one way, the cause the other.
	var shown struct {
		DerivedFrom string `json:"derived_from"`
		Derived     []struct {
			ID             string `json:"id"`
			Type           string `json:"type"`
			Classification *struct {
				Label    string   `json:"label"`
				Evidence []string `json:"evidence"`
				Action   string   `json:"action"`
			} `json:"classification"`
		} `json:"derived"`
	}
	natsURL := p.conn.Embedded.ClientURL()
	if err := json.Unmarshal([]byte(runExacto(t, "events", "show", id, "--nats-url", natsURL)), &shown); err != nil {
		t.Fatal(err)
	}
	types := map[string]string{}
	for _, d := range shown.Derived {
		types[d.Type] = d.ID
		if d.Type == "reply.classified" && (d.Classification == nil || d.Classification.Label != "interested" || len(d.Classification.Evidence) == 0 || d.Classification.Action == "") {
			t.Errorf("the classification shown: %+v", d.Classification)
		}
	}
	if types["reply.classified"] != classified || types["sequence.stopped"] != stopped || shown.DerivedFrom != "" {
		t.Fatalf("events show %s: derived %v, derived from %q", id, types, shown.DerivedFrom)
	}
	if err := json.Unmarshal([]byte(runExacto(t, "events", "show", classified, "--nats-url", natsURL)), &shown); err != nil || shown.DerivedFrom != id {
		t.Fatalf("events show %s: derived from %q (%v)", classified, shown.DerivedFrom, err)
	}

	// The console: the reply's page links to both, the classification's back.
	srv := consoleServer(t, p)
	b := openBrowser(t)
	// Without credentials the console asks for them, then goes on to the page asked for.
	b.do("the sign-in page", chromedp.Navigate(srv.URL+"/console/events/"+id), chromedp.WaitVisible(chromedp.CSS("#login")))
	b.shot("19-login")
	b.do("sign in", chromedp.SetValue(chromedp.CSS("#login-token"), consoleToken), chromedp.Click(chromedp.CSS("#login-submit")),
		chromedp.WaitVisible(chromedp.CSS("#derived")))
	row := b.text(`#derived tr[data-type="reply.classified"]`)
	for _, want := range []string{classified, "interested", "confidence", "evidence: “", "suggested action: "} {
		if !strings.Contains(row, want) {
			t.Errorf("the reply's derived classification lacks %q: %s", want, row)
		}
	}
	if row := b.text(`#derived tr[data-type="sequence.stopped"]`); !strings.Contains(row, stopped) {
		t.Errorf("the reply's derived stop: %s", row)
	}
	b.shot("20-event-causal-chain")
	b.do("to the classification", chromedp.Click(chromedp.CSS(`#derived tr[data-type="reply.classified"] a`)), chromedp.WaitVisible(chromedp.CSS("#consumers")))
	if h1 := b.text("h1"); !strings.Contains(h1, classified) {
		t.Fatalf("the classification's page: %s", h1)
	}
	b.do("back to the reply", chromedp.Click(chromedp.CSS(`a[href="/console/events/`+id+`"]`)), chromedp.WaitVisible(chromedp.CSS("#derived")))
	if h1 := b.text("h1"); !strings.Contains(h1, id) {
		t.Fatalf("back from the classification: %s", h1)
	}
	b.shot("21-event-derived-from")

	// The list: event time, status in each consumer, filtered by type.
	b.do("the events list", chromedp.Navigate(srv.URL+"/console/events?type=reply.received"), chromedp.WaitVisible(chromedp.CSS("#results")))
	// The crmwriter and the projector do not run here: the reply waits for them.
	if r := b.text(`#results tbody`); !strings.Contains(r, id) || strings.Contains(r, classified) || !strings.Contains(r, "stopper completed") || !strings.Contains(r, "crmwriter received") {
		t.Fatalf("the list of replies: %s", r)
	}
	b.do("all events", chromedp.Navigate(srv.URL+"/console/events"), chromedp.WaitVisible(chromedp.CSS("#results")))
	if r := b.text(`#results tbody`); !strings.Contains(r, classified) || !strings.Contains(r, stopped) {
		t.Fatalf("the list of all events: %s", r)
	}
	b.shot("22-events-list")
}

// Refused deliveries are listed with why, and a reconciliation finding reads at a
// glance (its contact's e-mail, full-width texts, its event a link).
func TestRefusedAndDiffsPages(t *testing.T) {
	p := startPipeline(t)
	id := p.post(instantlyEvent("reply_received", "noor@northwind.example", campaign, "em-diff-1", "Interested, call me", time.Now()))[0]
	srv := consoleServer(t, p)
	b := openBrowser(t)
	b.do("sign in", chromedp.Navigate(srv.URL+"/console/?token="+url.QueryEscape(consoleToken)), chromedp.WaitVisible(chromedp.CSS("h1")))

	// Refused deliveries: a wrong path token and a GET, each with why.
	p.mu.Lock()
	base := p.gwURL
	p.mu.Unlock()
	resp, err := http.Post(base+"/hooks/instantly/not-the-token-0123456789", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp, err = http.Get(base + "/hooks/instantly/tok-instantly-0123456789"); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	eventually(t, 10*time.Second, "two refusals logged", func() bool {
		b.do("refused", chromedp.Navigate(srv.URL+"/console/rejected"), chromedp.WaitVisible(chromedp.CSS("h1")))
		r, _ := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS("main")))
		return strings.Contains(r, "not_found") && strings.Contains(r, "method_not_allowed")
	})
	if r := b.text(`#rejected tr[data-status="404"]`); !strings.Contains(r, "instantly") || !strings.Contains(r, "wrong path token") || strings.Contains(r, "not-the-token") {
		t.Fatalf("the 404 refused: %s", r)
	}
	b.shot("23-refused")

	// A reconciliation finding: its contact's e-mail, full-width texts, linked events.
	kv, err := p.conn.JS.KeyValue(context.Background(), stream.Diffs)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	fd, _ := json.Marshal(reconcile.Finding{ID: "fd_console", Kind: reconcile.MissedReply, Tenant: "acme", Provider: "instantly",
		Contact: "noor@northwind.example", Campaign: campaign, Where: "instantly lead of noor@northwind.example in campaign " + campaign,
		Found:  "a reply at Instantly the projection does not have; the last event seen for the lead is " + id,
		Repair: "store the reply (proposed: approve to publish it)", Status: reconcile.StatusOpen, FirstSeen: now, LastSeen: now, Passes: 1})
	if _, err := kv.Put(context.Background(), "acme.fd_console", fd); err != nil {
		t.Fatal(err)
	}
	b.do("diffs", chromedp.Navigate(srv.URL+"/console/diffs"), chromedp.WaitVisible(chromedp.CSS(`section[data-finding="fd_console"]`)))
	b.do("the finding's event", chromedp.Click(chromedp.CSS(`section[data-finding="fd_console"] dd a[href="/console/events/`+id+`"]`)),
		chromedp.WaitVisible(chromedp.CSS("#consumers")))
	if h1 := b.text("h1"); !strings.Contains(h1, id) {
		t.Fatalf("the finding's event link led to %s", h1)
	}
	b.do("back to diffs", chromedp.Navigate(srv.URL+"/console/diffs"), chromedp.WaitVisible(chromedp.CSS(`section[data-finding="fd_console"]`)))
	if h := b.text(`section[data-finding="fd_console"] h3`); !strings.Contains(h, "noor@northwind.example") {
		t.Fatalf("the finding's heading: %s", h)
	}
	b.shot("24-diffs")
}
