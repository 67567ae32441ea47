package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/providers/registry"
	"exacto.dev/pkg/providers/smartlead"
	"exacto.dev/pkg/providers/stripe"
)

// `exacto send --provider smartlead --signing-secret S` signs X-Smartlead-Signature over
// the body it sends (secret_key filled in), as an endpoint with signing_secrets checks.
func TestSendSmartleadSigned(t *testing.T) {
	p, err := smartlead.New(providers.Config{Secrets: []string{"body-secret"}, SigningSecrets: []string{"signing-secret"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := p.Verify(&providers.Request{Method: r.Method, Header: r.Header, Body: body, Now: time.Now()}); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	ctx, now := context.Background(), time.Now()
	sample, err := smartlead.Spec.Sample("EMAIL_REPLY", now)
	if err != nil {
		t.Fatal(err)
	}
	d := outgoing{spec: smartlead.Spec, body: sample, secret: "body-secret", signingSecret: "signing-secret", to: srv.URL}
	if status, body, err := d.send(ctx, now); err != nil || status != 200 {
		t.Fatalf("signed: %d %s %v", status, body, err)
	}
	d.signingSecret = ""
	status, body, err := d.send(ctx, now)
	if err != nil || status != http.StatusUnauthorized || !strings.Contains(body, "missing signature") {
		t.Fatalf("without the signing secret: %d %s %v", status, body, err)
	}
}

// --signing-secret is refused for a provider without an optional signature.
func TestSendSigningSecretOnlyForSmartlead(t *testing.T) {
	cmd := sendCmd()
	cmd.SetArgs([]string{"--provider", stripe.Spec.Name, "--to", "http://127.0.0.1:1/hooks/x/y", "--secret", "whsec_x", "--signing-secret", "s"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "no optional signature") {
		t.Fatalf("got %v", err)
	}
}

// A config of one tenant whose endpoints read their secrets from the environment.
const sendConfig = `
http_addr: 0.0.0.0:18080
tenants:
  - id: acme
    endpoints:
      - id: instantly-main
        provider: instantly
        path_token: acme-instantly-token-0123456789
        secrets: [env:ACME_INSTANTLY_SECRET]
      - id: stripe-main
        provider: stripe
        path_token: acme-stripe-token-0123456789
        secrets: [env:ACME_STRIPE_SECRET]
`

func sendConfigFile(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "exacto.yaml")
	if err := os.WriteFile(f, []byte(sendConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// --endpoint takes the provider, the URL and the secret from the config; --email and
// --campaign put that lead and campaign in the sample, another event than the default.
func TestSendEndpointFromConfig(t *testing.T) {
	t.Setenv("ACME_INSTANTLY_SECRET", "s3cret")
	t.Setenv("ACME_STRIPE_SECRET", "whsec_x")
	f := sendFlags{endpoint: "instantly-main", config: sendConfigFile(t), email: "ana@example.com", campaign: "cmp-7", at: "2026-12-02T10:00:00Z", sandbox: "none"}
	d, err := f.outgoing()
	if err != nil {
		t.Fatal(err)
	}
	if d.spec.Name != "instantly" || d.to != "http://127.0.0.1:18080/hooks/instantly-main/acme-instantly-token-0123456789" || d.secret != "s3cret" {
		t.Fatalf("provider %s, to %s, secret %q", d.spec.Name, d.to, d.secret)
	}
	for _, want := range []string{`"lead_email":"ana@example.com"`, `"campaign_id":"cmp-7"`, `"event_type":"reply_received"`} {
		if !strings.Contains(string(d.body), want) {
			t.Errorf("body lacks %s: %s", want, d.body)
		}
	}
	f.gateway = "http://10.0.0.7:9000/"
	if g, err := f.outgoing(); err != nil || g.to != "http://10.0.0.7:9000/hooks/instantly-main/acme-instantly-token-0123456789" {
		t.Fatalf("--gateway: %v %s", err, g.to)
	}
	f.gateway, f.email, f.campaign = "", "", ""
	plain, err := f.outgoing()
	if err != nil || bytes.Equal(plain.body, d.body) || strings.Contains(string(plain.body), "ana@example.com") {
		t.Fatalf("without --email: %v %s", err, plain.body)
	}
	// Another endpoint's variable unset does not stop a send to this one.
	t.Setenv("ACME_STRIPE_SECRET", "")
	if d, err := f.outgoing(); err != nil || d.secret != "s3cret" {
		t.Fatalf("with stripe-main's secret unset: %v, secret %q", err, d.secret)
	}
	// Its own secret unset, --secret given: sent with that, as with --to.
	g := sendFlags{endpoint: "stripe-main", config: f.config, secret: "whsec_given", sandbox: "none"}
	if d, err := g.outgoing(); err != nil || d.secret != "whsec_given" {
		t.Fatalf("--secret for an endpoint whose variable is unset: %v, secret %q", err, d.secret)
	}
	// Smartlead's optional signature's secret unset: sent without it, and said.
	sl := filepath.Join(t.TempDir(), "exacto.yaml")
	os.WriteFile(sl, []byte(sendConfig+`      - id: smartlead-main
        provider: smartlead
        path_token: acme-smartlead-token-0123456789
        secrets: [sl-secret]
        signing_secrets: [env:ACME_UNSET_SIGNING]
`), 0o600)
	s := sendFlags{endpoint: "smartlead-main", config: sl, sandbox: "none"}
	if d, err := s.outgoing(); err != nil || d.signingSecret != "" || len(d.notes) != 1 || !strings.Contains(d.notes[0], "sent without its optional signature") || !strings.Contains(d.notes[0], "ACME_UNSET_SIGNING is not set") {
		t.Fatalf("smartlead's signing secret unset: %v, notes %q", err, d.notes)
	}
	// Its path token unset: no URL to send to.
	noToken := filepath.Join(t.TempDir(), "exacto.yaml")
	os.WriteFile(noToken, []byte(strings.Replace(sendConfig, "path_token: acme-stripe-token-0123456789", "path_token: env:ACME_UNSET_TOKEN", 1)), 0o600)
	g.config = noToken
	if _, err := g.outgoing(); err == nil || !strings.Contains(err.Error(), "--endpoint stripe-main: no URL without its path token") || !strings.Contains(err.Error(), "ACME_UNSET_TOKEN is not set") {
		t.Fatalf("path token unset: %v", err)
	}
}

// Every refusal says what is wrong and what to give instead; nothing is sent unsigned
// to an endpoint that expects a signature.
func TestSendRefusals(t *testing.T) {
	file := sendConfigFile(t)
	t.Setenv("ACME_INSTANTLY_SECRET", "")
	t.Setenv("ACME_STRIPE_SECRET", "")
	for name, tc := range map[string]struct {
		f    sendFlags
		want string
	}{
		"secret's variable unset":       {sendFlags{endpoint: "stripe-main", config: file}, "ACME_STRIPE_SECRET is not set"},
		"unset, with --to":              {sendFlags{provider: "stripe", to: "http://127.0.0.1:1/hooks/stripe-main/x", config: file}, "ACME_STRIPE_SECRET is not set"},
		"endpoint not in the config":    {sendFlags{provider: "stripe", to: "http://127.0.0.1:1/hooks/other/x"}, `endpoint "other" of http://127.0.0.1:1/hooks/other/x is not in built-in demo; give --secret`},
		"unknown endpoint":              {sendFlags{endpoint: "nope"}, "no such endpoint in built-in demo (endpoints: instantly, smartlead, hubspot, meta, stripe, standard, calendly)"},
		"provider against endpoint":     {sendFlags{endpoint: "stripe", provider: "instantly"}, "endpoint stripe is a stripe endpoint"},
		"neither endpoint nor url":      {sendFlags{}, "--endpoint ID or --to URL is required"},
		"url without provider":          {sendFlags{to: "http://127.0.0.1:1/hooks/x/y"}, "--provider is required with --to"},
		"gateway with a url":            {sendFlags{to: "http://127.0.0.1:1/hooks/x/y", provider: "stripe", gateway: "http://127.0.0.1:2"}, "--gateway goes with --endpoint"},
		"unknown event":                 {sendFlags{endpoint: "stripe", event: "reply_received"}, "no sample event \"reply_received\" (known: customer.updated"},
		"an e-mail meta does not carry": {sendFlags{endpoint: "meta", email: "ana@example.com"}, "--email does not apply"},
		"a campaign stripe lacks":       {sendFlags{endpoint: "stripe", campaign: "c1"}, "--campaign does not apply"},
		"smartlead's numeric campaign":  {sendFlags{endpoint: "smartlead", campaign: "q4"}, "Smartlead's campaign ids are numbers"},
		"bad time":                      {sendFlags{endpoint: "stripe", at: "yesterday"}, "want an RFC 3339 time"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Chdir(t.TempDir()) // no ./exacto.yaml: the built-in demo
			if _, err := tc.f.outgoing(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// `exacto send --help` lists each provider's events.
func TestSendHelpListsEvents(t *testing.T) {
	cmd := sendCmd()
	for _, name := range registry.Names() {
		spec, _ := registry.Lookup(name)
		for _, ev := range spec.Events {
			if !strings.Contains(cmd.Long, ev) {
				t.Errorf("help lacks %s's %s", name, ev)
			}
		}
	}
}
