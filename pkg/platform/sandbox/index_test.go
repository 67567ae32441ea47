package sandbox_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"exacto.dev/pkg/platform/sandbox"
)

// call sends body as JSON to path with auth and decodes the answer into out; it
// returns the status.
func call(t *testing.T, sb *sandbox.Server, method, path, auth string, body, out any) int {
	t.Helper()
	data, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, sb.URL+path, bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer "+auth)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
	}
	return resp.StatusCode
}

// The sandbox finds leads, e-mails and notes through indexes: what it answers must be
// what reading everything in order would give — leads listed by address in the order
// added (whatever the case asked), paged after any lead; a note found by the unique
// value it holds now, not one it held before.
func TestIndexesAnswerAsAScanWould(t *testing.T) {
	sb := sandbox.StartWith(t, sandbox.Options{})
	a1 := sb.AddInstantlyLead("camp-a", "Ann@Example.com")
	sb.AddInstantlyLead("camp-a", "bob@example.com")
	b1 := sb.AddInstantlyLead("camp-b", "ann@example.com")
	a2 := sb.AddInstantlyLead("camp-a", "cid@example.com")
	b2 := sb.AddInstantlyLead("camp-b", "CID@example.com")

	type page struct {
		Items []struct {
			ID    string `json:"id"`
			Email string `json:"email"`
		} `json:"items"`
		Next string `json:"next_starting_after"`
	}
	list := func(req map[string]any) (ids []string, next string) {
		var p page
		if st := call(t, sb, http.MethodPost, "/api/v2/leads/list", sandbox.InstantlyKey, req, &p); st != 200 {
			t.Fatalf("list %v: status %d", req, st)
		}
		for _, it := range p.Items {
			ids = append(ids, it.ID)
		}
		return ids, p.Next
	}
	contacts := []string{"cid@example.com", "ANN@example.com"}
	if ids, _ := list(map[string]any{"contacts": contacts}); !slices.Equal(ids, []string{a1, b1, a2, b2}) {
		t.Fatalf("by address: %v, want %v", ids, []string{a1, b1, a2, b2})
	}
	ids, next := list(map[string]any{"contacts": contacts, "limit": 2})
	if !slices.Equal(ids, []string{a1, b1}) || next != b1 {
		t.Fatalf("first page: %v next %q", ids, next)
	}
	if ids, _ := list(map[string]any{"contacts": contacts, "starting_after": next}); !slices.Equal(ids, []string{a2, b2}) {
		t.Fatalf("second page: %v", ids)
	}
	// The cursor may be a lead of another address; an unknown cursor lists nothing.
	bob, _ := list(map[string]any{"contacts": []string{"bob@example.com"}})
	if ids, _ := list(map[string]any{"contacts": contacts, "starting_after": bob[0]}); !slices.Equal(ids, []string{b1, a2, b2}) {
		t.Fatalf("after bob's lead: %v", ids)
	}
	if ids, _ := list(map[string]any{"contacts": contacts, "starting_after": "no-such-lead"}); len(ids) != 0 {
		t.Fatalf("after an unknown cursor: %v", ids)
	}
	if ids, _ := list(map[string]any{"contacts": contacts, "campaign": "camp-b"}); !slices.Equal(ids, []string{b1, b2}) {
		t.Fatalf("in camp-b: %v", ids)
	}

	// E-mails: by id (the first of an id), and listed by lead, newest first.
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	sb.AddInstantlyReply("camp-a", "ann@example.com", "em-1", "first", false, at)
	sb.AddInstantlyReply("camp-a", "bob@example.com", "em-2", "bob's", false, at.Add(time.Minute))
	sb.AddInstantlyReply("camp-a", "Ann@example.com", "em-3", "second", false, at.Add(2*time.Minute))
	var em struct {
		ID   string `json:"id"`
		Body struct {
			Text string `json:"text"`
		} `json:"body"`
	}
	if st := call(t, sb, http.MethodGet, "/api/v2/emails/em-3", sandbox.InstantlyKey, nil, &em); st != 200 || em.Body.Text != "second" {
		t.Fatalf("e-mail em-3: %d %+v", st, em)
	}
	if st := call(t, sb, http.MethodGet, "/api/v2/emails/em-9", sandbox.InstantlyKey, nil, nil); st != 404 {
		t.Fatalf("an unknown e-mail: %d", st)
	}
	var emails struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	call(t, sb, http.MethodGet, "/api/v2/emails?lead=ANN@example.com", sandbox.InstantlyKey, nil, &emails)
	if len(emails.Items) != 2 || emails.Items[0].ID != "em-3" || emails.Items[1].ID != "em-1" {
		t.Fatalf("ann's e-mails: %+v", emails.Items)
	}

	// A note by the unique value it holds: after an update moves it to another value,
	// the old one finds nothing and the new one finds it; an upsert of the old value
	// makes a new note.
	sb.SetNoteProperty(sandbox.NoteExternalIDProperty, true)
	note := sb.AddNote(map[string]string{sandbox.NoteExternalIDProperty: "ev_1", "hs_timestamp": "2026-12-01T09:00:00.000Z"})
	read := func(id string) (found []string) {
		var r struct {
			Results []struct {
				ID string `json:"id"`
			} `json:"results"`
		}
		call(t, sb, http.MethodPost, "/crm/v3/objects/notes/batch/read", sandbox.HubSpotToken,
			map[string]any{"idProperty": sandbox.NoteExternalIDProperty, "inputs": []map[string]string{{"id": id}}}, &r)
		for _, n := range r.Results {
			found = append(found, n.ID)
		}
		return found
	}
	if got := read("ev_1"); !slices.Equal(got, []string{note}) {
		t.Fatalf("ev_1 read as %v, want %s", got, note)
	}
	if st := call(t, sb, http.MethodPatch, "/crm/v3/objects/notes/"+note, sandbox.HubSpotToken,
		map[string]any{"properties": map[string]string{sandbox.NoteExternalIDProperty: "ev_2"}}, nil); st != 200 {
		t.Fatalf("update: %d", st)
	}
	if got := read("ev_1"); len(got) != 0 {
		t.Fatalf("ev_1 still finds %v", got)
	}
	if got := read("ev_2"); !slices.Equal(got, []string{note}) {
		t.Fatalf("ev_2 read as %v", got)
	}
	var up struct {
		Results []struct {
			ID  string `json:"id"`
			New bool   `json:"new"`
		} `json:"results"`
	}
	call(t, sb, http.MethodPost, "/crm/v3/objects/notes/batch/upsert", sandbox.HubSpotToken,
		map[string]any{"inputs": []map[string]any{{"idProperty": sandbox.NoteExternalIDProperty, "id": "ev_1",
			"properties": map[string]string{"hs_timestamp": "2026-12-01T09:00:00.000Z"}}}}, &up)
	if len(up.Results) != 1 || !up.Results[0].New || up.Results[0].ID == note {
		t.Fatalf("upsert of ev_1: %+v", up.Results)
	}
	if got := read("ev_1"); !slices.Equal(got, []string{up.Results[0].ID}) {
		t.Fatalf("ev_1 after the upsert: %v", got)
	}
	// A note given the property only later is found by it.
	plain := sb.AddNote(map[string]string{"hs_timestamp": "2026-12-01T09:00:00.000Z"})
	call(t, sb, http.MethodPatch, "/crm/v3/objects/notes/"+plain, sandbox.HubSpotToken,
		map[string]any{"properties": map[string]string{sandbox.NoteExternalIDProperty: "ev_3"}}, nil)
	if got := read("ev_3"); !slices.Equal(got, []string{plain}) {
		t.Fatalf("ev_3 read as %v, want %s", got, plain)
	}
	// Two notes cannot hold one unique value.
	if st := call(t, sb, http.MethodPatch, "/crm/v3/objects/notes/"+note, sandbox.HubSpotToken,
		map[string]any{"properties": map[string]string{sandbox.NoteExternalIDProperty: "ev_1"}}, nil); st != http.StatusConflict {
		t.Fatalf("a second note with ev_1: %d", st)
	}
}

