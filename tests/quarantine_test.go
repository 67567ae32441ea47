package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/config"
	"exacto.dev/pkg/providers/registry"
	"exacto.dev/pkg/quarantine"
	"exacto.dev/pkg/stream"
	"exacto.dev/services/gateway/server"
)

// quarantineConfig is a deployment before (%d, %d, %s = 64 KiB, 3, created_at) and
// after (1 MiB, 10, occurred_at) an upgrade: a raised body_limit and max_events, and
// the generic signer's time field renamed as the provider renamed it.
const quarantineConfig = `
gateway:
  body_limit: %d
  max_events: %d
tenants:
  - id: acme
    endpoints:
      - {id: stripe, provider: stripe, path_token: qt-tok-stripe-0123456789, secrets: [whsec_qt_stripe_signing_secret]}
      - {id: hubspot, provider: hubspot, path_token: qt-tok-hubspot-0123456789, secrets: [qt-hubspot-client-secret]}
      - id: signer
        provider: generic
        path_token: qt-tok-signer-0123456789
        secrets: [qt-signer-hmac-key]
        generic: {header: X-Signature, prefix: "sha256=", encoding: hex, algorithm: sha256, signed: "{timestamp}.{body}", timestamp_header: X-Timestamp, id_field: id, type_field: type, time_field: %s, types: {reply: reply.received}}
`

// quarantineGateway serves cfg's gateway on conn until the test ends.
type quarantineGateway struct {
	t    *testing.T
	cfg  *config.Config
	base string
	now  time.Time
}

