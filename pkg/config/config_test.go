package config

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/ratelimit"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

const good = `
tenants:
  - id: acme
    endpoints:
      - id: instantly-main
        provider: instantly
        path_token: env:ACME_INSTANTLY_TOKEN
        secrets: [env:ACME_INSTANTLY_SECRET, env:ACME_INSTANTLY_SECRET_OLD]
        tolerance: 5m
        public_url: https://hooks.example.com/hooks/instantly-main/TOKEN
      - id: meta-main
        provider: meta
        path_token: env:ACME_META_TOKEN
        secrets: [env:ACME_META_APP_SECRET]
        verify_token: env:ACME_META_VERIFY_TOKEN
`

// hubspotEndpoint follows good's endpoints.
const hubspotEndpoint = `      - id: hubspot-main
        provider: hubspot
        path_token: tok-hubspot-0123456789
        secrets: [env:ACME_META_APP_SECRET]
`

var goodEnv = map[string]string{
	"ACME_INSTANTLY_TOKEN":      "tok-0123456789abcdef",
	"ACME_INSTANTLY_SECRET":     "s1",
	"ACME_INSTANTLY_SECRET_OLD": "s0",
	"ACME_META_TOKEN":           "tok-meta-0123456789",
	"ACME_META_APP_SECRET":      "app-secret",
	"ACME_META_VERIFY_TOKEN":    "verify",
}

func TestParseContractExample(t *testing.T) {
	c, err := Parse([]byte(good), "exacto.yaml", env(goodEnv))
	if err != nil {
		t.Fatal(err)
	}
	ep := c.Tenants[0].Endpoints[0]
	if ep.PathToken.Value != "tok-0123456789abcdef" || len(ep.Secrets) != 2 || ep.Secrets[1].Value != "s0" {
		t.Fatalf("secrets not resolved: %+v", ep)
	}
	if ep.Tolerance != 5*time.Minute {
		t.Fatalf("tolerance %v", ep.Tolerance)
	}
	if ep.Line != 5 || c.Tenants[0].Endpoints[1].Line != 11 {
		t.Fatalf("endpoint lines %d %d", ep.Line, c.Tenants[0].Endpoints[1].Line)
	}
	if c.HTTPAddr != DefaultHTTPAddr || c.NATS.Sync != "always" || c.NATS.DuplicateWindow != 2*time.Minute || c.Gateway.BodyLimit != 1<<20 ||
		c.Gateway.DedupTTL != 8*24*time.Hour { // a week, but meta-main takes events up to 8 days old (WhatsApp retries for 7)
		t.Fatalf("defaults: %+v", c)
	}
	if len(c.Warnings) != 0 {
		t.Fatalf("unexpected warnings: %v", c.Warnings)
	}
	if s := ep.Secrets[0].String(); s != "env:ACME_INSTANTLY_SECRET" {
		t.Fatalf("String shows %q", s)
	}
}

func TestEnvOverridesFile(t *testing.T) {
	m := map[string]string{"EXACTO_HTTP_ADDR": "127.0.0.1:9999", "EXACTO_NATS_URL": "nats://127.0.0.1:4333", "EXACTO_DATA_DIR": "/tmp/x"}
	for k, v := range goodEnv {
		m[k] = v
	}
	c, err := Parse([]byte("http_addr: 127.0.0.1:1\n"+good), "f", env(m))
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != "127.0.0.1:9999" || c.NATS.URL != "nats://127.0.0.1:4333" || c.DataDir != "/tmp/x" {
		t.Fatalf("env not applied: %+v", c)
	}
}

func TestLiteralSecretWarns(t *testing.T) {
	doc := strings.ReplaceAll(good, "env:ACME_INSTANTLY_SECRET_OLD", "literal-secret")
	c, err := Parse([]byte(doc), "exacto.yaml", env(goodEnv))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "exacto.yaml:8") {
		t.Fatalf("warnings %v", c.Warnings)
	}
}

