package server

import (
	"fmt"
	"math"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"exacto.dev/pkg/config"
)

// A flood against one endpoint (issue 16: 2,000 unique events at 224/s from one
// unsigned URL) is answered 429 with Retry-After once the endpoint's bucket is empty,
// once verified, and stores nothing more; another endpoint of the tenant goes
// on; the tenant's own bucket bounds its endpoints together; the bucket fills again
// with time.
func TestFloodIsAnsweredTooManyRequests(t *testing.T) {
	h := newHarnessOf(t, strings.Replace(testConfig, "gateway:\n", "gateway:\n  rate_limit: {endpoint: 5, tenant: 8, burst: 2s}\n", 1))
	post := func(ep string) reply { return h.post(h.delivery(ep, sampleEvent(ep), h.clock())) }
	for i := range 10 { // the endpoint's burst: 2 s of 5 a second
		if r := post("instantly"); r.status != http.StatusOK {
			t.Fatalf("delivery %d: %d %s", i+1, r.status, r.body)
		}
		h.advance(time.Millisecond) // distinct samples
	}
	stored := h.stored()
	flood := post("instantly")
	if flood.status != http.StatusTooManyRequests || !strings.Contains(flood.body, "rate_limited") || flood.header.Get("Retry-After") != "1" {
		t.Fatalf("the 11th delivery within the burst: %d %s (Retry-After %q), want 429 rate_limited, Retry-After 1 (a token in 0.2 s)",
			flood.status, flood.body, flood.header.Get("Retry-After"))
	}
	if h.stored() != stored {
		t.Fatal("a refused delivery was stored")
	}
	// Another endpoint of the tenant goes on: 6 of the tenant's 16 tokens are left.
	for i := range 6 {
		if r := post("stripe"); r.status != http.StatusOK {
			t.Fatalf("stripe delivery %d during the flood: %d %s", i+1, r.status, r.body)
		}
		h.advance(time.Millisecond)
	}
	// The tenant's bucket is empty now: its other endpoints wait too.
	r := post("calendly")
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("past the tenant's burst: %d %s, want 429", r.status, r.body)
	}
	// A second later the buckets have five (the endpoint) and eight (the tenant) more.
	h.advance(time.Second)
	if r := post("instantly"); r.status != http.StatusOK {
		t.Fatalf("a second later: %d %s", r.status, r.body)
	}
}

// sampleEvent is an event each provider's Sample knows.
func sampleEvent(ep string) string {
	switch ep {
	case "instantly":
		return "reply_received"
	case "stripe":
		return "customer.updated"
	case "calendly":
		return "invitee.created"
	}
	return ""
}

// Forgeries spend no endpoint's budget: a sender holding a signed endpoint's URL but not
// its secret, answered 401, cannot hold the provider's real deliveries at 429.
func TestForgeriesSpendNoBudget(t *testing.T) {
	h := newHarnessOf(t, strings.Replace(testConfig, "gateway:\n", "gateway:\n  rate_limit: {endpoint: 5, tenant: 5, burst: 2s}\n", 1))
	for i := range 30 {
		d := h.sign("stripe", []byte(fmt.Sprintf(`{"id":"evt_forged_%d","object":"event","type":"customer.updated","created":%d,"data":{"object":{"id":"cus_1"}}}`, i, h.clock().Unix())),
			"whsec_not_the_secret", h.clock())
		if r := h.post(d); r.status != http.StatusUnauthorized {
			t.Fatalf("forgery %d: %d %s, want 401", i, r.status, r.body)
		}
	}
	for i := range 10 { // the whole burst is left: 2 s of 5 a second
		if r := h.post(h.delivery("stripe", sampleEvent("stripe"), h.clock())); r.status != http.StatusOK {
			t.Fatalf("real delivery %d after 30 forgeries: %d %s", i+1, r.status, r.body)
		}
		h.advance(time.Millisecond)
	}
}

// Requests that read the clock in one order and take the tenant's lock in another
// must not get more through than the bucket holds: a bucket given an earlier time than
// its last moves its clock back and gives that interval's tokens twice. Many senders
// at once, a rate they outrun: what is admitted stays within the burst and the rate
// over the time they took.
func TestAdmissionStaysWithinTheRateUnderConcurrency(t *testing.T) {
	const rate, senders, each = 20000.0, 8, 4000
	c := &config.Config{Tenants: []config.Tenant{{ID: "acme", Endpoints: []config.Endpoint{{ID: "ep"}}}}}
	c.Gateway.RateLimit = config.RateLimit{Endpoint: config.PerSecond{Rate: rate, Set: true}, Burst: time.Millisecond}
	a := newAdmission(c)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if ok, _ := a.admit("acme", "ep", time.Now); ok {
					admitted.Add(1)
				}
				runtime.Gosched() // interleave the senders between reading the clock and locking
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	limit := int64(math.Floor(rate*took.Seconds() + rate*time.Millisecond.Seconds()))
	if n := admitted.Load(); n > limit || n == 0 {
		t.Fatalf("%d of %d admitted in %v; the bucket allows at most %d", n, senders*each, took, limit)
	}
	if n := admitted.Load(); n == senders*each {
		t.Fatalf("every request admitted in %v: the senders did not outrun the rate, nothing was tested", took)
	}
}