// Contacts by e-mail and records by association, as a scan would find them: after an
// e-mail changes, the old address finds nothing; of two contacts with one address, a
// read by it finds the last and a create names the first; a search through a
// contact's associations finds, in creation order, what was made with it or associated
// later, and nothing of another list.
func TestHubSpotIndexesAnswerAsAScanWould(t *testing.T) {
	sb := sandbox.StartWith(t, sandbox.Options{})
	auth := sandbox.HubSpotToken
	first := sb.AddContact("twin@example.com", nil)
	second := sb.AddContact("Twin@Example.com", nil)
	var c struct {
		ID string `json:"id"`
	}
	if st := call(t, sb, http.MethodGet, "/crm/v3/objects/contacts/twin@example.com?idProperty=email", auth, nil, &c); st != 200 || c.ID != second {
		t.Fatalf("by e-mail: %d %q, want the last (%s)", st, c.ID, second)
	}
	var conflict struct {
		Message string `json:"message"`
	}
	if st := call(t, sb, http.MethodPost, "/crm/v3/objects/contacts", auth, map[string]any{"properties": map[string]string{"email": "TWIN@example.com"}}, &conflict); st != http.StatusConflict ||
		conflict.Message != "Contact already exists. Existing ID: "+first {
		t.Fatalf("create of a known address: %d %q", st, conflict.Message)
	}
	call(t, sb, http.MethodPatch, "/crm/v3/objects/contacts/"+second, auth, map[string]any{"properties": map[string]string{"email": "moved@example.com"}}, nil)
	if st := call(t, sb, http.MethodGet, "/crm/v3/objects/contacts/twin@example.com?idProperty=email", auth, nil, &c); st != 200 || c.ID != first {
		t.Fatalf("by the old e-mail after the move: %d %q, want %s", st, c.ID, first)
	}
	if st := call(t, sb, http.MethodGet, "/crm/v3/objects/contacts/moved@example.com?idProperty=email", auth, nil, &c); st != 200 || c.ID != second {
		t.Fatalf("by the new e-mail: %d %q", st, c.ID)
	}

	n1 := sb.AddNoteFor(first, map[string]string{"hs_note_body": "one"})
	other := sb.AddNoteFor(second, map[string]string{"hs_note_body": "other"})
	n3 := sb.AddNote(map[string]string{"hs_timestamp": "2026-12-01T09:00:00.000Z", "hs_note_body": "three"})
	deal := sb.AddDealFor(first, map[string]string{"dealname": "big"})
	if st := call(t, sb, http.MethodPut, "/crm/v4/objects/note/"+n3+"/associations/default/contact/"+first, auth, nil, nil); st != 200 {
		t.Fatalf("associate: %d", st)
	}
	search := func(path string, contacts ...string) (ids []string) {
		var groups []map[string]any
		for _, id := range contacts {
			groups = append(groups, map[string]any{"filters": []map[string]string{{"propertyName": "associations.contact", "operator": "EQ", "value": id}}})
		}
		var r struct {
			Results []struct {
				ID string `json:"id"`
			} `json:"results"`
		}
		call(t, sb, http.MethodPost, path, auth, map[string]any{"filterGroups": groups, "limit": 100}, &r)
		for _, o := range r.Results {
			ids = append(ids, o.ID)
		}
		return ids
	}
	if got := search("/crm/v3/objects/notes/search", first); !slices.Equal(got, []string{n1, n3}) {
		t.Fatalf("notes of the first contact: %v, want %v", got, []string{n1, n3})
	}
	if got := search("/crm/v3/objects/notes/search", second, first); !slices.Equal(got, []string{n1, other, n3}) {
		t.Fatalf("notes of either: %v", got)
	}
	if got := search("/crm/v3/objects/deals/search", first); !slices.Equal(got, []string{deal}) {
		t.Fatalf("deals of the first contact: %v", got)
	}

	// Contacts searched by e-mail (the CRM writer's lookup): whatever the case asked,
	// in creation order, the old address of a moved contact finding nothing, a group's
	// other filters still applied, and a group no index answers (an empty address
	// among them: the index holds none) read as a scan.
	third := sb.AddContact("TWIN@example.org", map[string]string{"firstname": "Tess"})
	fourth := sb.AddContact("twin@example.com", map[string]string{"firstname": "Tom"})
	blank := sb.AddContact("", map[string]string{"firstname": "Nobody"})
	byEmail := func(groups ...[]map[string]string) (ids []string) {
		var body []map[string]any
		for _, g := range groups {
			body = append(body, map[string]any{"filters": g})
		}
		var r struct {
			Results []struct {
				ID string `json:"id"`
			} `json:"results"`
		}
		if st := call(t, sb, http.MethodPost, "/crm/v3/objects/contacts/search", auth, map[string]any{"filterGroups": body, "limit": 100}, &r); st != 200 {
			t.Fatalf("contact search: %d", st)
		}
		for _, o := range r.Results {
			ids = append(ids, o.ID)
		}
		return ids
	}
	eq := func(prop, v string) map[string]string {
		return map[string]string{"propertyName": prop, "operator": "EQ", "value": v}
	}
	for _, tc := range []struct {
		what   string
		groups [][]map[string]string
		want   []string
	}{
		{"one address, any case", [][]map[string]string{{eq("email", "TWIN@EXAMPLE.COM")}}, []string{first, fourth}},
		{"the moved contact's new address", [][]map[string]string{{eq("email", "moved@example.com")}}, []string{second}},
		{"either of two addresses", [][]map[string]string{{eq("email", "twin@example.org")}, {eq("email", "twin@example.com")}}, []string{first, third, fourth}},
		{"an address and a name", [][]map[string]string{{eq("email", "twin@example.com"), eq("firstname", "tom")}}, []string{fourth}},
		{"a name alone (a scan)", [][]map[string]string{{eq("firstname", "Tess")}}, []string{third}},
		{"an empty address (a scan)", [][]map[string]string{{eq("email", "")}}, []string{blank}},
		{"an address, or a name (a scan)", [][]map[string]string{{eq("email", "moved@example.com")}, {eq("firstname", "Tess")}}, []string{second, third}},
	} {
		if got := byEmail(tc.groups...); !slices.Equal(got, tc.want) {
			t.Errorf("contacts by %s: %v, want %v", tc.what, got, tc.want)
		}
	}
}
