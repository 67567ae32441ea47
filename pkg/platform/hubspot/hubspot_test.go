package hubspot_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/platform"
	"exacto.dev/pkg/platform/hubspot"
	"exacto.dev/pkg/platform/sandbox"
)

func setup(t *testing.T) (*sandbox.Server, *hubspot.Client, string) {
	t.Helper()
	sb := sandbox.Start(t)
	c := hubspot.New(hubspot.Config{BaseURL: sb.URL, Token: sandbox.HubSpotToken, Timeout: 500 * time.Millisecond})
	contact := sb.AddContact("ada@example.com", map[string]string{"firstname": "Ada"})
	return sb, c, contact
}

func note(contact, ext string) hubspot.Note {
	return hubspot.Note{ContactID: contact, Body: "Replied: interested", ExternalID: ext,
		Timestamp: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), OwnerID: "77"}
}

func TestEnsureNoteTwiceWritesOnce(t *testing.T) {
	sb, c, contact := setup(t)
	ctx := context.Background()

	first, created, err := c.EnsureNote(ctx, note(contact, "evt-1"))
	if err != nil || !created || first.ID == "" {
		t.Fatalf("first: %+v created=%v err=%v", first, created, err)
	}
	second, created, err := c.EnsureNote(ctx, note(contact, "evt-1"))
	if err != nil || created || second.ID != first.ID {
		t.Fatalf("second: %+v created=%v err=%v", second, created, err)
	}
	if n := sb.NotesWithExternalID("evt-1"); n != 1 {
		t.Fatalf("notes = %d, want 1", n)
	}
	if got := sb.Requests(sandbox.RouteHubSpotNoteCreate); got != 1 {
		t.Errorf("creates = %d, want 1", got)
	}
	notes := sb.Notes()
	as := notes[0].Associations
	if len(as) != 1 || as[0].ToID != contact || as[0].TypeID != hubspot.NoteToContact || as[0].Category != "HUBSPOT_DEFINED" {
		t.Errorf("associations = %+v", as)
	}
	p := notes[0].Properties
	if p["hs_note_body"] != "Replied: interested" || p["hubspot_owner_id"] != "77" || p["hs_timestamp"] != "2026-12-02T10:00:00.000Z" {
		t.Errorf("properties = %v", p)
	}

	got, found, err := c.SearchNoteByExternalID(ctx, "evt-1")
	if err != nil || !found || got.ID != first.ID || !got.Timestamp.Equal(first.Timestamp) {
		t.Errorf("search: %+v found=%v err=%v", got, found, err)
	}
	if _, found, err := c.SearchNoteByExternalID(ctx, "evt-unknown"); err != nil || found {
		t.Errorf("absent: found=%v err=%v", found, err)
	}
}

func TestTimeoutAfterCommitThenEnsureNote(t *testing.T) {
	for _, lag := range []time.Duration{0, time.Minute} {
		t.Run("searchLag="+lag.String(), func(t *testing.T) {
			sb, c, contact := setup(t)
			ctx := context.Background()
			// A lagging index cannot see the committed note: only the unique
			// property stops the duplicate.
			sb.SetSearchLag(lag)
			sb.SetFault(sandbox.RouteHubSpotNoteCreate, sandbox.Fault{TimeoutAfterCommit: 3 * time.Second, Count: 1})

			start := time.Now()
			_, _, err := c.EnsureNote(ctx, note(contact, "evt-2"))
			if !platform.IsTransient(err) {
				t.Fatalf("want transient timeout, got %v", err)
			}
			if time.Since(start) > 2*time.Second {
				t.Errorf("client waited %v; its timeout is 500ms", time.Since(start))
			}
			if n := sb.NotesWithExternalID("evt-2"); n != 1 {
				t.Fatalf("the write should have committed: %d notes", n)
			}

			retry, created, err := c.EnsureNote(ctx, note(contact, "evt-2"))
			if err != nil || created || retry.ID != sb.Notes()[0].ID {
				t.Fatalf("retry: %+v created=%v err=%v", retry, created, err)
			}
			if n := sb.NotesWithExternalID("evt-2"); n != 1 {
				t.Fatalf("notes = %d after retry, want 1", n)
			}
		})
	}
}

