package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/config"
	"exacto.dev/pkg/forwarded"
	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/providers/providertest"
	"exacto.dev/pkg/providers/registry"
	"exacto.dev/pkg/stream"
)

// testConfig has one endpoint per provider, each with two secrets (rotation).
const testConfig = `
gateway:
  publish_timeout: 2s
tenants:
  - id: acme
    endpoints:
      - {id: instantly, provider: instantly, path_token: tok-instantly-0123456789, secrets: [instantly-new, instantly-old]}
      - {id: smartlead, provider: smartlead, path_token: tok-smartlead-0123456789, secrets: [smartlead-new, smartlead-old]}
      - {id: smartlead-signed, provider: smartlead, path_token: tok-smartlead-signed-0123456789, secrets: [smartlead-new], signing_secrets: [smartlead-signing-new, smartlead-signing-old]}
      - {id: hubspot, provider: hubspot, path_token: tok-hubspot-0123456789, secrets: [hubspot-new, hubspot-old]}
      - {id: meta, provider: meta, path_token: tok-meta-0123456789, secrets: [meta-new, meta-old], verify_token: meta-verify}
      - {id: stripe, provider: stripe, path_token: tok-stripe-0123456789, secrets: [whsec_stripe_new, whsec_stripe_old]}
      - {id: standard, provider: standard, path_token: tok-standard-0123456789, secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw, whsec_dGhlLW9sZC1zZWNyZXQtb2YtMzItYnl0ZXMhIQ==]}
      - {id: calendly, provider: calendly, path_token: tok-calendly-0123456789, secrets: [calendly-new, calendly-old]}
      - id: generic
        provider: generic
        path_token: tok-generic-0123456789
        secrets: [generic-new, generic-old]
        generic: {header: X-Signature, prefix: "sha256=", encoding: hex, algorithm: sha256, signed: "{timestamp}.{body}", timestamp_header: X-Timestamp, id_field: id, type_field: type, time_field: created_at, types: {reply: reply.received}}
`

type harness struct {
	t    *testing.T
	conn *broker.Conn
	cfg  *config.Config
	gw   *Server
	base string
	now  atomic.Pointer[time.Time]
}

func newHarness(t *testing.T, topo ...stream.Options) *harness {
	t.Helper()
	return newHarnessOf(t, testConfig, topo...)
}