func TestFileSecret(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "secret")
	os.WriteFile(p, []byte("from-file\n"), 0o600)
	doc := strings.ReplaceAll(good, "env:ACME_META_APP_SECRET", "file:"+p)
	c, err := Parse([]byte(doc), "f", env(goodEnv))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Tenants[0].Endpoints[1].Secrets[0].Value; got != "from-file" {
		t.Fatalf("file secret %q", got)
	}
}

// Every refusal names the file and line, and never the secret's value.
func TestRefusals(t *testing.T) {
	cases := []struct {
		name, doc string
		env       map[string]string
		want      string
	}{
		{"unknown provider", strings.Replace(good, "provider: instantly", "provider: mailchimp", 1), goodEnv, "exacto.yaml:5: endpoint instantly-main: unknown provider \"mailchimp\""},
		{"missing env secret", good, without(goodEnv, "ACME_META_APP_SECRET"), "exacto.yaml:14: endpoint meta-main secrets[0]: environment variable ACME_META_APP_SECRET is not set"},
		{"signed provider without secret", strings.Replace(good, "        secrets: [env:ACME_META_APP_SECRET]\n", "", 1), goodEnv, "exacto.yaml:11: endpoint meta-main: provider meta signs its webhooks; at least one secret is required"},
		{"empty secret list", strings.Replace(good, "[env:ACME_META_APP_SECRET]", "[]", 1), goodEnv, "at least one secret is required"},
		{"no path token", strings.Replace(good, "        path_token: env:ACME_META_TOKEN\n", "", 1), goodEnv, "endpoint meta-main: path_token is required"},
		{"meta without verify token", strings.Replace(good, "        verify_token: env:ACME_META_VERIFY_TOKEN\n", "", 1), goodEnv, "needs verify_token"},
		{"bad endpoint id", strings.Replace(good, "id: meta-main", "id: Meta_Main", 1), goodEnv, "endpoint id \"Meta_Main\""},
		{"duplicate endpoint", strings.Replace(good, "id: meta-main", "id: instantly-main", 1), goodEnv, "already declared at line 5"},
		{"unknown field", strings.Replace(good, "tolerance: 5m", "tolerence: 5m", 1), goodEnv, `exacto.yaml:9: unknown field "tolerence" (did you mean "tolerance"?)`},
		{"bad duration", strings.Replace(good, "tolerance: 5m", "tolerance: soon", 1), goodEnv, "soon"},
		{"bad public url", strings.Replace(good, "https://hooks.example.com/hooks/instantly-main/TOKEN", "hooks.example.com", 1), goodEnv, "public_url"},
		{"bad sync", "nats:\n  sync: sometimes\n" + good, goodEnv, "nats.sync"},
		{"no tenants", "http_addr: 127.0.0.1:8080\n", goodEnv, "no tenants"},
		{"bad address", "http_addr: nonsense\n" + good, goodEnv, "http_addr"},
		{"secret as a map", strings.Replace(good, "path_token: env:ACME_META_TOKEN", "path_token: {a: b}", 1), goodEnv, "line 13: a secret is a string"},
		{"signing secrets on another provider", strings.Replace(good, "        tolerance: 5m\n", "        signing_secrets: [env:ACME_META_APP_SECRET]\n", 1), goodEnv,
			"exacto.yaml:5: endpoint instantly-main: signing_secrets is only for smartlead"},
		{"signature versions on another provider", strings.Replace(good, "        tolerance: 5m\n", "        signature_versions: [v1]\n", 1), goodEnv,
			"exacto.yaml:5: endpoint instantly-main: signature_versions is only for a provider with several (hubspot)"},
		{"unknown signature version", good + hubspotEndpoint + "        signature_versions: [v3, v0]\n", goodEnv,
			`exacto.yaml:16: endpoint hubspot-main: hubspot: signature_versions: unknown "v0" (known: v3, v2, v1)`},
		{"a rate of zero", "gateway: {rate_limit: {endpoint: 0}}\n" + good, goodEnv, `line 1: "0" is not a positive rate a second (or off)`},
		{"a rate that is NaN", "gateway: {rate_limit: {endpoint: NaN}}\n" + good, goodEnv, `line 1: "NaN" is not a positive rate a second (or off)`},
		{"a rate that is no number", "gateway: {rate_limit: {tenant: lots}}\n" + good, goodEnv, `line 1: "lots" is not a positive rate a second (or off)`},
		{"a negative event limit", strings.Replace(good, "  - id: acme\n", "  - id: acme\n    event_limit: -5\n", 1), goodEnv, "tenant acme: event_limit must be positive"},
		{"a retention under a day", strings.Replace(good, "  - id: acme\n", "  - id: acme\n    retention: {payloads: 12h}\n", 1), goodEnv, "tenant acme: retention.payloads 12h0m0s: want at least a day (1d)"},
		{"a retention that is no age", strings.Replace(good, "  - id: acme\n", "  - id: acme\n    retention: {events: forever}\n", 1), goodEnv, `"forever" is not an age (90d, or a duration: 2160h)`},
		{"a negative retention", strings.Replace(good, "  - id: acme\n", "  - id: acme\n    retention: {events: -3d}\n", 1), goodEnv, `"-3d" is not an age`},
		{"a negative store limit", "gateway: {store_limit: -1}\n" + good, goodEnv, "gateway.store_limit and gateway.min_free_disk are sizes in bytes"},
		{"a negative burst", "gateway: {rate_limit: {burst: -1s}}\n" + good, goodEnv, "gateway.rate_limit.burst must be positive"},
		{"negative max event age", strings.Replace(good, "        tolerance: 5m\n", "        max_event_age: -1h\n", 1), goodEnv,
			"exacto.yaml:5: endpoint instantly-main: max_event_age must be positive"},
		{"max event age past what the index remembers", "gateway: {dedup_ttl: 200h}\n" + strings.Replace(good, "        tolerance: 5m\n", "        max_event_age: 201h\n", 1), goodEnv,
			"exacto.yaml:6: endpoint instantly-main: events up to 201h0m0s old are taken (max_event_age), longer than gateway.dedup_ttl 200h0m0s remembers their ids"},
		{"an index that forgets before the default age", "gateway: {dedup_ttl: 48h}\n" + good, goodEnv,
			"endpoint instantly-main: events up to 96h0m0s old are taken (max_event_age), longer than gateway.dedup_ttl 48h0m0s"},
		{"missing env signing secret", smartleadSigned, without(goodEnv, "ACME_SMARTLEAD_SIGNING"), "exacto.yaml:20: endpoint smartlead-main signing_secrets[0]: environment variable ACME_SMARTLEAD_SIGNING is not set"},
		{"empty signing secret", strings.Replace(smartleadSigned, "[env:ACME_SMARTLEAD_SIGNING]", `[""]`, 1), goodEnv, "exacto.yaml:16: endpoint smartlead-main: smartlead signing_secrets: secret 1 is empty"},
		{"signing secret as a map", strings.Replace(smartleadSigned, "[env:ACME_SMARTLEAD_SIGNING]", "[{a: b}]", 1), goodEnv, "line 20: a secret is a string"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc), "exacto.yaml", env(tc.env))
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
			for _, v := range goodEnv {
				if len(v) > 6 && strings.Contains(err.Error(), v) {
					t.Fatalf("error leaks a secret value: %q", err)
				}
			}
		})
	}
}

