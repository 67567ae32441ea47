// Package accounts builds each tenant's platform clients (Instantly, Smartlead,
// HubSpot) from the config: the tenant's own credentials where it has them, else the
// loopback sandbox, so the whole flow runs on one machine without any account.
//
// A real account is paced at its platform's documented rate (or the config's rate),
// by a limiter per account that every process shares when Pacing.Limits is the
// stream.RateLimits bucket: two tenants on one API key, the stopper and the
// reconciler, and every replica spend one budget.
package accounts

import (
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/platform/hubspot"
	"exacto.dev/pkg/platform/instantly"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/platform/smartlead"
	"exacto.dev/pkg/ratelimit"
)

// Pacing says where the accounts' pacing state lives and how the sandbox is paced.
type Pacing struct {
	// Limits is the shared state (stream.RateLimits); nil paces each account in this
	// process only.
	Limits jetstream.KeyValue
	// Sandbox, by limit name (Limits' keys), paces the clients the sandbox serves (not
	// at all for a name absent: the sandbox answers as fast as it can). Tests give the
	// documented rates, scaled down in time, to watch the pacing work against it.
	Sandbox map[string][]ratelimit.Rate
}

// Limits are the limits of each platform account, by name, at their documented rates:
// the account's own, and those of endpoints with a limit of their own besides.
var Limits = map[string][]ratelimit.Rate{
	"instantly":        instantly.Rates,
	"instantly-emails": instantly.EmailListRates,
	"smartlead":        smartlead.Rates,
	"hubspot":          hubspot.Rates,
	"hubspot-search":   hubspot.SearchRates,
}

// account is one platform account of a tenant, to build its client.
type account struct {
	url, key string
	own      *config.Platform // nil: the sandbox
}

// limiter paces the account's limit name: at the configured rate (an own account's
// main limit), else the documented one; a sandboxed account only when Pacing.Sandbox
// names the limit.
func (p Pacing) limiter(a account, name string) ratelimit.Limiter {
	rates := Limits[name]
	switch {
	case a.own == nil && p.Sandbox[name] == nil:
		return nil
	case a.own == nil:
		rates = p.Sandbox[name]
	case a.own.Rates != nil && !strings.Contains(name, "-"):
		rates = a.own.Rates
	}
	if p.Limits == nil {
		return ratelimit.NewLocal(rates...)
	}
	return ratelimit.NewShared(p.Limits, ratelimit.Key(name, a.key), rates...)
}

// Clients are one tenant's platform clients. Each is set: a real account, or the
// sandbox standing in for it.
type Clients struct {
	Instantly *instantly.Client
	Smartlead *smartlead.Client
	HubSpot   *hubspot.Client
	// Sandboxed names the platforms served by the sandbox.
	Sandboxed map[string]bool
}

// Set is every tenant's clients.
type Set struct {
	byTenant map[string]Clients
}

// NeedsSandbox reports whether some tenant lacks credentials for a platform.
func NeedsSandbox(cfg *config.Config) bool {
	for _, t := range cfg.Tenants {
		p := t.Platforms
		if p.Instantly == nil || p.Smartlead == nil || p.HubSpot == nil {
			return true
		}
	}
	return false
}

// New builds the clients of every tenant of cfg; sandboxURL serves the platforms a
// tenant has no credentials for ("" leaves them unset: callers check NeedsSandbox).
func New(cfg *config.Config, sandboxURL string, pacing Pacing) *Set {
	s := &Set{byTenant: map[string]Clients{}}
	for _, t := range cfg.Tenants {
		c := Clients{Sandboxed: map[string]bool{}}
		at := func(name string, p *config.Platform, sandboxKey string) account {
			if p != nil {
				return account{url: p.BaseURL, key: p.APIKey.Value, own: p}
			}
			c.Sandboxed[name] = true
			return account{url: sandboxURL, key: sandboxKey}
		}
		a := at("instantly", t.Platforms.Instantly, sandbox.InstantlyKey)
		c.Instantly = instantly.New(instantly.Config{BaseURL: a.url, APIKey: a.key,
			Limit: pacing.limiter(a, "instantly"), EmailLimit: pacing.limiter(a, "instantly-emails")})
		a = at("smartlead", t.Platforms.Smartlead, sandbox.SmartleadKey)
		c.Smartlead = smartlead.New(smartlead.Config{BaseURL: a.url, APIKey: a.key, Limit: pacing.limiter(a, "smartlead")})
		a = at("hubspot", t.Platforms.HubSpot, sandbox.HubSpotToken)
		c.HubSpot = hubspot.New(hubspot.Config{BaseURL: a.url, Token: a.key,
			Limit: pacing.limiter(a, "hubspot"), SearchLimit: pacing.limiter(a, "hubspot-search")})
		s.byTenant[t.ID] = c
	}
	return s
}

// For returns tenant's clients; ok is false for a tenant the config does not know.
func (s *Set) For(tenant string) (Clients, bool) {
	c, ok := s.byTenant[tenant]
	return c, ok
}