func startQuarantineGateway(t *testing.T, js jetstream.JetStream, cfg *config.Config, now time.Time) *quarantineGateway {
	t.Helper()
	gw, err := server.New(context.Background(), server.Options{Config: cfg, JS: js, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { srv.Close(); gw.Close() })
	return &quarantineGateway{t: t, cfg: cfg, base: srv.URL, now: now}
}

// post signs body as endpoint ep's provider would at at, posts it, and returns the
// answer's status and body.
func (g *quarantineGateway) post(ep string, body []byte, at time.Time) (int, map[string]any) {
	g.t.Helper()
	var ec *config.Endpoint
	for i := range g.cfg.Tenants[0].Endpoints {
		if g.cfg.Tenants[0].Endpoints[i].ID == ep {
			ec = &g.cfg.Tenants[0].Endpoints[i]
		}
	}
	spec, _ := registry.Lookup(ec.Provider)
	url := g.base + "/hooks/" + ep + "/" + ec.PathToken.Value
	h, b, err := spec.Sign(http.MethodPost, url, body, ec.Secrets[0].Value, at)
	if err != nil {
		g.t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var ans map[string]any
	if err := json.Unmarshal(raw, &ans); err != nil {
		g.t.Fatalf("answer %s: %v", raw, err)
	}
	return resp.StatusCode, ans
}

// The test, through the gateway and `exacto quarantine`: an over-limit delivery,
// an unparseable one (the provider renamed a field) and a batch over max_events, each
// verified, are answered 200 and quarantined, their retries kept once, nothing stored.
// Every refusal of a replay (no why, an unknown id, the parser still failing, a cut
// body) says why and changes nothing. After the upgrade (limits raised, the parser's
// field fixed) each replay stores every event of its delivery exactly once, with the ids
// the upgraded gateway gives the same delivery, and a second replay stores nothing.
func TestQuarantineReplayAfterUpgrade(t *testing.T) {
	t.Parallel()
	conn := brokertest.Start(t, "")
	dir := t.TempDir()
	write := func(name string, limit, maxEvents int, timeField string) (string, *config.Config) {
		text := fmt.Sprintf(quarantineConfig, limit, maxEvents, timeField)
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path, os.Getenv)
		if err != nil {
			t.Fatal(err)
		}
		return path, cfg
	}
	beforePath, before := write("before.yaml", 64<<10, 3, "created_at")
	afterPath, after := write("after.yaml", 1<<20, 10, "occurred_at")
	now := time.Now().UTC().Truncate(time.Second)
	gw := startQuarantineGateway(t, conn.JS, before, now)
	runIndexer(t, conn.JS)

	sample := func(ep, event string) []byte {
		spec, _ := registry.Lookup(ep)
		b, err := spec.Sample(event, now)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	big := bytes.Replace(sample("stripe", "customer.updated"), []byte(`{`), []byte(`{"pad":"`+strings.Repeat("x", 70<<10)+`",`), 1)
	renamed := fmt.Appendf(nil, `{"id":"evt_qt_1","type":"reply","occurred_at":%q,"data":{"contact":{"email":"ana@northwind.example"},"message":{"text":"Yes, let's talk"}}}`, now.Format(time.RFC3339))
	batch := sample("hubspot", "batch") // four events
	deliveries := []struct {
		endpoint, reason string
		body             []byte
		events           int
	}{
		{"stripe", "body_too_large", big, 1},
		{"signer", "malformed_body", renamed, 1},
		{"hubspot", "too_many_events", batch, 4},
	}
	ids := map[string]string{} // endpoint -> quarantine id
	for _, d := range deliveries {
		status, ans := gw.post(d.endpoint, d.body, now)
		id, _ := ans["quarantine_id"].(string)
		if status != 200 || ans["quarantined"] != 1.0 || ans["reason"] != d.reason || ans["stored"] != 0.0 || !strings.HasPrefix(id, "qr_") {
			t.Fatalf("%s: %d %v", d.endpoint, status, ans)
		}
		ids[d.endpoint] = id
		// The provider's retry, signed again a second later: kept once.
		if status, ans := gw.post(d.endpoint, d.body, now.Add(time.Second)); status != 200 || ans["quarantine_id"] != id || ans["already_quarantined"] != true {
			t.Fatalf("%s retry: %d %v", d.endpoint, status, ans)
		}
	}
	if n, kept := brokertest.Count(t, conn, stream.Events), brokertest.Count(t, conn, stream.Quarantine); n != 0 || kept != 3 {
		t.Fatalf("%d events stored, %d deliveries kept; want 0 and 3", n, kept)
	}

	url := conn.Embedded.ClientURL()
	run := func(args ...string) (string, error) {
		cmd := exec.Command(exactoBin, append(append([]string{"quarantine"}, args...), "--nats-url", url)...)
		cmd.Env = append(os.Environ(), "EXACTO_CONFIG=", "USER=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	list, err := run("list")
	if err != nil || strings.Count(list, " open ") != 3 {
		t.Fatalf("list: %v\n%s", err, list)
	}
	for _, d := range deliveries {
		if !regexp.MustCompile(ids[d.endpoint] + `\s+\S+ ago\s+acme\s+` + d.endpoint + `\s+\S+\s+` + d.reason + `\s+` + fmt.Sprint(len(d.body)) + `\s+open\s+`).MatchString(list) {
			t.Errorf("list has no line for %s:\n%s", d.endpoint, list)
		}
	}
	if out, err := run("list", "--reason", "too_many_events"); err != nil || strings.Count(out, "qr_") != 1 || !strings.Contains(out, ids["hubspot"]) {
		t.Fatalf("list --reason: %v\n%s", err, out)
	}
	if out, err := run("list", "--tenant", "acme.*"); err == nil || !strings.Contains(out, `tenant "acme.*" is not an id`) {
		t.Fatalf("list --tenant acme.*: %v\n%s", err, out)
	}
	show, err := run("show", ids["stripe"])
	if err != nil || !strings.Contains(show, `"reason": "body_too_large"`) || !strings.Contains(show, `"Stripe-Signature"`) ||
		!strings.Contains(show, `"status": "open"`) || strings.Contains(show, "xxxxxxxx") || strings.Contains(show, "whsec_") {
		t.Fatalf("show: %v\n%.2000s", err, show)
	}
	if body, err := run("show", ids["stripe"], "--body"); err != nil || body != string(big) {
		t.Fatalf("show --body: %v, %d bytes, want the %d posted", err, len(body), len(big))
	}

	// Refused, each with its reason, and nothing changes.
	cut := cutCopy(t, conn.JS, ids["signer"])
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"replay", ids["stripe"], "--by", "ana", "--config", afterPath}, "--why is required"},
		{[]string{"replay", "qr_" + strings.Repeat("0", 32), "--why", "x", "--config", afterPath}, "no quarantined delivery qr_0000"},
		{[]string{"replay", "7", "--why", "x", "--config", afterPath}, `"7" is not a quarantine id`},
		{[]string{"replay", ids["stripe"], "--why", "retry", "--config", beforePath}, "not replayed: still refused: body_too_large: the body is " + fmt.Sprint(len(big)) + " bytes, over the limit of 65536"},
		{[]string{"replay", ids["signer"], "--why", "retry", "--config", beforePath}, "not replayed: still refused: malformed_body: malformed payload: event 0: no created_at"},
		{[]string{"replay", ids["hubspot"], "--why", "retry", "--config", beforePath}, "not replayed: still refused: too_many_events: the delivery holds 4 events, over the limit of 3"},
		{[]string{"replay", cut, "--why", "x", "--config", afterPath}, "its body was cut when it was kept"},
	} {
		if out, err := run(c.args...); err == nil || !strings.Contains(out, c.want) {
			t.Errorf("%v: %v\n%s", c.args, err, out)
		}
	}
	if out, err := run("replay", ids["signer"], "--dry-run", "--config", beforePath); err != nil || !strings.Contains(out, "replay: would be refused: still refused: malformed_body") {
		t.Errorf("dry run under the old parser: %v\n%s", err, out)
	}
	if n := brokertest.Count(t, conn, stream.Events); n != 0 {
		t.Fatalf("refused replays stored %d events", n)
	}
	if out, _ := run("list"); strings.Count(out, " open ") != 4 { // the three and the cut copy
		t.Fatalf("refused replays changed a status:\n%s", out)
	}

	// After the upgrade: a dry run says what would be stored; each replay stores every
	// event of its delivery once; a second stores nothing.
	if out, err := run("replay", ids["hubspot"], "--dry-run", "--config", afterPath); err != nil || !strings.Contains(out, "replay: would store 4 of 4 events") ||
		strings.Count(out, ": would be stored") != 4 || brokertest.Count(t, conn, stream.Events) != 0 {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	total := 0
	for _, d := range deliveries {
		out, err := run("replay", ids[d.endpoint], "--by", "ana", "--why", "upgraded", "--config", afterPath)
		if err != nil || !strings.Contains(out, fmt.Sprintf("replayed by ana: %d events stored, 0 already stored: ev_", d.events)) {
			t.Fatalf("replay %s: %v\n%s", d.endpoint, err, out)
		}
		total += d.events
		if n := brokertest.Count(t, conn, stream.Events); n != uint64(total) {
			t.Fatalf("after replaying %s the stream holds %d events, want %d", d.endpoint, n, total)
		}
		out, err = run("replay", ids[d.endpoint], "--by", "ben", "--why", "again", "--config", afterPath)
		if err != nil || !strings.Contains(out, fmt.Sprintf("replayed by ben: 0 events stored, %d already stored", d.events)) {
			t.Fatalf("second replay %s: %v\n%s", d.endpoint, err, out)
		}
	}
	if n := brokertest.Count(t, conn, stream.Events); n != uint64(total) {
		t.Fatalf("the stream holds %d events, want %d", n, total)
	}
	// The upgraded gateway gives the same deliveries the same ids: all duplicates.
	upgraded := startQuarantineGateway(t, conn.JS, after, now)
	for _, d := range deliveries {
		if status, ans := upgraded.post(d.endpoint, d.body, now.Add(2*time.Second)); status != 200 || ans["stored"] != 0.0 || ans["duplicates"] != float64(d.events) {
			t.Errorf("%s through the upgraded gateway: %d %v", d.endpoint, status, ans)
		}
	}
	if out, _ := run("list"); strings.Count(out, "qr_") != 1 || !strings.Contains(out, cut) {
		t.Errorf("open after the replays (only the cut copy should be):\n%s", out)
	}
	if out, _ := run("list", "--all"); strings.Count(out, " replayed ") != 3 {
		t.Errorf("list --all:\n%s", out)
	}
	if show, _ := run("show", ids["hubspot"]); !strings.Contains(show, `"status": "replayed"`) || !strings.Contains(show, `"by": "ana"`) ||
		!strings.Contains(show, `"why": "upgraded"`) || !strings.Contains(show, `"by": "ben"`) {
		t.Errorf("show after the replays:\n%s", show)
	}
}

// cutCopy keeps a copy of kept delivery id as if its body had been cut (a server with a
// smaller max_payload), under another id, and returns that id.
func cutCopy(t *testing.T, js jetstream.JetStream, id string) string {
	t.Helper()
	ctx := context.Background()
	q, err := quarantine.New(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	e, err := q.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	rec := e.Record
	rec.ID, rec.Cut = quarantine.ID(rec.Tenant, rec.Endpoint, "cut"), true
	data, _ := json.Marshal(rec)
	msg := &nats.Msg{Subject: stream.QuarantineSubject(rec.Tenant, rec.Endpoint, rec.ID), Data: e.Body[:len(e.Body)/2], Header: nats.Header{}}
	msg.Header.Set(quarantine.RecordHeader, string(data))
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	return rec.ID
}
