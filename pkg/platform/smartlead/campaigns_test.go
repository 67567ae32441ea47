package smartlead_test

import (
	"context"
	"testing"
	"time"

	"exacto.dev/pkg/platform"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/platform/smartlead"
)

// Every campaign of the account in one answer, with its status; a refusal or a
// failure is an error of its class.
func TestCampaigns(t *testing.T) {
	sb, c, _ := setup(t)
	sb.AddSmartleadCampaign(campaign, "Q1", "ACTIVE")
	sb.AddSmartleadCampaign(77, "Old", "COMPLETED")
	sb.AddSmartleadCampaign(78, "Held", "PAUSED")
	all, err := c.Campaigns(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 || all[0].ID != campaign || !all[0].Active() || all[1].Active() || all[2].Active() || all[0].Name != "Q1" {
		t.Fatalf("campaigns %+v", all)
	}
	bad := smartlead.New(smartlead.Config{BaseURL: sb.URL, APIKey: "wrong", Timeout: time.Second})
	if _, err := bad.Campaigns(context.Background()); platform.StatusOf(err) != 401 || platform.IsTransient(err) {
		t.Fatalf("wrong key: %v", err)
	}
	sb.SetFault(sandbox.RouteSmartleadCampaignList, sandbox.Fault{Status: 500, Count: 1})
	if l, err := c.Campaigns(context.Background()); !platform.IsTransient(err) || l != nil {
		t.Fatalf("500: %v %v", l, err)
	}
}
