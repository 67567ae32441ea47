package instantly_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"exacto.dev/pkg/platform"
	"exacto.dev/pkg/platform/instantly"
	"exacto.dev/pkg/platform/sandbox"
)

// The workspace's campaigns come page by page (100 a page, starting_after) with their
// numeric status: active and running-subsequences campaigns are the ones sending.
func TestCampaignsPagesAndStatus(t *testing.T) {
	sb, c, _ := setup(t)
	for i := range 150 {
		sb.AddInstantlyCampaign(fmt.Sprintf("c-%03d", i), fmt.Sprintf("Campaign %d", i), instantly.CampaignPaused)
	}
	sb.AddInstantlyCampaign(campaign, "Q1 outbound", instantly.CampaignActive)
	sb.AddInstantlyCampaign("c-subseq", "Follow-ups", instantly.CampaignRunningSubsequences)
	sb.AddInstantlyCampaign("c-draft", "Draft", instantly.CampaignDraft)
	all, err := c.Campaigns(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 153 {
		t.Fatalf("%d campaigns, want 153", len(all))
	}
	if n := sb.Requests(sandbox.RouteInstantlyCampaignList); n != 2 {
		t.Fatalf("%d pages requested, want 2", n)
	}
	var active []string
	for _, cp := range all {
		if cp.Active() {
			active = append(active, cp.ID+" "+cp.Name)
		}
	}
	if fmt.Sprint(active) != "["+campaign+" Q1 outbound c-subseq Follow-ups]" {
		t.Fatalf("active %v", active)
	}
}

// A listing refused (401) or failing (500, 429) is an error of its class, never a
// shorter list.
func TestCampaignsErrors(t *testing.T) {
	sb, c, _ := setup(t)
	sb.AddInstantlyCampaign(campaign, "Q1 outbound", instantly.CampaignActive)
	bad := instantly.New(instantly.Config{BaseURL: sb.URL, APIKey: "wrong", Timeout: time.Second})
	if l, err := bad.Campaigns(context.Background()); platform.StatusOf(err) != 401 || platform.IsTransient(err) || l != nil {
		t.Fatalf("wrong key: %v %v", l, err)
	}
	for _, st := range []int{500, 429} {
		sb.SetFault(sandbox.RouteInstantlyCampaignList, sandbox.Fault{Status: st, Count: 1})
		if l, err := c.Campaigns(context.Background()); !platform.IsTransient(err) || l != nil {
			t.Fatalf("%d: %v %v", st, l, err)
		}
	}
}
