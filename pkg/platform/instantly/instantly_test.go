package instantly_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"exacto.dev/pkg/platform"
	"exacto.dev/pkg/platform/instantly"
	"exacto.dev/pkg/platform/sandbox"
)

const campaign = "019cc043-e398-7985-aef5-99101bec3adf"

func setup(t *testing.T) (*sandbox.Server, *instantly.Client, string) {
	t.Helper()
	sb := sandbox.Start(t)
	c := instantly.New(instantly.Config{BaseURL: sb.URL, APIKey: sandbox.InstantlyKey, Timeout: 500 * time.Millisecond})
	return sb, c, sb.AddInstantlyLead(campaign, "lead@example.com")
}

func TestStopLeadTwiceIsHarmless(t *testing.T) {
	sb, c, id := setup(t)
	ctx := context.Background()
	for range 2 {
		if err := c.StopLead(ctx, campaign, "lead@example.com", instantly.NotInterested); err != nil {
			t.Fatal(err)
		}
	}
	l, err := c.GetLead(ctx, id)
	if err != nil || !l.Stopped() || l.Status != instantly.StatusCompleted ||
		l.InterestStatus == nil || *l.InterestStatus != instantly.NotInterested {
		t.Fatalf("lead = %+v, err %v", l, err)
	}
	found, ok, err := c.FindLead(ctx, campaign, "LEAD@example.com")
	if err != nil || !ok || found.ID != id {
		t.Fatalf("find: %+v %v %v", found, ok, err)
	}
	if n := len(sb.Stops("lead@example.com")); n != 2 {
		t.Errorf("stops = %d", n)
	}
	if _, ok, err := c.FindLead(ctx, campaign, "nobody@example.com"); ok || err != nil {
		t.Errorf("absent lead: ok=%v err=%v", ok, err)
	}
}

func TestUnsubscribeTwiceIsHarmless(t *testing.T) {
	sb, c, id := setup(t)
	ctx := context.Background()
	for range 2 {
		if err := c.Unsubscribe(ctx, "Lead@Example.com"); err != nil {
			t.Fatal(err)
		}
	}
	if bl := sb.Blocklist(); len(bl) != 1 || bl[0] != "lead@example.com" {
		t.Fatalf("blocklist = %v", bl)
	}
	if l, err := c.GetLead(ctx, id); err != nil || l.Status != instantly.StatusUnsubscribed {
		t.Fatalf("lead = %+v %v", l, err)
	}
}

func TestErrors(t *testing.T) {
	sb, c, _ := setup(t)
	ctx := context.Background()

	bad := instantly.New(instantly.Config{BaseURL: sb.URL, APIKey: "wrong", Timeout: time.Second})
	if err := bad.StopLead(ctx, campaign, "lead@example.com", instantly.NotInterested); platform.StatusOf(err) != 401 || platform.IsTransient(err) {
		t.Errorf("wrong key: %v", err)
	}
	if len(sb.Stops("lead@example.com")) != 0 {
		t.Error("unauthenticated stop was applied")
	}
	if _, err := c.GetLead(ctx, "missing"); platform.StatusOf(err) != http.StatusNotFound || platform.IsTransient(err) {
		t.Errorf("missing lead: %v", err)
	}

	sb.SetFault(sandbox.RouteInstantlyInterest, sandbox.Fault{Status: 429, RetryAfter: 3 * time.Second, Count: 1})
	err := c.StopLead(ctx, campaign, "lead@example.com", instantly.NotInterested)
	if !platform.IsTransient(err) || platform.RetryAfter(err) != 3*time.Second {
		t.Errorf("429: %v", err)
	}
	for _, st := range []int{500, 503} {
		sb.SetFault(sandbox.RouteInstantlyInterest, sandbox.Fault{Status: st, Count: 1})
		if err := c.StopLead(ctx, campaign, "lead@example.com", instantly.NotInterested); !platform.IsTransient(err) {
			t.Errorf("%d: %v", st, err)
		}
	}
	sb.SetFault(sandbox.RouteInstantlyInterest, sandbox.Fault{Status: 400, Count: 1})
	if err := c.StopLead(ctx, campaign, "lead@example.com", instantly.NotInterested); platform.IsTransient(err) || platform.StatusOf(err) != 400 {
		t.Errorf("400: %v", err)
	}
	if n := len(sb.Stops("lead@example.com")); n != 0 {
		t.Errorf("faulted requests were applied: %d", n)
	}
}

func TestTimeoutAfterCommitThenRetry(t *testing.T) {
	sb, c, id := setup(t)
	ctx := context.Background()
	sb.SetFault(sandbox.RouteInstantlyInterest, sandbox.Fault{TimeoutAfterCommit: 3 * time.Second, Count: 1})
	if err := c.StopLead(ctx, campaign, "lead@example.com", instantly.NotInterested); !platform.IsTransient(err) {
		t.Fatalf("want transient timeout, got %v", err)
	}
	// Confirm at the source before deciding whether to repeat.
	if l, err := c.GetLead(ctx, id); err != nil || !l.Stopped() {
		t.Fatalf("the stop should have committed: %+v %v", l, err)
	}
	if err := c.StopLead(ctx, campaign, "lead@example.com", instantly.NotInterested); err != nil {
		t.Fatal(err)
	}
	if l, _ := c.GetLead(ctx, id); l.Status != instantly.StatusCompleted {
		t.Fatalf("lead = %+v", l)
	}
	if total := sb.TotalRequests(); total != 4 {
		t.Errorf("requests = %d, want 4", total)
	}
}

// A campaign's leads come page by page (100 a page) until Instantly gives no cursor:
// every lead once, none of another campaign.
func TestCampaignLeadsPagination(t *testing.T) {
	sb, c, _ := setup(t)
	sb.AddInstantlyLead("another-campaign", "elsewhere@example.com")
	for i := range 249 { // 250 with setup's lead: three pages
		sb.AddInstantlyLead(campaign, fmt.Sprintf("lead%d@example.com", i))
	}
	before := sb.Requests(sandbox.RouteInstantlyLeadList)
	leads, err := c.CampaignLeads(context.Background(), campaign)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, l := range leads {
		if seen[l.ID] || l.Campaign != campaign {
			t.Fatalf("lead %+v twice or of another campaign", l)
		}
		seen[l.ID] = true
	}
	if len(seen) != 250 {
		t.Fatalf("%d leads, want 250", len(seen))
	}
	if n := sb.Requests(sandbox.RouteInstantlyLeadList) - before; n != 3 {
		t.Fatalf("%d pages requested, want 3", n)
	}
}