func TestRateLimitRetryAfter(t *testing.T) {
	sb, c, contact := setup(t)
	sb.SetFault(sandbox.RouteHubSpotNoteSearch, sandbox.Fault{Status: 429, RetryAfter: 3 * time.Second, Count: 1})
	_, _, err := c.EnsureNote(context.Background(), note(contact, "evt-3"))
	if !platform.IsTransient(err) || platform.RetryAfter(err) != 3*time.Second || platform.StatusOf(err) != 429 {
		t.Fatalf("got %v (retry after %v)", err, platform.RetryAfter(err))
	}
	if sb.Requests(sandbox.RouteHubSpotNoteCreate) != 0 {
		t.Fatal("created a note without a successful search")
	}
	// The fault was for one request only.
	if _, created, err := c.EnsureNote(context.Background(), note(contact, "evt-3")); err != nil || !created {
		t.Fatalf("after the limit: created=%v err=%v", created, err)
	}
}

func TestStatusClassification(t *testing.T) {
	cases := []struct {
		status    int
		transient bool
	}{{500, true}, {502, true}, {503, true}, {504, true}, {400, false}, {403, false}, {409, false}}
	for _, tc := range cases {
		sb, c, contact := setup(t)
		sb.SetFault(sandbox.RouteHubSpotContactGet, sandbox.Fault{Status: tc.status, Count: 1})
		_, err := c.GetContact(context.Background(), contact)
		if platform.StatusOf(err) != tc.status || platform.IsTransient(err) != tc.transient {
			t.Errorf("%d: got %v", tc.status, err)
		}
	}
}

func TestPermanentErrors(t *testing.T) {
	sb, c, _ := setup(t)
	ctx := context.Background()

	_, err := c.GetContact(ctx, "424242")
	if platform.StatusOf(err) != http.StatusNotFound || platform.IsTransient(err) {
		t.Errorf("missing contact: %v", err)
	}

	bad := hubspot.New(hubspot.Config{BaseURL: sb.URL, Token: "wrong", Timeout: time.Second})
	_, _, err = bad.SearchNoteByExternalID(ctx, "evt")
	if platform.StatusOf(err) != http.StatusUnauthorized || platform.IsTransient(err) {
		t.Errorf("wrong token: %v", err)
	}

	// A real validation error from the sandbox (association to no contact).
	_, err = c.CreateNote(ctx, note("999999", "evt-4"))
	if platform.StatusOf(err) != http.StatusBadRequest || platform.IsTransient(err) {
		t.Errorf("bad association: %v", err)
	}
}

func TestDownForAndLatency(t *testing.T) {
	sb, c, contact := setup(t)
	ctx := context.Background()
	sb.SetFault(sandbox.RouteHubSpotContactGet, sandbox.Fault{DownFor: 300 * time.Millisecond})
	if _, err := c.GetContact(ctx, contact); platform.StatusOf(err) != 503 || !platform.IsTransient(err) {
		t.Fatalf("down: %v", err)
	}
	time.Sleep(350 * time.Millisecond)
	if _, err := c.GetContact(ctx, contact); err != nil {
		t.Fatalf("back up: %v", err)
	}

	sb.SetFault(sandbox.RouteHubSpotContactGet, sandbox.Fault{Latency: 2 * time.Second, Count: 1})
	if _, err := c.GetContact(ctx, contact); !platform.IsTransient(err) || platform.StatusOf(err) != 0 {
		t.Fatalf("slow: %v", err)
	}
}

func TestSearchPagination(t *testing.T) {
	sb, c, _ := setup(t)
	for i := range 25 {
		sb.AddContact("p"+string(rune('a'+i))+"@acme.test", map[string]string{"company": "Acme"})
	}
	before := sb.Requests(sandbox.RouteHubSpotContactSearch)
	objs, err := c.Search(context.Background(), "contacts",
		[]hubspot.Filter{{PropertyName: "company", Operator: "EQ", Value: "Acme"}}, nil, 10)
	if err != nil || len(objs) != 25 {
		t.Fatalf("got %d objects, err %v", len(objs), err)
	}
	seen := map[string]bool{}
	for _, o := range objs {
		seen[o.ID] = true
	}
	if len(seen) != 25 {
		t.Errorf("duplicates across pages: %d distinct", len(seen))
	}
	if pages := sb.Requests(sandbox.RouteHubSpotContactSearch) - before; pages != 3 {
		t.Errorf("pages = %d, want 3", pages)
	}
}

