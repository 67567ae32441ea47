package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/config"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform/accounts"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/providers/calendly"
	"exacto.dev/pkg/providers/hubspot"
	"exacto.dev/pkg/providers/instantly"
	"exacto.dev/pkg/providers/meta"
	"exacto.dev/pkg/providers/providertest"
	"exacto.dev/pkg/providers/registry"
	"exacto.dev/pkg/providers/smartlead"
	"exacto.dev/pkg/providers/standard"
	"exacto.dev/pkg/providers/stripe"
	"exacto.dev/pkg/service"
	"exacto.dev/pkg/stream"
	classifier "exacto.dev/services/classifier/handler"
	crmwriter "exacto.dev/services/crmwriter/handler"
	"exacto.dev/services/gateway/server"
	projector "exacto.dev/services/projector/handler"
	stopper "exacto.dev/services/stopper/handler"
	suppressor "exacto.dev/services/suppressor/handler"
)

// catConfig has one endpoint per provider, for the catalogue of hostile inputs. %s is
// the gateway block (the second gateway raises max_events).
const catConfig = `
gateway:
%s
tenants:
  - id: acme
    endpoints:
      - {id: instantly, provider: instantly, path_token: cat-tok-instantly-0123456789, secrets: [cat-instantly-shared-secret]}
      - {id: smartlead, provider: smartlead, path_token: cat-tok-smartlead-0123456789, secrets: [cat-smartlead-secret-key]}
      - {id: hubspot, provider: hubspot, path_token: cat-tok-hubspot-0123456789, secrets: [cat-hubspot-client-secret]}
      - {id: meta, provider: meta, path_token: cat-tok-meta-0123456789, secrets: [cat-meta-app-secret], verify_token: cat-meta-verify-token}
      - {id: stripe, provider: stripe, path_token: cat-tok-stripe-0123456789, secrets: [whsec_cat_stripe_signing_secret]}
      - {id: standard, provider: standard, path_token: cat-tok-standard-0123456789, secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]}
      - {id: calendly, provider: calendly, path_token: cat-tok-calendly-0123456789, secrets: [cat-calendly-signing-key]}
      - id: generic
        provider: generic
        path_token: cat-tok-generic-0123456789
        secrets: [cat-generic-hmac-key]
        generic: {header: X-Signature, prefix: "sha256=", encoding: hex, algorithm: sha256, signed: "{timestamp}.{body}", timestamp_header: X-Timestamp, id_field: id, type_field: type, time_field: created_at, types: {reply.created: reply.received}}
`

// catReq is one hostile request: an HTTP request, or raw bytes written to a TCP
// connection (for what Go's client refuses to send: CR, LF or NUL in headers).
type catReq struct {
	method string
	path   string // with the query, if any
	header http.Header
	body   []byte
	raw    []byte // when set, sent as is on a fresh connection
	// halfClose closes the connection's write side after raw, so a short body ends.
	halfClose bool
}

// catCase is one entry of the catalogue and what the contract says of it.
type catCase struct {
	name   string
	req    catReq
	status int
	code   string // the error code of the JSON error body ("" for 200)
	stored int    // events that must be new in the stream afterwards
	dups   int    // duplicates the 200 answer must report
	typ    string // when set, the type every stored envelope must have
	raw    []byte // when set, the one stored envelope's data.raw, as JSON
	// quarantined is the reason a verified delivery that cannot be turned into events
	// is kept in the quarantine (answered 200, nothing stored).
	quarantined string
	// plain marks a request refused by net/http itself before the gateway sees it:
	// its 400 body is Go's text, not the gateway's JSON.
	plain bool
	// same404 asks for the exact body an unknown endpoint gets.
	same404 bool
}

// catEnv is the gateway under test and the material to build requests with.
type catEnv struct {
	t       *testing.T
	conn    *broker.Conn
	cfg     *config.Config
	base    string // http://127.0.0.1:port
	host    string // 127.0.0.1:port
	now     time.Time
	secrets []string // every secret, verify token and path token of the config
	k       int      // for fresh sample times
}

func (e *catEnv) endpoint(id string) *config.Endpoint {
	for i := range e.cfg.Tenants[0].Endpoints {
		if ep := &e.cfg.Tenants[0].Endpoints[i]; ep.ID == id {
			return ep
		}
	}
	e.t.Fatalf("no endpoint %s", id)
	return nil
}

func (e *catEnv) path(ep string) string { return "/hooks/" + ep + "/" + e.endpoint(ep).PathToken.Value }
func (e *catEnv) secret(ep string) string {
	return e.endpoint(ep).Secrets[0].Value
}

// fresh is a sample time no other case uses, so its event is new.
func (e *catEnv) fresh() time.Time {
	e.k++
	return e.now.Add(-time.Duration(e.k) * time.Second)
}

func (e *catEnv) sample(ep, event string, at time.Time) []byte {
	e.t.Helper()
	spec, _ := registry.Lookup(e.endpoint(ep).Provider)
	b, err := spec.Sample(event, at)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// signWith signs body for ep with the provider's own signing helper, as it would be
// posted to url (HubSpot v3 signs the URL).
func (e *catEnv) signWith(ep, url string, body []byte, secret string, at time.Time) (http.Header, []byte) {
	e.t.Helper()
	spec, _ := registry.Lookup(e.endpoint(ep).Provider)
	h, b, err := spec.Sign(http.MethodPost, url, body, secret, at)
	if err != nil {
		e.t.Fatal(err)
	}
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/json")
	}
	return h, b
}

