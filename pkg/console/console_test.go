package console

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/config"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/dlq"
	"exacto.dev/pkg/dlq/dlqtest"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/forwarded"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/ingest"
	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/quarantine"
	"exacto.dev/pkg/reconcile"
	"exacto.dev/pkg/stream"
)

const (
	consoleToken = "console-tok-SECRET-5d1e8a"
	anaPassword  = "ana-pw-SECRET-93bf"
	pathToken    = "path-tok-SECRET-0123456789"
	apiKey       = "hubspot-key-SECRET-77aa"
)

var secrets = []string{consoleToken, anaPassword, pathToken, apiKey}

const testConfig = `
console:
  token: env:CONSOLE_TOKEN
  users: {ana: env:ANA_PW}
tenants:
  - id: acme
    owners: {default: revops@acme.example}
    platforms:
      hubspot: {api_key: env:HS_KEY}
    endpoints:
      - {id: instantly, provider: instantly, path_token: env:PATH_TOKEN}
`

func testEnv(name string) string {
	return map[string]string{"CONSOLE_TOKEN": consoleToken, "ANA_PW": anaPassword, "PATH_TOKEN": pathToken, "HS_KEY": apiKey}[name]
}

type fixture struct {
	t     *testing.T
	conn  *broker.Conn
	js    jetstream.JetStream
	srv   *httptest.Server
	fresh string // event ids
	old   string
	evil  string
	// dead letter sequences
	freshDL, oldDL uint64
	// quarantined deliveries: one over a body limit since raised (a replay stores its
	// event), one its parser still refuses
	keptBig, keptBad string
}

// metricsText is a gateway's /metrics: distinctive values, labels summed by the
// overview (duplicates 3100+4217), a label holding a space, and no rejection yet.
const metricsText = `# HELP exacto_gateway_duplicates_total events answered 200 without being stored again
# TYPE exacto_gateway_duplicates_total counter
exacto_gateway_duplicates_total{provider="instantly",tenant="acme"} 3100
exacto_gateway_duplicates_total{provider="smartlead",tenant="acme"} 4217
exacto_gateway_invalid_signatures_total{provider="instantly",reason="bad signature"} 5923
exacto_gateway_events_received_total{provider="instantly"} 48611
exacto_dlq_open{consumer="crmwriter"} 2
`

// serveMetrics serves text as /metrics.
func serveMetrics(text string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, text)
	})
}

// setup starts a broker with three events, two dead letters and a finding, and the
// console over it; opts change the console's options.
func setup(t *testing.T, opts ...func(*Options)) *fixture {
	t.Helper()
	cfg, err := config.Parse([]byte(testConfig), "test", testEnv)
	if err != nil {
		t.Fatal(err)
	}
	conn := brokertest.Start(t, "")
	f := &fixture{t: t, conn: conn, js: conn.JS}
	ctx := context.Background()
	now := time.Now().UTC()
	f.fresh = f.publish(ctx, "reply.received", "ana@northwind.example", "camp-1", "pe-fresh", "Can you send pricing?", now.Add(-time.Minute))
	f.old = f.publish(ctx, "reply.received", "ben@northwind.example", "camp-1", "pe-old", "Old reply", now.Add(-120*time.Hour))
	f.evil = f.publish(ctx, "reply.received", "eve@evil.example", "camp-2", "pe-evil", `<script>alert("x")</script><b>bold</b>`, now)
	f.freshDL = f.deadLetter(ctx, f.fresh, "hubspot: 400 property does not exist")
	f.oldDL = f.deadLetter(ctx, f.old, "hubspot: 400 <img src=x onerror=alert(1)>")
	f.keptBig = f.quarantine(cfg, 1024, fmt.Appendf(nil, `{"timestamp":%q,"event_type":"reply_received","campaign_id":"camp-1","lead_email":"dee@northwind.example","email_id":"em-q-1","reply_text":"<script>alert(\"q\")</script>yes, call me","pad":%q}`,
		now.Format(time.RFC3339), strings.Repeat("x", 1200)))
	f.keptBad = f.quarantine(cfg, 1<<20, []byte(`{"event_type": "reply_received", "truncated`))
	// A finding waiting for a decision.
	kv, err := conn.JS.KeyValue(ctx, stream.Diffs)
	if err != nil {
		t.Fatal(err)
	}
	fd := reconcile.Finding{ID: "fd_0123", Kind: reconcile.MissedUnsubscribe, Tenant: "acme", Provider: "instantly",
		Contact: "cy@northwind.example", Where: "instantly lead in campaign camp-1", Found: "unsubscribed at Instantly, active here",
		Repair: "suppress the contact", Status: reconcile.StatusOpen, FirstSeen: now, LastSeen: now, Passes: 1}
	data, _ := json.Marshal(fd)
	if _, err := kv.Put(ctx, "acme.fd_0123", data); err != nil {
		t.Fatal(err)
	}
	o := Options{JS: conn.JS, Config: cfg, Metrics: serveMetrics(metricsText),
		Breakers: func() map[string]string { return map[string]string{"hubspot": "open", "instantly": "closed"} }}
	for _, opt := range opts {
		opt(&o)
	}
	h, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	Mount(mux, h)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) publish(ctx context.Context, typ, email, campaign, peid, text string, at time.Time) string {
	f.t.Helper()
	return f.store(ctx, envelope.Envelope{SpecVersion: "1.0", ID: envelope.ID("acme", "instantly", peid), Source: "instantly", Type: typ, Time: at,
		DataContentType: "application/json", Tenant: "acme", Provider: "instantly", Endpoint: "instantly", ProviderEventID: peid,
		ReceivedAt: at, PayloadSHA256: strings.Repeat("ab", 32), AuthMethod: "none",
		Data: envelope.Data{ProviderType: "reply_received", Contact: &envelope.Contact{Email: email}, Campaign: &envelope.Campaign{ID: campaign, Name: "Founders"},
			Message: &envelope.Message{Text: text}, Raw: json.RawMessage(`{"reply_text":` + strconv.Quote(text) + `}`)}})
}

// store publishes env on EXACTO_EVENTS and indexes it, as the gateway does.
func (f *fixture) store(ctx context.Context, env envelope.Envelope) string {
	f.t.Helper()
	msg, err := stream.EventMessage(ctx, env)
	if err != nil {
		f.t.Fatal(err)
	}
	ack, err := f.js.PublishMsg(ctx, msg)
	if err != nil {
		f.t.Fatal(err)
	}
	idx, err := f.js.KeyValue(ctx, stream.EventIndex)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := idx.Put(ctx, env.ID, []byte(strconv.FormatUint(ack.Sequence, 10))); err != nil {
		f.t.Fatal(err)
	}
	return env.ID
}