// smartleadSigned is good with a Smartlead endpoint that verifies X-Smartlead-Signature.
const smartleadSigned = good + `      - id: smartlead-main
        provider: smartlead
        path_token: env:ACME_META_TOKEN
        secrets: [env:ACME_INSTANTLY_SECRET]
        signing_secrets: [env:ACME_SMARTLEAD_SIGNING]
`

func TestSigningSecrets(t *testing.T) {
	m := map[string]string{"ACME_SMARTLEAD_SIGNING": "sl-signing-0123456789"}
	for k, v := range goodEnv {
		m[k] = v
	}
	c, err := Parse([]byte(smartleadSigned), "exacto.yaml", env(m))
	if err != nil {
		t.Fatal(err)
	}
	pc := c.Tenants[0].Endpoints[2].ProviderConfig()
	if len(pc.SigningSecrets) != 1 || pc.SigningSecrets[0] != "sl-signing-0123456789" || len(pc.Secrets) != 1 {
		t.Fatalf("provider config %+v", pc)
	}
	if got := c.Tenants[0].Endpoints[0].ProviderConfig().SigningSecrets; got != nil {
		t.Fatalf("an endpoint without signing_secrets got %v", got)
	}
	// A literal signing secret is accepted with a warning naming its line.
	c, err = Parse([]byte(strings.Replace(smartleadSigned, "env:ACME_SMARTLEAD_SIGNING", "literal-signing", 1)), "exacto.yaml", env(goodEnv))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "exacto.yaml:20: endpoint smartlead-main signing_secrets[0] is a literal secret") {
		t.Fatalf("warnings %v", c.Warnings)
	}
}

