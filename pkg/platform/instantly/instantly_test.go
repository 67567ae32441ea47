package instantly_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
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

func TestSetInterestTwiceIsHarmless(t *testing.T) {
	sb, c, id := setup(t)
	ctx := context.Background()
	for range 2 {
		if err := c.SetInterest(ctx, campaign, "lead@example.com", ptr(instantly.NotInterested)); err != nil {
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

func TestUnsubscribeTwiceMakesOneEntry(t *testing.T) {
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
	if err := bad.SetInterest(ctx, campaign, "lead@example.com", ptr(instantly.NotInterested)); platform.StatusOf(err) != 401 || platform.IsTransient(err) {
		t.Errorf("wrong key: %v", err)
	}
	if len(sb.Stops("lead@example.com")) != 0 {
		t.Error("unauthenticated stop was applied")
	}
	if _, err := c.GetLead(ctx, "missing"); platform.StatusOf(err) != http.StatusNotFound || platform.IsTransient(err) {
		t.Errorf("missing lead: %v", err)
	}

	sb.SetFault(sandbox.RouteInstantlyInterest, sandbox.Fault{Status: 429, RetryAfter: 3 * time.Second, Count: 1})
	err := c.SetInterest(ctx, campaign, "lead@example.com", ptr(instantly.NotInterested))
	if !platform.IsTransient(err) || platform.RetryAfter(err) != 3*time.Second {
		t.Errorf("429: %v", err)
	}
	for _, st := range []int{500, 503} {
		sb.SetFault(sandbox.RouteInstantlyInterest, sandbox.Fault{Status: st, Count: 1})
		if err := c.SetInterest(ctx, campaign, "lead@example.com", ptr(instantly.NotInterested)); !platform.IsTransient(err) {
			t.Errorf("%d: %v", st, err)
		}
	}
	sb.SetFault(sandbox.RouteInstantlyInterest, sandbox.Fault{Status: 400, Count: 1})
	if err := c.SetInterest(ctx, campaign, "lead@example.com", ptr(instantly.NotInterested)); platform.IsTransient(err) || platform.StatusOf(err) != 400 {
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
	if err := c.SetInterest(ctx, campaign, "lead@example.com", ptr(instantly.NotInterested)); !platform.IsTransient(err) {
		t.Fatalf("want transient timeout, got %v", err)
	}
	// Confirm at the source before deciding whether to repeat.
	if l, err := c.GetLead(ctx, id); err != nil || !l.Stopped() {
		t.Fatalf("the stop should have committed: %+v %v", l, err)
	}
	if err := c.SetInterest(ctx, campaign, "lead@example.com", ptr(instantly.NotInterested)); err != nil {
		t.Fatal(err)
	}
	if l, _ := c.GetLead(ctx, id); l.Status != instantly.StatusCompleted {
		t.Fatalf("lead = %+v", l)
	}
	if total := sb.TotalRequests(); total != 4 {
		t.Errorf("requests = %d, want 4", total)
	}
	// The reference's answer is 202 (a background job): no error.
	if n := len(sb.Stops("lead@example.com")); n != 2 {
		t.Errorf("%d interest updates, want 2", n)
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

func ptr(v int) *int { return &v }

// The unsubscribe looks the block list up first: the reference documents no answer
// for an entry that exists (the sandbox then adds a second), so a repeat, or an entry
// of the address's domain, writes nothing.
func TestBlockedLooksBeforeWriting(t *testing.T) {
	sb, c, _ := setup(t)
	ctx := context.Background()
	if err := c.Unsubscribe(ctx, "example.org"); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"ana@example.org", "ANA@example.org"} {
		blocked, err := c.Blocked(ctx, addr)
		if err != nil || !blocked {
			t.Fatalf("%s under a domain entry: blocked=%v %v", addr, blocked, err)
		}
		if err := c.Unsubscribe(ctx, addr); err != nil {
			t.Fatal(err)
		}
	}
	if bl := sb.Blocklist(); len(bl) != 1 {
		t.Fatalf("block list %v: a blocked address was added again", bl)
	}
	if blocked, err := c.Blocked(ctx, "ben@example.com"); err != nil || blocked {
		t.Fatalf("an address not listed: blocked=%v %v", blocked, err)
	}
}

// A campaign's stop settings are read from the campaign; an unknown one is a
// permanent 404.
func TestGetCampaign(t *testing.T) {
	sb, c, _ := setup(t)
	sb.SetInstantlyCampaign(campaign, true, false)
	cp, err := c.GetCampaign(context.Background(), campaign)
	if err != nil || !cp.StopOnReply || cp.StopOnAutoReply || cp.ID != campaign {
		t.Fatalf("campaign %+v %v", cp, err)
	}
	if _, err := c.GetCampaign(context.Background(), "nope"); platform.StatusOf(err) != http.StatusNotFound || platform.IsTransient(err) {
		t.Fatalf("unknown campaign: %v", err)
	}
}

// A custom label is found by name and kind, made when absent, and kept: the second
// ask costs no request; another client of the workspace finds the one made.
func TestEnsureLabel(t *testing.T) {
	sb, c, _ := setup(t)
	ctx := context.Background()
	l, err := c.EnsureLabel(ctx, "Replied (Exacto)", instantly.KindNeutral, "set on a reply")
	if err != nil || l.InterestStatus == 0 || l.Kind != instantly.KindNeutral {
		t.Fatalf("label %+v %v", l, err)
	}
	before := sb.TotalRequests()
	again, err := c.EnsureLabel(ctx, "Replied (Exacto)", instantly.KindNeutral, "set on a reply")
	if err != nil || again != l || sb.TotalRequests() != before {
		t.Fatalf("second ask: %+v %v, %d requests", again, err, sb.TotalRequests()-before)
	}
	other := instantly.New(instantly.Config{BaseURL: sb.URL, APIKey: sandbox.InstantlyKey})
	found, err := other.EnsureLabel(ctx, "Replied (Exacto)", instantly.KindNeutral, "set on a reply")
	if err != nil || found.InterestStatus != l.InterestStatus || len(sb.InstantlyLabels()) != 1 {
		t.Fatalf("another client: %+v %v, %d labels", found, err, len(sb.InstantlyLabels()))
	}
	// The label's value is an interest value the update accepts; an unknown one is a 400.
	if err := c.SetInterest(ctx, campaign, "lead@example.com", &l.InterestStatus); err != nil {
		t.Fatal(err)
	}
	if err := c.SetInterest(ctx, campaign, "lead@example.com", ptr(29999)); platform.StatusOf(err) != 400 {
		t.Fatalf("unknown interest value: %v", err)
	}
}

// Many callers of one client make the label once; clients of several processes making
// it at once (Instantly documents no uniqueness of names, and the sandbox keeps every
// one made) all settle on the same label.
func TestEnsureLabelConcurrently(t *testing.T) {
	sb, _, _ := setup(t)
	clients := make([]*instantly.Client, 3)
	for i := range clients {
		clients[i] = instantly.New(instantly.Config{BaseURL: sb.URL, APIKey: sandbox.InstantlyKey})
	}
	got := make([]instantly.LeadLabel, len(clients)*8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			l, err := clients[i%len(clients)].EnsureLabel(context.Background(), "Stopped", instantly.KindNeutral, "")
			if err != nil {
				t.Error(err)
			}
			got[i] = l
		})
	}
	wg.Wait()
	for _, l := range got {
		if l.ID == "" || l.ID != got[0].ID {
			t.Fatalf("callers settled on different labels: %+v", got)
		}
	}
	if n := len(sb.InstantlyLabels()); n > len(clients) {
		t.Fatalf("%d labels made by %d clients", n, len(clients))
	}
	// Whichever was made by whom, each is recognised by every client as that label.
	for _, l := range sb.InstantlyLabels() {
		for _, c := range clients {
			if ok, err := c.IsLabel(context.Background(), "Stopped", instantly.KindNeutral, l.InterestStatus); err != nil || !ok {
				t.Fatalf("label %+v not recognised: %v", l, err)
			}
		}
	}
	if ok, err := clients[0].IsLabel(context.Background(), "Stopped", instantly.KindNeutral, instantly.NotInterested); err != nil || ok {
		t.Fatalf("Not Interested taken for the label: %v", err)
	}
}

// A subsequence keyed on an interest value takes in a lead given that value (the bite
// the stopper guards against) — not at once: a background job does, after the value's
// change, which the lead dates; removing the lead takes it out before its first step.
func TestSubsequences(t *testing.T) {
	sb, c, id := setup(t)
	ctx := context.Background()
	sub := sb.AddInstantlySubsequence(campaign, time.Hour, instantly.Interested)
	subs, err := c.Subsequences(ctx, campaign)
	if err != nil || len(subs) != 1 || !subs[0].StartsOn(instantly.Interested) || subs[0].StartsOn(instantly.MeetingBooked) {
		t.Fatalf("subsequences %+v %v", subs, err)
	}
	given := time.Now()
	if err := c.SetInterest(ctx, campaign, "lead@example.com", ptr(instantly.Interested)); err != nil {
		t.Fatal(err)
	}
	l, _ := c.GetLead(ctx, id)
	changed, err := time.Parse(time.RFC3339Nano, l.TimestampLastInterestChange)
	if l.SubsequenceID != "" || err != nil || changed.Before(given.Add(-time.Second)) {
		t.Fatalf("lead just given Interested: %+v (%v), want no subsequence yet and the change dated", l, err)
	}
	time.Sleep(sandbox.DefaultInstantlyJobDelay + 50*time.Millisecond)
	l, _ = c.GetLead(ctx, id)
	if l.SubsequenceID != sub || l.Stopped() {
		t.Fatalf("lead given Interested, after the job: %+v, want active in subsequence %s", l, sub)
	}
	if l, err = c.RemoveFromSubsequence(ctx, id); err != nil || l.SubsequenceID != "" || !l.Stopped() {
		t.Fatalf("removed: %+v %v", l, err)
	}
	if sends := sb.InstantlySubsequenceSends(); len(sends) != 0 {
		t.Fatalf("subsequence steps sent: %v", sends)
	}
}

// A reply is read back by its e-mail id (ue_type 2, the lead's address and text), or
// among the lead's received e-mails; a lead only in a lead list is no campaign lead.
func TestEmailsAndListLeads(t *testing.T) {
	sb, c, _ := setup(t)
	ctx := context.Background()
	at := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
	id := sb.AddInstantlyReply(campaign, "lead@example.com", "em-1", "Send me the pricing", false, at)
	e, err := c.GetEmail(ctx, id)
	if err != nil || !e.Received() || e.Lead != "lead@example.com" || e.Body.Text != "Send me the pricing" || !e.Time().Equal(at) {
		t.Fatalf("email %+v %v", e, err)
	}
	if _, err := c.GetEmail(ctx, "em-forged"); platform.StatusOf(err) != http.StatusNotFound {
		t.Fatalf("unknown e-mail: %v", err)
	}
	list, err := c.ReceivedEmails(ctx, "lead@example.com", campaign, 5)
	if err != nil || len(list) != 1 || list[0].ID != "em-1" {
		t.Fatalf("received %+v %v", list, err)
	}
	sb.AddInstantlyListLead("list-1", "listed@example.com")
	if leads, err := c.FindLeads(ctx, "", "listed@example.com"); err != nil || len(leads) != 0 {
		t.Fatalf("a lead only in a list: %+v %v", leads, err)
	}
}
