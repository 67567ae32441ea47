package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/config"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/platform/accounts"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/providers/registry"
	"exacto.dev/pkg/service"
	"exacto.dev/pkg/stream"
	"exacto.dev/services/gateway/server"
)

// pipeline is the whole flow in one test process: an embedded JetStream server on a
// temporary store, the sandbox of the three platforms, the gateway on a loopback port
// and the consumer services, each started with its own Run as `exacto up` does.
type pipeline struct {
	t    *testing.T
	conn *broker.Conn
	sb   *sandbox.Server
	env  *service.Env

	mu        sync.Mutex
	gwURL     string
	stopGW    func()
	stopParts []func()
}

// pipelineConfig: one tenant with an endpoint of each provider, owners for dead
// letters and CRM routing (interested replies to owner 101, the rest to 303).
const pipelineConfig = `
tenants:
  - id: acme
    owners: {default: revops@acme.example, reply.received: sdr-team}
    routing:
      - {label: interested, owner: "101"}
      - {provider: instantly, owner: "303"}
    endpoints:
      # max_event_age: the dead-letter tests store replies four and five days old.
      - {id: instantly, provider: instantly, path_token: tok-instantly-0123456789, max_event_age: 168h}
      - {id: stripe, provider: stripe, path_token: tok-stripe-0123456789, secrets: [whsec_test_secret]}
      - {id: smartlead, provider: smartlead, path_token: tok-smartlead-0123456789, secrets: [smartlead-secret-key]}
      - {id: hubspot, provider: hubspot, path_token: tok-hubspot-0123456789, secrets: [hubspot-client-secret]}
      - {id: meta, provider: meta, path_token: tok-meta-0123456789, secrets: [meta-app-secret], verify_token: meta-verify-token}
`

func startPipeline(t *testing.T) *pipeline {
	t.Helper()
	cfg, err := config.Parse([]byte(pipelineConfig), "test", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTPAddr = "127.0.0.1:0"
	p := &pipeline{t: t, conn: brokertest.Start(t, ""), sb: sandbox.Start(t)}
	p.env = &service.Env{Config: cfg, Conn: p.conn, Log: slog.New(slog.DiscardHandler), Platforms: accounts.New(cfg, p.sb.URL, accounts.Pacing{})}
	t.Cleanup(func() {
		p.mu.Lock()
		stops := append([]func(){p.stopGW}, p.stopParts...)
		p.mu.Unlock()
		for _, stop := range stops {
			if stop != nil {
				stop()
			}
		}
	})
	p.startGateway()
	return p
}

// startGateway runs the gateway (and its indexer) until stopGateway.
func (p *pipeline) startGateway() {
	p.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := server.Run(ctx, p.env.Config, p.conn.JS, p.env.Log, func(a string) { addr <- a }); err != nil {
			p.t.Errorf("gateway: %v", err)
		}
	}()
	select {
	case a := <-addr:
		p.mu.Lock()
		p.gwURL, p.stopGW = "http://"+a, func() { cancel(); <-done }
		p.mu.Unlock()
	case <-time.After(20 * time.Second):
		p.t.Fatal("the gateway did not listen")
	}
}

func (p *pipeline) restartGateway() {
	p.mu.Lock()
	stop := p.stopGW
	p.stopGW = nil
	p.mu.Unlock()
	stop()
	p.startGateway()
}

// start runs a consumer service until the test ends, and waits until it is bound.
func (p *pipeline) start(name string, run service.Run) {
	p.t.Helper()
	p.startIn(p.env, name, run)
}

// startIn runs a consumer service with env (another replica's platforms, say).
func (p *pipeline) startIn(env *service.Env, name string, run service.Run) {
	p.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	up := make(chan struct{})
	done := make(chan struct{})
	var once sync.Once
	go func() {
		defer close(done)
		if err := run(ctx, env, func() { once.Do(func() { close(up) }) }); err != nil && ctx.Err() == nil {
			p.t.Errorf("%s: %v", name, err)
		}
	}()
	p.mu.Lock()
	p.stopParts = append(p.stopParts, func() { cancel(); <-done })
	p.mu.Unlock()
	select {
	case <-up:
	case <-done:
		p.t.Fatalf("%s stopped before it was up", name)
	case <-time.After(30 * time.Second):
		p.t.Fatalf("%s did not bind its consumer", name)
	}
}

// instantlyEvent is a webhook body as Instantly sends it.
func instantlyEvent(typ, lead, campaign, emailID, text string, at time.Time) []byte {
	b, _ := json.Marshal(map[string]any{
		"timestamp": at.UTC().Format("2006-01-02T15:04:05.000Z"), "event_type": typ,
		"workspace": "9f1c2d3e-4b5a-6c7d-8e9f-0a1b2c3d4e5f", "campaign_id": campaign, "campaign_name": "Founders Q4",
		"lead_email": lead, "email_account": "alex@getoutbound.example", "step": 2, "email_id": emailID,
		"reply_subject": "Re: onboarding", "reply_text": text, "reply_text_snippet": text,
	})
	return b
}

