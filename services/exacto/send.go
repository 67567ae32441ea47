package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/providers/registry"
)

func sendCmd() *cobra.Command {
	var provider, event, to, secret, signingSecret, at, sandboxURL string
	cmd := &cobra.Command{
		Use:   "send",
		Short: "Sign and send a realistic webhook exactly as a provider would",
		Long: `Sign and send a realistic webhook exactly as provider P would, to try a set-up
without the provider. Without --secret, the secret of the endpoint named in --to is
taken from the config (or the built-in demo); so is its signing secret, for a Smartlead
endpoint with signing_secrets (X-Smartlead-Signature), without --signing-secret.`,
		Example: "  exacto send --provider instantly --event reply_received --to http://127.0.0.1:8080/hooks/instantly/demo-instantly-token",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, ok := registry.Lookup(provider)
			if !ok {
				return fmt.Errorf("unknown provider %q (known: %s)", provider, strings.Join(registry.Names(), ", "))
			}
			if event == "" {
				event = spec.Events[0]
			}
			if !contains(spec.Events, event) {
				return fmt.Errorf("provider %s has no sample event %q (known: %s)", provider, event, strings.Join(spec.Events, ", "))
			}
			if to == "" {
				return fmt.Errorf("--to is required: the endpoint URL, e.g. http://127.0.0.1:8080/hooks/ID/TOKEN")
			}
			if signingSecret != "" && spec.SignOptional == nil {
				return fmt.Errorf("--signing-secret: provider %s has no optional signature (only smartlead)", provider)
			}
			if _, _, e := endpointOf(to); e != nil {
				if secret == "" && len(e.Secrets) > 0 {
					secret = e.Secrets[0].Value
				}
				if signingSecret == "" && spec.SignOptional != nil && len(e.SigningSecrets) > 0 {
					signingSecret = e.SigningSecrets[0].Value
				}
			}
			eventTime := time.Now()
			if at != "" {
				t, err := time.Parse(time.RFC3339, at)
				if err != nil {
					return fmt.Errorf("--at %q: want an RFC 3339 time such as 2026-12-02T10:00:00Z", at)
				}
				eventTime = t
			}
			sample, err := spec.Sample(event, eventTime)
			if err != nil {
				return err
			}
			// A platform the built-in sandbox stands in for must hold what the webhook says
			// happened, as the real one would: consumers confirm unsigned events there.
			if sb := sandboxFor(to, provider, sandboxURL); sb != "" {
				if err := tellSandbox(cmd.Context(), sb, provider, sample); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "note: the sandbox at %s was not told (%v): the event will not be confirmed at its source\n", sb, err)
				}
			}
			status, body, err := send(cmd.Context(), spec, sample, secret, signingSecret, to, time.Now())
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
	cmd.Flags().StringVar(&provider, "provider", "", "provider to impersonate: "+strings.Join(registry.Names(), ", "))
	cmd.Flags().StringVar(&event, "event", "", "event to send (default: the provider's first sample event)")
	cmd.Flags().StringVar(&to, "to", "", "endpoint URL")
	cmd.Flags().StringVar(&secret, "secret", "", "signing secret (default: the endpoint's first secret in the config)")
	cmd.Flags().StringVar(&signingSecret, "signing-secret", "", "smartlead: also sign X-Smartlead-Signature with this (default: the endpoint's first signing_secrets entry in the config)")
	cmd.Flags().StringVar(&at, "at", "", "the event's time, RFC 3339 (default now); the same --at sends the same event again, as a provider's retry would")
	cmd.Flags().StringVar(&sandboxURL, "sandbox", "", `the built-in sandbox standing in for Instantly or Smartlead, told first what the webhook says happened (default: the config's sandbox when the endpoint's tenant has no account there; "none" tells nothing)`)
	cmd.MarkFlagRequired("provider")
	return cmd
}

// send posts body as spec signs it now (with signingSecret too, when set, for a
// provider whose signature is optional).
func send(ctx context.Context, spec providers.Spec, body []byte, secret, signingSecret, to string, now time.Time) (int, string, error) {
	h, body, err := spec.Sign(http.MethodPost, to, body, secret, now)
	if err != nil {
		return 0, "", err
	}
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

// endpointOf finds the endpoint named in the URL's path, and its tenant, in the
// config (or the built-in demo).
func endpointOf(to string) (*config.Config, *config.Tenant, *config.Endpoint) {
	u, err := url.Parse(to)
	if err != nil {
		return nil, nil, nil
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(parts) < 2 || parts[0] != "hooks" {
		return nil, nil, nil
	}
	cfg, err := config.Load("", os.Getenv)
	if err != nil {
		return nil, nil, nil
	}
	for i := range cfg.Tenants {
		t := &cfg.Tenants[i]
		for j := range t.Endpoints {
			if t.Endpoints[j].ID == parts[1] {
				return cfg, t, &t.Endpoints[j]
			}
		}
	}
	return cfg, nil, nil
}

// sandboxFor is the sandbox to tell of a webhook of provider sent to `to`: flag when
// given ("none": none), else the config's sandbox when the endpoint's tenant has no
// account at provider; "" when no sandbox stands in for provider.
func sandboxFor(to, provider, flag string) string {
	if provider != "instantly" && provider != "smartlead" || flag == "none" {
		return ""
	}
	if flag != "" {
		return flag
	}
	cfg, t, _ := endpointOf(to)
	if cfg == nil || t == nil {
		return ""
	}
	if (provider == "instantly" && t.Platforms.Instantly != nil) || (provider == "smartlead" && t.Platforms.Smartlead != nil) {
		return ""
	}
	if cfg.SandboxURL != "" {
		return cfg.SandboxURL
	}
	return "http://" + cfg.SandboxAddr
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

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
