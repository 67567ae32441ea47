package smartlead_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/platform"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/platform/smartlead"
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
	cl, found, err := c.CampaignLeadStatus(ctx, campaign, lead)
	if err != nil || !found || cl.Status != "PAUSED" || !cl.Stopped() {
		t.Fatalf("status: %+v found=%v err=%v", cl, found, err)
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
	if cl, _, _ := c.CampaignLeadStatus(ctx, other, lead); !cl.Stopped() {
		t.Errorf("other campaign: %+v", cl)
	}
}

func TestLookupAndPagination(t *testing.T) {
	sb, c, _ := setup(t)
	ctx := context.Background()
	if _, found, err := c.LeadByEmail(ctx, "nobody@example.com"); found || err != nil {
		t.Fatalf("absent: found=%v err=%v", found, err)
	}
	var target int64
	for i := range 150 {
		id := sb.AddSmartleadLead(campaign, fmt.Sprintf("p%03d@acme.test", i))
		if i == 120 {
			target = id
		}
	}
	before := sb.Requests(sandbox.RouteSmartleadCampaignLeads)
	cl, found, err := c.CampaignLeadStatus(ctx, campaign, target)
	if err != nil || !found || cl.Email != "p120@acme.test" || cl.Stopped() {
		t.Fatalf("paged lookup: %+v found=%v err=%v", cl, found, err)
	}
	if pages := sb.Requests(sandbox.RouteSmartleadCampaignLeads) - before; pages != 2 {
		t.Errorf("pages = %d, want 2", pages)
	}
	if _, found, err := c.CampaignLeadStatus(ctx, campaign, 1); found || err != nil {
		t.Errorf("not a member: found=%v err=%v", found, err)
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
