package sandbox_test

import (
	"net/http"
	"strings"
	"testing"

	"exacto.dev/pkg/platform/sandbox"
)

// Every batch route refuses a body it cannot take with a 400, as HubSpot's validation
// does, and writes nothing; its inputs are counted all the same (a request asked them).
func TestHubSpotBatchRoutesRefuseBadRequests(t *testing.T) {
	sb := sandbox.Start(t)
	contact := sb.AddContact("ada@example.com", nil)
	sb.SetNoteProperty(sandbox.NoteExternalIDProperty, true)
	tooMany := `{"inputs":[` + strings.TrimSuffix(strings.Repeat(`{"id":"1"},`, 101), ",") + `]}`
	routes := map[string]string{
		"/crm/v3/objects/contacts/batch/read":   sandbox.RouteHubSpotContactBatchRead,
		"/crm/v3/objects/contacts/batch/create": sandbox.RouteHubSpotContactBatchNew,
		"/crm/v3/objects/notes/batch/create":    sandbox.RouteHubSpotNoteBatchCreate,
		"/crm/v3/objects/notes/batch/update":    sandbox.RouteHubSpotNoteBatchUpdate,
		"/crm/v3/objects/notes/batch/read":      sandbox.RouteHubSpotNoteRead,
	}
	for path := range routes {
		for name, body := range map[string]string{"not JSON": `{"inputs":`, "no inputs": `{"inputs":[]}`, "over 100 inputs": tooMany} {
			if status := post(t, sb, path, body); status != http.StatusBadRequest {
				t.Errorf("%s, %s: %d, want 400", path, name, status)
			}
		}
	}
	for name, c := range map[string]struct{ path, body string }{
		"a contact read by a property that is not unique": {"/crm/v3/objects/contacts/batch/read", `{"idProperty":"phone","inputs":[{"id":"1"}]}`},
		"a note without its time":                         {"/crm/v3/objects/notes/batch/create", `{"inputs":[{"properties":{"exacto_event_id":"e1"}},{"properties":{"hs_timestamp":"2026-12-07T10:00:00.000Z","exacto_event_id":"e2"}}]}`},
		"a note on a contact that does not exist": {"/crm/v3/objects/notes/batch/create", `{"inputs":[{"properties":{"hs_timestamp":"2026-12-07T10:00:00.000Z","exacto_event_id":"e3"},` +
			`"associations":[{"to":{"id":"999"},"types":[{"associationCategory":"HUBSPOT_DEFINED","associationTypeId":202}]}]}]}`},
	} {
		if status := post(t, sb, c.path, c.body); status != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", name, status)
		}
	}
	// Refusals that name one input refuse the batch: a contact HubSpot has, a note id it
	// has not.
	if status := post(t, sb, "/crm/v3/objects/contacts/batch/create", `{"inputs":[{"properties":{"email":"new@example.com"}},{"properties":{"email":"ADA@example.com"}}]}`); status != http.StatusConflict {
		t.Errorf("a batch holding an e-mail HubSpot has: %d, want 409", status)
	}
	if status := post(t, sb, "/crm/v3/objects/notes/batch/update", `{"inputs":[{"id":"999","properties":{"hs_note_body":"x"}}]}`); status != http.StatusNotFound {
		t.Errorf("an update of a note HubSpot has not: %d, want 404", status)
	}
	if n, c := len(sb.Notes()), len(sb.Contacts()); n != 0 || c != 1 {
		t.Errorf("%d notes and %d contacts after refused batches, want 0 and 1 (%s)", n, c, contact)
	}
	if got := sb.Inputs(sandbox.RouteHubSpotContactBatchNew); got != 1+1+101+2 {
		t.Errorf("contact batch create counted %d inputs, want 105", got)
	}
}

func post(t *testing.T, sb *sandbox.Server, path, body string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, sb.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+sandbox.HubSpotToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