func TestUpsertContact(t *testing.T) {
	sb, c, existing := setup(t)
	ctx := context.Background()

	got, err := c.UpsertContact(ctx, "ADA@example.com", map[string]string{"lifecyclestage": "lead"})
	if err != nil || got.ID != existing || got.Properties["lifecyclestage"] != "lead" {
		t.Fatalf("update existing: %+v %v", got, err)
	}
	created, err := c.UpsertContact(ctx, "grace@example.com", map[string]string{"firstname": "Grace"})
	if err != nil || created.ID == "" || created.ID == existing {
		t.Fatalf("create: %+v %v", created, err)
	}
	again, err := c.UpsertContact(ctx, "grace@example.com", nil)
	if err != nil || again.ID != created.ID || again.Properties["firstname"] != "Grace" {
		t.Fatalf("upsert again: %+v %v", again, err)
	}
	if n := len(sb.Contacts()); n != 2 {
		t.Errorf("contacts = %d, want 2", n)
	}

	// Search lags behind the create: the 409 names the contact to update.
	sb.SetSearchLag(time.Minute)
	lagged, err := c.UpsertContact(ctx, "grace@example.com", map[string]string{"jobtitle": "Admiral"})
	if err != nil || lagged.ID != created.ID || lagged.Properties["jobtitle"] != "Admiral" {
		t.Fatalf("lagged upsert: %+v %v", lagged, err)
	}
	if n := len(sb.Contacts()); n != 2 {
		t.Errorf("contacts = %d after lagged upsert, want 2", n)
	}
	if total := sb.TotalRequests(); total > 15 {
		t.Errorf("%d requests; expected a handful", total)
	}
}

func TestUpdateNote(t *testing.T) {
	sb, c, contact := setup(t)
	ctx := context.Background()
	n, _, err := c.EnsureNote(ctx, note(contact, "evt-5"))
	if err != nil {
		t.Fatal(err)
	}
	props := map[string]string{"hs_note_body": "Replied: interested (0.9)", "hubspot_owner_id": "88"}
	for range 2 { // the same update twice changes nothing more
		got, err := c.UpdateNote(ctx, n.ID, props)
		if err != nil || got.ID != n.ID || got.Body != props["hs_note_body"] || got.OwnerID != "88" {
			t.Fatalf("update: %+v %v", got, err)
		}
	}
	stored := sb.Notes()
	if len(stored) != 1 || stored[0].Properties["hs_note_body"] != props["hs_note_body"] ||
		stored[0].Properties[hubspot.ExternalIDProperty] != "evt-5" || len(stored[0].Associations) != 1 {
		t.Fatalf("stored: %+v", stored)
	}
	if sb.Requests(sandbox.RouteHubSpotNoteUpdate) != 2 {
		t.Errorf("updates = %d", sb.Requests(sandbox.RouteHubSpotNoteUpdate))
	}

	if _, err := c.UpdateNote(ctx, "424242", props); platform.StatusOf(err) != http.StatusNotFound || platform.IsTransient(err) {
		t.Errorf("missing note: %v", err)
	}
	// The unique property holds on update too: the 409 names the holder.
	other, _, err := c.EnsureNote(ctx, note(contact, "evt-6"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.UpdateNote(ctx, other.ID, map[string]string{hubspot.ExternalIDProperty: "evt-5"})
	if id, ok := hubspot.ExistingID(err); !ok || id != n.ID {
		t.Errorf("duplicate key on update: %v", err)
	}
	// A body over the documented limit is refused, permanently.
	_, err = c.UpdateNote(ctx, n.ID, map[string]string{"hs_note_body": strings.Repeat("é", hubspot.MaxNoteBody+1)})
	if platform.StatusOf(err) != http.StatusBadRequest || platform.IsTransient(err) {
		t.Errorf("long body: %v", err)
	}
	if _, err := c.CreateNote(ctx, hubspot.Note{ContactID: contact, ExternalID: "evt-7", Body: strings.Repeat("x", hubspot.MaxNoteBody+1)}); platform.StatusOf(err) != http.StatusBadRequest {
		t.Errorf("long body on create: %v", err)
	}
	if _, err := c.CreateNote(ctx, hubspot.Note{ContactID: contact, ExternalID: "evt-8", Body: strings.Repeat("é", hubspot.MaxNoteBody)}); err != nil {
		t.Errorf("body at the limit: %v", err)
	}
}

func TestCreateContactConflictNamesExisting(t *testing.T) {
	_, c, existing := setup(t)
	_, err := c.CreateContact(context.Background(), map[string]string{"email": "Ada@Example.com"})
	if id, ok := hubspot.ExistingID(err); !ok || id != existing || platform.IsTransient(err) {
		t.Fatalf("duplicate email: %v", err)
	}
	got, err := c.GetContact(context.Background(), existing)
	if err != nil || got.Properties["firstname"] != "Ada" {
		t.Fatalf("get: %+v %v", got, err)
	}
}
