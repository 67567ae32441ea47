package hubspot_test

import (
	"context"
	"testing"
	"time"

	"exacto.dev/pkg/platform"
	"exacto.dev/pkg/platform/hubspot"
	"exacto.dev/pkg/platform/sandbox"
)

// A contact's deals and meetings are the ones associated with it (another contact's
// are not), with the properties the reconciler compares.
func TestDealsAndMeetingsOfContact(t *testing.T) {
	sb, c, contact := setup(t)
	ctx := context.Background()
	other := sb.AddContact("bob@example.com", nil)
	deal := sb.AddDealFor(contact, map[string]string{"dealname": "Ada - 10 seats", "dealstage": "appointmentscheduled",
		"pipeline": "default", "amount": "1200", "createdate": "2026-12-02T10:00:00.000Z"})
	sb.AddDealFor(other, map[string]string{"dealname": "Bob"})
	held := sb.AddMeetingFor(contact, map[string]string{"hs_meeting_title": "Demo", "hs_meeting_outcome": hubspot.MeetingScheduled,
		"hs_meeting_start_time": "1796205600000"})
	cancelled := sb.AddMeetingFor(contact, map[string]string{"hs_meeting_title": "Intro", "hs_meeting_outcome": hubspot.MeetingCanceled})
	sb.AddMeetingFor(other, nil)

	deals, err := c.DealsOfContact(ctx, contact)
	if err != nil || len(deals) != 1 {
		t.Fatalf("deals %+v %v", deals, err)
	}
	if d := deals[0]; d.ID != deal || d.Name != "Ada - 10 seats" || d.Stage != "appointmentscheduled" || d.Amount != "1200" ||
		!d.Created.Equal(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)) {
		t.Fatalf("deal %+v", d)
	}
	meetings, err := c.MeetingsOfContact(ctx, contact)
	if err != nil || len(meetings) != 2 {
		t.Fatalf("meetings %+v %v", meetings, err)
	}
	for _, m := range meetings {
		switch m.ID {
		case held:
			if !m.Held() || m.Title != "Demo" || !m.Start.Equal(time.UnixMilli(1796205600000)) {
				t.Fatalf("meeting %+v", m)
			}
		case cancelled:
			if m.Held() {
				t.Fatalf("a cancelled meeting holds: %+v", m)
			}
		default:
			t.Fatalf("meeting of another contact %+v", m)
		}
	}
	if _, err := c.DealsOfContact(ctx, ""); err == nil {
		t.Fatal("no contact id, no error")
	}
	sb.SetFault(sandbox.RouteHubSpotMeetingSearch, sandbox.Fault{Status: 500, Count: 1})
	if l, err := c.MeetingsOfContact(ctx, contact); !platform.IsTransient(err) || l != nil {
		t.Fatalf("500: %v %v", l, err)
	}
	bad := hubspot.New(hubspot.Config{BaseURL: sb.URL, Token: "wrong", Timeout: time.Second})
	if _, err := bad.DealsOfContact(ctx, contact); platform.StatusOf(err) != 401 {
		t.Fatalf("wrong token: %v", err)
	}
}
