package smartlead_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/platform"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/platform/smartlead"
	"exacto.dev/pkg/ratelimit"
)

const campaign = 1234

func setup(t *testing.T) (*sandbox.Server, *smartlead.Client, int64) {
	t.Helper()
	sb := sandbox.Start(t)
	c := smartlead.New(smartlead.Config{BaseURL: sb.URL, APIKey: sandbox.SmartleadKey, Timeout: 500 * time.Millisecond})
	return sb, c, sb.AddSmartleadLead(campaign, "lead@example.com")
}

func TestPauseTwiceIsHarmless(t *testing.T) {
	sb, c, lead := setup(t)
	ctx := context.Background()
	for range 2 {
		if err := c.PauseLead(ctx, campaign, lead); err != nil {
			t.Fatal(err)
		}
	}
	if m, _ := sb.SmartleadLeadState(campaign, lead); m.Status != "PAUSED" {
		t.Fatalf("status: %+v", m)
	}
	if n := sb.Requests(sandbox.RouteSmartleadPause); n != 2 {
		t.Errorf("pause requests = %d", n)
	}
}

func TestUnsubscribeTwiceIsHarmless(t *testing.T) {
	sb, c, lead := setup(t)
	other := int64(99)
	sb.AddSmartleadLead(other, "lead@example.com")
	ctx := context.Background()
	for range 2 {
		if err := c.UnsubscribeFromCampaign(ctx, campaign, lead); err != nil {
			t.Fatal(err)
		}
	}
	if m, _ := sb.SmartleadLeadState(campaign, lead); !m.Unsubscribed {
		t.Fatal("not unsubscribed from campaign")
	}
	if m, _ := sb.SmartleadLeadState(other, lead); m.Unsubscribed {
		t.Fatal("campaign unsubscribe leaked to another campaign")
	}
	for range 2 {
		if err := c.Unsubscribe(ctx, lead); err != nil {
			t.Fatal(err)
		}
	}
	if !sb.SmartleadUnsubscribedAll(lead) {
		t.Fatal("not unsubscribed globally")
	}
	l, found, err := c.LeadByEmail(ctx, "lead@example.com")
	if err != nil || !found || l.ID != lead || !l.Unsubscribed || len(l.CampaignIDs) != 2 {
		t.Fatalf("lead: %+v found=%v err=%v", l, found, err)
	}
	leads, err := c.CampaignLeads(ctx, other)
	if err != nil || len(leads) != 1 || !leads[0].Stopped() || !leads[0].Unsubscribed {
		t.Errorf("other campaign: %+v %v", leads, err)
	}
}

// A lead past the 10,000th row of its campaign is found in one page by the documented
// filters (its recent activity), where reading the campaign would take over 100 pages.
func TestFindInCampaignByFilter(t *testing.T) {
	sb, c, _ := setup(t)
	ctx := context.Background()
	if _, found, err := c.LeadByEmail(ctx, "nobody@example.com"); found || err != nil {
		t.Fatalf("absent: found=%v err=%v", found, err)
	}
	sb.AddSmartleadLeads(campaign, 10500, "acme.test")
	at := time.Now().Add(-time.Minute)
	target := sb.AddSmartleadReply(campaign, "late@acme.test", "<m-1@acme.test>", "Please stop", at)
	if err := c.PauseLead(ctx, campaign, target); err != nil {
		t.Fatal(err)
	}
	before := sb.Requests(sandbox.RouteSmartleadCampaignLeads)
	cl, found, err := c.FindInCampaign(ctx, campaign, target, smartlead.Filter{Status: "PAUSED", ActiveAfter: at.Add(-time.Minute)}, 3)
	if err != nil || !found || cl.Email != "late@acme.test" || !cl.Stopped() {
		t.Fatalf("filtered lookup: %+v found=%v err=%v", cl, found, err)
	}
	if pages := sb.Requests(sandbox.RouteSmartleadCampaignLeads) - before; pages != 1 {
		t.Errorf("pages = %d, want 1", pages)
	}
	// Without a filter, the bound is reached first: not found, no error (the caller
	// must not conclude the lead is absent).
	if _, found, err := c.FindInCampaign(ctx, campaign, target, smartlead.Filter{}, 3); found || err != nil {
		t.Errorf("past the bound: found=%v err=%v", found, err)
	}
	// The reply is in the lead's message history, with its Message-ID and text.
	h, err := c.MessageHistory(ctx, campaign, target)
	if err != nil || len(h) != 1 || !h[0].Reply() || h[0].MessageID != "<m-1@acme.test>" || h[0].Body != "Please stop" {
		t.Fatalf("history %+v %v", h, err)
	}
	if bounce := (smartlead.Message{Type: "REPLY", From: "MAILER-DAEMON@mx.acme.test"}); bounce.Reply() {
		t.Error("a mailer daemon's notice counted as a reply")
	}
}