// post is a POST of body to ep, signed with its first secret at the gateway's now.
func (e *catEnv) post(ep string, body []byte) catReq {
	return e.postAt(ep, body, e.secret(ep), e.now)
}

func (e *catEnv) postAt(ep string, body []byte, secret string, at time.Time) catReq {
	h, b := e.signWith(ep, e.base+e.path(ep), body, secret, at)
	return catReq{method: http.MethodPost, path: e.path(ep), header: h, body: b}
}

// with returns r with header k set to v.
func (r catReq) with(k, v string) catReq {
	r.header = r.header.Clone()
	r.header.Set(k, v)
	return r
}

func (r catReq) without(ks ...string) catReq {
	r.header = r.header.Clone()
	for _, k := range ks {
		r.header.Del(k)
	}
	return r
}

// rawPost is a raw HTTP/1.1 POST to ep; headerLines are written as given (they may
// hold CR, LF or NUL), and contentLength < 0 means len(body).
func (e *catEnv) rawPost(target string, headerLines []string, body []byte, contentLength int) []byte {
	if contentLength < 0 {
		contentLength = len(body)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n", target, e.host)
	for _, l := range headerLines {
		b.WriteString(l + "\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\nConnection: close\r\n\r\n", contentLength)
	b.Write(body)
	return b.Bytes()
}

// upperHex upper-cases the hex digits after prefix in a signature value.
func upperHex(v, prefix string) string {
	i := strings.Index(v, prefix)
	return v[:i] + prefix + strings.ToUpper(v[i+len(prefix):])
}

func (e *catEnv) send(r catReq) (int, string, http.Header) {
	e.t.Helper()
	if r.raw != nil {
		c, err := net.DialTimeout("tcp", e.host, 5*time.Second)
		if err != nil {
			e.t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write(r.raw); err != nil {
			e.t.Fatal(err)
		}
		if r.halfClose {
			c.(*net.TCPConn).CloseWrite()
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			e.t.Fatalf("raw request: no response: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	req, err := http.NewRequest(r.method, e.base+r.path, bytes.NewReader(r.body))
	if err != nil {
		e.t.Fatal(err)
	}
	if r.header != nil {
		req.Header = r.header.Clone()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func (e *catEnv) count() uint64 { return brokertest.Count(e.t, e.conn, stream.Events) }

// envelopes reads the stream's messages first..last, each validated against schemas/.
func (e *catEnv) envelopes(t *testing.T, first, last uint64) []map[string]json.RawMessage {
	t.Helper()
	ctx := context.Background()
	st, err := e.conn.JS.Stream(ctx, stream.Events)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]json.RawMessage
	for seq := first; seq <= last; seq++ {
		msg, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("seq %d: %v", seq, err)
		}
		if err := providertest.Validate(msg.Data); err != nil {
			t.Errorf("seq %d: stored envelope does not match schemas/: %v\n%.600s", seq, err, msg.Data)
		}
		for _, s := range e.secrets {
			if bytes.Contains(msg.Data, []byte(s)) {
				t.Errorf("seq %d: a stored envelope holds a secret or token", seq)
			}
		}
		var env map[string]json.RawMessage
		if err := json.Unmarshal(msg.Data, &env); err != nil {
			t.Fatalf("seq %d: %v", seq, err)
		}
		out = append(out, env)
	}
	return out
}

// sameJSON compares two JSON texts by value, numbers by their text (1e400 included).
func sameJSON(a, b []byte) bool {
	decode := func(x []byte) (any, bool) {
		d := json.NewDecoder(bytes.NewReader(x))
		d.UseNumber()
		var v any
		return v, d.Decode(&v) == nil
	}
	va, oka := decode(a)
	vb, okb := decode(b)
	return oka && okb && reflect.DeepEqual(va, vb)
}

func newCatEnv(t *testing.T) (*catEnv, *server.Server) {
	t.Helper()
	e := &catEnv{t: t, now: time.Now().UTC().Truncate(time.Second)}
	e.conn = brokertest.Start(t, "")
	cfg, err := config.Parse(fmt.Appendf(nil, catConfig, "  publish_timeout: 5s"), "catalogue.yaml", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	e.cfg = cfg
	ctx := context.Background()
	gw, err := server.New(ctx, server.Options{Config: cfg, JS: e.conn.JS, Now: func() time.Time { return e.now }})
	if err != nil {
		t.Fatal(err)
	}
	runIndexer(t, e.conn.JS)
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(srv.Close)
	e.base = srv.URL
	e.host = srv.Listener.Addr().String()
	for _, ep := range cfg.Tenants[0].Endpoints {
		e.secrets = append(e.secrets, ep.PathToken.Value, ep.VerifyToken.Value)
		for _, s := range ep.Secrets {
			e.secrets = append(e.secrets, s.Value)
		}
	}
	e.secrets = append(e.secrets, "cat-meta-verify-token")
	clean := e.secrets[:0]
	for _, s := range e.secrets {
		if s != "" {
			clean = append(clean, s)
		}
	}
	e.secrets = clean
	return e, gw
}

// runIndexer writes the index of stored ids from EXACTO_EVENTS until the test ends.
func runIndexer(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	idx, err := server.NewIndexer(context.Background(), js, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { idx.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// catHubSpotBatch is a signed-ready HubSpot batch of n compact notifications (under
// 1 MiB for n = 10,000), each its own event.
func catHubSpotBatch(n int, at time.Time) []byte {
	var b bytes.Buffer
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"eventId":%d,"occurredAt":%d,"subscriptionType":"contact.deletion","objectId":%d}`, 10000+i, at.UnixMilli(), 50000+i)
	}
	b.WriteByte(']')
	return b.Bytes()
}

// TestCatalogueOfHostileInputs sends each malformed or hostile delivery of the
// catalogue to one gateway on one embedded NATS: each gets its contract status (or is
// stored as unmapped, or, verified but not turned into events, quarantined), nothing
// crashes, no half-event is stored, every stored envelope is schema-valid, and no error
// body or quarantined delivery holds a secret, a token or a signature.
func TestCatalogueOfHostileInputs(t *testing.T) {
	e, _ := newCatEnv(t)
	now := e.now

	// What an unknown endpoint is answered, for the wrong-token cases to match.
	_, unknownBody, _ := e.send(catReq{method: http.MethodPost, path: "/hooks/no-such-endpoint/x", body: []byte(`{}`),
		header: http.Header{"Content-Type": {"application/json"}}})

	// Stripe. The valid delivery is first: the duplicate and replay cases use it.
	stripeValid := e.sample("stripe", "customer.updated", e.fresh())
	stripeBody := func(typ string) []byte { // a fresh event of a type Sample does not build
		return bytes.Replace(e.sample("stripe", "invoice.paid", e.fresh()), []byte(`"type":"invoice.paid"`), []byte(`"type":"`+typ+`"`), 1)
	}
	stripeUnknown := stripeBody("charge.refunded")
	stripeSig := e.post("stripe", stripeValid).header.Get(stripe.Header)
	stripeUpper := e.post("stripe", e.sample("stripe", "customer.created", e.fresh()))
	stripeUpper = stripeUpper.with(stripe.Header, upperHex(stripeUpper.header.Get(stripe.Header), "v1="))
	oldAt := now.Add(-10 * time.Minute)
	big := fmt.Appendf(nil, `{"id":"evt_big","object":"event","created":%d,"type":"charge.refunded","pad":"%s"}`, now.Unix(), strings.Repeat("x", 1<<20))

	// Standard Webhooks.
	stdUnknown := e.sample("standard", "invoice.paid", e.fresh())
	stdSpaces := e.post("standard", e.sample("standard", "contact.updated", e.fresh()))
	stdSpaces = stdSpaces.with(standard.HeaderSignature, "v1,"+base64.StdEncoding.EncodeToString(make([]byte, 32))+"  "+stdSpaces.header.Get(standard.HeaderSignature))
	ts := now.UTC().Format(time.RFC3339)

	// Meta.
	metaValid := e.sample("meta", "message", e.fresh())
	metaUpper := e.post("meta", e.sample("meta", "status", e.fresh()))
	metaUpper = metaUpper.with(meta.SignatureHeader, strings.ToUpper(metaUpper.header.Get(meta.SignatureHeader)))
	messenger := e.sample("meta", "messenger", e.fresh())
	metaBadEntry := append(bytes.TrimSuffix(messenger, []byte("]}")), []byte(`,{"id":"104976425133841","changes":"not a list"}]}`)...)
	deep := []byte(`{"object":"page","entry":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`)

	// HubSpot.
	hsDeal := e.sample("hubspot", "deal.creation", e.fresh())
	hsElem := hsDeal[1 : len(hsDeal)-1]
	hsTwice := []byte("[" + string(hsElem) + "," + string(hsElem) + "]")
	hsWrongURL := e.post("hubspot", e.sample("hubspot", "contact.propertyChange", e.fresh()))
	h, _ := e.signWith("hubspot", "https://evil.example/hooks/hubspot/x", hsWrongURL.body, e.secret("hubspot"), now)
	hsWrongURL.header = h
	hsV3Broken := e.post("hubspot", e.sample("hubspot", "batch", e.fresh())).with(hubspot.HeaderV3, base64.StdEncoding.EncodeToString(make([]byte, 32)))
	hsMissingID := []byte(`[` + string(hsElem) + `,{"subscriptionId":25,"portalId":62515,"occurredAt":` + strconv.FormatInt(now.UnixMilli(), 10) + `,"subscriptionType":"contact.creation","objectId":7}]`)
	hsUnknown := fmt.Appendf(nil, `[{"eventId":4242,"subscriptionId":40,"portalId":62515,"appId":1160452,"occurredAt":%d,"subscriptionType":"ticket.merge","attemptNumber":0,"objectId":77,"changeSource":"CRM_UI"}]`, e.fresh().UnixMilli())
	batch10k := catHubSpotBatch(10000, now)

	// Calendly.
	calUnknown := bytes.Replace(e.sample("calendly", "invitee.created", e.fresh()), []byte(`"event":"invitee.created"`), []byte(`"event":"routing_form_submission.created"`), 1)
	calUpper := e.post("calendly", e.sample("calendly", "invitee.canceled", e.fresh()))
	calUpper = calUpper.with(calendly.Header, upperHex(calUpper.header.Get(calendly.Header), "v1="))

	// Instantly.
	instUnknown := fmt.Appendf(nil, `{"timestamp":%q,"event_type":"lead_teleported","workspace":"0e3c5e7a","campaign_id":"5a4f1d2e","lead_email":"jordan.lee@acme.example"}`, e.fresh().Format("2006-01-02T15:04:05.000Z"))
	instHuge := bytes.Replace(e.sample("instantly", "email_opened", e.fresh()), []byte(`"variant":1`), []byte(`"variant":1e400`), 1)
	instValid := e.post("instantly", e.sample("instantly", "reply_received", e.fresh()))
	instSecret := e.secret("instantly")

	// Smartlead: Sign writes the secret_key into the body.
	slOpen := e.sample("smartlead", "EMAIL_OPEN", e.fresh())
	slUnknown := e.post("smartlead", bytes.Replace(slOpen, []byte(`"event_type":"EMAIL_OPEN"`), []byte(`"event_type":"CAMPAIGN_ARCHIVED"`), 1))
	slDup := e.post("smartlead", e.sample("smartlead", "EMAIL_SENT", e.fresh()))
	slDup.body = append([]byte(`{"secret_key":"`+e.secret("smartlead")+`",`), slDup.body[1:]...)

	// Generic.
	genUnknown := e.sample("generic", "account.updated", e.fresh())
	genNullID := fmt.Appendf(nil, `{"id":null,"type":"account.updated","created_at":%q,"data":{"account":{"id":"acc_9"}}}`, e.fresh().Format(time.RFC3339))
	genUpper := e.post("generic", e.sample("generic", "reply.created", e.fresh()))
	genUpper = genUpper.with("X-Signature", upperHex(genUpper.header.Get("X-Signature"), "sha256="))
	genUpper = genUpper.with("X-Signature", "SHA256="+strings.TrimPrefix(genUpper.header.Get("X-Signature"), "sha256="))

	// The raw requests, over a TCP connection.
	stripeTS := strconv.FormatInt(now.Unix(), 10)
	rawStripe := e.sample("stripe", "customer.created", e.fresh())
	rawSig := e.post("stripe", rawStripe).header.Get(stripe.Header)

	cases := []catCase{
		// Stripe-style.
		{name: "stripe/valid delivery", req: e.post("stripe", stripeValid), status: 200, stored: 1, typ: envelope.TypeContactUpdated},
		{name: "stripe/valid duplicate, re-signed a second later", req: e.postAt("stripe", stripeValid, e.secret("stripe"), now.Add(time.Second)), status: 200, dups: 1},
		{name: "stripe/truncated JSON", req: e.post("stripe", stripeUnknown[:len(stripeUnknown)/2]), status: 200, quarantined: "malformed_body"},
		{name: "stripe/JSON array where an object is expected", req: e.post("stripe", []byte("["+string(stripeUnknown)+"]")), status: 200, quarantined: "malformed_body"},
		{name: "stripe/created as a string (wrong type)", req: e.post("stripe", fmt.Appendf(nil, `{"id":"evt_wrongtype","object":"event","created":"%d","type":"charge.refunded"}`, now.Unix())), status: 200, quarantined: "malformed_body"},
		{name: "stripe/null event id", req: e.post("stripe", fmt.Appendf(nil, `{"id":null,"object":"event","created":%d,"type":"charge.refunded"}`, now.Unix())), status: 200, quarantined: "malformed_body"},
		{name: "stripe/huge number created 1e400", req: e.post("stripe", []byte(`{"id":"evt_huge","object":"event","created":1e400,"type":"charge.refunded"}`)), status: 200, quarantined: "malformed_body"},
		{name: "stripe/duplicate type key", req: e.post("stripe", fmt.Appendf(nil, `{"id":"evt_dupkey","object":"event","created":%d,"type":"customer.updated","type":"charge.refunded","data":{"object":{}}}`, now.Unix())), status: 200, quarantined: "malformed_body"},
		{name: "stripe/duplicate id key", req: e.post("stripe", fmt.Appendf(nil, `{"id":"evt_a","id":"evt_b","object":"event","created":%d,"type":"charge.refunded"}`, now.Unix())), status: 200, quarantined: "malformed_body"},
		{name: "stripe/trailing garbage after the JSON", req: e.post("stripe", append(bytes.Clone(stripeUnknown), "garbage"...)), status: 200, quarantined: "malformed_body"},
		{name: "stripe/UTF-8 byte order mark", req: e.post("stripe", append([]byte("\xef\xbb\xbf"), stripeUnknown...)), status: 200, quarantined: "malformed_body"},
		{name: "stripe/empty body, validly signed", req: e.post("stripe", []byte{}), status: 200, quarantined: "malformed_body"},
		{name: "stripe/Content-Type text/plain", req: e.post("stripe", stripeUnknown).with("Content-Type", "text/plain"), status: 400, code: "wrong_content_type"},
		{name: "stripe/spaces in the signature header", req: e.post("stripe", stripeUnknown).with(stripe.Header, strings.Replace(e.post("stripe", stripeUnknown).header.Get(stripe.Header), ",", ", ", 1)), status: 401, code: "invalid_signature"},
		{name: "stripe/uppercase hex v1 (decoded, as stripe-go does)", req: stripeUpper, status: 200, stored: 1},
		{name: "stripe/signed with another secret", req: e.postAt("stripe", stripeUnknown, "whsec_not_the_endpoint_secret", now), status: 401, code: "invalid_signature"},
		{name: "stripe/no Stripe-Signature header", req: e.post("stripe", stripeUnknown).without(stripe.Header), status: 401, code: "invalid_signature"},
		{name: "stripe/v1 signature of another body", req: e.post("stripe", stripeUnknown).with(stripe.Header, stripeSig), status: 401, code: "invalid_signature"},
		{name: "stripe/replayed signature 10 minutes old", req: e.postAt("stripe", e.sample("stripe", "customer.updated", oldAt), e.secret("stripe"), oldAt), status: 401, code: "invalid_signature"},
		{name: "stripe/timestamp 10 minutes in the future", req: e.postAt("stripe", stripeUnknown, e.secret("stripe"), now.Add(10*time.Minute)), status: 401, code: "invalid_signature"},
		{name: "stripe/unknown event type charge.refunded", req: e.post("stripe", stripeUnknown), status: 200, stored: 1, typ: envelope.TypeUnmapped, raw: stripeUnknown},
		{name: "stripe/body over 1 MiB", req: e.post("stripe", big), status: 200, quarantined: "body_too_large"},
		{name: "stripe/wrong path token", req: func() catReq {
			r := e.post("stripe", stripeBody("charge.captured"))
			r.path = "/hooks/stripe/wrong-token"
			return r
		}(), status: 404, code: "not_found", same404: true},
		{name: "stripe/path token prefix", req: func() catReq {
			r := e.post("stripe", stripeBody("charge.captured"))
			r.path = r.path[:len(r.path)-4]
			return r
		}(), status: 404, code: "not_found", same404: true},
		{name: "unknown endpoint", req: func() catReq {
			r := e.post("stripe", stripeBody("charge.captured"))
			r.path = "/hooks/nope/" + e.endpoint("stripe").PathToken.Value
			return r
		}(), status: 404, code: "not_found", same404: true},
		{name: "stripe/GET on the POST-only URL", req: catReq{method: http.MethodGet, path: e.path("stripe")}, status: 405, code: "method_not_allowed"},
		{name: "stripe/PUT of a signed delivery", req: func() catReq {
			r := e.post("stripe", stripeBody("charge.captured"))
			r.method = http.MethodPut
			return r
		}(), status: 405, code: "method_not_allowed"},

		// Header injection and broken framing, over a raw connection.
		{name: "raw/bare CR injecting a header into Stripe-Signature", req: catReq{raw: e.rawPost(e.path("stripe"), []string{stripe.Header + ": " + rawSig + "\rX-Injected: 1"}, rawStripe, -1)}, status: 400, plain: true},
		{name: "raw/NUL in the Instantly secret header", req: catReq{raw: e.rawPost(e.path("instantly"), []string{instantly.DefaultHeader + ": " + instSecret + "\x00x"}, instValid.body, -1)}, status: 400, plain: true},
		{name: "raw/CRLF in the request target", req: catReq{raw: e.rawPost(e.path("stripe")+"\r\nX-Injected: 1", []string{stripe.Header + ": " + rawSig}, rawStripe, -1)}, status: 400, plain: true},
		{name: "raw/two different Content-Length headers", req: catReq{raw: e.rawPost(e.path("stripe"), []string{stripe.Header + ": " + rawSig, "Content-Length: 2"}, rawStripe, -1)}, status: 400, plain: true},
		{name: "raw/obs-fold continuation line in Stripe-Signature", req: catReq{raw: e.rawPost(e.path("stripe"), []string{stripe.Header + ": t=" + stripeTS + ",\r\n " + rawSig[strings.Index(rawSig, "v1="):]}, rawStripe, -1)}, status: 401, code: "invalid_signature"},
		{name: "raw/bare LF splits off a second Instantly secret header", req: catReq{raw: e.rawPost(e.path("instantly"), []string{instantly.DefaultHeader + ": wrong-secret\n" + instantly.DefaultHeader + ": " + instSecret}, instValid.body, -1)}, status: 401, code: "invalid_signature"},
		{name: "raw/Content-Length longer than the body", req: catReq{raw: e.rawPost(e.path("stripe"), []string{stripe.Header + ": " + rawSig}, rawStripe, len(rawStripe)+100), halfClose: true}, status: 400, code: "unreadable_body"},

		// Standard Webhooks.
		{name: "standard/number where the type string is expected", req: e.post("standard", fmt.Appendf(nil, `{"type":7,"timestamp":%q,"data":{}}`, ts)), status: 200, quarantined: "malformed_body"},
		{name: "standard/invalid UTF-8 inside a string", req: e.post("standard", fmt.Appendf(nil, `{"type":"invoice.paid","timestamp":%q,"data":{"id":"inv_%s"}}`, ts, "\xff\xfe")), status: 200, quarantined: "malformed_body"},
		{name: "standard/signature list with doubled spaces and a decoy", req: stdSpaces, status: 200, stored: 1, typ: envelope.TypeContactUpdated},
		{name: "standard/signed with another secret", req: e.postAt("standard", stdUnknown, "whsec_bm90LXRoZS1zZWNyZXQtb2YtdGhpcy1lbmRwb2ludA==", now), status: 401, code: "invalid_signature"},
		{name: "standard/replayed signature 10 minutes old", req: e.postAt("standard", stdUnknown, e.secret("standard"), oldAt), status: 401, code: "invalid_signature"},
		{name: "standard/no webhook-id", req: e.post("standard", stdUnknown).without(standard.HeaderID), status: 401, code: "invalid_signature"},
		{name: "standard/unknown type invoice.paid", req: e.post("standard", stdUnknown), status: 200, stored: 1, typ: envelope.TypeUnmapped, raw: stdUnknown},

		// Meta.
		{name: "meta/valid WhatsApp message", req: e.post("meta", metaValid), status: 200, stored: 1},
		{name: "meta/replay of a stored delivery (Meta signs no time)", req: e.post("meta", metaValid), status: 200, dups: 1},
		{name: "meta/nesting 10000 deep", req: e.post("meta", deep), status: 200, quarantined: "malformed_body"},
		{name: "meta/uppercase SHA256= and uppercase hex", req: metaUpper, status: 200, stored: 1},
		{name: "meta/no X-Hub-Signature-256", req: e.post("meta", messenger).without(meta.SignatureHeader), status: 401, code: "invalid_signature"},
		{name: "meta/signature with a space after sha256=", req: e.post("meta", messenger).with(meta.SignatureHeader, strings.Replace(e.post("meta", messenger).header.Get(meta.SignatureHeader), "=", "= ", 1)), status: 401, code: "invalid_signature"},
		{name: "meta/empty entry list", req: e.post("meta", []byte(`{"object":"page","entry":[]}`)), status: 200, quarantined: "malformed_body"},
		{name: "meta/batch with one malformed entry is refused whole", req: e.post("meta", metaBadEntry), status: 200, quarantined: "malformed_body"},
		{name: "meta/handshake with the wrong verify token", req: catReq{method: http.MethodGet, path: e.path("meta") + "?hub.mode=subscribe&hub.verify_token=wrong-token&hub.challenge=1158201444"}, status: 403, code: "handshake_refused"},

		// HubSpot.
		{name: "hubspot/v3 signed for another URL", req: hsWrongURL, status: 401, code: "invalid_signature"},
		{name: "hubspot/v3 broken, v1 beside it right (no fallback)", req: hsV3Broken, status: 401, code: "invalid_signature"},
		{name: "hubspot/v3 timestamp 10 minutes old", req: e.postAt("hubspot", hsDeal, e.secret("hubspot"), oldAt), status: 401, code: "invalid_signature"},
		{name: "hubspot/empty batch", req: e.post("hubspot", []byte(`[]`)), status: 200, quarantined: "malformed_body"},
		{name: "hubspot/object where the batch array is expected", req: e.post("hubspot", hsElem), status: 200, quarantined: "malformed_body"},
		{name: "hubspot/batch with one element without eventId is refused whole", req: e.post("hubspot", hsMissingID), status: 200, quarantined: "malformed_body"},
		{name: "hubspot/duplicate eventId key", req: e.post("hubspot", []byte(`[{"eventId":1,"eventId":2,`+string(hsElem[1:])+`]`)), status: 200, quarantined: "malformed_body"},
		{name: "hubspot/occurredAt 1e400", req: e.post("hubspot", bytes.Replace(hsDeal, []byte(`"occurredAt":`), []byte(`"occurredAt":1e400,"x":`), 1)), status: 200, quarantined: "malformed_body"},
		{name: "hubspot/null eventId", req: e.post("hubspot", bytes.Replace(hsDeal, []byte(`"eventId":`), []byte(`"eventId":null,"x":`), 1)), status: 200, quarantined: "malformed_body"},
		{name: "hubspot/batch of 10,000 over max_events 1000", req: e.post("hubspot", batch10k), status: 200, quarantined: "too_many_events"},
		{name: "hubspot/the same notification twice in one batch", req: e.post("hubspot", hsTwice), status: 200, stored: 1, typ: envelope.TypeOpportunityCreated},
		{name: "hubspot/unknown subscription type", req: e.post("hubspot", hsUnknown), status: 200, stored: 1, typ: envelope.TypeUnmapped, raw: hsUnknown[1 : len(hsUnknown)-1]},

		// Calendly.
		{name: "calendly/a second JSON value after the first", req: e.post("calendly", append(e.sample("calendly", "invitee.created", e.fresh()), "{}"...)), status: 200, quarantined: "malformed_body"},
		{name: "calendly/signed 4 minutes in the future (tolerance 3m)", req: e.postAt("calendly", calUnknown, e.secret("calendly"), now.Add(4*time.Minute)), status: 401, code: "invalid_signature"},
		{name: "calendly/signed with another secret", req: e.postAt("calendly", calUnknown, "not-the-calendly-key", now), status: 401, code: "invalid_signature"},
		{name: "calendly/uppercase hex v1", req: calUpper, status: 200, stored: 1, typ: envelope.TypeMeetingCancelled},
		{name: "calendly/unknown event routing_form_submission.created", req: e.post("calendly", calUnknown), status: 200, stored: 1, typ: envelope.TypeUnmapped, raw: calUnknown},

		// Instantly (unsigned: the path token and the custom header authenticate).
		{name: "instantly/custom secret header missing", req: instValid.without(instantly.DefaultHeader), status: 401, code: "invalid_signature"},
		{name: "instantly/wrong custom secret header", req: instValid.with(instantly.DefaultHeader, "cat-instantly-shared-secreT"), status: 401, code: "invalid_signature"},
		{name: "instantly/JSON null body", req: e.post("instantly", []byte(`null`)), status: 200, quarantined: "malformed_body"},
		{name: "instantly/timestamp as a number (wrong type)", req: e.post("instantly", []byte(`{"timestamp":1700000000,"event_type":"email_opened"}`)), status: 200, quarantined: "malformed_body"},
		{name: "instantly/huge number variant 1e400 kept as text", req: e.post("instantly", instHuge), status: 200, stored: 1, typ: envelope.TypeEmailOpened, raw: instHuge},
		{name: "instantly/unknown event_type", req: e.post("instantly", instUnknown), status: 200, stored: 1, typ: envelope.TypeUnmapped, raw: instUnknown},

		// Smartlead (unsigned: secret_key in the body).
		{name: "smartlead/wrong secret_key in the body", req: e.postAt("smartlead", slOpen, "not-the-secret-key", now), status: 401, code: "invalid_signature"},
		{name: "smartlead/empty secret_key", req: catReq{method: http.MethodPost, path: e.path("smartlead"), header: http.Header{"Content-Type": {"application/json"}}, body: slOpen}, status: 401, code: "invalid_signature"},
		{name: "smartlead/secret_key as a number (wrong type)", req: catReq{method: http.MethodPost, path: e.path("smartlead"), header: http.Header{"Content-Type": {"application/json"}}, body: bytes.Replace(slOpen, []byte(`"secret_key":""`), []byte(`"secret_key":12345`), 1)}, status: 400, code: "malformed_body"},
		{name: "smartlead/two secret_key fields", req: slDup, status: 400, code: "malformed_body"},
		{name: "smartlead/unknown event type, secret redacted", req: slUnknown, status: 200, stored: 1, typ: envelope.TypeUnmapped, raw: smartlead.Redact(slUnknown.body)},

		// Generic HMAC.
		{name: "generic/null id falls back to content identity", req: e.post("generic", genNullID), status: 200, stored: 1, typ: envelope.TypeUnmapped, raw: genNullID},
		{name: "generic/type is an object (wrong type)", req: e.post("generic", fmt.Appendf(nil, `{"id":"evt_obj","type":{"a":1},"created_at":%q}`, ts)), status: 200, quarantined: "malformed_body"},
		{name: "generic/batch with one element without type is refused whole", req: e.post("generic", fmt.Appendf(nil, `[{"id":"evt_b1","type":"account.updated","created_at":%q},{"id":"evt_b2","created_at":%q}]`, ts, ts)), status: 200, quarantined: "malformed_body"},
		{name: "generic/empty batch", req: e.post("generic", []byte(`[]`)), status: 200, quarantined: "malformed_body"},
		{name: "generic/uppercase SHA256= and uppercase hex", req: genUpper, status: 200, stored: 1, typ: envelope.TypeReplyReceived},
		{name: "generic/X-Timestamp an hour in the future", req: e.postAt("generic", genUnknown, e.secret("generic"), now.Add(time.Hour)), status: 401, code: "invalid_signature"},
		{name: "generic/X-Timestamp not a number", req: e.post("generic", genUnknown).with("X-Timestamp", "yesterday"), status: 401, code: "invalid_signature"},
		{name: "generic/signed with another secret", req: e.postAt("generic", genUnknown, "not-the-generic-key", now), status: 401, code: "invalid_signature"},
		{name: "generic/unknown type account.updated", req: e.post("generic", genUnknown), status: 200, stored: 1, typ: envelope.TypeUnmapped, raw: genUnknown},
	}

	start := e.count()
	var total uint64
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, kept := e.count(), brokertest.Count(t, e.conn, stream.Quarantine)
			status, body, hdr := e.send(c.req)
			after := e.count()
			if got, want := brokertest.Count(t, e.conn, stream.Quarantine)-kept, map[bool]uint64{true: 1}[c.quarantined != ""]; got != want {
				t.Errorf("%d deliveries quarantined, want %d", got, want)
			}
			total += after - before
			if status != c.status {
				t.Errorf("status %d %.300s, want %d", status, body, c.status)
			}
			catCheckBody(t, e, c, status, body, hdr, unknownBody)
			if got := int(after - before); got != c.stored {
				t.Errorf("stored %d events, want %d (a rejected delivery stores nothing, an accepted one all of it)", got, c.stored)
			}
			if after > before {
				envs := e.envelopes(t, before+1, after)
				for _, env := range envs {
					var typ string
					json.Unmarshal(env["type"], &typ)
					if c.typ != "" && typ != c.typ {
						t.Errorf("stored type %q, want %q", typ, c.typ)
					}
				}
				if c.raw != nil {
					var data struct{ Raw json.RawMessage }
					json.Unmarshal(envs[0]["data"], &data)
					if !sameJSON(data.Raw, c.raw) {
						t.Errorf("stored raw payload differs from the delivery:\n got %.300s\nwant %.300s", data.Raw, c.raw)
					}
				}
			}
		})
	}

	// Nothing the quarantine keeps holds a secret, a token or a signature.
	qs, err := e.conn.JS.Stream(context.Background(), stream.Quarantine)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= brokertest.Count(t, e.conn, stream.Quarantine); seq++ {
		m, err := qs.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		var kept bytes.Buffer
		http.Header(m.Header).Write(&kept)
		kept.Write(m.Data)
		for _, s := range append(slices.Clone(e.secrets), stripeSig, rawSig) {
			if bytes.Contains(kept.Bytes(), []byte(s)) {
				t.Errorf("quarantined delivery %d (%s) holds a secret, token or signature", seq, m.Subject)
			}
		}
	}

	// Nothing crashed: the gateway still stores a valid delivery.
	status, body, _ := e.send(e.post("instantly", e.sample("instantly", "email_sent", e.fresh())))
	if status != 200 {
		t.Fatalf("after the catalogue, a valid delivery got %d %s", status, body)
	}
	total++
	if got := e.count() - start; got != total {
		t.Fatalf("the stream holds %d events, the cases stored %d", got, total)
	}

	// The same 10,000-event batch through a gateway whose max_events allows it: all
	// stored in one delivery, each a valid envelope, each once.
	t.Run("hubspot/batch of 10,000 under max_events 10000", func(t *testing.T) {
		cfg2, err := config.Parse(fmt.Appendf(nil, catConfig, "  publish_timeout: 60s\n  max_events: 10000"), "catalogue-10k.yaml", func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		gw2, err := server.New(context.Background(), server.Options{Config: cfg2, JS: e.conn.JS, Now: func() time.Time { return e.now }})
		if err != nil {
			t.Fatal(err)
		}
		srv2 := httptest.NewServer(gw2.Handler())
		defer srv2.Close()
		url := srv2.URL + e.path("hubspot")
		hdr, body := e.signWith("hubspot", url, batch10k, e.secret("hubspot"), now)
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header = hdr
		before := e.count()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var ans struct{ Stored, Duplicates int }
		json.Unmarshal(b, &ans)
		after := e.count()
		if resp.StatusCode != 200 || ans.Stored != 10000 || after-before != 10000 {
			t.Fatalf("got %d %.200s, stream grew by %d; want 200 and 10000 stored", resp.StatusCode, b, after-before)
		}
		for _, env := range e.envelopes(t, before+1, after) {
			var typ string
			json.Unmarshal(env["type"], &typ)
			if typ != envelope.TypeUnmapped {
				t.Fatalf("stored type %q, want unmapped", typ)
			}
		}
		total += after - before
		if got := e.count() - start; got != total {
			t.Fatalf("the stream holds %d events, the deliveries stored %d", got, total)
		}
	})

	// None of what was stored crashes a consumer or stays unfinished in one.
	t.Run("every stored event through every consumer", func(t *testing.T) { catThroughConsumers(t, e) })
}

// catThroughConsumers runs every consumer service over what the catalogue stored: each
// stored event ends completed or dead-lettered (with its reason) in every consumer that
// takes it (unfinishedIn), no service stops on any of it, and the projections equal a
// rebuild.
func catThroughConsumers(t *testing.T, e *catEnv) {
	sb := sandbox.Start(t)
	env := &service.Env{Config: e.cfg, Conn: e.conn, Log: slog.New(slog.DiscardHandler), Platforms: accounts.New(e.cfg, sb.URL, accounts.Pacing{})}
	parts := map[string]service.Run{stream.Classifier: classifier.Run, stream.Stopper: stopper.Run, stream.CRMWriter: crmwriter.Run,
		stream.Suppressor: suppressor.Run, stream.Projector: projector.Run}
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); wg.Wait() }()
	for name, run := range parts {
		wg.Go(func() {
			if err := run(ctx, env, func() {}); err != nil && ctx.Err() == nil {
				t.Errorf("%s stopped on the catalogue's events: %v", name, err)
			}
		})
	}
	for name := range parts {
		settledWithin(t, e.conn.JS, name, 3*time.Minute)
	}
	unfinishedIn(t, e.conn.JS, stream.Classifier, stream.Stopper, stream.CRMWriter, stream.Suppressor, stream.Projector)
	equalsRebuild(t, e.conn.JS)
}

// catCheckBody checks the answer's body: a 200 reports what was stored; an error is a
// small JSON {"error","message"} (or, for what net/http refuses itself, Go's short
// text) that echoes no secret, token or signature.
func catCheckBody(t *testing.T, e *catEnv, c catCase, status int, body string, hdr http.Header, unknownBody string) {
	t.Helper()
	for _, s := range e.secrets {
		if strings.Contains(body, s) {
			t.Errorf("the answer echoes a secret or token: %.300s", body)
		}
	}
	for k, vs := range c.req.header {
		for _, v := range vs {
			if len(v) > 20 && k != "Content-Type" && strings.Contains(body, v) {
				t.Errorf("the answer echoes header %s: %.300s", k, body)
			}
		}
	}
	if c.req.raw != nil {
		for _, line := range strings.Split(string(c.req.raw), "\n") {
			if _, v, ok := strings.Cut(line, "v1="); ok && len(v) > 20 && strings.Contains(body, strings.TrimSpace(v)[:20]) {
				t.Errorf("the answer echoes the signature: %.300s", body)
			}
		}
	}
	switch {
	case status == http.StatusOK:
		var ans struct {
			Stored, Duplicates *int
			IDs                []string
			Quarantined        int
			QuarantineID       string `json:"quarantine_id"`
			Reason             string
		}
		if err := json.Unmarshal([]byte(body), &ans); err != nil || ans.Stored == nil || ans.Duplicates == nil {
			t.Errorf("a 200 answer is not {stored,duplicates,ids}: %.300s", body)
			return
		}
		if kept := ans.Quarantined == 1 && ans.Reason == c.quarantined && strings.HasPrefix(ans.QuarantineID, "qr_"); kept != (c.quarantined != "") {
			t.Errorf("answer %s, want quarantined %q", body, c.quarantined)
		}
		if *ans.Stored != c.stored || *ans.Duplicates != c.dups || len(ans.IDs) != c.stored+c.dups {
			t.Errorf("answer %s, want stored %d duplicates %d", body, c.stored, c.dups)
		}
	case c.plain:
		if len(body) > 200 {
			t.Errorf("net/http's refusal is %d bytes", len(body))
		}
	default:
		if len(body) > 512 {
			t.Errorf("the error body is %d bytes, not small", len(body))
		}
		if ct := hdr.Get("Content-Type"); ct != "application/json" {
			t.Errorf("error Content-Type %q", ct)
		}
		var eb map[string]any
		if err := json.Unmarshal([]byte(body), &eb); err != nil {
			t.Errorf("the error body is not JSON: %.300s", body)
			return
		}
		code, _ := eb["error"].(string)
		msg, _ := eb["message"].(string)
		if len(eb) != 2 || code == "" || msg == "" {
			t.Errorf("the error body is not {error,message}: %.300s", body)
		}
		if c.code != "" && code != c.code {
			t.Errorf("error code %q, want %q", code, c.code)
		}
		if c.same404 && body != unknownBody {
			t.Errorf("404 body %q differs from an unknown endpoint's %q", body, unknownBody)
		}
	}
}