// quarantine keeps a verified delivery of body to the instantly endpoint as the gateway
// does when it is over bodyLimit or unparseable, with a hostile header, and returns its id.
func (f *fixture) quarantine(cfg *config.Config, bodyLimit int64, body []byte) string {
	f.t.Helper()
	ep, err := ingest.FindEndpoint(cfg, "acme", "instantly")
	if err != nil {
		f.t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	header := http.Header{"Content-Type": {"application/json"}, "X-Note": {`<img src=x onerror=alert(2)>`}, "Authorization": {"Bearer " + consoleToken}}
	d := ingest.Delivery{Endpoint: ep, Request: &providers.Request{Method: http.MethodPost, Header: header, Body: body, Now: time.Now().UTC()},
		Size: len(body), SHA256: hex.EncodeToString(sum[:])}
	lim := cfg.Gateway
	lim.BodyLimit = bodyLimit
	_, refused := d.Envelopes(lim)
	if refused == nil {
		f.t.Fatal("the delivery to quarantine was not refused")
	}
	q, err := quarantine.New(context.Background(), f.js)
	if err != nil {
		f.t.Fatal(err)
	}
	rec, kept := quarantine.NewRecord(d, refused)
	if _, err := q.Put(context.Background(), rec, kept); err != nil {
		f.t.Fatal(err)
	}
	return rec.ID
}

// deadLetter records event id as dead-lettered by the crmwriter, as the consumer does.
func (f *fixture) deadLetter(ctx context.Context, id, cause string) uint64 {
	f.t.Helper()
	st, _ := f.js.Stream(ctx, stream.Events)
	idx, _ := f.js.KeyValue(ctx, stream.EventIndex)
	e, err := idx.Get(ctx, id)
	if err != nil {
		f.t.Fatal(err)
	}
	seq, _ := strconv.ParseUint(string(e.Value()), 10, 64)
	m, err := st.GetMsg(ctx, seq)
	if err != nil {
		f.t.Fatal(err)
	}
	now := time.Now().UTC()
	rec := guard.Record{Status: guard.DeadLetter, Attempts: 1, LastError: cause, FirstAttempt: now, LastAttempt: now}
	guards, _ := f.js.KeyValue(ctx, stream.Guards)
	data, _ := json.Marshal(rec)
	if _, err := guards.Put(ctx, guard.Key(stream.CRMWriter, id), data); err != nil {
		f.t.Fatal(err)
	}
	dl := consumer.DeadLetter{Consumer: stream.CRMWriter, EventID: id, Tenant: "acme", Provider: "instantly", Type: "reply.received",
		Error: cause, Class: "permanent", Attempts: 1, FirstAttempt: now, LastAttempt: now, Owner: "revops@acme.example", Event: m.Data}
	data, _ = json.Marshal(dl)
	ack, err := f.js.Publish(ctx, stream.DLQSubject(stream.CRMWriter, "acme", "instantly", "reply.received"), data)
	if err != nil {
		f.t.Fatal(err)
	}
	return ack.Sequence
}

// client follows no redirect, so tests see them; it may carry a cookie jar.
func client() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (f *fixture) get(path string, auth func(*http.Request)) (int, string, http.Header) {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	if auth != nil {
		auth(req)
	}
	resp, err := client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func bearer(tok string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
}

func basic(user, pw string) func(*http.Request) {
	return func(r *http.Request) { r.SetBasicAuth(user, pw) }
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// form gets the page at path and returns it with the CSRF token of its forms.
func (f *fixture) form(path string, auth func(*http.Request)) (page, csrf string) {
	f.t.Helper()
	_, page, _ = f.get(path, auth)
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		f.t.Fatalf("no CSRF token on %s:\n%s", path, page)
	}
	return page, m[1]
}

func (f *fixture) post(path string, form url.Values, auth func(*http.Request)) (int, string, http.Header) {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if auth != nil {
		auth(req)
	}
	resp, err := client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// Behind the TLS proxy the README recommends, the session cookie is Secure (issue 16:
// it never was): the proxy's X-Forwarded-Proto is believed from the proxies the config
// trusts (loopback by default), and from no one else.
func TestSessionCookieBehindAProxy(t *testing.T) {
	login := func(f *fixture, proto string) string {
		t.Helper()
		code, _, h := f.get("/console/?token="+url.QueryEscape(consoleToken), func(r *http.Request) {
			if proto != "" {
				r.Header.Set("X-Forwarded-Proto", proto)
			}
		})
		if code != http.StatusSeeOther {
			t.Fatalf("login: %d", code)
		}
		return h.Get("Set-Cookie")
	}
	f := setup(t)
	if ck := login(f, "https"); !strings.Contains(ck, "; Secure") {
		t.Errorf("through a trusted proxy that says https: %s, want Secure", ck)
	}
	if ck := login(f, ""); strings.Contains(ck, "Secure") {
		t.Errorf("plain http, no proxy: %s, want it not Secure (the browser would not send it back)", ck)
	}
	untrusted := setup(t, func(o *Options) { o.Config.TrustedProxies = []string{"10.0.0.0/8"} })
	if ck := login(untrusted, "https"); strings.Contains(ck, "Secure") {
		t.Errorf("X-Forwarded-Proto from a client that is no trusted proxy: %s, want its word not taken", ck)
	}
}

// A link that puts words in the console's mouth (issue 16: "?done=" was echoed as a
// notice) shows nothing: only the notices the console signed on its own redirects.
func TestForgedNoticeIsNotShown(t *testing.T) {
	f := setup(t)
	auth := bearer(consoleToken)
	seq := strconv.FormatUint(f.freshDL, 10)
	const lure = "Your session expired: call +1 555 0100 to restore it"
	for _, path := range []string{
		"/console/dlq/" + seq + "?done=" + url.QueryEscape(lure),
		"/console/dlq/" + seq + "?err=" + url.QueryEscape(lure) + "&err_sig=AAAA",
		"/console/diffs?done=" + url.QueryEscape(lure),
		"/console/quarantine/" + f.keptBad + "?err=" + url.QueryEscape(lure),
	} {
		code, body, _ := f.get(path, auth)
		if code != http.StatusOK || strings.Contains(body, "session expired") {
			t.Errorf("%s: %d, the lure shown: %v", path, code, strings.Contains(body, "session expired"))
		}
	}
	// A notice the console signed shows on its own page, and on no other.
	oseq := strconv.FormatUint(f.oldDL, 10)
	_, tok := f.form("/console/dlq/"+oseq, auth)
	code, _, h := f.post("/console/dlq/"+oseq+"/discard", url.Values{"csrf": {tok}}, auth)
	loc, err := url.Parse(h.Get("Location"))
	if code != http.StatusSeeOther || err != nil || loc.Query().Get("err_sig") == "" {
		t.Fatalf("discard without a why: %d %q", code, h.Get("Location"))
	}
	if _, body, _ := f.get(loc.String(), auth); !strings.Contains(body, "discard refused") {
		t.Error("the signed notice is not shown on its own page")
	}
	if _, body, _ := f.get("/console/dlq/"+seq+"?"+loc.RawQuery, auth); strings.Contains(body, "discard refused") {
		t.Error("a notice signed for one dead letter's page shows on another's")
	}
}

// A form announced at 100 GB and trickled in (issue 16: held the connection until the
// read timeout) is refused 413 at once, unread.
func TestHugeFormIsRefusedAtOnce(t *testing.T) {
	f := setup(t)
	c, err := net.Dial("tcp", strings.TrimPrefix(f.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seq := strconv.FormatUint(f.freshDL, 10)
	fmt.Fprintf(c, "POST /console/dlq/%s/replay HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000000000\r\n\r\nab", seq, consoleToken)
	c.SetReadDeadline(time.Now().Add(10 * time.Second)) // a test server has no read timeout: without the check it waits for good
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close {
		t.Fatalf("%d, close %v; want 413 and the connection closed", resp.StatusCode, resp.Close)
	}
}

func TestAuth(t *testing.T) {
	f := setup(t)
	for name, tc := range map[string]struct {
		auth func(*http.Request)
		want int
	}{
		"none":              {nil, 401},
		"wrong token":       {bearer("nope"), 401},
		"token":             {bearer(consoleToken), 200},
		"basic":             {basic("ana", anaPassword), 200},
		"basic wrong":       {basic("ana", "nope"), 401},
		"basic unknown":     {basic("bob", anaPassword), 401},
		"password as token": {bearer(anaPassword), 401},
	} {
		if code, body, _ := f.get("/console/", tc.auth); code != tc.want {
			t.Errorf("%s: %d, want %d\n%s", name, code, tc.want, body)
		}
	}
	// The rest of the admin mux is untouched.
	if code, _, _ := f.get("/healthz", nil); code != 200 {
		t.Errorf("/healthz: %d", code)
	}
	// ?token= sets an HttpOnly SameSite=Strict cookie and drops the token from the URL.
	code, _, h := f.get("/console/events?q=ana%40northwind.example&token="+url.QueryEscape(consoleToken), nil)
	if code != http.StatusSeeOther || h.Get("Location") != "/console/events?q=ana%40northwind.example" {
		t.Fatalf("login: %d %q", code, h.Get("Location"))
	}
	ck := h.Get("Set-Cookie")
	if !strings.Contains(ck, "HttpOnly") || !strings.Contains(ck, "SameSite=Strict") || strings.Contains(ck, consoleToken) {
		t.Fatalf("cookie: %s", ck)
	}
	cookie := strings.SplitN(ck, ";", 2)[0]
	withCookie := func(r *http.Request) { r.Header.Set("Cookie", cookie) }
	if code, body, _ := f.get("/console/events?q=ana%40northwind.example", withCookie); code != 200 || !strings.Contains(body, f.fresh) {
		t.Fatalf("with the session: %d", code)
	}
	if code, _, _ := f.get("/console/", func(r *http.Request) { r.Header.Set("Cookie", cookieName+"=forged") }); code != 401 {
		t.Fatalf("forged cookie: %d", code)
	}
	if code, _, _ := f.get("/console/?token=wrong", nil); code != 401 {
		t.Fatalf("wrong ?token=: %d", code)
	}
}

func TestNotConfigured(t *testing.T) {
	conn := brokertest.Start(t, "")
	cfg, err := config.Parse([]byte("tenants: []\n"), "test", func(string) string { return "" })
	if err != nil {
		cfg = &config.Config{}
	}
	h, err := New(Options{JS: conn.JS, Config: cfg})
	if err != ErrNotConfigured || h != nil {
		t.Fatalf("New without credentials: %v", err)
	}
	mux := http.NewServeMux()
	Mount(mux, h)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/console/", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("unconfigured console answered %d", rec.Code)
	}
}

func TestPagesRenderWithoutSecrets(t *testing.T) {
	f := setup(t)
	auth := basic("ana", anaPassword)
	pages := map[string][]string{
		"/console/":                                         {"Events per minute", `id="exacto_gateway_duplicates">7317<`, "open dead letters", `id="quarantined-open">2<`},
		"/console/events":                                   {f.fresh, f.old, f.evil},
		"/console/events?q=" + f.fresh:                      {f.fresh, "ana@northwind.example"},
		"/console/events?q=ANA%40northwind.example":         {f.fresh},
		"/console/events?q=pe-old":                          {f.old},
		"/console/events?q=camp-2":                          {f.evil},
		"/console/events/" + f.fresh:                        {"dead_letter", "hubspot: 400 property does not exist", "crmwriter", "not_seen", "payloadsha256"},
		"/console/dlq":                                      {"#" + strconv.FormatUint(f.freshDL, 10), "revops@acme.example", "permanent"},
		"/console/dlq?consumer=crmwriter&older=1h":          {"No dead letter matches"},
		"/console/dlq/" + strconv.FormatUint(f.freshDL, 10): {f.fresh, "Replay", "Discard", `name="csrf"`},
		"/console/diffs":                                    {"fd_0123", "missed_unsubscribe", "Approve", "Reject"},
		"/console/quarantine":                               {f.keptBig, f.keptBad, "body_too_large", "malformed_body", `href="/console/quarantine" class="on"`},
		"/console/quarantine?reason=body_too_large":         {f.keptBig},
		"/console/quarantine?tenant=acme.x":                 {"nothing listed: tenant &#34;acme.x&#34; is not an id"},
		"/console/quarantine/" + f.keptBig:                  {"A replay now would store 1 of 1 events", "reply.received", "X-Note", "Authorization", "(credentials and signatures)", `name="csrf"`, "/hooks/instantly/REDACTED"},
		"/console/quarantine/" + f.keptBad:                  {"A replay now would be refused: still refused: malformed_body", "truncated"},
		"/console/diffs?status=":                            {"fd_0123"},
	}
	for path, want := range pages {
		code, body, h := f.get(path, auth)
		if code != 200 {
			t.Errorf("%s: %d\n%s", path, code, body)
			continue
		}
		if !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") {
			t.Errorf("%s: no CSP", path)
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("%s: %q missing", path, w)
			}
		}
		for _, s := range secrets {
			if strings.Contains(body, s) {
				t.Errorf("%s shows a secret", path)
			}
		}
		if strings.Contains(body, "ZgotmplZ") || strings.Contains(body, "template:") {
			t.Errorf("%s: template trouble", path)
		}
	}
	if code, _, _ := f.get("/console/events?q=nobody%40nowhere.example", auth); code != 200 {
		t.Errorf("empty search: %d", code)
	}
	if code, _, _ := f.get("/console/events/ev_unknown", auth); code != 404 {
		t.Errorf("unknown event: %d", code)
	}
	if code, _, _ := f.get("/console/dlq/nine", auth); code != 404 {
		t.Errorf("bad letter id: %d", code)
	}
	if code, _, _ := f.get("/console/quarantine/qr_nine", auth); code != 404 {
		t.Errorf("bad quarantine id: %d", code)
	}
	if _, body, _ := f.get("/console/quarantine?reason=body_too_large", auth); strings.Contains(body, f.keptBad) {
		t.Errorf("the reason filter lists a malformed_body delivery")
	}
	if code, _, _ := f.get("/console/static/console.css", nil); code != 200 {
		t.Errorf("css: %d", code)
	}
}

func TestEscaping(t *testing.T) {
	f := setup(t)
	auth := bearer(consoleToken)
	for _, path := range []string{"/console/events/" + f.evil, "/console/events?q=camp-2", "/console/dlq/" + strconv.FormatUint(f.oldDL, 10), "/console/dlq?all=1", "/console/events?q=%3Cscript%3E",
		"/console/quarantine/" + f.keptBig} {
		_, body, _ := f.get(path, auth)
		if strings.Contains(body, "<script") || strings.Contains(body, "<img") || strings.Contains(body, "<b>bold") {
			t.Errorf("%s renders a hostile field as markup", path)
		}
	}
	_, body, _ := f.get("/console/events/"+f.evil, auth)
	if !strings.Contains(body, `&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&lt;b&gt;bold&lt;/b&gt;`) {
		t.Errorf("the reply text is not shown as text:\n%s", body)
	}
	_, body, _ = f.get("/console/dlq?all=1", auth)
	if !strings.Contains(body, "hubspot: 400 &lt;img src=x onerror=alert(1)&gt;") {
		t.Errorf("the dead letter's error is not shown as text:\n%s", body)
	}
	_, body, _ = f.get("/console/quarantine/"+f.keptBig, auth)
	if !strings.Contains(body, `&lt;script&gt;alert(\&#34;q\&#34;)&lt;/script&gt;yes`) || !strings.Contains(body, "&lt;img src=x onerror=alert(2)&gt;") {
		t.Errorf("the quarantined body and headers are not shown as text:\n%s", body)
	}
}

func TestCSRFAndReplay(t *testing.T) {
	f := setup(t)
	auth := basic("ana", anaPassword)
	seq := strconv.FormatUint(f.freshDL, 10)
	page, tok := f.form("/console/dlq/"+seq, auth)
	// Without the token, or with another credential's token: 403, nothing done.
	if code, _, _ := f.post("/console/dlq/"+seq+"/replay", url.Values{"why": {"fixed"}}, auth); code != 403 {
		t.Fatalf("replay without CSRF: %d", code)
	}
	if code, _, _ := f.post("/console/dlq/"+seq+"/replay", url.Values{"why": {"fixed"}, "csrf": {tok}}, bearer(consoleToken)); code != 403 {
		t.Fatalf("replay with another credential's CSRF token: %d", code)
	}
	if code, _, _ := f.post("/console/dlq/"+seq+"/replay", url.Values{"why": {"fixed"}, "csrf": {tok}}, func(r *http.Request) {
		auth(r)
		r.Header.Set("Origin", "https://evil.example")
	}); code != 403 {
		t.Fatalf("cross-origin replay: %d", code)
	}
	if _, body, _ := f.get("/console/dlq/"+seq, auth); !strings.Contains(body, `id="letter-status">open`) {
		t.Fatal("a refused POST changed the letter")
	}
	// Without a why: refused, the letter stays open with no action, its guard untouched.
	if !strings.Contains(page, `id="replay-why" size="40" placeholder="what was fixed" required`) {
		t.Errorf("the letter page does not require a why:\n%s", page)
	}
	for _, why := range []string{"", "   "} {
		code, _, h := f.post("/console/dlq/"+seq+"/replay", url.Values{"why": {why}, "csrf": {tok}}, auth)
		_, body, _ := f.get(h.Get("Location"), auth)
		if code != http.StatusSeeOther || !strings.Contains(body, "replay refused: a why is required") || !strings.Contains(body, `id="letter-status">open`) ||
			!strings.Contains(body, "No action yet.") {
			t.Errorf("replay with why %q: %d\n%s", why, code, body)
		}
	}
	guards, err := f.js.KeyValue(context.Background(), stream.Guards)
	if err != nil {
		t.Fatal(err)
	}
	if rec, _, err := guard.Status(context.Background(), guards, stream.CRMWriter, f.fresh); err != nil || rec.Status != guard.DeadLetter {
		t.Errorf("a refused replay reset the guard: %+v %v", rec, err)
	}
	// With it: replayed, redirected to the letter, recorded with ana and the why.
	code, _, h := f.post("/console/dlq/"+seq+"/replay", url.Values{"why": {"property fixed"}, "csrf": {tok}}, auth)
	if code != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/console/dlq/"+seq+"?done=") {
		t.Fatalf("replay: %d %s", code, h.Get("Location"))
	}
	_, body, _ := f.get(h.Get("Location"), auth)
	for _, w := range []string{"replayed: the event was sent back to crmwriter", `id="letter-status">replayed`, "ana", "property fixed", "/console/events/" + f.fresh} {
		if !strings.Contains(body, w) {
			t.Errorf("after the replay: %q missing", w)
		}
	}
	// The guard was reset for the consumer to take it again.
	if _, body, _ := f.get("/console/events/"+f.fresh, auth); strings.Contains(body, ">dead_letter<") {
		t.Error("the event still shows dead_letter in crmwriter after the replay")
	}

	// A stale letter: refused, with its reason shown.
	oseq := strconv.FormatUint(f.oldDL, 10)
	_, page, _ = f.get("/console/dlq/"+oseq, auth)
	if !strings.Contains(page, "A replay now would be refused") {
		t.Error("the stale letter's page does not warn")
	}
	code, _, h = f.post("/console/dlq/"+oseq+"/replay", url.Values{"why": {"try"}, "csrf": {tok}}, auth)
	if code != http.StatusSeeOther {
		t.Fatalf("stale replay: %d", code)
	}
	_, body, _ = f.get(h.Get("Location"), auth)
	if !regexp.MustCompile(`replay refused: stale: the reply.received event is 1[12]\dh\d+m0s old; its freshness limit is 72h0m0s`).MatchString(body) ||
		!strings.Contains(body, `id="letter-status">open`) {
		t.Errorf("stale replay page:\n%s", body)
	}
	// Discard needs a why; with one it is recorded.
	code, _, h = f.post("/console/dlq/"+oseq+"/discard", url.Values{"csrf": {tok}}, auth)
	if _, body, _ = f.get(h.Get("Location"), auth); code != 303 || !strings.Contains(body, "discard refused") {
		t.Errorf("discard without why: %d", code)
	}
	f.post("/console/dlq/"+oseq+"/discard", url.Values{"csrf": {tok}, "why": {"too old to matter"}}, auth)
	if _, body, _ = f.get("/console/dlq/"+oseq, auth); !strings.Contains(body, `id="letter-status">discarded`) || !strings.Contains(body, "too old to matter") {
		t.Error("discard not recorded")
	}

	// A diff decision: CSRF required too, recorded with the user.
	if code, _, _ := f.post("/console/diffs/acme/fd_0123", url.Values{"decision": {"reject"}}, auth); code != 403 {
		t.Fatalf("decide without CSRF: %d", code)
	}
	code, _, h = f.post("/console/diffs/acme/fd_0123", url.Values{"decision": {"reject"}, "why": {"known gap"}, "csrf": {tok}}, auth)
	if code != 303 {
		t.Fatalf("decide: %d", code)
	}
	if _, body, _ = f.get(h.Get("Location"), auth); !strings.Contains(body, "finding fd_0123 rejected") || !strings.Contains(body, "rejected by ana: known gap") {
		t.Errorf("after the decision:\n%s", body)
	}
}

// The bearer token's and a session's CSRF tokens work for their own credential. The
// shared token names nobody: its forms ask who decides, and a decision without a name
// (or with one that is not a name) is refused; the name is recorded, marked as given
// by the token.
func TestSessionCSRF(t *testing.T) {
	f := setup(t)
	_, _, h := f.get("/console/?token="+url.QueryEscape(consoleToken), nil)
	cookie := strings.SplitN(h.Get("Set-Cookie"), ";", 2)[0]
	withCookie := func(r *http.Request) { r.Header.Set("Cookie", cookie) }
	seq := strconv.FormatUint(f.freshDL, 10)
	page, tok := f.form("/console/dlq/"+seq, withCookie)
	if !strings.Contains(page, `<input name="by" id="replay-by" size="16" required>`) {
		t.Errorf("the shared token's replay form does not ask who:\n%s", page)
	}
	for _, by := range []string{"", "  ", strings.Repeat("b", 65), strings.Repeat("é", 65), "ben\nadmin"} {
		code, _, h := f.post("/console/dlq/"+seq+"/replay", url.Values{"why": {"fixed"}, "by": {by}, "csrf": {tok}}, withCookie)
		if _, body, _ := f.get(h.Get("Location"), withCookie); code != 303 || !strings.Contains(body, "replay refused: ") || !strings.Contains(body, "No action yet.") {
			t.Errorf("replay by %q: %d\n%s", by, code, body)
		}
	}
	code, _, h := f.post("/console/dlq/"+seq+"/replay", url.Values{"why": {"fixed"}, "by": {"ben"}, "csrf": {tok}}, withCookie)
	if code != 303 {
		t.Fatalf("session replay: %d", code)
	}
	if _, body, _ := f.get(h.Get("Location"), withCookie); !strings.Contains(body, "replayed") || !strings.Contains(body, "<td>ben (console token)</td>") {
		t.Errorf("session replay not recorded as ben (console token):\n%s", body)
	}
	// The bearer token likewise, on a diff decision; a console user is not asked.
	_, btok := f.form("/console/diffs", bearer(consoleToken))
	if code, _, h := f.post("/console/diffs/acme/fd_0123", url.Values{"decision": {"reject"}, "why": {"known gap"}, "csrf": {btok}}, bearer(consoleToken)); code != 303 ||
		!strings.Contains(h.Get("Location"), "who+decides+is+required") {
		t.Errorf("a decision by the token without a name: %d %s", code, h.Get("Location"))
	}
	f.post("/console/diffs/acme/fd_0123", url.Values{"decision": {"reject"}, "why": {"known gap"}, "by": {"cy"}, "csrf": {btok}}, bearer(consoleToken))
	if _, body, _ := f.get("/console/diffs?status=", bearer(consoleToken)); !strings.Contains(body, "rejected by cy (console token): known gap") {
		t.Errorf("decision by the token:\n%s", body)
	}
	if page, _ := f.form("/console/dlq/"+seq, basic("ana", anaPassword)); strings.Contains(page, `name="by"`) {
		t.Error("a console user is asked who they are")
	}
}

// The overview shows what it reads, each figure where it belongs: the rates row of
// each tenant, provider and type; the gateway counters summed over their labels; the
// breakers with their states; a consumer's backlog and the age of its oldest
// unacknowledged event. The console's clock runs 10 minutes ahead, so the events
// stored now are 10 minutes old: in the 15-minute window, not in the last 5.
func TestOverview(t *testing.T) {
	f := setup(t, func(o *Options) { o.Now = func() time.Time { return time.Now().Add(10 * time.Minute) } })
	ctx := context.Background()
	for i := range 2 {
		at := time.Now().UTC()
		f.store(ctx, envelope.Envelope{SpecVersion: "1.0", ID: envelope.ID("globex", "smartlead", fmt.Sprint("open-", i)), Source: "smartlead",
			Type: "email.opened", Time: at, DataContentType: "application/json", Tenant: "globex", Provider: "smartlead", Endpoint: "smartlead",
			ProviderEventID: fmt.Sprint("open-", i), ReceivedAt: at, PayloadSHA256: strings.Repeat("cd", 32), AuthMethod: "none",
			Data: envelope.Data{ProviderType: "EMAIL_OPEN", Contact: &envelope.Contact{Email: "dee@globex.example"}}})
	}
	// The crmwriter is bound and holds one event unacknowledged; the others are not bound.
	var crm stream.Subscription
	for _, s := range stream.Subscriptions {
		if s.Durable == stream.CRMWriter {
			crm = s
		}
	}
	cons, err := f.js.CreateOrUpdateConsumer(ctx, stream.Events, jetstream.ConsumerConfig{Durable: crm.Durable, FilterSubjects: crm.Subjects,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1)
	if err != nil {
		t.Fatal(err)
	}
	for range batch.Messages() {
	}

	_, body, _ := f.get("/console/", basic("ana", anaPassword))
	for _, want := range []string{
		`<tr><td>acme</td><td>instantly</td><td>reply.received</td><td class="n">0</td><td class="n">0</td><td class="n">3</td>`,
		`<tr><td>globex</td><td>smartlead</td><td>email.opened</td><td class="n">0</td><td class="n">0</td><td class="n">2</td>`,
		`id="exacto_gateway_duplicates">7317<`,
		`id="exacto_gateway_invalid_signatures">5923<`,
		`id="exacto_gateway_events_received">48611<`,
		`id="exacto_gateway_rejections">0<`, // the gateway runs here and refused nothing
		`<tr><td>hubspot</td><td><span class="warn">open</span></td></tr>`,
		`<tr><td>instantly</td><td><span class="ok">closed</span></td></tr>`,
		`<tr data-durable="crmwriter"><td>crmwriter</td><td><code>crmwriter</code></td><td>EXACTO_EVENTS</td><td class="n">2</td><td class="n">1</td><td class="n">0</td><td>10m</td><td><span class="ok">running</span></td><td class="chart"><svg class="chart"`,
		`<tr data-durable="stopper"><td>stopper</td><td><code>stopper</code></td><td>EXACTO_EVENTS</td><td class="n">0</td><td class="n">0</td><td class="n">0</td><td>—</td><td><span class="muted">not bound yet</span></td><td class="chart"></td>`,
		`aria-label="instantly reply.received per minute, last 15 minutes"`,
		`aria-label="oldest open dead letter against the SLO, last hour"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("overview: %s missing", want)
		}
	}
	if t.Failed() {
		t.Logf("overview:\n%s", body)
	}
}

// The overview's hour: a sample each render at most every 30 s, the charts drawn from
// them — the open dead letters as a line through each sample, their age against the
// SLO's dashed line — and samples older than the hour dropped.
func TestOverviewChartsTheHour(t *testing.T) {
	now := time.Now()
	f := setup(t, func(o *Options) { o.Now = func() time.Time { return now } })
	auth := basic("ana", anaPassword)
	points := func(body string) int { // of the open dead letters' chart
		i := strings.Index(body, `aria-label="open dead letters, last hour"`)
		if i < 0 {
			t.Fatal("no chart of the open dead letters")
		}
		chart := body[i:]
		chart = chart[:strings.Index(chart, "</svg>")]
		m := regexp.MustCompile(`<polyline points="([^"]*)"`).FindStringSubmatch(chart)
		if m == nil {
			return 0
		}
		return len(strings.Fields(m[1]))
	}
	start := now
	// One sample is drawn as a short line (two points); a render within 30 s of the last
	// sample adds none.
	for _, r := range []struct {
		after time.Duration
		want  int
	}{{0, 2}, {20 * time.Second, 2}, {40 * time.Second, 2}, {80 * time.Second, 3}} {
		now = start.Add(r.after)
		_, body, _ := f.get("/console/", auth)
		if got := points(body); got != r.want {
			t.Fatalf("render at +%v: %d points, want %d", r.after, got, r.want)
		}
		if !strings.Contains(body, `stroke-dasharray="4 3"><title>limit `) {
			t.Fatalf("no SLO line on the dead letters' chart")
		}
	}
	now = now.Add(2 * time.Hour)
	if _, body, _ := f.get("/console/", auth); points(body) != 2 {
		t.Fatalf("samples of more than an hour ago still drawn")
	}
}

