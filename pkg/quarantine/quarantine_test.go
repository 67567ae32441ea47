package quarantine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/config"
	"exacto.dev/pkg/dlq"
	"exacto.dev/pkg/ingest"
	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/stream"
)

// testConfig's generic endpoint reads each event's time from the field %s: the
// provider renamed created_at to occurred_at, and the config catches up.
const testConfig = `
tenants:
  - id: acme
    endpoints:
      - id: signer
        provider: generic
        path_token: tok-signer-0123456789
        secrets: [generic-key-SECRET]
        generic: {header: X-Sig, prefix: "sha256=", encoding: hex, algorithm: sha256, id_field: id, type_field: type, time_field: %s}
      - {id: instantly, provider: instantly, path_token: tok-instantly-0123456789, secrets: [instantly-SECRET], secret_header: X-Instantly-Key}
      - {id: smartlead, provider: smartlead, path_token: tok-smartlead-0123456789, secrets: [smartlead-SECRET]}
`

func parse(t *testing.T, timeField string) *config.Config {
	t.Helper()
	cfg, err := config.Parse(fmt.Appendf(nil, testConfig, timeField), "test.yaml", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

var received = time.Date(2026, 12, 2, 10, 0, 5, 0, time.UTC)

// delivery is a verified delivery of body to endpoint id as cfg configures it.
func delivery(t *testing.T, cfg *config.Config, id string, header http.Header, body []byte) ingest.Delivery {
	t.Helper()
	ep, err := ingest.FindEndpoint(cfg, "acme", id)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	req := &providers.Request{Method: http.MethodPost, URL: "https://hooks.example/hooks/" + id + "/tok", Header: header, Body: body, Now: received}
	return ingest.Delivery{Endpoint: ep, Request: req, Size: len(body), SHA256: hex.EncodeToString(sum[:])}
}

// keep does what the gateway does with d: normalise it under cfg's limits and, refused,
// keep it. It returns the kept id.
func keep(t *testing.T, s *Store, cfg *config.Config, d ingest.Delivery) string {
	t.Helper()
	envs, refused := d.Envelopes(cfg.Gateway)
	if refused == nil {
		t.Fatalf("the delivery was not refused: %d envelopes", len(envs))
	}
	rec, body := NewRecord(d, refused)
	if already, err := s.Put(context.Background(), rec, body); err != nil || already {
		t.Fatalf("put: %v (already %v)", err, already)
	}
	return rec.ID
}

func open(t *testing.T, js jetstream.JetStream) *Store {
	t.Helper()
	s, err := New(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var renamed = []byte(`{"id":"evt_41","type":"reply","occurred_at":"2026-12-02T10:00:00Z","data":{"contact":{"email":"ana@northwind.example"}}}`)

// A delivery the parser refuses after the provider renamed a field is kept; replayed
// while the config still reads the old field, it is refused and nothing changes; once
// the config reads the new one, the replay stores its event with the id the gateway
// would give it, once, however often it is replayed — also past the stream's duplicate
// window with the index of stored ids forgotten.
func TestReplayAfterTheParserIsFixed(t *testing.T) {
	topo := brokertest.Topology
	topo.DuplicateWindow = time.Second
	conn := brokertest.Start(t, "", topo)
	ctx := context.Background()
	s := open(t, conn.JS)
	broken, fixed := parse(t, "created_at"), parse(t, "occurred_at")
	d := delivery(t, broken, "signer", http.Header{"Content-Type": {"application/json"}, "X-Sig": {"sha256=00"}}, renamed)
	id := keep(t, s, broken, d)
	if want := ID("acme", "signer", d.SHA256); id != want {
		t.Fatalf("id %s, want %s", id, want)
	}

	list := func(f Filter) []string {
		t.Helper()
		entries, err := s.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, e := range entries {
			if e.Body != nil || e.Kept != len(renamed) {
				t.Errorf("a listed entry: body %d bytes, kept %d", len(e.Body), e.Kept)
			}
			ids = append(ids, e.ID)
		}
		return ids
	}
	for _, c := range []struct {
		f    Filter
		want int
	}{{Filter{}, 1}, {Filter{Tenant: "acme", Endpoint: "signer", Reason: ingest.Malformed}, 1}, {Filter{Reason: ingest.BodyTooLarge}, 0}, {Filter{Tenant: "globex"}, 0}} {
		if got := list(c.f); len(got) != c.want {
			t.Errorf("list %+v: %v, want %d", c.f, got, c.want)
		}
	}
	for _, f := range []Filter{{Tenant: "acme.*"}, {Endpoint: ">"}, {Tenant: "Acme"}} {
		if _, err := s.List(ctx, f); err == nil || !strings.Contains(err.Error(), "is not an id") {
			t.Errorf("list %+v: %v, want refused", f, err)
		}
	}

	e, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// Refused: no why; still unparseable under the old config. Nothing changes.
	if _, err := s.Replay(ctx, fixed, e, "ana", " "); !errors.Is(err, dlq.ErrNoWhy) {
		t.Fatalf("replay without a why: %v", err)
	}
	if _, err := s.Replay(ctx, broken, e, "ana", "retry"); err == nil || !strings.Contains(err.Error(), "still refused: malformed_body: ") || !strings.Contains(err.Error(), "no created_at") {
		t.Fatalf("replay with the parser still broken: %v", err)
	}
	if planned, refused, err := s.Preview(ctx, broken, e); err != nil || refused == nil || planned != nil {
		t.Fatalf("preview with the parser still broken: %v %v %v", planned, refused, err)
	}
	if e, _ := s.Get(ctx, id); e.Status != Open || len(e.Actions) != 0 || brokertest.Count(t, conn, stream.Events) != 0 {
		t.Fatalf("a refused replay changed something: %+v, %d events", e, brokertest.Count(t, conn, stream.Events))
	}

	// Fixed: the event the gateway would store now, with its id, stored once.
	want, refused := delivery(t, fixed, "signer", d.Request.Header, renamed).Envelopes(fixed.Gateway)
	if refused != nil || len(want) != 1 {
		t.Fatalf("the fixed parser: %v %v", want, refused)
	}
	if planned, refused, err := s.Preview(ctx, fixed, e); err != nil || refused != nil || len(planned) != 1 || planned[0].ID != want[0].ID || planned[0].Stored {
		t.Fatalf("preview: %+v %v %v", planned, refused, err)
	}
	a, err := s.Replay(ctx, fixed, e, "ana", "time_field fixed")
	if err != nil || a.Stored != 1 || a.Duplicates != 0 || !slices.Equal(a.IDs, []string{want[0].ID}) || brokertest.Count(t, conn, stream.Events) != 1 {
		t.Fatalf("replay: %+v %v, %d events", a, err, brokertest.Count(t, conn, stream.Events))
	}
	st, _ := conn.JS.Stream(ctx, stream.Events)
	if m, err := st.GetMsg(ctx, 1); err != nil || m.Header.Get(jetstream.MsgIDHeader) != want[0].ID || m.Subject != want[0].StreamSubject() {
		t.Fatalf("stored: %v %v", m, err)
	}
	e, err = s.Get(ctx, id)
	if err != nil || e.Status != Replayed || len(e.Actions) != 1 || e.Actions[0].By != "ana" || e.Actions[0].Why != "time_field fixed" {
		t.Fatalf("after the replay: %+v %v", e, err)
	}
	if got := list(Filter{}); len(got) != 0 {
		t.Errorf("open after the replay: %v", got)
	}
	if got := list(Filter{All: true}); len(got) != 1 {
		t.Errorf("all after the replay: %v", got)
	}
	// Again: nothing new. Then past the duplicate window with the index forgotten:
	// still nothing, from the replays' own record.
	if a, err := s.Replay(ctx, fixed, e, "ben", "again"); err != nil || a.Stored != 0 || a.Duplicates != 1 {
		t.Fatalf("second replay: %+v %v", a, err)
	}
	time.Sleep(1200 * time.Millisecond)
	if err := conn.JS.DeleteKeyValue(ctx, stream.EventIndex); err != nil {
		t.Fatal(err)
	}
	for _, b := range stream.Buckets(topo) {
		if b.Bucket == stream.EventIndex {
			if _, err := conn.JS.CreateKeyValue(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
	}
	e, _ = s.Get(ctx, id)
	s = open(t, conn.JS)
	if a, err := s.Replay(ctx, fixed, e, "cy", "once more"); err != nil || a.Stored != 0 || a.Duplicates != 1 || brokertest.Count(t, conn, stream.Events) != 1 {
		t.Fatalf("replay past the window: %+v %v, %d events", a, err, brokertest.Count(t, conn, stream.Events))
	}
	if e, _ := s.Get(ctx, id); len(e.Actions) != 3 {
		t.Fatalf("actions: %+v", e.Actions)
	}
}

// A replay is refused, and changes nothing, for an id that is not one, an id kept
// nowhere, an endpoint the config no longer has, or one that is another provider's now.
func TestReplayRefusals(t *testing.T) {
	conn := brokertest.Start(t, "")
	ctx := context.Background()
	s := open(t, conn.JS)
	cfg := parse(t, "created_at")
	id := keep(t, s, cfg, delivery(t, cfg, "signer", http.Header{}, renamed))
	if _, err := s.Get(ctx, "qr_>"); err == nil || !strings.Contains(err.Error(), "is not a quarantine id") {
		t.Errorf("get qr_>: %v", err)
	}
	if _, err := s.Get(ctx, "qr_"+strings.Repeat("0", 32)); err == nil || !strings.Contains(err.Error(), "no quarantined delivery qr_000") {
		t.Errorf("get an unknown id: %v", err)
	}
	e, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	gone := parse(t, "occurred_at")
	gone.Tenants[0].Endpoints = gone.Tenants[0].Endpoints[1:]
	if _, err := s.Replay(ctx, gone, e, "ana", "x"); err == nil || !strings.Contains(err.Error(), "has no endpoint signer of tenant acme") {
		t.Errorf("endpoint gone: %v", err)
	}
	other := parse(t, "occurred_at")
	other.Tenants[0].Endpoints[0].Provider, other.Tenants[0].Endpoints[0].Generic = "instantly", nil
	if _, err := s.Replay(ctx, other, e, "ana", "x"); err == nil || !strings.Contains(err.Error(), "is a instantly endpoint now; the delivery came from generic") {
		t.Errorf("provider changed: %v", err)
	}
	if e, _ := s.Get(ctx, id); len(e.Actions) != 0 || brokertest.Count(t, conn, stream.Events) != 0 {
		t.Errorf("a refused replay changed something")
	}
}

// Nothing that authenticates a delivery is kept: credential-like headers, the
// endpoint's own signature and secret headers (whatever their names), its path token
// in another header, the secret a provider carries in the body; the path token is not
// in the kept path.
func TestNewRecordKeepsNoSecret(t *testing.T) {
	cfg := parse(t, "created_at")
	header := http.Header{"Content-Type": {"application/json"}, "User-Agent": {"Smartlead/2"}, "Authorization": {"Bearer a"},
		"Cookie": {"c=1"}, "X-Sig": {"sha256=ab"}, "X-Instantly-Key": {"instantly-SECRET"}, "X-Api-Key": {"k"}, "X-Request-Token": {"t"},
		"X-Forwarded-Uri": {"/hooks/signer/tok-signer-0123456789?x=1", "/hooks/instantly/tok-instantly-0123456789"}}
	for _, c := range []struct {
		endpoint string
		removed  []string
	}{
		{"signer", []string{"Authorization", "Cookie", "X-Api-Key", "X-Request-Token", "X-Sig"}},
		{"instantly", []string{"Authorization", "Cookie", "X-Api-Key", "X-Instantly-Key", "X-Request-Token"}},
	} {
		rec, _ := NewRecord(delivery(t, cfg, c.endpoint, header, renamed), &ingest.Refusal{Reason: ingest.Malformed, Message: "x"})
		if !slices.Equal(rec.Removed, c.removed) || len(rec.Header) != 4 || rec.Header.Get("User-Agent") != "Smartlead/2" || rec.Header.Get("X-Sig") != "" && c.endpoint == "signer" {
			t.Errorf("%s: kept %v, removed %v; want %v removed", c.endpoint, rec.Header, rec.Removed, c.removed)
		}
		// The endpoint's own path token, wherever it appears (another's is not its to know).
		want := map[string][]string{"signer": {"/hooks/signer/REDACTED?x=1", "/hooks/instantly/tok-instantly-0123456789"},
			"instantly": {"/hooks/signer/tok-signer-0123456789?x=1", "/hooks/instantly/REDACTED"}}[c.endpoint]
		if got := rec.Header["X-Forwarded-Uri"]; !slices.Equal(got, want) {
			t.Errorf("%s: X-Forwarded-Uri kept as %v, want %v", c.endpoint, got, want)
		}
		if rec.Path != "/hooks/"+c.endpoint+"/REDACTED" {
			t.Errorf("%s: path %s", c.endpoint, rec.Path)
		}
	}
	body := []byte(`{"secret_key":"smartlead-SECRET","event_type":"EMAIL_REPLY"}`)
	_, kept := NewRecord(delivery(t, cfg, "smartlead", http.Header{}, body), &ingest.Refusal{Reason: ingest.Malformed, Message: "x"})
	if string(kept) != `{"secret_key":"REDACTED","event_type":"EMAIL_REPLY"}` {
		t.Errorf("smartlead body kept as %s", kept)
	}
}

// A body that does not fit the server's max_payload beside its record is cut to what
// fits, marked cut, kept once, and refused by a replay with its reason.
func TestPutCutsWhatDoesNotFit(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), MaxPayload: 64 << 10, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if err := stream.Ensure(ctx, js, brokertest.Topology); err != nil {
		t.Fatal(err)
	}
	s := open(t, js)
	cfg := parse(t, "created_at")
	cfg.Gateway.BodyLimit = 1024
	body := []byte(`{"pad":"` + strings.Repeat("x", 100<<10) + `"}`)
	d := delivery(t, cfg, "signer", http.Header{"Content-Type": {"application/json"}}, body)
	id := keep(t, s, cfg, d)
	rec, kept := NewRecord(d, &ingest.Refusal{Reason: ingest.BodyTooLarge, Message: "x"})
	if already, err := s.Put(ctx, rec, kept); err != nil || !already {
		t.Fatalf("put again: %v %v", already, err)
	}
	e, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !e.Cut || e.Kept != len(e.Body) || e.Kept >= 64<<10 || e.Kept < 60<<10 || e.Size != len(body) || string(e.Body) != string(body[:e.Kept]) {
		t.Fatalf("cut: %v, kept %d of %d", e.Cut, e.Kept, e.Size)
	}
	cfg.Gateway.BodyLimit = 1 << 20
	if _, err := s.Replay(ctx, cfg, e, "ana", "limit raised"); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("its body was cut when it was kept (%d of %d bytes): it cannot be replayed", e.Kept, e.Size)) {
		t.Fatalf("replay of a cut body: %v", err)
	}
}
