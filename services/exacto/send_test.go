package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/providers"
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
	if status, body, err := send(ctx, smartlead.Spec, sample, "body-secret", "signing-secret", srv.URL, now); err != nil || status != 200 {
		t.Fatalf("signed: %d %s %v", status, body, err)
	}
	status, body, err := send(ctx, smartlead.Spec, sample, "body-secret", "", srv.URL, now)
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
