// Package accounts builds each tenant's platform clients (Instantly, Smartlead,
// HubSpot) from the config: the tenant's own credentials where it has them, else the
// loopback sandbox, so the whole flow runs on one machine without any account.
package accounts

import (
	"exacto.dev/pkg/config"
	"exacto.dev/pkg/platform/hubspot"
	"exacto.dev/pkg/platform/instantly"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/platform/smartlead"
)

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
func New(cfg *config.Config, sandboxURL string) *Set {
	s := &Set{byTenant: map[string]Clients{}}
	for _, t := range cfg.Tenants {
		c := Clients{Sandboxed: map[string]bool{}}
		// account returns the base URL and key of platform p: its own, or the sandbox's;
		// real reports whether it is a real account, paced at the provider's rate.
		account := func(name string, p *config.Platform, sandboxKey string) (url, key string, real bool) {
			if p != nil {
				return p.BaseURL, p.APIKey.Value, true
			}
			c.Sandboxed[name] = true
			return sandboxURL, sandboxKey, false
		}
		url, key, _ := account("instantly", t.Platforms.Instantly, sandbox.InstantlyKey)
		// Instantly documents no rate for API v2: its 429s pace us (Retry-After).
		c.Instantly = instantly.New(instantly.Config{BaseURL: url, APIKey: key})
		url, key, real := account("smartlead", t.Platforms.Smartlead, sandbox.SmartleadKey)
		sc := smartlead.Config{BaseURL: url, APIKey: key}
		if real {
			sc.Limit = smartlead.DefaultLimit()
		}
		c.Smartlead = smartlead.New(sc)
		url, key, real = account("hubspot", t.Platforms.HubSpot, sandbox.HubSpotToken)
		hc := hubspot.Config{BaseURL: url, Token: key}
		if real {
			hc.Limit, hc.SearchLimit = hubspot.DefaultLimit(), hubspot.DefaultSearchLimit()
		}
		c.HubSpot = hubspot.New(hc)
		s.byTenant[t.ID] = c
	}
	return s
}

// For returns tenant's clients; ok is false for a tenant the config does not know.
func (s *Set) For(tenant string) (Clients, bool) {
	c, ok := s.byTenant[tenant]
	return c, ok
}
