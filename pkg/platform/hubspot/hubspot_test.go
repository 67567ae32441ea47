package hubspot_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/platform"
	"exacto.dev/pkg/platform/hubspot"
	"exacto.dev/pkg/platform/sandbox"
)

// setup starts a portal with one contact and the note property made, as the
// crmwriter makes it at start-up.
func setup(t *testing.T) (*sandbox.Server, *hubspot.Client, string) {
	t.Helper()
	sb := sandbox.Start(t)
	c := hubspot.New(hubspot.Config{BaseURL: sb.URL, Token: sandbox.HubSpotToken, Timeout: 500 * time.Millisecond})
	contact := sb.AddContact("ada@example.com", map[string]string{"firstname": "Ada"})
	if err := c.EnsureNoteProperty(context.Background()); err != nil {
		t.Fatal(err)
	}
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
	if got := sb.Requests(sandbox.RouteHubSpotNoteUpsert); got != 1 {
		t.Errorf("upserts = %d, want 1 (the second found the note by its key)", got)
	}
	if got := sb.Requests(sandbox.RouteHubSpotNoteSearch); got != 0 {
		t.Errorf("%d searches: the note path needs none", got)
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

	got, found, err := c.NoteByExternalID(ctx, "evt-1")
	if err != nil || !found || got.ID != first.ID || !got.Timestamp.Equal(first.Timestamp) {
		t.Errorf("read: %+v found=%v err=%v", got, found, err)
	}
	if _, found, err := c.NoteByExternalID(ctx, "evt-unknown"); err != nil || found {
		t.Errorf("absent: found=%v err=%v", found, err)
	}
}

// HubSpot commits the note and the answer is lost; the retry, whatever the search
// index says (it is not asked), finds or upserts the same note: one note.
func TestTimeoutAfterCommitThenEnsureNote(t *testing.T) {
	for _, route := range []string{sandbox.RouteHubSpotNoteUpsert, sandbox.RouteHubSpotNoteAssociate} {
		t.Run(route, func(t *testing.T) {
			sb, c, contact := setup(t)
			ctx := context.Background()
			sb.SetSearchLag(time.Minute)
			sb.SetFault(route, sandbox.Fault{TimeoutAfterCommit: 3 * time.Second, Count: 1})
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
			if n := sb.NotesWithExternalID("evt-2"); n != 1 || len(sb.Notes()[0].Associations) != 1 {
				t.Fatalf("notes = %d after retry (want 1), associations %+v", n, sb.Notes()[0].Associations)
			}
		})
	}
	// Two upserts racing past the read (the read missed both) still make one note.
	sb, c, contact := setup(t)
	a, _, err := c.UpsertNote(context.Background(), note(contact, "evt-9"))
	if err != nil {
		t.Fatal(err)
	}
	b, created, err := c.UpsertNote(context.Background(), note(contact, "evt-9"))
	if err != nil || created || b.ID != a.ID || sb.NotesWithExternalID("evt-9") != 1 {
		t.Fatalf("second upsert: %+v created=%v %v", b, created, err)
	}
}

// The note property is made once, with unique values, in its own group; a portal
// that refuses it, or holds one of that name without unique values, is an error that
// names the problem (the crmwriter refuses to start on it).
func TestEnsureNoteProperty(t *testing.T) {
	sb, c, _ := setup(t)
	if exists, unique := sb.NoteProperty(hubspot.ExternalIDProperty); !exists || !unique {
		t.Fatalf("property: exists=%v unique=%v", exists, unique)
	}
	before := sb.TotalRequests()
	if err := c.EnsureNoteProperty(context.Background()); err != nil || sb.TotalRequests()-before != 1 {
		t.Fatalf("second time: %v, %d requests (want one read)", err, sb.TotalRequests()-before)
	}

	refusing := sandbox.Start(t)
	refusing.RefuseUniqueNoteProperties(true)
	rc := hubspot.New(hubspot.Config{BaseURL: refusing.URL, Token: sandbox.HubSpotToken})
	err := rc.EnsureNoteProperty(context.Background())
	if !errors.Is(err, hubspot.ErrNoUniqueProperty) || !strings.Contains(err.Error(), "not supported for object type notes") {
		t.Fatalf("refused: %v", err)
	}

	plain := sandbox.Start(t)
	plain.SetNoteProperty(hubspot.ExternalIDProperty, false)
	pc := hubspot.New(hubspot.Config{BaseURL: plain.URL, Token: sandbox.HubSpotToken})
	if err := pc.EnsureNoteProperty(context.Background()); !errors.Is(err, hubspot.ErrNoUniqueProperty) || !strings.Contains(err.Error(), "without unique values") {
		t.Fatalf("not unique: %v", err)
	}
	// Without the property, a read or upsert by it is refused: nothing silently
	// falls back to a second note.
	if _, _, err := pc.UpsertNote(context.Background(), note("1", "evt-x")); platform.StatusOf(err) != http.StatusBadRequest {
		t.Fatalf("upsert by a non-unique property: %v", err)
	}
	bad := hubspot.New(hubspot.Config{BaseURL: plain.URL, Token: "wrong"})
	if err := bad.EnsureNoteProperty(context.Background()); platform.StatusOf(err) != http.StatusUnauthorized || errors.Is(err, hubspot.ErrNoUniqueProperty) {
		t.Fatalf("wrong token: %v", err)
	}
}

func TestRateLimitRetryAfter(t *testing.T) {
	sb, c, contact := setup(t)
	sb.SetFault(sandbox.RouteHubSpotNoteRead, sandbox.Fault{Status: 429, RetryAfter: 3 * time.Second, Count: 1})
	_, _, err := c.EnsureNote(context.Background(), note(contact, "evt-3"))
	if !platform.IsTransient(err) || platform.RetryAfter(err) != 3*time.Second || platform.StatusOf(err) != 429 {
		t.Fatalf("got %v (retry after %v)", err, platform.RetryAfter(err))
	}
	if sb.Requests(sandbox.RouteHubSpotNoteUpsert) != 0 {
		t.Fatal("wrote a note without a successful read")
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
	_, _, err = bad.NoteByExternalID(ctx, "evt")
	if platform.StatusOf(err) != http.StatusUnauthorized || platform.IsTransient(err) {
		t.Errorf("wrong token: %v", err)
	}

	// An association to no contact is refused, permanently.
	_, _, err = c.EnsureNote(ctx, note("999999", "evt-4"))
	if platform.StatusOf(err) != http.StatusNotFound || platform.IsTransient(err) {
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

// A contact is read by e-mail through the unique email property: no search, so a
// contact made a moment ago is found at once.
func TestContactByEmail(t *testing.T) {
	sb, c, existing := setup(t)
	ctx := context.Background()
	sb.SetSearchLag(time.Minute)
	got, found, err := c.ContactByEmail(ctx, "ADA@example.com")
	if err != nil || !found || got.ID != existing || got.Properties["firstname"] != "Ada" {
		t.Fatalf("by e-mail: %+v %v %v", got, found, err)
	}
	created, err := c.CreateContact(ctx, map[string]string{"email": "grace@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if got, found, err := c.ContactByEmail(ctx, "grace@example.com"); err != nil || !found || got.ID != created.ID {
		t.Fatalf("just made: %+v %v %v", got, found, err)
	}
	if _, found, err := c.ContactByEmail(ctx, "nobody@example.com"); err != nil || found {
		t.Fatalf("absent: %v %v", found, err)
	}
	if sb.Requests(sandbox.RouteHubSpotContactSearch) != 0 {
		t.Fatal("a contact read by e-mail searched")
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
	// The unique property holds on update too: HubSpot refuses a second holder.
	other, _, err := c.EnsureNote(ctx, note(contact, "evt-6"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.UpdateNote(ctx, other.ID, map[string]string{hubspot.ExternalIDProperty: "evt-5"})
	if platform.StatusOf(err) != http.StatusConflict {
		t.Errorf("duplicate key on update: %v", err)
	}
	// A body over the documented limit is refused, permanently.
	_, err = c.UpdateNote(ctx, n.ID, map[string]string{"hs_note_body": strings.Repeat("é", hubspot.MaxNoteBody+1)})
	if platform.StatusOf(err) != http.StatusBadRequest || platform.IsTransient(err) {
		t.Errorf("long body: %v", err)
	}
	if _, _, err := c.UpsertNote(ctx, hubspot.Note{ContactID: contact, ExternalID: "evt-7", Body: strings.Repeat("x", hubspot.MaxNoteBody+1)}); platform.StatusOf(err) != http.StatusBadRequest {
		t.Errorf("long body on upsert: %v", err)
	}
	if _, _, err := c.UpsertNote(ctx, hubspot.Note{ContactID: contact, ExternalID: "evt-8", Body: strings.Repeat("é", hubspot.MaxNoteBody)}); err != nil {
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

// Answers the sandbox does not give, from a server that gives only them: a 207 upsert
// is tried again for a rate limit and not for a validation error; a property create
// answered 409 whose property the read does not show (archived) is named, not retried
// for ever.
func TestAnswersBesideTheSandbox(t *testing.T) {
	category := "RATE_LIMITS"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/crm/v3/objects/notes/batch/upsert":
			w.WriteHeader(http.StatusMultiStatus)
			fmt.Fprintf(w, `{"status":"COMPLETE","results":[],"errors":[{"status":"error","category":%q,"message":"m"}]}`, category)
		case r.Method == http.MethodPost && r.URL.Path == "/crm/v3/properties/notes":
			w.WriteHeader(http.StatusConflict)
		case strings.HasPrefix(r.URL.Path, "/crm/v3/properties/notes/groups/"):
			w.Write([]byte(`{"name":"exacto"}`))
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	hs := hubspot.New(hubspot.Config{BaseURL: srv.URL, Token: "t"})
	ctx := context.Background()
	note := hubspot.Note{ContactID: "1", Body: "b", ExternalID: "ev_1"}
	if _, _, err := hs.UpsertNote(ctx, note); !platform.IsTransient(err) || !strings.Contains(err.Error(), "RATE_LIMITS") {
		t.Fatalf("207 with a rate limit: %v, want transient", err)
	}
	category = "VALIDATION_ERROR"
	if _, _, err := hs.UpsertNote(ctx, note); err == nil || platform.IsTransient(err) {
		t.Fatalf("207 with a validation error: %v, want permanent", err)
	}
	if err := hs.EnsureNoteProperty(ctx); !errors.Is(err, hubspot.ErrNoUniqueProperty) || !strings.Contains(err.Error(), "archived") {
		t.Fatalf("409 for a property not shown: %v", err)
	}
}

// CreateNote writes the note and its association to the contact in one request; a
// second note with the same key is refused (409), and so is a note without a key or a
// contact, before any request.
func TestCreateNoteAssociatesInOneRequest(t *testing.T) {
	sb, c, contact := setup(t)
	ctx := context.Background()
	n, err := c.CreateNote(ctx, note(contact, "evt-c"))
	if err != nil || n.ID == "" {
		t.Fatalf("create: %+v %v", n, err)
	}
	if got := sb.Requests(sandbox.RouteHubSpotNoteCreate) + sb.Requests(sandbox.RouteHubSpotNoteAssociate); got != 1 {
		t.Errorf("%d requests, want the one create", got)
	}
	notes := sb.Notes()
	if len(notes) != 1 || notes[0].ID != n.ID || len(notes[0].Associations) != 1 || notes[0].Associations[0].ToID != contact ||
		notes[0].Associations[0].TypeID != hubspot.NoteToContact || notes[0].Associations[0].Category != "HUBSPOT_DEFINED" {
		t.Fatalf("notes: %+v", notes)
	}
	if p := notes[0].Properties; p[hubspot.ExternalIDProperty] != "evt-c" || p["hs_timestamp"] != "2026-12-02T10:00:00.000Z" || p["hubspot_owner_id"] != "77" {
		t.Errorf("properties: %v", p)
	}
	if _, err := c.CreateNote(ctx, note(contact, "evt-c")); platform.StatusOf(err) != http.StatusConflict {
		t.Fatalf("the same key again: %v, want a 409", err)
	}
	for _, bad := range []hubspot.Note{note("", "evt-d"), note(contact, "")} {
		if _, err := c.CreateNote(ctx, bad); err == nil {
			t.Errorf("%+v: created", bad)
		}
	}
	if got := sb.Requests(sandbox.RouteHubSpotNoteCreate); got != 2 || len(sb.Notes()) != 1 {
		t.Errorf("%d creates, %d notes; want 2 and 1", got, len(sb.Notes()))
	}
}