func TestDemoLoads(t *testing.T) {
	c, err := Parse([]byte(Demo), "built-in demo", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Tenants) != 1 || len(c.Tenants[0].Endpoints) < 7 {
		t.Fatalf("demo: %+v", c.Tenants)
	}
	if len(c.Warnings) != 0 {
		t.Fatalf("demo warns: %v", c.Warnings)
	}
}

func without(m map[string]string, key string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}

func TestOwners(t *testing.T) {
	doc := strings.Replace(good, "  - id: acme\n", "  - id: acme\n    owners: {default: revops@acme.example, reply.received: sdr-team}\n", 1)
	c, err := Parse([]byte(doc), "f", env(goodEnv))
	if err != nil {
		t.Fatal(err)
	}
	if c.Owner("acme", "reply.received") != "sdr-team" || c.Owner("acme", "email.bounced") != "revops@acme.example" || c.Owner("globex", "reply.received") != "" {
		t.Fatalf("owners: %q %q", c.Owner("acme", "reply.received"), c.Owner("acme", "email.bounced"))
	}
	bad := strings.Replace(good, "  - id: acme\n", "  - id: acme\n    owners: {replies: sdr-team}\n", 1)
	if _, err := Parse([]byte(bad), "f", env(goodEnv)); err == nil || !strings.Contains(err.Error(), `owners: "replies" is not an event type`) {
		t.Fatalf("unknown owner type: %v", err)
	}
}

const withPlatforms = `    platforms:
      instantly: {api_key: env:ACME_INSTANTLY_API_KEY}
      hubspot: {api_key: env:ACME_HUBSPOT_TOKEN, base_url: "https://hubspot-proxy.example.com", rate: "190/10s"}
    routing:
      - {campaign: camp-1, label: interested, owner: "101"}
      - {provider: smartlead, owner: "202"}
      - {owner: "303"}
`

func platformsEnv() map[string]string {
	m := map[string]string{"ACME_INSTANTLY_API_KEY": "inst-key-0123456789", "ACME_HUBSPOT_TOKEN": "pat-na1-0123456789"}
	for k, v := range goodEnv {
		m[k] = v
	}
	return m
}

func TestPlatformsAndRouting(t *testing.T) {
	doc := strings.Replace(good, "  - id: acme\n", "  - id: acme\n"+withPlatforms, 1)
	c, err := Parse([]byte(doc), "f", env(platformsEnv()))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Tenants[0].Platforms
	if p.Instantly == nil || p.Instantly.APIKey.Value != "inst-key-0123456789" || p.Smartlead != nil || p.HubSpot.BaseURL != "https://hubspot-proxy.example.com" {
		t.Fatalf("platforms: %+v", p)
	}
	if want := []ratelimit.Rate{{N: 190, Per: 10 * time.Second}}; !slices.Equal(p.HubSpot.Rates, want) || p.Instantly.Rates != nil {
		t.Fatalf("rates: hubspot %v (want %v), instantly %v (want the documented)", p.HubSpot.Rates, want, p.Instantly.Rates)
	}
	for _, tc := range []struct{ provider, campaign, label, want string }{
		{"instantly", "camp-1", "interested", "101"},
		{"instantly", "camp-1", "", "303"}, // not yet classified: the label rule does not match
		{"smartlead", "camp-9", "", "202"},
		{"meta", "", "unclear", "303"},
	} {
		if got := c.CRMOwner("acme", tc.provider, tc.campaign, tc.label); got != tc.want {
			t.Errorf("CRMOwner(%s, %s, %s) = %q, want %q", tc.provider, tc.campaign, tc.label, got, tc.want)
		}
	}
	if got := c.CRMOwner("globex", "instantly", "", ""); got != "" {
		t.Errorf("unknown tenant routed to %q", got)
	}
}

