package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A store at its limit (issue 16: one URL could fill the disk, 60 bodies of 1 MiB at
// 24 MB/s) refuses every delivery loudly, 507 with Retry-After and why, and stores
// nothing more; what it took before stays. It looks again at most every two seconds.
func TestStoreAtItsLimitRefusesLoudly(t *testing.T) {
	h := newHarnessOf(t, strings.Replace(testConfig, "gateway:\n", "gateway:\n  store_limit: 1\n", 1))
	if r := h.post(h.delivery("instantly", "reply_received", h.clock())); r.status != http.StatusOK || r.answer.Stored != 1 {
		t.Fatalf("an empty store: %d %s", r.status, r.body)
	}
	stored := h.stored()
	h.advance(time.Millisecond)
	if r := h.post(h.delivery("instantly", "email_opened", h.clock())); r.status != http.StatusOK {
		t.Fatalf("within the check's two seconds: %d %s, want the last answer (it takes)", r.status, r.body)
	}
	stored++
	h.advance(storeCheckEvery)
	// The check falls to a request whose client has hung up: it still reads the store
	// (else a sender closing each request at once would freeze the last answer, here
	// "it takes").
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if _, why := h.gw.store.refusal(gone, "acme"); !strings.Contains(why, "gateway.store_limit") {
		t.Fatalf("a check on a cancelled request: %q, want the store at its limit", why)
	}
	for _, ep := range []string{"instantly", "stripe"} {
		r := h.post(h.delivery(ep, sampleEvent(ep), h.clock()))
		if r.status != http.StatusInsufficientStorage || !strings.Contains(r.body, "store_full") ||
			!strings.Contains(r.body, "gateway.store_limit") || r.header.Get("Retry-After") != "60" {
			t.Fatalf("%s, the store past its limit: %d %s (Retry-After %q), want 507 store_full naming store_limit, Retry-After 60",
				ep, r.status, r.body, r.header.Get("Retry-After"))
		}
	}
	if got := h.stored(); got != stored {
		t.Fatalf("the stream holds %d events, want the %d taken before", got, stored)
	}
}

// A data dir whose disk has less free than gateway.min_free_disk refuses before the
// disk is full (nats-server would fail its writes, then stop JetStream).
func TestDiskNearlyFullRefusesLoudly(t *testing.T) {
	h := newHarnessOf(t, strings.Replace(testConfig, "gateway:\n", "gateway:\n  min_free_disk: 1125899906842624\n", 1)) // 1 PiB
	r := h.post(h.delivery("instantly", "reply_received", h.clock()))
	if r.status != http.StatusInsufficientStorage || !strings.Contains(r.body, "gateway.min_free_disk") {
		t.Fatalf("%d %s, want 507 naming min_free_disk", r.status, r.body)
	}
	if got := h.stored(); got != 0 {
		t.Fatalf("%d events stored", got)
	}
}

// A tenant whose history holds its event_limit has its deliveries refused 507, naming
// the limit; another tenant's are taken.
func TestTenantAtItsEventLimitIsRefused(t *testing.T) {
	doc := strings.Replace(testConfig, "  - id: acme\n", "  - id: acme\n    event_limit: 2\n", 1) +
		"  - id: globex\n    endpoints:\n      - {id: globex-instantly, provider: instantly, path_token: tok-globex-0123456789, secrets: [globex-secret]}\n"
	h := newHarnessOf(t, doc)
	for _, ep := range []string{"instantly", "stripe"} {
		if r := h.post(h.delivery(ep, sampleEvent(ep), h.clock())); r.status != http.StatusOK || r.answer.Stored != 1 {
			t.Fatalf("%s, within the limit: %d %s", ep, r.status, r.body)
		}
	}
	h.advance(storeCheckEvery)
	r := h.post(h.delivery("calendly", sampleEvent("calendly"), h.clock()))
	if r.status != http.StatusInsufficientStorage || !strings.Contains(r.body, `"tenant_quota"`) || !strings.Contains(r.body, "tenant acme's history holds 2 events, its event_limit is 2") {
		t.Fatalf("acme at its limit: %d %s, want 507 naming event_limit", r.status, r.body)
	}
	if r := h.post(h.delivery("globex-instantly", "reply_received", h.clock())); r.status != http.StatusOK || r.answer.Stored != 1 {
		t.Fatalf("globex, no limit: %d %s", r.status, r.body)
	}
	if got := h.stored(); got != 3 {
		t.Fatalf("the stream holds %d events, want 3", got)
	}
}