// Where this process has no gateway (the console of a split deployment runs in the
// reconciler) the gateway's counters are not in this process: the overview says so and
// shows no 0 for them.
func TestOverviewWithoutGateway(t *testing.T) {
	for name, metrics := range map[string]http.Handler{
		"reconciler's /metrics": serveMetrics("exacto_dlq_open{consumer=\"crmwriter\"} 2\nexacto_reconcile_findings_total{kind=\"missed_reply\"} 4\n"),
		"no /metrics":           nil,
	} {
		f := setup(t, func(o *Options) { o.Metrics = metrics })
		_, body, _ := f.get("/console/", basic("ana", anaPassword))
		for _, c := range gatewayCounters {
			if !strings.Contains(body, `id="`+c.name+`">not in this process<`) {
				t.Errorf("%s: %s is not shown as not in this process", name, c.name)
			}
		}
		if metrics != nil && !strings.Contains(body, "the gateway runs in another process") {
			t.Errorf("%s: no explanation", name)
		}
	}
}

// The DLQ page's query string filters exactly as pkg/dlq does, on a sample queue
// across two consumers, tenants, providers, classes, three types and different ages;
// a filter value that is not valid lists nothing rather than more.
func TestDLQFilters(t *testing.T) {
	cfg, err := config.Parse([]byte(testConfig), "test", testEnv)
	if err != nil {
		t.Fatal(err)
	}
	conn := brokertest.Start(t, "")
	ids := dlqtest.Publish(t, conn.JS, time.Now())
	h, err := New(Options{JS: conn.JS, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, js: conn.JS, srv: httptest.NewServer(h)}
	t.Cleanup(f.srv.Close)
	auth := bearer(consoleToken)
	letterRE := regexp.MustCompile(`<a href="/console/dlq/(\d+)">`)
	list := func(q url.Values) ([]string, string) {
		t.Helper()
		code, body, _ := f.get("/console/dlq?"+q.Encode(), auth)
		if code != 200 {
			t.Fatalf("%s: %d", q.Encode(), code)
		}
		var seqs []uint64
		for _, m := range letterRE.FindAllStringSubmatch(body, -1) {
			s, _ := strconv.ParseUint(m[1], 10, 64)
			seqs = append(seqs, s)
		}
		return dlqtest.Names(ids, seqs), body
	}
	for _, c := range dlqtest.Cases {
		q := url.Values{}
		for k, v := range map[string]string{"consumer": c.Consumer, "tenant": c.Tenant, "provider": c.Provider, "type": c.Type, "class": c.Class} {
			if v != "" {
				q.Set(k, v)
			}
		}
		if c.OlderThan > 0 {
			q.Set("older", c.OlderThan.String())
		}
		if c.NewerThan > 0 {
			q.Set("newer", c.NewerThan.String())
		}
		if got, _ := list(q); !slices.Equal(got, c.Want) && len(got)+len(c.Want) > 0 {
			t.Errorf("?%s lists %v, want %v", q.Encode(), got, c.Want)
		}
	}
	for _, q := range []url.Values{{"tenant": {"globex.*"}}, {"provider": {">"}}, {"type": {"reply.*"}}, {"older": {"an hour"}}, {"newer": {"-1h"}}} {
		if got, body := list(q); len(got) != 0 || !strings.Contains(body, "nothing listed: filter values that are not valid") {
			t.Errorf("?%s lists %v", q.Encode(), got)
		}
	}
}

// Approving a finding's proposed repair through the console publishes it when it is
// fresh; a stale one is refused with its reason and stays open; a decision needs a
// why; a decided finding cannot be decided again.
func TestApproveProposedRepair(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	auth := basic("ana", anaPassword)
	kv, err := f.js.KeyValue(ctx, stream.Diffs)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	propose := func(id, peid string, at time.Time) envelope.Envelope {
		env := envelope.Envelope{SpecVersion: "1.0", ID: envelope.ID("acme", "instantly", peid), Source: "instantly", Type: envelope.TypeReplyReceived,
			Time: at, DataContentType: "application/json", Tenant: "acme", Provider: "instantly", Endpoint: "instantly", ProviderEventID: peid,
			ReceivedAt: now, PayloadSHA256: strings.Repeat("ef", 32), AuthMethod: "reconciliation",
			Data: envelope.Data{ProviderType: "reply_received", Contact: &envelope.Contact{Email: peid + "@northwind.example"}}}
		fd := reconcile.Finding{ID: id, Kind: reconcile.MissedReply, Tenant: "acme", Provider: "instantly", Contact: peid + "@northwind.example",
			Where: "instantly lead in campaign camp-1", Found: "a reply we never received", Repair: "publish the reply after review",
			Status: reconcile.StatusOpen, FirstSeen: now, LastSeen: now, Passes: 1, Proposed: &env}
		data, _ := json.Marshal(fd)
		if _, err := kv.Put(ctx, "acme."+id, data); err != nil {
			t.Fatal(err)
		}
		return env
	}
	fresh := propose("fd_fresh", "missed-fresh", now.Add(-time.Hour))
	stale := propose("fd_stale", "missed-stale", now.Add(-100*time.Hour))
	finding := func(id string) reconcile.Finding {
		t.Helper()
		e, err := kv.Get(ctx, "acme."+id)
		if err != nil {
			t.Fatal(err)
		}
		var fd reconcile.Finding
		if err := json.Unmarshal(e.Value(), &fd); err != nil {
			t.Fatal(err)
		}
		return fd
	}
	published := func(id string) bool {
		t.Helper()
		st, _ := f.js.Stream(ctx, stream.Events)
		m, err := st.GetLastMsgForSubject(ctx, "events.acme.instantly.reply.received")
		return err == nil && m.Header.Get(jetstream.MsgIDHeader) == id
	}
	page, tok := f.form("/console/diffs", auth)
	if !regexp.MustCompile(`<section class="finding" data-finding="fd_fresh">\s*<h3><span class="status warn">open</span> missed_reply`).MatchString(page) || !strings.Contains(page, "fd_stale") {
		t.Fatalf("diffs page:\n%s", page)
	}
	decide := func(id, decision, why string) string {
		t.Helper()
		code, _, h := f.post("/console/diffs/acme/"+id, url.Values{"decision": {decision}, "why": {why}, "csrf": {tok}}, auth)
		if code != http.StatusSeeOther {
			t.Fatalf("%s %s: %d", decision, id, code)
		}
		_, body, _ := f.get(h.Get("Location"), auth)
		return body
	}
	events := func() uint64 {
		st, _ := f.js.Stream(ctx, stream.Events)
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	before := events()

	// Without a why: refused, nothing done.
	if body := decide("fd_fresh", "approve", " "); !strings.Contains(body, "decision refused: a why is required") ||
		finding("fd_fresh").Status != reconcile.StatusOpen || events() != before {
		t.Fatalf("approve without a why:\n%s", body)
	}
	// Stale: refused with its reason, still open, nothing published.
	body := decide("fd_stale", "approve", "looks right")
	if !regexp.MustCompile(`decision refused: the proposed event is too old to publish: reply.received of \S+ is 100h0m\d+s old, over its limit of 72h0m0s`).MatchString(body) {
		t.Errorf("stale approval:\n%s", body)
	}
	if fd := finding("fd_stale"); fd.Status != reconcile.StatusOpen || fd.Applied || fd.Event != "" || fd.Decision != nil || events() != before || published(stale.ID) {
		t.Errorf("a refused approval changed something: %+v", fd)
	}
	// Fresh: published, approved by ana with the why.
	if body := decide("fd_fresh", "approve", "the reply is real"); !strings.Contains(body, "finding fd_fresh approved; repair event "+fresh.ID) {
		t.Errorf("fresh approval:\n%s", body)
	}
	fd := finding("fd_fresh")
	if fd.Status != reconcile.StatusApproved || !fd.Applied || fd.Event != fresh.ID || fd.Decision == nil || fd.Decision.By != "ana" || fd.Decision.Why != "the reply is real" {
		t.Errorf("approved finding: %+v", fd)
	}
	if events() != before+1 || !published(fresh.ID) {
		t.Errorf("the approved repair is not on the stream (%d events, %d before)", events(), before)
	}
	// Decided once: a second decision is refused.
	if body := decide("fd_fresh", "reject", "changed my mind"); !strings.Contains(body, "decision refused: finding fd_fresh is approved, not open") ||
		finding("fd_fresh").Status != reconcile.StatusApproved {
		t.Errorf("second decision:\n%s", body)
	}
	if code, _, _ := f.post("/console/diffs/acme/fd_stale", url.Values{"decision": {"maybe"}, "why": {"x"}, "csrf": {tok}}, auth); code != http.StatusBadRequest {
		t.Errorf("decision maybe: %d", code)
	}
}

// decider takes who and why through dlq.NeedWhoWhy; the shared token's name is bounded
// in characters, not bytes: 64 two-byte letters pass, 65 do not.
func TestDecider(t *testing.T) {
	form := func(by, why string) *http.Request {
		return &http.Request{PostForm: url.Values{"by": {by}, "why": {why}}}
	}
	token, ana := who{name: "console", shared: true}, who{name: "ana"}
	for _, c := range []struct {
		u       who
		by, why string
		want    string
		err     error
	}{
		{ana, "", "fixed", "ana", nil},
		{ana, "", " ", "", dlq.ErrNoWhy},
		{token, "ben", "fixed", "ben (console token)", nil},
		{token, " ", "fixed", "", dlq.ErrNoWho},
		{token, "ben", "", "", dlq.ErrNoWhy},
		{token, strings.Repeat("é", 40), "fixed", strings.Repeat("é", 40) + " (console token)", nil},
		{token, strings.Repeat("é", 64), "fixed", strings.Repeat("é", 64) + " (console token)", nil},
	} {
		got, err := decider(form(c.by, c.why), c.u)
		if got != c.want || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("decider(by %q, why %q, shared %v) = %q, %v; want %q, %v", c.by, c.why, c.u.shared, got, err, c.want, c.err)
		}
	}
	for _, by := range []string{strings.Repeat("é", 65), strings.Repeat("b", 65), "ben\tadmin"} {
		if got, err := decider(form(by, "fixed"), token); err == nil || !strings.Contains(err.Error(), "at most 64 characters") {
			t.Errorf("decider(by %q) = %q, %v; want refused", by, got, err)
		}
	}
}

// A quarantined delivery is replayed from its page: a same-origin POST with the CSRF
// token and a why, recorded with who; the one its parser still refuses is refused
// with its reason; a refused replay stores nothing and changes nothing; replaying
// again stores nothing new.
func TestQuarantineReplay(t *testing.T) {
	f := setup(t)
	auth := basic("ana", anaPassword)
	events := func() uint64 { return brokertest.Count(t, f.conn, stream.Events) }
	before := events()
	page, tok := f.form("/console/quarantine/"+f.keptBig, auth)
	if !strings.Contains(page, `id="replay-why" size="40" placeholder="what was fixed" required`) || strings.Contains(page, `name="by"`) {
		t.Errorf("the replay form does not ask a console user just for a why:\n%s", page)
	}
	replay := func(id string, form url.Values, auth func(*http.Request)) (int, string) {
		t.Helper()
		code, _, h := f.post("/console/quarantine/"+id+"/replay", form, auth)
		if code != http.StatusSeeOther {
			return code, ""
		}
		_, body, _ := f.get(h.Get("Location"), auth)
		return code, body
	}
	if code, _ := replay(f.keptBig, url.Values{"why": {"limit raised"}}, auth); code != http.StatusForbidden {
		t.Fatalf("replay without CSRF: %d", code)
	}
	for _, why := range []string{"", "  "} {
		if _, body := replay(f.keptBig, url.Values{"why": {why}, "csrf": {tok}}, auth); !strings.Contains(body, "replay refused: a why is required") ||
			!strings.Contains(body, `id="quarantine-status">open`) {
			t.Errorf("replay with why %q:\n%s", why, body)
		}
	}
	if _, body := replay(f.keptBad, url.Values{"why": {"try"}, "csrf": {tok}}, auth); !strings.Contains(body, "replay refused: still refused: malformed_body") ||
		!strings.Contains(body, `id="quarantine-status">open`) {
		t.Errorf("replay of what its parser still refuses:\n%s", body)
	}
	if events() != before {
		t.Fatalf("refused replays stored %d events", events()-before)
	}
	_, body := replay(f.keptBig, url.Values{"why": {"body_limit raised"}, "csrf": {tok}}, auth)
	for _, w := range []string{"replayed: 1 events stored, 0 already stored", `id="quarantine-status">replayed`, "<td>ana</td>", "body_limit raised", "/console/events/ev_",
		"A replay now would store 0 of 1 events", "already stored"} {
		if !strings.Contains(body, w) {
			t.Errorf("after the replay: %q missing", w)
		}
	}
	if events() != before+1 {
		t.Fatalf("the replay stored %d events, want 1", events()-before)
	}
	// The shared token names nobody: its form asks who, and records the name given.
	_, _, h := f.get("/console/?token="+url.QueryEscape(consoleToken), nil)
	cookie := strings.SplitN(h.Get("Set-Cookie"), ";", 2)[0]
	withCookie := func(r *http.Request) { r.Header.Set("Cookie", cookie) }
	page, ctok := f.form("/console/quarantine/"+f.keptBig, withCookie)
	if !strings.Contains(page, `<input name="by" id="replay-by" size="16" required>`) {
		t.Errorf("the shared token's replay form does not ask who")
	}
	if _, body := replay(f.keptBig, url.Values{"why": {"again"}, "csrf": {ctok}}, withCookie); !strings.Contains(body, "replay refused: who decides is required") {
		t.Errorf("a replay by the token without a name:\n%s", body)
	}
	if _, body := replay(f.keptBig, url.Values{"why": {"again"}, "by": {"ben"}, "csrf": {ctok}}, withCookie); !strings.Contains(body, "replayed: 0 events stored, 1 already stored") ||
		!strings.Contains(body, "<td>ben (console token)</td>") || events() != before+1 {
		t.Errorf("second replay:\n%s", body)
	}
	if _, body, _ := f.get("/console/quarantine", auth); strings.Contains(body, f.keptBig) || !strings.Contains(body, f.keptBad) {
		t.Errorf("the open list after the replay:\n%s", body)
	}
}

// A browser without credentials gets a login page (still 401), not a bare 401 or a
// basic-auth dialog; API clients keep the plain 401. The form signs in with the token
// or a user's password, goes on to the page asked for (never off the console), and
// failed sign-ins are limited.
func TestLoginPage(t *testing.T) {
	f := setup(t)
	page := func(r *http.Request) { r.Header.Set("Accept", "text/html,application/xhtml+xml") }
	code, body, h := f.get("/console/events?q=x", page)
	if code != 401 || !strings.Contains(body, `<form class="login" id="login" method="post" action="/console/login">`) ||
		!strings.Contains(body, `name="next" value="/console/events?q=x"`) || h.Get("WWW-Authenticate") != "" || strings.Contains(body, "<nav>") {
		t.Fatalf("browser without credentials: %d %q\n%s", code, h.Get("WWW-Authenticate"), body)
	}
	if code, body, h := f.get("/console/", nil); code != 401 || strings.Contains(body, "<form") || h.Get("WWW-Authenticate") == "" {
		t.Fatalf("API client: %d %q %s", code, h.Get("WWW-Authenticate"), body)
	}
	session := func(h http.Header) func(*http.Request) {
		ck := strings.SplitN(h.Get("Set-Cookie"), ";", 2)[0]
		return func(r *http.Request) { r.Header.Set("Cookie", ck) }
	}
	// The token, going on to the page asked for.
	code, _, h = f.post("/console/login", url.Values{"token": {consoleToken}, "next": {"/console/events?q=x"}}, nil)
	if code != http.StatusSeeOther || h.Get("Location") != "/console/events?q=x" || !strings.Contains(h.Get("Set-Cookie"), "HttpOnly") {
		t.Fatalf("token sign-in: %d %q %q", code, h.Get("Location"), h.Get("Set-Cookie"))
	}
	if code, body, _ := f.get("/console/", session(h)); code != 200 || !strings.Contains(body, "signed in as console") {
		t.Fatalf("after the token sign-in: %d", code)
	}
	// A user: named in the session; a next off the console goes to the overview.
	code, _, h = f.post("/console/login", url.Values{"user": {"ana"}, "password": {anaPassword}, "next": {"//evil.example/x"}}, nil)
	if code != http.StatusSeeOther || h.Get("Location") != "/console/" {
		t.Fatalf("user sign-in: %d %q", code, h.Get("Location"))
	}
	if code, body, _ := f.get("/console/", session(h)); code != 200 || !strings.Contains(body, "signed in as ana") {
		t.Fatalf("after the user sign-in: %d", code)
	}
	// Refusals: a wrong token or password, a cross-origin form, then too many failures.
	for name, form := range map[string]url.Values{
		"wrong token":    {"token": {"nope"}},
		"wrong password": {"user": {"ana"}, "password": {"nope"}},
		"unknown user":   {"user": {"bob"}, "password": {anaPassword}},
		"nothing":        {},
	} {
		if code, body, h := f.post("/console/login", form, nil); code != 401 || h.Get("Set-Cookie") != "" || !strings.Contains(body, "not signed in: wrong token, user or password") {
			t.Errorf("%s: %d %q", name, code, h.Get("Set-Cookie"))
		}
	}
	for name, h := range map[string][2]string{
		"another origin":       {"Origin", "http://evil.example"},
		"null origin":          {"Origin", "null"},
		"cross-site fetch":     {"Sec-Fetch-Site", "cross-site"},
		"a sibling host fetch": {"Sec-Fetch-Site", "same-site"},
	} {
		if code, _, hd := f.post("/console/login", url.Values{"token": {consoleToken}}, func(r *http.Request) { r.Header.Set(h[0], h[1]) }); code != 403 || hd.Get("Set-Cookie") != "" {
			t.Errorf("sign-in from %s: %d", name, code)
		}
	}
	// The console's own form: its origin, same-origin fetch.
	if code, _, hd := f.post("/console/login", url.Values{"token": {consoleToken}}, func(r *http.Request) {
		r.Header.Set("Origin", "http://"+r.Host)
		r.Header.Set("Sec-Fetch-Site", "same-origin")
	}); code != http.StatusSeeOther || hd.Get("Set-Cookie") == "" {
		t.Errorf("sign-in from the console's own page: %d", code)
	}
	// Behind a proxy that rewrites Host to its upstream's: the browser's own word
	// (Sec-Fetch-Site), or the proxy's X-Forwarded-Host, says the origin is the console's.
	for name, h := range map[string]map[string]string{
		"Sec-Fetch-Site same-origin": {"Sec-Fetch-Site": "same-origin"},
		"X-Forwarded-Host":           {"X-Forwarded-Host": "console.example.com"},
		"neither":                    {},
	} {
		code, _, hd := f.post("/console/login", url.Values{"token": {consoleToken}}, func(r *http.Request) {
			r.Header.Set("Origin", "https://console.example.com")
			for k, v := range h {
				r.Header.Set(k, v)
			}
		})
		if ok := code == http.StatusSeeOther && hd.Get("Set-Cookie") != ""; ok != (name != "neither") {
			t.Errorf("sign-in through a proxy, %s: %d", name, code)
		}
	}
	// A ?token= link on another site's page (a link, an image) neither signs in nor
	// spends this address's failed sign-ins; opened directly, it signs in.
	crossSite := func(r *http.Request) {
		page(r)
		r.Header.Set("Sec-Fetch-Site", "cross-site")
	}
	if code, _, hd := f.get("/console/?token="+consoleToken, crossSite); code != 401 || hd.Get("Set-Cookie") != "" {
		t.Errorf("the right token in another site's link: %d %q", code, hd.Get("Set-Cookie"))
	}
	for range loginFailures + 5 {
		f.get("/console/?token=guess", crossSite)
	}
	if code, _, hd := f.get("/console/?token="+consoleToken, func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "none") }); code != http.StatusSeeOther || hd.Get("Set-Cookie") == "" {
		t.Errorf("the token link opened directly after another site's guesses: %d", code)
	}
	// Guesses by bearer token count as failed sign-ins too.
	for range loginFailures / 2 {
		f.get("/console/", bearer("guess"))
	}
	for range loginFailures - loginFailures/2 {
		f.post("/console/login", url.Values{"token": {"guess"}}, nil)
	}
	if code, _, _ := f.get("/console/", bearer(consoleToken)); code != http.StatusTooManyRequests {
		t.Errorf("a bearer from the guessing client after %d failures: %d", loginFailures, code)
	}
	code, body, h = f.post("/console/login", url.Values{"token": {consoleToken}}, nil)
	if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" || h.Get("Set-Cookie") != "" || !strings.Contains(body, "too many failed sign-ins") {
		t.Fatalf("after %d failures, the right token: %d %q", loginFailures, code, h.Get("Set-Cookie"))
	}
}

