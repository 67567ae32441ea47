package sandbox_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"exacto.dev/pkg/platform/instantly"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/platform/smartlead"
)

// What a webhook says happened is held by the platform it came from: the reply in
// the unibox or the message history (and the lead stopped where the campaign stops on
// reply), the unsubscribe and the bounce on the lead. Anything else is refused.
func TestHappened(t *testing.T) {
	sb := sandbox.Start(t)
	ctx := context.Background()
	ic := instantly.New(instantly.Config{BaseURL: sb.URL, APIKey: sandbox.InstantlyKey})
	sc := smartlead.New(smartlead.Config{BaseURL: sb.URL, APIKey: sandbox.SmartleadKey})
	const campaign = "c-stops"
	sb.SetInstantlyCampaign(campaign, true, false)
	reply := `{"timestamp":"2026-12-01T10:00:00.000Z","event_type":"reply_received","workspace":"w","campaign_id":"c-stops",` +
		`"lead_email":"Ana@Example.com","email_id":"em-7","reply_text":"Yes please"}`
	if err := sb.Happened("instantly", []byte(reply)); err != nil {
		t.Fatal(err)
	}
	e, err := ic.GetEmail(ctx, "em-7")
	if err != nil || !e.Received() || e.Body.Text != "Yes please" || e.Lead != "ana@example.com" {
		t.Fatalf("the reply at Instantly: %+v %v", e, err)
	}
	l, found, err := ic.FindLead(ctx, campaign, "ana@example.com")
	if err != nil || !found || l.Status != instantly.StatusCompleted || l.EmailReplyCount != 1 {
		t.Fatalf("a campaign that stops on reply stopped the lead itself: %+v %v %v", l, found, err)
	}
	unsub := `{"timestamp":"2026-12-01T11:00:00.000Z","event_type":"lead_unsubscribed","workspace":"w","campaign_id":"c-2","lead_email":"ben@example.com"}`
	if err := sb.Happened("instantly", []byte(unsub)); err != nil {
		t.Fatal(err)
	}
	if l, _, _ := ic.FindLead(ctx, "c-2", "ben@example.com"); l.Status != instantly.StatusUnsubscribed {
		t.Fatalf("unsubscribed lead: %+v", l)
	}

	slReply := `{"event_type":"EMAIL_REPLY","event_timestamp":"2026-12-01T10:00:00Z","campaign_id":9181,"sl_email_lead_id":"1",` +
		`"to_email":"kim@example.com","reply_message":{"message_id":"<r1@example.com>","text":"Not now","time":"2026-12-01T10:00:00Z"}}`
	if err := sb.Happened("smartlead", []byte(slReply)); err != nil {
		t.Fatal(err)
	}
	// Held under the lead id the webhook carries, as Smartlead's own id for the lead.
	id := sb.SmartleadLeadID("kim@example.com")
	if id != 1 {
		t.Fatalf("kim's lead id %d, want the webhook's 1", id)
	}
	h, err := sc.MessageHistory(ctx, 9181, id)
	if err != nil || len(h) != 1 || !h[0].Reply() || h[0].MessageID != "<r1@example.com>" {
		t.Fatalf("the reply at Smartlead: %+v %v", h, err)
	}
	slUnsub := `{"event_type":"LEAD_UNSUBSCRIBED","event_timestamp":"2026-12-01T10:00:00Z","campaign_id":9181,"to_email":"kim@example.com"}`
	if err := sb.Happened("smartlead", []byte(slUnsub)); err != nil {
		t.Fatal(err)
	}
	if l, _, _ := sc.LeadByEmail(ctx, "kim@example.com"); !l.Unsubscribed {
		t.Fatalf("unsubscribed at Smartlead: %+v", l)
	}

	for _, bad := range []struct{ provider, body, want string }{
		{"stripe", `{}`, "not a platform"},
		{"instantly", `{"event_type":`, "does not parse"},
		{"instantly", `{"timestamp":"2026-12-01T10:00:00Z","event_type":"reply_received","workspace":"w","campaign_id":"c"}`, "no e-mail"},
		// Kim is lead 1: another id for her, or her id for another, contradicts it.
		{"smartlead", strings.Replace(slReply, `"sl_email_lead_id":"1"`, `"sl_email_lead_id":"2"`, 1), "lead kim@example.com is lead 1 here, not 2"},
		{"smartlead", strings.Replace(slReply, "kim@example.com", "lee@example.com", 1), "lead 1 is another lead here, not lee@example.com"},
		{"smartlead", strings.Replace(slReply, `"sl_email_lead_id":"1"`, `"sl_email_lead_id":"x1"`, 1), `lead id "x1" is not a number`},
	} {
		if err := sb.Happened(bad.provider, []byte(bad.body)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s %s: %v, want %q", bad.provider, bad.body, err, bad.want)
		}
	}
	// The control route says the same over HTTP.
	resp, err := http.Post(sb.URL+sandbox.ControlHappened, "application/json", strings.NewReader(`{"provider":"stripe","body":{}}`))
	if err != nil || resp.StatusCode != 400 {
		t.Fatalf("control route: %v %v", resp, err)
	}
	resp.Body.Close()
}