// happened tells the sandbox what each body says happened at Instantly, as Instantly
// holds it before its webhook fires: the consumers confirm unsigned events there.
func (p *pipeline) happened(bodies ...[]byte) {
	p.t.Helper()
	seen := map[string]bool{}
	for _, b := range bodies {
		if seen[string(b)] {
			continue
		}
		seen[string(b)] = true
		if err := p.sb.Happened("instantly", b); err != nil {
			p.t.Fatal(err)
		}
	}
}

// post delivers body to the Instantly endpoint, after what it says happened at
// Instantly, and returns the stored event ids.
func (p *pipeline) post(body []byte) []string {
	p.t.Helper()
	p.happened(body)
	return p.postForged(body)
}

// postForged delivers body as post does, but Instantly never saw what it says: a
// forgery sent to the endpoint's URL.
func (p *pipeline) postForged(body []byte) []string {
	p.t.Helper()
	p.mu.Lock()
	url := p.gwURL + "/hooks/instantly/tok-instantly-0123456789"
	p.mu.Unlock()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		p.t.Fatalf("webhook: %d %s", resp.StatusCode, data)
	}
	var out struct {
		IDs []string `json:"ids"`
	}
	if err := json.Unmarshal(data, &out); err != nil || len(out.IDs) == 0 {
		p.t.Fatalf("webhook answer %s: %v", data, err)
	}
	return out.IDs
}

// postSigned delivers body to endpoint ep (hubspot, meta, stripe), signed with its
// secret by the provider's own signing helper, and returns the stored event ids.
func (p *pipeline) postSigned(ep string, body []byte) []string {
	p.t.Helper()
	var endpoint config.Endpoint
	for _, e := range p.env.Config.Tenants[0].Endpoints {
		if e.ID == ep {
			endpoint = e
		}
	}
	spec, ok := registry.Lookup(endpoint.Provider)
	if !ok {
		p.t.Fatalf("no endpoint %q", ep)
	}
	p.mu.Lock()
	url := p.gwURL + "/hooks/" + ep + "/" + endpoint.PathToken.Value
	p.mu.Unlock()
	h, b, err := spec.Sign(http.MethodPost, url, body, endpoint.Secrets[0].Value, time.Now())
	if err != nil {
		p.t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out struct {
		IDs []string `json:"ids"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(data, &out) != nil || len(out.IDs) == 0 {
		p.t.Fatalf("webhook to %s: %d %s", ep, resp.StatusCode, data)
	}
	return out.IDs
}

// status is what consumer service name has done with event id (Status "" when
// nothing yet).
func (p *pipeline) status(name, id string) guard.Record {
	p.t.Helper()
	kv, err := p.conn.JS.KeyValue(context.Background(), stream.Guards)
	if err != nil {
		p.t.Fatal(err)
	}
	sub, ok := stream.SubscriptionOf(name)
	if !ok {
		p.t.Fatalf("no consumer %s", name)
	}
	seq, err := server.Lookup(context.Background(), p.conn.JS, id)
	if err != nil {
		seq = 0 // not indexed yet: nothing is completed past an ack floor
	}
	env, _, _ := stream.Load(context.Background(), p.conn.JS, id) // when indexed
	env.ID = id
	rec, _, err := consumer.NewStatuses(p.conn.JS, kv).OfEvent(context.Background(), sub, env, seq)
	if err != nil {
		p.t.Fatal(err)
	}
	return rec
}

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(25 * time.Millisecond) {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
	}
}

// completedIn waits until id is completed in every consumer named.
func (p *pipeline) completedIn(d time.Duration, id string, consumers ...string) {
	p.t.Helper()
	for _, c := range consumers {
		eventually(p.t, d, fmt.Sprintf("%s completed in %s (now %+v)", id, c, p.status(c, id)), func() bool {
			return p.status(c, id).Status == guard.Completed
		})
	}
}

// read returns every message of stream name on subject filter, decoded.
func (p *pipeline) read(name, filter string) []map[string]any {
	p.t.Helper()
	return readStream(p.t, p.conn.JS, name, filter)
}

// readStream returns every message of stream name on subject filter, decoded. It reads
// in batches: a full-size chaos run has tens of thousands to read.
func readStream(t *testing.T, js jetstream.JetStream, name, filter string) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for {
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumPending == 0 {
			return out
		}
		batch, err := c.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for msg := range batch.Messages() {
			var m map[string]any
			json.Unmarshal(msg.Data(), &m)
			out = append(out, m)
		}
		if err := batch.Error(); err != nil {
			t.Fatal(err)
		}
	}
}

// derived returns the envelopes of type typ on the stream whose cause is id.
func (p *pipeline) derived(typ, cause string) []map[string]any {
	var out []map[string]any
	for _, env := range p.read(stream.Events, "events.*.*."+typ) {
		if data, _ := env["data"].(map[string]any); data["cause"] == cause {
			out = append(out, env)
		}
	}
	return out
}

// deadLetters returns the EXACTO_DLQ entries of consumer.
func (p *pipeline) deadLetters(consumer string) []map[string]any {
	return p.read(stream.DLQ, "dlq."+consumer+".>")
}

// notesFor is the HubSpot sandbox's notes carrying event id as their external id.
func (p *pipeline) notesFor(id string) []sandbox.Object {
	var out []sandbox.Object
	for _, n := range p.sb.Notes() {
		if n.Properties["exacto_event_id"] == id {
			out = append(out, n)
		}
	}
	return out
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