func TestPlatformAndRoutingRefusals(t *testing.T) {
	base := strings.Replace(good, "  - id: acme\n", "  - id: acme\n"+withPlatforms, 1)
	for _, tc := range []struct {
		name, doc string
		env       map[string]string
		want      string
	}{
		{"platform key not set", base, without(platformsEnv(), "ACME_INSTANTLY_API_KEY"), "platforms.instantly.api_key: environment variable ACME_INSTANTLY_API_KEY is not set"},
		{"platform without key", strings.Replace(base, "{api_key: env:ACME_INSTANTLY_API_KEY}", "{base_url: \"https://x.example\"}", 1), platformsEnv(), "platforms.instantly: api_key is required"},
		{"bad base url", strings.Replace(base, "https://hubspot-proxy.example.com", "hubspot-proxy", 1), platformsEnv(), "platforms.hubspot: base_url"},
		{"bad rate", strings.Replace(base, "rate: \"190/10s\"", "rate: 190 per 10s", 1), platformsEnv(), "platforms.hubspot: rate \"190 per 10s\": want N/DURATION such as 60/1m"},
		{"unknown platform", strings.Replace(base, "instantly: {api_key", "lemlist: {api_key", 1), platformsEnv(), `unknown field "lemlist"; here the fields are instantly, smartlead, hubspot`},
		{"route without owner", strings.Replace(base, `{owner: "303"}`, `{label: unclear}`, 1), platformsEnv(), "routing[2]: owner is required"},
		{"route with unknown label", strings.Replace(base, "label: interested", "label: keen", 1), platformsEnv(), `routing[0]: unknown label "keen"`},
		{"route with unknown provider", strings.Replace(base, "provider: smartlead", "provider: lemlist", 1), platformsEnv(), `routing[1]: unknown provider "lemlist"`},
		{"bad sandbox address", "sandbox_addr: nowhere\n" + base, platformsEnv(), "sandbox_addr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc), "exacto.yaml", env(tc.env))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v does not contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "inst-key-0123456789") || strings.Contains(err.Error(), "pat-na1-0123456789") {
				t.Fatalf("error leaks a key: %v", err)
			}
		})
	}
}

