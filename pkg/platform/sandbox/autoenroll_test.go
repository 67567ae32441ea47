package sandbox_test

import (
	"context"
	"testing"

	"exacto.dev/pkg/platform/instantly"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/platform/smartlead"
)

// With AutoEnroll, looking up a lead the sandbox has never seen enrols it as an active
// lead, so `exacto up` without accounts has sequences to stop; without it, the same
// lookup finds nothing.
func TestAutoEnroll(t *testing.T) {
	ctx := context.Background()
	const campaign = "019cc043-e398-7985-aef5-99101bec3adf"
	for _, auto := range []bool{false, true} {
		sb := sandbox.StartWith(t, sandbox.Options{AutoEnroll: auto})
		ic := instantly.New(instantly.Config{BaseURL: sb.URL, APIKey: sandbox.InstantlyKey})
		sc := smartlead.New(smartlead.Config{BaseURL: sb.URL, APIKey: sandbox.SmartleadKey})

		l, found, err := ic.FindLead(ctx, campaign, "New@Example.com")
		if err != nil || found != auto {
			t.Fatalf("auto=%v: instantly find: found=%v err=%v", auto, found, err)
		}
		if auto {
			if l.Campaign != campaign || l.Status != instantly.StatusActive || l.Stopped() {
				t.Fatalf("instantly lead enrolled as %+v", l)
			}
			// A second lookup finds the same lead: one enrolment, not one per lookup.
			again, _, _ := ic.FindLead(ctx, "", "new@example.com")
			if again.ID != l.ID {
				t.Fatalf("second lookup found %+v, want %s", again, l.ID)
			}
		}

		sl, found, err := sc.LeadByEmail(ctx, "new@example.com")
		if err != nil || found != auto {
			t.Fatalf("auto=%v: smartlead by email: found=%v err=%v", auto, found, err)
		}
		if !auto {
			continue
		}
		if len(sl.CampaignIDs) != 1 || sl.CampaignIDs[0] != sandbox.SmartleadAutoCampaign {
			t.Fatalf("smartlead lead enrolled in %v", sl.CampaignIDs)
		}
		// The sandbox cannot know an auto-enrolled lead's campaigns: it is a started
		// lead of any campaign it is asked about.
		const other int64 = 77
		cl, found, err := sc.FindInCampaign(ctx, other, sl.ID, smartlead.Filter{}, 1)
		if err != nil || !found || cl.Stopped() || cl.Email != "new@example.com" {
			t.Fatalf("campaign %d: %+v found=%v err=%v", other, cl, found, err)
		}
		if err := sc.PauseLead(ctx, 78, sl.ID); err != nil {
			t.Fatalf("pause in a campaign not yet listed: %v", err)
		}
		if m, ok := sb.SmartleadLeadState(78, sl.ID); !ok || m.Status != "PAUSED" {
			t.Fatalf("after pause: %+v %v", m, ok)
		}
		// A seeded lead keeps its real campaigns.
		seeded := sb.AddSmartleadLead(5, "seeded@example.com")
		if _, found, _ := sc.FindInCampaign(ctx, other, seeded, smartlead.Filter{}, 1); found {
			t.Fatal("a seeded lead joined a campaign it is not in")
		}
	}
}