// newHarnessOf is newHarness over config doc.
func newHarnessOf(t *testing.T, doc string, topo ...stream.Options) *harness {
	t.Helper()
	h := &harness{t: t}
	start := time.Now().Truncate(time.Second)
	h.now.Store(&start)
	h.conn = brokertest.Start(t, "", topo...)
	cfg, err := config.Parse([]byte(doc), "test.yaml", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	h.cfg = cfg
	ctx := context.Background()
	h.gw, err = New(ctx, Options{Config: cfg, JS: h.conn.JS, Now: func() time.Time { return *h.now.Load() }, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	idx, err := NewIndexer(ctx, h.conn.JS, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ictx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { idx.Run(ictx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	srv := httptest.NewServer(h.gw.Handler())
	t.Cleanup(srv.Close)
	h.base = srv.URL
	return h
}

func (h *harness) clock() time.Time { return *h.now.Load() }

func (h *harness) advance(d time.Duration) {
	n := h.clock().Add(d)
	h.now.Store(&n)
}

func (h *harness) endpoint(id string) *config.Endpoint {
	for _, t := range h.cfg.Tenants {
		for i := range t.Endpoints {
			if e := &t.Endpoints[i]; e.ID == id {
				return e
			}
		}
	}
	h.t.Fatalf("no endpoint %s", id)
	return nil
}

func (h *harness) url(ep string) string {
	return h.base + "/hooks/" + ep + "/" + h.endpoint(ep).PathToken.Value
}

// delivery is a signed delivery of spec's event, as raw parts so tests can mangle it.
type delivery struct {
	url    string
	header http.Header
	body   []byte
}

func (h *harness) delivery(ep, event string, signedAt time.Time) delivery {
	h.t.Helper()
	e := h.endpoint(ep)
	spec, _ := registry.Lookup(e.Provider)
	body, err := spec.Sample(event, signedAt)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.sign(ep, body, e.Secrets[0].Value, signedAt)
}

func (h *harness) sign(ep string, body []byte, secret string, at time.Time) delivery {
	h.t.Helper()
	e := h.endpoint(ep)
	spec, _ := registry.Lookup(e.Provider)
	u := h.url(ep)
	hdr, body, err := spec.Sign(http.MethodPost, u, body, secret, at)
	if err != nil {
		h.t.Fatal(err)
	}
	if len(e.SigningSecrets) > 0 {
		maps.Copy(hdr, spec.SignOptional(body, e.SigningSecrets[0].Value))
	}
	if hdr.Get("Content-Type") == "" {
		hdr.Set("Content-Type", "application/json")
	}
	return delivery{url: u, header: hdr, body: body}
}

type reply struct {
	status int
	header http.Header
	body   string
	answer answer
}

func (h *harness) post(d delivery) reply {
	h.t.Helper()
	req, err := http.NewRequest(http.MethodPost, d.url, bytes.NewReader(d.body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header = d.header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
	if r.status == http.StatusOK {
		json.Unmarshal(b, &r.answer)
	}
	return r
}

func (h *harness) stored() uint64 { return brokertest.Count(h.t, h.conn, stream.Events) }

func (h *harness) quarantined() uint64 { return brokertest.Count(h.t, h.conn, stream.Quarantine) }

// overLimit is a JSON body 1 KiB over the gateway's body limit.
func (h *harness) overLimit() []byte {
	return []byte(`{"pad":"` + strings.Repeat("x", int(h.cfg.Gateway.BodyLimit)+1024) + `"}`)
}

// waitIndexed waits until the index consumer has caught up with the stream.
func (h *harness) waitIndexed() {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := h.conn.JS.Consumer(context.Background(), stream.Events, stream.IndexConsumer)
		if err == nil {
			info, err := c.Info(context.Background())
			if err == nil && info.NumPending == 0 && info.NumAckPending == 0 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.t.Fatal("index did not catch up")
}

var allEndpoints = []string{"instantly", "smartlead", "hubspot", "meta", "stripe", "standard", "calendly", "generic"}

func spec(h *harness, ep string) providers.Spec {
	s, _ := registry.Lookup(h.endpoint(ep).Provider)
	return s
}

func TestValidDeliveryStoredOnceAndSchemaValid(t *testing.T) {
	h := newHarness(t)
	var total uint64
	for _, ep := range allEndpoints {
		for _, event := range spec(h, ep).Events {
			r := h.post(h.delivery(ep, event, h.clock()))
			if r.status != http.StatusOK {
				t.Fatalf("%s/%s: %d %s", ep, event, r.status, r.body)
			}
			if r.answer.Stored+r.answer.Duplicates != len(r.answer.IDs) || len(r.answer.IDs) == 0 {
				t.Fatalf("%s/%s: answer %+v", ep, event, r.answer)
			}
			total += uint64(r.answer.Stored)
		}
	}
	if got := h.stored(); got != total {
		t.Fatalf("stream holds %d, answers said %d stored", got, total)
	}
	// Every stored envelope is schema-valid and carries its Nats-Msg-Id.
	st, _ := h.conn.JS.Stream(context.Background(), stream.Events)
	for seq := uint64(1); seq <= total; seq++ {
		msg, err := st.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		if err := providertest.Validate(msg.Data); err != nil {
			t.Fatalf("seq %d: %v\n%s", seq, err, msg.Data)
		}
		var env struct {
			ID, Tenant, Provider, Type string
		}
		json.Unmarshal(msg.Data, &env)
		if msg.Header.Get(jetstream.MsgIDHeader) != env.ID {
			t.Fatalf("seq %d: Nats-Msg-Id %q != id %q", seq, msg.Header.Get(jetstream.MsgIDHeader), env.ID)
		}
		if want := stream.EventSubject(env.Tenant, env.Provider, env.Type); msg.Subject != want {
			t.Fatalf("seq %d: subject %s, want %s", seq, msg.Subject, want)
		}
	}
}

func TestRedeliveriesStoredOnce(t *testing.T) {
	h := newHarness(t)
	for _, ep := range allEndpoints {
		t.Run(ep, func(t *testing.T) {
			before := h.stored()
			event := spec(h, ep).Events[0]
			at := h.clock()
			body, _ := spec(h, ep).Sample(event, at)
			first := h.post(h.sign(ep, body, h.endpoint(ep).Secrets[0].Value, at))
			if first.status != http.StatusOK || first.answer.Stored == 0 {
				t.Fatalf("first: %d %s", first.status, first.body)
			}
			n := uint64(first.answer.Stored)
			// Four sequential retries, each signed anew a little later.
			for i := 1; i <= 4; i++ {
				r := h.post(h.sign(ep, body, h.endpoint(ep).Secrets[0].Value, at.Add(time.Duration(i)*time.Second)))
				if r.status != http.StatusOK || r.answer.Stored != 0 {
					t.Fatalf("retry %d: %d %s", i, r.status, r.body)
				}
			}
			// Five concurrent deliveries of one new event.
			ev2 := spec(h, ep).Events[len(spec(h, ep).Events)-1]
			body2, _ := spec(h, ep).Sample(ev2, at.Add(time.Minute))
			var wg sync.WaitGroup
			var stored atomic.Int64
			for i := 0; i < 5; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := h.post(h.sign(ep, body2, h.endpoint(ep).Secrets[0].Value, at))
					if r.status != http.StatusOK {
						t.Errorf("concurrent: %d %s", r.status, r.body)
					}
					stored.Add(int64(r.answer.Stored))
				}()
			}
			wg.Wait()
			if got := h.stored() - before; got != n+uint64(stored.Load()) {
				t.Fatalf("stream grew by %d, answers said %d", got, n+uint64(stored.Load()))
			}
			if ev2 != event && stored.Load() == 0 {
				// ev2 may equal a sample already stored above only when it is the same event.
				t.Fatalf("concurrent deliveries of a new event stored nothing")
			}
		})
	}
}

// A redelivery long after the stream's duplicate window is still answered 200 and
// stored nothing: the index of stored ids catches it.
func TestLateDuplicatePastWindow(t *testing.T) {
	topo := brokertest.Topology
	topo.DuplicateWindow = time.Second // stands in for the 1-minute window
	h := newHarness(t, topo)
	bodies := map[string][]byte{}
	for _, ep := range allEndpoints {
		body, _ := spec(h, ep).Sample(spec(h, ep).Events[0], h.clock())
		bodies[ep] = body
		if r := h.post(h.sign(ep, body, h.endpoint(ep).Secrets[0].Value, h.clock())); r.status != http.StatusOK {
			t.Fatalf("%s: %d %s", ep, r.status, r.body)
		}
	}
	stored := h.stored()
	h.waitIndexed()
	time.Sleep(1500 * time.Millisecond) // past the window for real
	h.advance(10 * time.Minute)         // and signed ten minutes later
	for _, ep := range allEndpoints {
		r := h.post(h.sign(ep, bodies[ep], h.endpoint(ep).Secrets[0].Value, h.clock()))
		if r.status != http.StatusOK || r.answer.Stored != 0 || r.answer.Duplicates == 0 {
			t.Fatalf("%s late redelivery: %d %s", ep, r.status, r.body)
		}
	}
	if got := h.stored(); got != stored {
		t.Fatalf("late redeliveries stored %d new events", got-stored)
	}
	// The arrivals were counted.
	kv, _ := h.conn.JS.KeyValue(context.Background(), stream.Arrivals)
	keys, err := kv.Keys(context.Background())
	if err != nil || len(keys) == 0 {
		t.Fatalf("no arrivals counted: %v", err)
	}
}

func TestRotationBothSecretsValid(t *testing.T) {
	h := newHarness(t)
	for _, ep := range allEndpoints {
		body, _ := spec(h, ep).Sample(spec(h, ep).Events[0], h.clock())
		for i, s := range h.endpoint(ep).Secrets {
			if r := h.post(h.sign(ep, body, s.Value, h.clock())); r.status != http.StatusOK {
				t.Fatalf("%s secret %d: %d %s", ep, i, r.status, r.body)
			}
		}
	}
}

// Each rejection gets its contract status, stores nothing, and never echoes a secret
// or signature. (A verified delivery refused for its content is not rejected: it is
// quarantined, quarantine_test.go.)
func TestRejections(t *testing.T) {
	h := newHarness(t)
	type tc struct {
		name   string
		mangle func(d *delivery)
		status int
	}
	common := []tc{
		{"wrong path token", func(d *delivery) { d.url = d.url[:strings.LastIndex(d.url, "/")] + "/wrong-token" }, 404},
		{"unknown endpoint", func(d *delivery) { d.url = h.base + "/hooks/nope/tok" }, 404},
		{"wrong content type", func(d *delivery) { d.header.Set("Content-Type", "application/x-www-form-urlencoded") }, 400},
	}
	for _, ep := range allEndpoints {
		sp := spec(h, ep)
		cases := append([]tc{}, common...)
		if sp.Signed || len(h.endpoint(ep).Secrets) > 0 {
			cases = append(cases, tc{"wrong secret", nil, 401}, tc{"wrong secret, body over the limit", nil, 401})
		}
		if ep == "smartlead" { // its secret_key cannot be read from a malformed body
			cases = append(cases, tc{"malformed json", nil, 400})
		}
		if sp.Signed {
			cases = append(cases,
				tc{"wrong signature", func(d *delivery) { d.body = append(bytes.Clone(d.body[:len(d.body)-1]), ' ', d.body[len(d.body)-1]) }, 401},
				tc{"missing header", func(d *delivery) {
					for _, hd := range sp.SignatureHeaders {
						d.header.Del(hd)
					}
				}, 401})
		}
		if sp.SignsTime {
			cases = append(cases, tc{"stale timestamp", nil, 401}, tc{"future timestamp", nil, 401})
		}
		for _, c := range cases {
			t.Run(ep+"/"+c.name, func(t *testing.T) {
				before := h.stored()
				var d delivery
				switch c.name {
				case "wrong secret":
					body, _ := sp.Sample(sp.Events[0], h.clock())
					d = h.sign(ep, body, wrongSecret(ep), h.clock())
				case "wrong secret, body over the limit":
					d = h.sign(ep, h.overLimit(), wrongSecret(ep), h.clock())
				case "malformed json":
					d = h.sign(ep, []byte(`{"event_type": "reply_received", "truncated`), h.endpoint(ep).Secrets[0].Value, h.clock())
				case "stale timestamp":
					d = h.delivery(ep, sp.Events[0], h.clock().Add(-time.Hour))
				case "future timestamp":
					d = h.delivery(ep, sp.Events[0], h.clock().Add(time.Hour))
				default:
					d = h.delivery(ep, sp.Events[0], h.clock())
				}
				if c.mangle != nil {
					c.mangle(&d)
				}
				r := h.post(d)
				if r.status != c.status {
					t.Fatalf("got %d %s, want %d", r.status, r.body, c.status)
				}
				var e struct{ Error, Message string }
				if err := json.Unmarshal([]byte(r.body), &e); err != nil || e.Error == "" {
					t.Fatalf("error body is not {error,message}: %q", r.body)
				}
				for _, s := range h.endpoint(ep).Secrets {
					if strings.Contains(r.body, s.Value) {
						t.Fatalf("error body echoes a secret: %s", r.body)
					}
				}
				for _, vs := range d.header {
					for _, v := range vs {
						if len(v) > 20 && strings.Contains(r.body, v) {
							t.Fatalf("error body echoes a header value: %s", r.body)
						}
					}
				}
				if got := h.stored(); got != before {
					t.Fatalf("a rejected delivery stored %d events", got-before)
				}
				if got := h.quarantined(); got != 0 {
					t.Fatalf("a rejected delivery was quarantined (%d kept)", got)
				}
			})
		}
	}
}

// wrongSecret is a secret of the right form that is not endpoint ep's.
func wrongSecret(ep string) string {
	if ep == "standard" {
		return "whsec_bm90LXRoZS1zZWNyZXQtb2YtdGhpcy1lbmRwb2ludA=="
	}
	return "not-the-secret-" + ep
}

func TestNotFoundIsIdentical(t *testing.T) {
	h := newHarness(t)
	get := func(url string) (int, string, http.Header) {
		resp, err := http.Post(url, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		resp.Header.Del("Date")
		return resp.StatusCode, string(b), resp.Header
	}
	s1, b1, h1 := get(h.base + "/hooks/instantly/wrong")
	s2, b2, h2 := get(h.base + "/hooks/no-such-endpoint/wrong")
	s3, b3, _ := get(h.base + "/hooks/instantly/" + h.endpoint("instantly").PathToken.Value[:10])
	if s1 != 404 || s2 != 404 || s3 != 404 || b1 != b2 || b1 != b3 || fmt.Sprint(h1) != fmt.Sprint(h2) {
		t.Fatalf("404s differ: %d %q %v / %d %q %v / %d %q", s1, b1, h1, s2, b2, h2, s3, b3)
	}
}

func TestMetaHandshake(t *testing.T) {
	h := newHarness(t)
	get := func(q string) (int, string) {
		resp, err := http.Get(h.url("meta") + "?" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if s, b := get("hub.mode=subscribe&hub.verify_token=meta-verify&hub.challenge=1158201444"); s != 200 || b != "1158201444" {
		t.Fatalf("handshake: %d %q", s, b)
	}
	for _, q := range []string{"hub.mode=subscribe&hub.verify_token=wrong&hub.challenge=1", "hub.mode=unsubscribe&hub.verify_token=meta-verify&hub.challenge=1", ""} {
		if s, b := get(q); s != http.StatusForbidden || strings.Contains(b, "meta-verify") {
			t.Fatalf("%q: %d %q", q, s, b)
		}
	}
	// GET on a provider without a handshake is not allowed.
	resp, err := http.Get(h.url("stripe"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET stripe: %d", resp.StatusCode)
	}
}

// With JetStream gone, a delivery is answered 503, never 200.
func TestUnavailableStoreIs503(t *testing.T) {
	h := newHarness(t)
	d := h.delivery("stripe", spec(h, "stripe").Events[0], h.clock())
	h.conn.Embedded.Shutdown()
	h.conn.Embedded.WaitForShutdown()
	r := h.post(d)
	if r.status != http.StatusServiceUnavailable {
		t.Fatalf("got %d %s, want 503", r.status, r.body)
	}
}

// The index of stored ids is derived: when it cannot answer, the webhook is still
// stored (200), and a retry within the stream's duplicate window is still stored once
// (Nats-Msg-Id).
func TestIndexAwayIsNo503(t *testing.T) {
	h := newHarness(t)
	if err := h.conn.JS.DeleteStream(context.Background(), "KV_"+stream.EventIndex); err != nil {
		t.Fatal(err)
	}
	before := h.stored()
	at := h.clock()
	body, _ := spec(h, "stripe").Sample(spec(h, "stripe").Events[0], at)
	for i := range 2 {
		r := h.post(h.sign("stripe", body, h.endpoint("stripe").Secrets[0].Value, at))
		if r.status != http.StatusOK {
			t.Fatalf("delivery %d with the index away: %d %s", i+1, r.status, r.body)
		}
	}
	if got := h.stored() - before; got != 1 {
		t.Fatalf("the stream grew by %d, want 1", got)
	}
}

func TestPanicIs500(t *testing.T) {
	srv := httptest.NewServer(recoverPanics(slog.New(slog.DiscardHandler), http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") })))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 500 || strings.Contains(string(b), "boom") {
		t.Fatalf("panic: %d %q", resp.StatusCode, b)
	}
}

// A batch over max_events is not stored, not even in part, nor is an empty one: each is
// quarantined (200), with its reason; a batch of several events is stored whole.
func TestBatchLimits(t *testing.T) {
	h := newHarness(t)
	var big strings.Builder
	big.WriteString("[")
	for i := 0; i <= h.cfg.Gateway.MaxEvents; i++ {
		if i > 0 {
			big.WriteString(",")
		}
		fmt.Fprintf(&big, `{"eventId":%d,"subscriptionId":25,"portalId":62515,"appId":1160452,"occurredAt":%d,"subscriptionType":"contact.propertyChange","attemptNumber":0,"objectId":%d,"propertyName":"email","propertyValue":"a%d@example.com","changeSource":"CRM_UI"}`, 1000+i, h.clock().UnixMilli(), 500+i, i)
	}
	big.WriteString("]")
	secret := h.endpoint("hubspot").Secrets[0].Value
	if r := h.post(h.sign("hubspot", []byte(big.String()), secret, h.clock())); r.status != http.StatusOK || r.answer.Reason != "too_many_events" || r.answer.Quarantined != 1 {
		t.Fatalf("batch of %d: %d %s", h.cfg.Gateway.MaxEvents+1, r.status, r.body)
	}
	// HubSpot's parser itself refuses an empty batch.
	if r := h.post(h.sign("hubspot", []byte(`[]`), secret, h.clock())); r.status != http.StatusOK || r.answer.Reason != "malformed_body" || r.answer.Quarantined != 1 {
		t.Fatalf("empty batch: %d %s", r.status, r.body)
	}
	if got := h.stored(); got != 0 {
		t.Fatalf("refused batches stored %d events", got)
	}
	// A batch of several events is split into as many stored events.
	r := h.post(h.delivery("hubspot", "batch", h.clock()))
	if r.status != http.StatusOK || r.answer.Stored != 4 || h.stored() != 4 {
		t.Fatalf("batch of 4: %d %s, stream %d", r.status, r.body, h.stored())
	}
}

// HubSpot v3 signs the URL: behind a proxy the gateway checks it against public_url,
// or against the scheme the proxy reports in X-Forwarded-Proto.
func TestSignedURLBehindProxy(t *testing.T) {
	h := newHarness(t)
	spec := spec(h, "hubspot")
	body, _ := spec.Sample("deal.creation", h.clock())
	secret := h.endpoint("hubspot").Secrets[0].Value
	public := strings.Replace(h.url("hubspot"), "http://", "https://", 1)
	hdr, _, _ := spec.Sign(http.MethodPost, public, body, secret, h.clock())
	hdr.Set("Content-Type", "application/json")
	d := delivery{url: h.url("hubspot"), header: hdr, body: body}
	if r := h.post(d); r.status != http.StatusUnauthorized {
		t.Fatalf("https signature over plain http without the proxy header: %d", r.status)
	}
	d.header.Set("X-Forwarded-Proto", "https")
	// From a client that is no proxy the config trusts, the header is not believed
	// (issue 16: a v3 signature could be made to verify for a URL never called).
	h.gw.proxies, _ = forwarded.Parse([]string{"10.0.0.0/8"})
	if r := h.post(d); r.status != http.StatusUnauthorized {
		t.Fatalf("X-Forwarded-Proto from an untrusted client: %d %s, want 401", r.status, r.body)
	}
	h.gw.proxies = h.cfg.Proxies() // loopback: the harness's client stands for a proxy on the same machine
	if r := h.post(d); r.status != http.StatusOK {
		t.Fatalf("with X-Forwarded-Proto: %d %s", r.status, r.body)
	}
	// With public_url set, that URL is what is verified.
	h.gw.endpoints["hubspot"].PublicURL = "https://hooks.example.com/hooks/hubspot/x"
	body2, _ := spec.Sample("contact.propertyChange", h.clock())
	hdr2, _, _ := spec.Sign(http.MethodPost, "https://hooks.example.com/hooks/hubspot/x", body2, secret, h.clock())
	hdr2.Set("Content-Type", "application/json")
	if r := h.post(delivery{url: h.url("hubspot"), header: hdr2, body: body2}); r.status != http.StatusOK {
		t.Fatalf("with public_url: %d %s", r.status, r.body)
	}
}

// With the broker up but the publish not acknowledged (the stream is gone), the answer
// is 503 too.
func TestUnacknowledgedPublishIs503(t *testing.T) {
	h := newHarness(t)
	if err := h.conn.JS.DeleteStream(context.Background(), stream.Events); err != nil {
		t.Fatal(err)
	}
	r := h.post(h.delivery("stripe", spec(h, "stripe").Events[0], h.clock()))
	if r.status != http.StatusServiceUnavailable || strings.Contains(r.body, "whsec") {
		t.Fatalf("got %d %s, want 503", r.status, r.body)
	}
}