// The README's config reference is a config that loads: every field it shows exists.
func TestREADMEConfigLoads(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "## Config reference")
	if !ok {
		t.Fatal("README has no config reference")
	}
	_, block, ok := strings.Cut(after, "```yaml\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("README's config reference has no yaml block")
	}
	c, err := Parse([]byte(block), "README.md", func(name string) string {
		if strings.HasPrefix(name, "EXACTO_") {
			return ""
		}
		return "value-of-" + strings.ToLower(name) + "-0123456789"
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.CRMOwner("acme", "smartlead", "9181", "") != "23456" || c.Tenants[0].Platforms.HubSpot == nil {
		t.Fatalf("README config: routing or platforms lost: %+v", c.Tenants[0])
	}
}

// The gateway's rate limits: defaults that leave room for any campaign's burst, a
// number, or off.
func TestRateLimits(t *testing.T) {
	for doc, want := range map[string]RateLimit{
		"": {Endpoint: PerSecond{Rate: 2000}, Tenant: PerSecond{Rate: 5000}, Burst: 10 * time.Second},
		"gateway: {rate_limit: {endpoint: 12.5, burst: 3s}}\n":  {Endpoint: PerSecond{Rate: 12.5, Set: true}, Tenant: PerSecond{Rate: 5000}, Burst: 3 * time.Second},
		"gateway: {rate_limit: {endpoint: off, tenant: off}}\n": {Endpoint: PerSecond{Set: true}, Tenant: PerSecond{Set: true}, Burst: 10 * time.Second},
	} {
		c, err := Parse([]byte(doc+good), "exacto.yaml", env(goodEnv))
		if err != nil {
			t.Fatal(err)
		}
		if c.Gateway.RateLimit != want {
			t.Errorf("%q: %+v, want %+v", doc, c.Gateway.RateLimit, want)
		}
	}
}

func TestOperationsConfig(t *testing.T) {
	doc := "dlq:\n  slo: 30m\n  freshness: {email.sent: 72h, reply.received: 168h}\nconsole:\n  token: env:CONSOLE_TOKEN\n  users: {ops: env:OPS_PASSWORD}\n" +
		strings.Replace(good, "  - id: acme\n", "  - id: acme\n    reconcile: {every: 30m}\n", 1) + "  - id: globex\n    reconcile: {every: \"off\"}\n    endpoints: []\n"
	m := map[string]string{"CONSOLE_TOKEN": "console-token-0123456789", "OPS_PASSWORD": "ops-password-0123"}
	for k, v := range goodEnv {
		m[k] = v
	}
	c, err := Parse([]byte(doc), "f", env(m))
	if err != nil {
		t.Fatal(err)
	}
	if c.DLQ.SLO != 30*time.Minute || c.DLQ.Fresh("email.sent") != 72*time.Hour || c.DLQ.Fresh("reply.received") != 168*time.Hour || c.DLQ.Fresh("email.opened") != 72*time.Hour {
		t.Fatalf("dlq: %+v", c.DLQ)
	}
	if c.Console.Token.Value != "console-token-0123456789" || c.Console.Users["ops"].Value != "ops-password-0123" {
		t.Fatal("console secrets not resolved")
	}
	if c.Tenants[0].Reconcile.Every.Duration != 30*time.Minute || c.Tenants[1].Reconcile.Every.Duration != 0 {
		t.Fatalf("reconcile: %+v %+v", c.Tenants[0].Reconcile, c.Tenants[1].Reconcile)
	}
	d, _ := Parse([]byte(good), "f", env(goodEnv))
	if d.Tenants[0].Reconcile.Every.Duration != time.Hour || d.DLQ.SLO != 15*time.Minute {
		t.Fatalf("defaults: %+v %+v", d.Tenants[0].Reconcile, d.DLQ)
	}
	for _, tc := range []struct{ doc, want string }{
		{"dlq:\n  freshness: {follow_up: 72h}\n" + good, `dlq.freshness: "follow_up" is not an event type`},
		{"dlq:\n  freshness: {email.sent: -1h}\n" + good, "want a positive duration"},
		{strings.Replace(good, "  - id: acme\n", "  - id: acme\n    reconcile: {every: 10s}\n", 1), "reconcile.every 10s: want at least 1m"},
		{strings.Replace(good, "  - id: acme\n", "  - id: acme\n    reconcile: {every: hourly}\n", 1), `"hourly" is not a duration`},
		{"console:\n  token: env:NOPE\n" + good, "console token: environment variable NOPE is not set"},
	} {
		if _, err := Parse([]byte(tc.doc), "f", env(goodEnv)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.want, err, tc.want)
		}
	}
}