// A 429 names its wait in the body (error.retry_after) or X-RateLimit-Reset besides
// Retry-After: the client reads it.
func TestRateLimitedAnswer(t *testing.T) {
	sb, c, lead := setup(t)
	sb.SetRateLimit("smartlead", ratelimit.Rate{N: 1, Per: 3 * time.Second})
	ctx := context.Background()
	if err := c.PauseLead(ctx, campaign, lead); err != nil {
		t.Fatal(err)
	}
	err := c.PauseLead(ctx, campaign, lead)
	if platform.StatusOf(err) != http.StatusTooManyRequests || !platform.IsTransient(err) || platform.RetryAfter(err) < 2*time.Second {
		t.Fatalf("over the limit: %v (retry after %v)", err, platform.RetryAfter(err))
	}
	if !strings.Contains(err.Error(), "RATE_LIMIT_EXCEEDED") {
		t.Fatalf("the error body was not read: %v", err)
	}
}

func TestErrors(t *testing.T) {
	sb, c, lead := setup(t)
	ctx := context.Background()

	bad := smartlead.New(smartlead.Config{BaseURL: sb.URL, APIKey: "wrong-key", Timeout: time.Second})
	err := bad.PauseLead(ctx, campaign, lead)
	if platform.StatusOf(err) != http.StatusUnauthorized || platform.IsTransient(err) {
		t.Errorf("wrong key: %v", err)
	}
	if m, _ := sb.SmartleadLeadState(campaign, lead); m.Status != "STARTED" {
		t.Error("unauthenticated pause was applied")
	}
	if err := c.PauseLead(ctx, 777, lead); platform.StatusOf(err) != http.StatusNotFound || platform.IsTransient(err) {
		t.Errorf("not in campaign: %v", err)
	}

	sb.SetFault(sandbox.RouteSmartleadPause, sandbox.Fault{Status: 429, RetryAfter: 3 * time.Second, Count: 1})
	err = c.PauseLead(ctx, campaign, lead)
	if !platform.IsTransient(err) || platform.RetryAfter(err) != 3*time.Second {
		t.Errorf("429: %v", err)
	}
	for _, st := range []int{500, 503} {
		sb.SetFault(sandbox.RouteSmartleadPause, sandbox.Fault{Status: st, Count: 1})
		if err := c.PauseLead(ctx, campaign, lead); !platform.IsTransient(err) {
			t.Errorf("%d: %v", st, err)
		}
	}

	// The key travels in the URL; it must not reach error text (logs).
	sb.SetFault(sandbox.RouteSmartleadPause, sandbox.Fault{TimeoutAfterCommit: 3 * time.Second, Count: 1})
	err = c.PauseLead(ctx, campaign, lead)
	if !platform.IsTransient(err) || strings.Contains(err.Error(), sandbox.SmartleadKey) {
		t.Errorf("timeout: %v", err)
	}
	if m, _ := sb.SmartleadLeadState(campaign, lead); m.Status != "PAUSED" {
		t.Errorf("pause should have committed before the timeout: %+v", m)
	}
}

func TestQuietPeriod(t *testing.T) {
	sb, c, lead := setup(t)
	if err := c.PauseLead(context.Background(), campaign, lead); err != nil {
		t.Fatal(err)
	}
	last := sb.LastRequest(sandbox.RouteSmartleadPause)
	time.Sleep(100 * time.Millisecond)
	if !sb.LastRequest(sandbox.RouteSmartleadPause).Equal(last) || sb.TotalRequests() != 1 {
		t.Error("client made calls nobody asked for")
	}
}
