package accounts

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"exacto.dev/pkg/config"
)

func parse(t *testing.T, platforms string) *config.Config {
	t.Helper()
	doc := "tenants:\n  - id: acme\n" + platforms + "    endpoints: [{id: ep, provider: instantly, path_token: tok-0123456789abcdef}]\n"
	c, err := config.Parse([]byte(doc), "test", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A tenant's own account is used where it has one; the sandbox serves the rest.
func TestOwnAccountElseSandbox(t *testing.T) {
	var got string
	own := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Authorization")
		w.Write([]byte(`{"items":[]}`))
	}))
	defer own.Close()
	cfg := parse(t, "    platforms:\n      instantly: {api_key: own-instantly-key, base_url: \""+own.URL+"\"}\n")
	if !NeedsSandbox(cfg) {
		t.Fatal("smartlead and hubspot have no account: the sandbox is needed")
	}
	set := New(cfg, "http://127.0.0.1:1", Pacing{})
	c, ok := set.For("acme")
	if !ok || c.Sandboxed["instantly"] || !c.Sandboxed["smartlead"] || !c.Sandboxed["hubspot"] {
		t.Fatalf("sandboxed: %v %v", c.Sandboxed, ok)
	}
	if _, _, err := c.Instantly.FindLead(context.Background(), "", "ana@example.com"); err != nil || got != "Bearer own-instantly-key" {
		t.Fatalf("instantly went elsewhere: %v, auth %q", err, got)
	}
	if _, ok := set.For("globex"); ok {
		t.Fatal("an unknown tenant has clients")
	}
	all := parse(t, "    platforms:\n      instantly: {api_key: a}\n      smartlead: {api_key: b}\n      hubspot: {api_key: c}\n")
	if NeedsSandbox(all) {
		t.Fatal("a tenant with every account needs no sandbox")
	}
}