// minute is the console's datetime-local value of now plus d minutes (UTC).
func minute(d int) string {
	return url.QueryEscape(time.Now().UTC().Add(time.Duration(d) * time.Minute).Format("2006-01-02T15:04"))
}

// seqAt finds the first event stored at or after a time anywhere in the stream, so
// that a span of time is not looked for in the latest events only.
func TestSeqAt(t *testing.T) {
	conn := brokertest.Start(t, "")
	ctx := context.Background()
	st, err := conn.JS.Stream(ctx, stream.Events)
	if err != nil {
		t.Fatal(err)
	}
	publish := func(id string) {
		if _, err := conn.JS.Publish(ctx, "events.acme.instantly.reply.received", []byte(id)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	before := time.Now()
	publish("1")
	between := time.Now()
	publish("2")
	publish("3")
	for _, tc := range []struct {
		at   time.Time
		want uint64
	}{{before.Add(-time.Hour), 1}, {before, 1}, {between, 2}, {time.Now().Add(time.Hour), 4}} {
		if got, err := seqAt(ctx, st, tc.at); err != nil || got != tc.want {
			t.Errorf("seqAt(%v): %d %v, want %d", tc.at, got, err, tc.want)
		}
	}
}

// The events list: filtered by tenant, provider, type and status in the consumers, with
// each event's time, stored time and status per consumer, paged by stream sequence;
// a filter it cannot read is refused, saying why.
func TestEventsListFiltersAndPages(t *testing.T) {
	f := setup(t, func(o *Options) { o.SearchDepth = 2 }) // a page looks at two sequences
	auth := bearer(consoleToken)
	code, body, _ := f.get("/console/events", auth)
	if code != 200 || !strings.Contains(body, f.evil) || !strings.Contains(body, f.old) || strings.Contains(body, f.fresh) {
		t.Fatalf("the first page (the two latest): %d\n%s", code, body)
	}
	older := regexp.MustCompile(`<a id="older" href="([^"]+)">`).FindStringSubmatch(body)
	if older == nil || !strings.Contains(body, "crmwriter</span> <span class=\"status warn\">dead_letter") {
		t.Fatalf("no older link, or no status per consumer:\n%s", body)
	}
	code, body, _ = f.get(html.UnescapeString(older[1]), auth)
	if code != 200 || !strings.Contains(body, f.fresh) || strings.Contains(body, f.evil) || strings.Contains(body, `id="older"`) || !strings.Contains(body, `id="newer"`) {
		t.Fatalf("the older page: %d\n%s", code, body)
	}
	f2 := setup(t)
	for query, want := range map[string][]string{
		"provider=instantly&type=reply.received":    {f2.fresh, f2.old, f2.evil},
		"provider=stripe":                           {},
		"tenant=acme&status=failed":                 {f2.fresh, f2.old},
		"status=waiting":                            {f2.fresh, f2.old, f2.evil}, // the classifier has attempted none
		"status=done":                               {},
		"from=2000-01-01T00:00&to=2000-01-02T00:00": {},
		"from=" + minute(-5) + "&to=" + minute(5):   {f2.fresh, f2.old, f2.evil},
		"from=" + minute(2):                         {},
		"to=" + minute(-2):                          {},
		// A search keeps the filters.
		"q=camp-1":                         {f2.fresh, f2.old},
		"q=camp-1&provider=stripe":         {},
		"q=eve%40evil.example&tenant=acme": {f2.evil},
		"q=camp-2&status=failed":           {},
	} {
		code, body, _ := f2.get("/console/events?"+query, auth)
		if code != 200 {
			t.Errorf("%s: %d", query, code)
			continue
		}
		for _, id := range []string{f2.fresh, f2.old, f2.evil} {
			if strings.Contains(body, id) != slices.Contains(want, id) {
				t.Errorf("%s: listed %s: %v, want %v", query, id, strings.Contains(body, id), slices.Contains(want, id))
			}
		}
	}
	for _, bad := range []string{"type=reply.*", "status=lost", "from=yesterday", "before=x", "tenant=a%20b"} {
		if code, body, _ := f2.get("/console/events?"+bad, auth); code != 400 || !strings.Contains(body, `id="error"`) {
			t.Errorf("%s: %d", bad, code)
		}
	}
}

// A finding reads at a glance: its contact's e-mail in its heading, its where, found
// and repair in full width, every envelope id in them a link to the event.
func TestDiffsShowContactsAndLinkEvents(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	kv, err := f.js.KeyValue(ctx, stream.Diffs)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	fd := reconcile.Finding{ID: "fd_links", Kind: reconcile.DuplicateContact, Tenant: "acme", Provider: "exacto", Contact: "dup@northwind.example",
		Where: "projection contacts ct_0a, ct_0b", Found: "two contact records for one e-mail; the last reply " + f.fresh + " <b>named</b> both",
		Repair: "merge them", Status: reconcile.StatusOpen, FirstSeen: now, LastSeen: now, Passes: 2}
	data, _ := json.Marshal(fd)
	if _, err := kv.Put(ctx, "acme.fd_links", data); err != nil {
		t.Fatal(err)
	}
	code, page, _ := f.get("/console/diffs", bearer(consoleToken))
	i := strings.Index(page, `data-finding="fd_links"`)
	if code != 200 || i < 0 {
		t.Fatalf("diffs: %d\n%s", code, page)
	}
	section := page[i:]
	section = section[:strings.Index(section, "</section>")]
	for _, want := range []string{
		`<a href="/console/events?q=dup%40northwind.example">dup@northwind.example</a>`,
		`<a href="/console/events/` + f.fresh + `"><code>` + f.fresh + `</code></a>`,
		"&lt;b&gt;named&lt;/b&gt;", // the text escaped around the links
		"found 2× since",
	} {
		if !strings.Contains(section, want) {
			t.Errorf("the finding lacks %s:\n%s", want, section)
		}
	}
}

// Behind a proxy of trusted_proxies (this machine's, by default) failed sign-ins are
// counted by the client address it forwards: one client's guesses lock that client out,
// not every client of the proxy, and what a client writes before its proxy's entry
// does not move it to another count.
func TestSignInLimitIsPerForwardedClient(t *testing.T) {
	f := setup(t)
	from := func(xff string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("X-Forwarded-For", xff) }
	}
	for i := range loginFailures {
		f.post("/console/login", url.Values{"token": {"guess"}}, from(fmt.Sprintf("10.0.0.%d, 198.51.100.7", i)))
	}
	if code, _, _ := f.post("/console/login", url.Values{"token": {consoleToken}}, from("198.51.100.7")); code != http.StatusTooManyRequests {
		t.Errorf("the guessing client: %d, want 429", code)
	}
	if code, _, h := f.post("/console/login", url.Values{"token": {consoleToken}}, from("198.51.100.8")); code != http.StatusSeeOther || h.Get("Set-Cookie") == "" {
		t.Errorf("another client of the same proxy: %d", code)
	}
	// A proxy that passes the header on as written lets a guesser name a new client
	// each time: the proxy's own count stops it.
	for i := range proxyFailures - loginFailures {
		f.post("/console/login", url.Values{"token": {"guess"}}, from(fmt.Sprintf("203.0.113.%d", i)))
	}
	if code, _, _ := f.post("/console/login", url.Values{"token": {consoleToken}}, from("198.51.100.9")); code != http.StatusTooManyRequests {
		t.Errorf("a new client name after %d failures through the proxy: %d, want 429", proxyFailures, code)
	}
}

// sameOrigin, case by case: what a browser sends from the console's own pages passes,
// what another site's page can make it send does not, and a proxy's word counts only
// from a trusted proxy.
func TestSameOrigin(t *testing.T) {
	proxies, _ := forwarded.Parse([]string{"10.0.0.0/8"})
	c := &console{cfg: &config.Config{AdminHosts: []string{"console.example.com"}}, proxies: proxies}
	for _, tc := range []struct {
		name, remote string
		header       map[string]string
		want         bool
	}{
		{"no browser headers (curl)", "192.0.2.1:1", nil, true},
		{"the Host asked for", "192.0.2.1:1", map[string]string{"Origin": "http://127.0.0.1:8081"}, true},
		{"the browser says same-origin", "192.0.2.1:1", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "https://anything.example"}, true},
		{"a name of admin_hosts", "192.0.2.1:1", map[string]string{"Origin": "https://console.example.com"}, true},
		{"that name on another port", "192.0.2.1:1", map[string]string{"Origin": "http://console.example.com:3000"}, false},
		{"a trusted proxy's X-Forwarded-Host", "10.0.0.5:1", map[string]string{"Origin": "https://ops.example.com", "X-Forwarded-Host": "ops.example.com"}, true},
		{"X-Forwarded-Host from anyone else", "192.0.2.1:1", map[string]string{"Origin": "https://ops.example.com", "X-Forwarded-Host": "ops.example.com"}, false},
		{"another origin", "192.0.2.1:1", map[string]string{"Origin": "https://evil.example"}, false},
		{"null", "192.0.2.1:1", map[string]string{"Origin": "null"}, false},
		{"cross-site", "192.0.2.1:1", map[string]string{"Sec-Fetch-Site": "cross-site"}, false},
		{"a sibling host", "192.0.2.1:1", map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:8081"}, false},
	} {
		r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8081/console/login", nil)
		r.RemoteAddr = tc.remote
		for k, v := range tc.header {
			r.Header.Set(k, v)
		}
		if got := c.sameOrigin(r); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	// An IPv6 client is counted by its /64: one host holds the whole of it.
	if a, b := clientKey("2001:db8:1:2::1"), clientKey("2001:db8:1:2:ffff::9"); a != b || a != "2001:db8:1:2::/64" {
		t.Errorf("IPv6 clients of one /64: %q, %q", a, b)
	}
	if k := clientKey("198.51.100.7"); k != "198.51.100.7" {
		t.Errorf("an IPv4 client: %q", k)
	}
}