// Group commit: on by default on one node, off by default on a replicated stream (its
// Raft log already commits in groups), and bounded.
func TestGroupCommit(t *testing.T) {
	c, err := Parse([]byte(good), "exacto.yaml", env(goodEnv))
	if err != nil {
		t.Fatal(err)
	}
	if gc := c.Gateway.GroupCommit; gc.MaxEvents != 256 || gc.MaxWait != time.Millisecond {
		t.Fatalf("defaults on one node: %+v", gc)
	}
	c, err = Parse([]byte("nats: {replicas: 3}\n"+good), "exacto.yaml", env(goodEnv))
	if err != nil {
		t.Fatal(err)
	}
	if gc := c.Gateway.GroupCommit; gc.MaxEvents != 1 {
		t.Fatalf("defaults on three replicas: %+v", gc)
	}
	for _, tc := range []struct{ doc, want string }{
		{"gateway: {group_commit: {max_events: 1001}}", "gateway.group_commit.max_events 1001: want 1 (off) to 1000"},
		{"gateway: {group_commit: {max_events: -1}}", "gateway.group_commit.max_events -1"},
		{"gateway: {group_commit: {max_wait: 1s}}", "gateway.group_commit.max_wait 1s: want at most 100ms"},
		{"gateway: {group_commit: {derived_wait: 10s}}", "gateway.group_commit.derived_wait 10s: want at most 5s"},
	} {
		if _, err := Parse([]byte(tc.doc+"\n"+good), "exacto.yaml", env(goodEnv)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v does not contain %q", tc.doc, err, tc.want)
		}
	}
}

// Consumers: workers per service, bounded, only for services that exist.
func TestConsumerTuning(t *testing.T) {
	c, err := Parse([]byte("consumers: {stopper: {workers: 12}}\n"+good), "exacto.yaml", env(goodEnv))
	if err != nil {
		t.Fatal(err)
	}
	if c.Consumers["stopper"].Workers != 12 {
		t.Fatalf("consumers: %+v", c.Consumers)
	}
	for _, tc := range []struct{ doc, want string }{
		{"consumers: {stoper: {workers: 4}}", "consumers.stoper: no such consumer service"},
		{"consumers: {reconciler: {workers: 4}}", "consumers.reconciler: no such consumer service"},
		{"consumers: {stopper: {workers: 0}}", "consumers.stopper.workers 0: want 1 to 64"},
		{"consumers: {crmwriter: {workers: 65}}", "consumers.crmwriter.workers 65: want 1 to 64"},
	} {
		if _, err := Parse([]byte(tc.doc+"\n"+good), "exacto.yaml", env(goodEnv)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v does not contain %q", tc.doc, err, tc.want)
		}
	}
}

// The quarantine's cap: 8 MiB by default, never under body_limit (the default follows a
// larger body_limit); a cap under body_limit names the file and both settings.
func TestQuarantineCap(t *testing.T) {
	c, err := Parse([]byte(good), "exacto.yaml", env(goodEnv))
	if err != nil {
		t.Fatal(err)
	}
	if c.Gateway.QuarantineCap != 8<<20 {
		t.Fatalf("default quarantine_cap %d", c.Gateway.QuarantineCap)
	}
	c, err = Parse([]byte("gateway: {body_limit: 10485760}\n"+good), "exacto.yaml", env(goodEnv))
	if err != nil || c.Gateway.QuarantineCap != 10<<20 {
		t.Fatalf("quarantine_cap with a larger body_limit: %v %d", err, c.Gateway.QuarantineCap)
	}
	_, err = Parse([]byte("gateway: {body_limit: 2097152, quarantine_cap: 1048576}\n"+good), "exacto.yaml", env(goodEnv))
	if err == nil || !strings.Contains(err.Error(), "exacto.yaml:0: gateway.quarantine_cap 1048576: want at least gateway.body_limit (2097152)") {
		t.Fatalf("quarantine_cap under body_limit: %v", err)
	}
}

