package ingest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/providers"
)

// A delivery is a replay, refused as stale_event, when every event it carries is older
// than its endpoint takes (max_event_age), and no signature over a fresh timestamp
// vouches for it: a live batch may carry an old fact beside fresh ones, and a
// provider's manual resend of an old event is signed anew.
func TestStaleIsEveryEventOldAndNothingSignedFresh(t *testing.T) {
	cfg, err := config.Parse([]byte("tenants:\n  - id: acme\n    endpoints:\n      - {id: hs, provider: hubspot, path_token: tok-hubspot-0123456789, secrets: [s]}\n"),
		"test", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	ep, err := NewEndpoint("acme", &cfg.Tenants[0].Endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	old, fresh := now.Add(-9*24*time.Hour), now.Add(-time.Minute)
	batch := func(times ...time.Time) []byte {
		var b []string
		for i, at := range times {
			b = append(b, fmt.Sprintf(`{"eventId":%d,"subscriptionId":25,"portalId":62515,"appId":1160452,"occurredAt":%d,"subscriptionType":"contact.propertyChange","attemptNumber":0,"objectId":%d,"propertyName":"email","propertyValue":"a%d@example.com","changeSource":"CRM_UI"}`,
				100+i, at.UnixMilli(), 500+i, i))
		}
		return []byte("[" + strings.Join(b, ",") + "]")
	}
	for _, c := range []struct {
		name       string
		body       []byte
		timeSigned bool
		stale      bool
	}{
		{"an old fact beside a fresh one", batch(old, fresh), false, false},
		{"every event old", batch(old, old), false, true},
		{"every event old, the delivery signed at a fresh time", batch(old, old), true, false},
		{"fresh", batch(fresh), false, false},
	} {
		d := Delivery{Endpoint: ep, Request: &providers.Request{Body: c.body, Now: now, TimeSigned: c.timeSigned}, Size: len(c.body)}
		envs, refused := d.Envelopes(cfg.Gateway)
		switch {
		case c.stale && (refused == nil || refused.Reason != Stale || !strings.Contains(refused.Message, "216h0m0s before it arrived")):
			t.Errorf("%s: %v, want it refused as %s", c.name, refused, Stale)
		case !c.stale && (refused != nil || len(envs) == 0):
			t.Errorf("%s: %v, want its events", c.name, refused)
		}
	}
}
