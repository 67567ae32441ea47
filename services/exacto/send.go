package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/providers/generic"
	"exacto.dev/pkg/providers/instantly"
	"exacto.dev/pkg/providers/registry"
)

func sendCmd() *cobra.Command {
	var f sendFlags
	cmd := &cobra.Command{
		Use:   "send",
		Short: "Sign and send a realistic webhook exactly as a provider would",
		Long: `Sign and send a realistic webhook exactly as a provider would, to try a set-up
without the provider. --endpoint ID takes the provider, the URL and the secret from the
config (--config, else ./exacto.yaml, else the built-in demo); --to URL sends elsewhere.
It refuses to send unsigned to a provider that signs: when the endpoint's secret cannot
be read (an unset environment variable, another directory's config), it says which.
--email and --campaign make the sample about that lead and campaign (each its own event).

Events each provider's samples cover (the first is the default):
` + sampleEventList(),
		Example: `  exacto send --endpoint instantly --event reply_received --email ana@example.com
  exacto send --provider instantly --event email_opened --to http://127.0.0.1:8080/hooks/instantly/demo-instantly-token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := f.outgoing()
			if err != nil {
				return err
			}
			for _, note := range d.notes {
				fmt.Fprintln(cmd.ErrOrStderr(), "note:", note)
			}
			// A platform the built-in sandbox stands in for must hold what the webhook says
			// happened, as the real one would: consumers confirm unsigned events there.
			if d.sandbox != "" {
				if err := tellSandbox(cmd.Context(), d.sandbox, d.spec.Name, d.body); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "note: the sandbox at %s was not told (%v): the event will not be confirmed at its source\n", d.sandbox, err)
				}
			}
			status, body, err := d.send(cmd.Context(), time.Now())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d %s\n", status, strings.TrimSpace(body))
			if status/100 != 2 {
				return fmt.Errorf("the gateway answered %d", status)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.endpoint, "endpoint", "", "the config's endpoint to send to: its provider, URL and secret")
	fl.StringVar(&f.config, "config", "", "config file (default ./exacto.yaml, else the built-in demo)")
	fl.StringVar(&f.gateway, "gateway", "", "with --endpoint: the gateway's base URL (default http:// and the config's http_addr)")
	fl.StringVar(&f.provider, "provider", "", "provider to impersonate, with --to: "+strings.Join(registry.Names(), ", "))
	fl.StringVar(&f.event, "event", "", "event to send (default: the provider's first sample event; listed above)")
	fl.StringVar(&f.to, "to", "", "endpoint URL (default, with --endpoint: the config's gateway address)")
	fl.StringVar(&f.email, "email", "", "the lead's e-mail (default: the sample's own)")
	fl.StringVar(&f.campaign, "campaign", "", "the campaign's id (default: the sample's own)")
	fl.StringVar(&f.secret, "secret", "", "signing secret (default: the endpoint's first secret in the config)")
	fl.StringVar(&f.signingSecret, "signing-secret", "", "smartlead: also sign X-Smartlead-Signature with this (default: the endpoint's first signing_secrets entry in the config)")
	fl.StringVar(&f.at, "at", "", "the event's time, RFC 3339 (default now); the same --at sends the same event again, as a provider's retry would")
	fl.StringVar(&f.sandbox, "sandbox", "", `the built-in sandbox standing in for Instantly or Smartlead, told first what the webhook says happened (default: the config's sandbox when the endpoint's tenant has no account there; "none" tells nothing)`)
	return cmd
}

// sendFlags are what `exacto send` was given.
type sendFlags struct {
	endpoint, config, gateway, provider, event, to, email, campaign, secret, signingSecret, at, sandbox string
}

// outgoing is what `exacto send` posts, and where.
type outgoing struct {
	spec                  providers.Spec
	endpoint              *config.Endpoint // its signing settings; nil: the provider's defaults
	body                  []byte
	to, sandbox           string
	secret, signingSecret string
	notes                 []string // said on stderr before sending
}

// outgoing resolves the flags against the config: the endpoint, its secrets, the
// sample. Every refusal names what to give instead.
func (f sendFlags) outgoing() (outgoing, error) {
	var d outgoing
	// Partial: an unset variable of another endpoint does not stop a send to this one.
	cfg, cfgErr := config.LoadPartial(f.config, os.Getenv)
	var t *config.Tenant
	var e *config.Endpoint
	switch {
	case f.endpoint != "":
		if cfgErr != nil {
			return d, fmt.Errorf("--endpoint %s: %w", f.endpoint, cfgErr)
		}
		if t, e = cfg.Endpoint(f.endpoint); e == nil {
			return d, fmt.Errorf("--endpoint %s: no such endpoint in %s (endpoints: %s)", f.endpoint, cfg.Source, strings.Join(cfg.EndpointIDs(), ", "))
		}
		if f.provider != "" && f.provider != e.Provider {
			return d, fmt.Errorf("--provider %s: endpoint %s is a %s endpoint", f.provider, e.ID, e.Provider)
		}
		if err := e.PathToken.Unresolved; err != nil && f.to == "" {
			return d, fmt.Errorf("--endpoint %s: no URL without its path token: %w", f.endpoint, err)
		}
		f.provider = e.Provider
		if f.to == "" {
			gateway := "http://" + dialable(cfg.HTTPAddr)
			if f.gateway != "" {
				gateway = strings.TrimRight(f.gateway, "/")
			}
			f.to = fmt.Sprintf("%s/hooks/%s/%s", gateway, e.ID, e.PathToken.Value)
		}
	case f.to == "":
		return d, fmt.Errorf("--endpoint ID or --to URL is required (endpoint ids are in the config)")
	case f.gateway != "":
		return d, fmt.Errorf("--gateway goes with --endpoint: --to is the whole URL")
	case f.provider == "":
		return d, fmt.Errorf("--provider is required with --to (known: %s)", strings.Join(registry.Names(), ", "))
	case cfgErr == nil:
		t, e = cfg.Endpoint(endpointInURL(f.to))
	}
	spec, ok := registry.Lookup(f.provider)
	if !ok {
		return d, fmt.Errorf("unknown provider %q (known: %s)", f.provider, strings.Join(registry.Names(), ", "))
	}
	d.spec, d.to = spec, f.to
	if f.event == "" {
		f.event = spec.Events[0]
	}
	if !slices.Contains(spec.Events, f.event) {
		return d, fmt.Errorf("provider %s has no sample event %q (known: %s)", spec.Name, f.event, strings.Join(spec.Events, ", "))
	}
	if f.signingSecret != "" && spec.SignOptional == nil {
		return d, fmt.Errorf("--signing-secret: provider %s has no optional signature (only smartlead)", spec.Name)
	}
	d.secret, d.signingSecret, d.endpoint = f.secret, f.signingSecret, e
	if e != nil {
		if len(e.Secrets) > 0 && e.Secrets[0].Unresolved != nil && d.secret == "" { // the one it signs with
			return d, fmt.Errorf("endpoint %s of %s: %w; set it, or give --secret", e.ID, f.to, e.Secrets[0].Unresolved)
		}
		if v := e.SignatureVersions; len(v) > 0 && !slices.Contains(v, "v3") && !slices.Contains(v, "v1") {
			return d, fmt.Errorf("endpoint %s takes HubSpot signatures %s only: exacto send signs v3 and v1", e.ID, strings.Join(v, ", "))
		}
		if d.secret == "" && len(e.Secrets) > 0 {
			d.secret = e.Secrets[0].Value
		}
		if d.signingSecret == "" && spec.SignOptional != nil && len(e.SigningSecrets) > 0 {
			d.signingSecret = e.SigningSecrets[0].Value
			if err := e.SigningSecrets[0].Unresolved; err != nil {
				d.notes = append(d.notes, fmt.Sprintf("sent without its optional signature: %v (give --signing-secret)", err))
			}
		}
	}
	if d.secret == "" {
		// Unsigned is a bare 401 from an endpoint that expects a secret: say why instead.
		switch {
		case cfgErr != nil:
			return d, fmt.Errorf("no secret to sign with: the config did not load (%v); set what it names, or give --secret", cfgErr)
		case e == nil && spec.NeedsSecret:
			return d, fmt.Errorf("no secret to sign with: endpoint %q of %s is not in %s; give --secret, or --config with the config that has it", endpointInURL(f.to), f.to, cfg.Source)
		case e == nil:
			d.notes = append(d.notes, fmt.Sprintf("endpoint %q is not in %s: sent without a secret header, as an endpoint without secrets takes it", endpointInURL(f.to), cfg.Source))
		}
	}
	eventTime := time.Now()
	if f.at != "" {
		at, err := time.Parse(time.RFC3339, f.at)
		if err != nil {
			return d, fmt.Errorf("--at %q: want an RFC 3339 time such as 2026-12-02T10:00:00Z", f.at)
		}
		eventTime = at
	}
	body, err := spec.Sample(f.event, eventTime, providers.Lead{Email: f.email, Campaign: f.campaign})
	if err != nil {
		return d, err
	}
	d.body = body
	if cfgErr == nil {
		d.sandbox = sandboxFor(cfg, t, spec.Name, f.sandbox)
	} else if f.sandbox != "none" {
		d.sandbox = f.sandbox
	}
	return d, nil
}

// sampleEventList is each provider's sample events, a line each.
func sampleEventList() string {
	var b strings.Builder
	for _, name := range registry.Names() {
		spec, _ := registry.Lookup(name)
		fmt.Fprintf(&b, "  %-10s %s\n", name, strings.Join(spec.Events, ", "))
	}
	return b.String()
}

// dialable is addr as a client reaches it: a wildcard listen address is this host.
func dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// send posts d, signed now as its endpoint takes it: over the public URL the provider
// would call (HubSpot's v3 signs it), in the endpoint's own header or generic scheme.
func (d outgoing) send(ctx context.Context, now time.Time) (int, string, error) {
	signURL, sign := d.to, d.spec.Sign
	if e := d.endpoint; e != nil {
		if e.PublicURL != "" {
			signURL = e.PublicURL
		}
		if e.Generic != nil {
			g := *e.Generic
			sign = func(method, url string, body []byte, secret string, now time.Time) (http.Header, []byte, error) {
				return generic.SignWith(g, method, url, body, secret, now)
			}
		}
	}
	h, body, err := sign(http.MethodPost, signURL, d.body, d.secret, now)
	if err != nil {
		return 0, "", err
	}
	if e := d.endpoint; e != nil && e.SecretHeader != "" && d.spec.Name == instantly.Spec.Name && d.secret != "" {
		h.Del(instantly.DefaultHeader)
		h.Set(e.SecretHeader, d.secret)
	}
	return post(ctx, d.spec, h, body, d.signingSecret, d.to)
}

// post posts body with headers h (and the optional signature, when signingSecret is set).
func post(ctx context.Context, spec providers.Spec, h http.Header, body []byte, signingSecret, to string) (int, string, error) {
	if signingSecret != "" {
		maps.Copy(h, spec.SignOptional(body, signingSecret))
	}
	req, err := http.NewRequest(http.MethodPost, to, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header = h
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(b), nil
}

// endpointInURL is the endpoint id in a gateway URL's path (/hooks/ID/TOKEN), or "".
func endpointInURL(to string) string {
	u, err := url.Parse(to)
	if err != nil {
		return ""
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(parts) < 2 || parts[0] != "hooks" {
		return ""
	}
	return parts[1]
}

// sandboxFor is the sandbox to tell of a webhook of provider to tenant t's endpoint:
// flag when given ("none": none), else the config's sandbox when t has no account at
// provider; "" when no sandbox stands in for provider.
func sandboxFor(cfg *config.Config, t *config.Tenant, provider, flag string) string {
	if provider != "instantly" && provider != "smartlead" || flag == "none" {
		return ""
	}
	if flag != "" {
		return flag
	}
	if t == nil {
		return ""
	}
	if (provider == "instantly" && t.Platforms.Instantly != nil) || (provider == "smartlead" && t.Platforms.Smartlead != nil) {
		return ""
	}
	if cfg.SandboxURL != "" {
		return cfg.SandboxURL
	}
	return "http://" + dialable(cfg.SandboxAddr)
}

// tellSandbox posts body to the sandbox's happened control route.
func tellSandbox(ctx context.Context, sandboxURL, provider string, body []byte) error {
	req, err := json.Marshal(sandbox.ControlHappenedRequest{Provider: provider, Body: body})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(sandboxURL, "/")+sandbox.ControlHappened, bytes.NewReader(req))
	if err != nil {
		return err
	}
	r.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return fmt.Errorf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return nil
}
