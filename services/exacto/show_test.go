package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Without --tenant the show commands take the config's one tenant, and refuse, naming
// them, when it has several.
func TestTenantDefaultsToTheConfigsOnly(t *testing.T) {
	dir := t.TempDir()
	one := filepath.Join(dir, "one.yaml")
	two := filepath.Join(dir, "two.yaml")
	endpoint := func(id string) string {
		return "      - id: " + id + "\n        provider: stripe\n        path_token: " + id + "-token-0123456789abcdef\n        secrets: [whsec_x]\n"
	}
	os.WriteFile(one, []byte("tenants:\n  - id: acme\n    endpoints:\n"+endpoint("a")), 0o600)
	os.WriteFile(two, []byte("tenants:\n  - id: acme\n    endpoints:\n"+endpoint("a")+"  - id: globex\n    endpoints:\n"+endpoint("b")), 0o600)
	if got, err := tenantOrOnly("", one); err != nil || got != "acme" {
		t.Fatalf("one tenant: %q %v", got, err)
	}
	if got, err := tenantOrOnly("globex", two); err != nil || got != "globex" {
		t.Fatalf("given: %q %v", got, err)
	}
	if _, err := tenantOrOnly("", two); err == nil || !strings.Contains(err.Error(), "2 tenants (acme, globex)") {
		t.Fatalf("two tenants: %v", err)
	}
	// The tenant is known without the secrets: a variable unset here does not matter.
	unset := filepath.Join(dir, "unset.yaml")
	os.WriteFile(unset, []byte("tenants:\n  - id: acme\n    endpoints:\n"+strings.Replace(endpoint("a"), "[whsec_x]", "[env:EXACTO_TEST_UNSET_SECRET]", 1)), 0o600)
	if got, err := tenantOrOnly("", unset); err != nil || got != "acme" {
		t.Fatalf("a secret's variable unset: %q %v", got, err)
	}
	if _, err := tenantOrOnly("", filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "--tenant is required") {
		t.Fatalf("no config: %v", err)
	}
	t.Chdir(dir) // no ./exacto.yaml: the built-in demo, tenant demo
	if got, err := tenantOrOnly("", ""); err != nil || got != "demo" {
		t.Fatalf("demo: %q %v", got, err)
	}
}
