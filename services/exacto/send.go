package main

import (
	"bytes"
	"context"
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
	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/providers/registry"
)

func sendCmd() *cobra.Command {
	var provider, event, to, secret, signingSecret, at string
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
			configured, configuredSigning := configuredSecrets(to)
			if secret == "" {
				secret = configured
			}
			if signingSecret == "" && spec.SignOptional != nil {
				signingSecret = configuredSigning
			}
			eventTime := time.Now()
			if at != "" {
				t, err := time.Parse(time.RFC3339, at)
				if err != nil {
					return fmt.Errorf("--at %q: want an RFC 3339 time such as 2026-12-02T10:00:00Z", at)
				}
				eventTime = t
			}
			status, body, err := send(cmd.Context(), spec, event, secret, signingSecret, to, eventTime, time.Now())
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
	cmd.MarkFlagRequired("provider")
	return cmd
}

// send posts spec's sample of event, made at eventTime and signed now (with
// signingSecret too, when set, for a provider whose signature is optional).
func send(ctx context.Context, spec providers.Spec, event, secret, signingSecret, to string, eventTime, now time.Time) (int, string, error) {
	body, err := spec.Sample(event, eventTime)
	if err != nil {
		return 0, "", err
	}
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

// configuredSecrets finds the first secret and the first signing secret of the
// endpoint named in the URL's path ("" for what it has not).
func configuredSecrets(to string) (secret, signingSecret string) {
	u, err := url.Parse(to)
	if err != nil {
		return "", ""
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(parts) < 2 || parts[0] != "hooks" {
		return "", ""
	}
	cfg, err := config.Load("", os.Getenv)
	if err != nil {
		return "", ""
	}
	for _, t := range cfg.Tenants {
		for _, e := range t.Endpoints {
			if e.ID != parts[1] {
				continue
			}
			if len(e.Secrets) > 0 {
				secret = e.Secrets[0].Value
			}
			if len(e.SigningSecrets) > 0 {
				signingSecret = e.SigningSecrets[0].Value
			}
			return secret, signingSecret
		}
	}
	return "", ""
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