// memory_limit is a size or off, EXACTO_MEMORY_LIMIT overrides it, and a size that
// does not parse stops the start.
func TestMemoryLimit(t *testing.T) {
	c, err := Parse([]byte("memory_limit: 200MiB\n"+good), "f", env(goodEnv))
	if err != nil || c.MemoryLimit != "200MiB" {
		t.Fatalf("memory_limit: %q, %v", c.MemoryLimit, err)
	}
	c, err = Parse([]byte("memory_limit: 200MiB\n"+good), "f", env(mapWith(goodEnv, "EXACTO_MEMORY_LIMIT", "off")))
	if err != nil || c.MemoryLimit != "off" {
		t.Fatalf("EXACTO_MEMORY_LIMIT not applied: %q, %v", c.MemoryLimit, err)
	}
	if c, err = Parse([]byte(good), "f", env(goodEnv)); err != nil || c.MemoryLimit != "" {
		t.Fatalf("unset memory_limit: %q, %v (the process picks its default)", c.MemoryLimit, err)
	}
	for _, bad := range []string{"200MB", "0", "lots"} {
		if _, err := Parse([]byte("memory_limit: "+bad+"\n"+good), "f", env(goodEnv)); err == nil || !strings.Contains(err.Error(), "memory_limit") {
			t.Errorf("memory_limit %q: error %v, want one naming memory_limit", bad, err)
		}
	}
}

func TestRetention(t *testing.T) {
	c, err := Parse([]byte(strings.Replace(good, "  - id: acme\n", "  - id: acme\n    retention: {payloads: 90d, events: 17520h}\n", 1)), "exacto.yaml", env(goodEnv))
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Tenants[0].Retention; r.Payloads.Duration != 90*24*time.Hour || r.Events.Duration != 730*24*time.Hour {
		t.Fatalf("retention %+v", r)
	}
}

// LoadPartial loads a config whose other endpoints' variables are unset, and says of
// each endpoint which of its secrets did not resolve; Load refuses the same config;
// anything but a secret still fails both.
func TestLoadPartialLeavesUnresolvedSecretsNamed(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "exacto.yaml")
	os.WriteFile(file, []byte(good), 0o600)
	partialEnv := maps.Clone(goodEnv)
	delete(partialEnv, "ACME_META_TOKEN")
	delete(partialEnv, "ACME_META_VERIFY_TOKEN")
	if _, err := Load(file, env(partialEnv)); err == nil || !strings.Contains(err.Error(), "ACME_META_TOKEN is not set") {
		t.Fatalf("Load: %v", err)
	}
	c, err := LoadPartial(file, env(partialEnv))
	if err != nil {
		t.Fatal(err)
	}
	if _, e := c.Endpoint("instantly-main"); e.Unresolved() != nil || e.Secrets[0].Value != "s1" {
		t.Errorf("instantly-main: %v, secret %q", e.Unresolved(), e.Secrets[0].Value)
	}
	_, e := c.Endpoint("meta-main")
	got := fmt.Sprint(e.Unresolved())
	for _, want := range []string{file + ":13: endpoint meta-main path_token: environment variable ACME_META_TOKEN is not set",
		file + ":15: endpoint meta-main verify_token: environment variable ACME_META_VERIFY_TOKEN is not set"} {
		if !strings.Contains(got, want) {
			t.Errorf("meta-main unresolved: %q, want %q", got, want)
		}
	}
	if strings.Contains(got, "APP_SECRET") || e.Secrets[0].Value != "app-secret" {
		t.Errorf("meta-main's resolved secret reported: %q", got)
	}
	// Not a secret's resolution: refused by both.
	os.WriteFile(file, []byte(strings.Replace(good, "tolerance: 5m", "tolerance: -5m", 1)), 0o600)
	if _, err := LoadPartial(file, env(partialEnv)); err == nil || !strings.Contains(err.Error(), "tolerance must be positive") {
		t.Errorf("LoadPartial of a bad tolerance: %v", err)
	}
	// A path token left out is still refused: only a reference that did not resolve is let through.
	os.WriteFile(file, []byte(strings.Replace(good, "        path_token: env:ACME_META_TOKEN\n", "", 1)), 0o600)
	if _, err := LoadPartial(file, env(partialEnv)); err == nil || !strings.Contains(err.Error(), "meta-main: path_token is required") {
		t.Errorf("LoadPartial without a path token: %v", err)
	}
}
