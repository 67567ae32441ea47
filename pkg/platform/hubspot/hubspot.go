// Package hubspot is a small client for the HubSpot CRM v3 objects API: notes keyed
// by our event id in a unique-value property (so a write is found again, and repeated
// without a second note, by that key alone), and contacts read by e-mail.
//
// Endpoints (developers.hubspot.com; docs/platforms.md says, for each, what the
// reference verifies and what is assumed):
//
//	GET   /crm/v3/properties/notes/{name}            the note property exacto_event_id
//	POST  /crm/v3/properties/notes                   created once, hasUniqueValue
//	GET   /crm/v3/properties/notes/groups/{name}     its group; POST …/groups creates it
//	POST  /crm/v3/objects/notes/batch/read           notes by exacto_event_id (idProperty)
//	POST  /crm/v3/objects/notes                      create with its association (a New event's note)
//	POST  /crm/v3/objects/notes/batch/upsert         create-or-update by exacto_event_id
//	PUT   /crm/v4/objects/note/{id}/associations/default/contact/{id}   note → contact
//	PATCH /crm/v3/objects/notes/{id}                 update (the classification, the owner)
//	GET   /crm/v3/objects/contacts/{email}?idProperty=email   a contact by e-mail
//	GET   /crm/v3/objects/contacts/{id}              a contact by id
//	POST  /crm/v3/objects/contacts                   create; PATCH …/{id} update
//	POST  /crm/v3/objects/contacts/batch/read        concurrent reads by e-mail or id
//	POST  /crm/v3/objects/contacts/batch/create      concurrent creates
//	POST  /crm/v3/objects/notes/batch/create         concurrent creates
//	POST  /crm/v3/objects/notes/batch/update         concurrent updates
//	POST  /crm/v3/objects/{notes,contacts,deals,meetings}/search   the reconciler's reads
//
// Auth is a private app token: "Authorization: Bearer <token>". Rates (usage
// guidelines): 100 requests per 10 seconds per private app on the lowest tiers (190 on
// Professional and Enterprise: config platforms.hubspot.rate), and the search
// endpoints 5 a second per account, outside the 10-second bucket.
package hubspot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"exacto.dev/pkg/platform"
	"exacto.dev/pkg/ratelimit"
)

// DefaultBaseURL is HubSpot's API host.
const DefaultBaseURL = "https://api.hubapi.com"

// ExternalIDProperty is the custom note property holding our event id: a single-line
// text property with unique values (EnsureNoteProperty makes it), so that notes can be
// read and upserted by it (idProperty) and HubSpot itself keeps one note per key.
const ExternalIDProperty = "exacto_event_id"

// PropertyGroup is the note property group ExternalIDProperty is put in.
const PropertyGroup = "exacto"

// Rates are HubSpot's limits for a private app on the Free and Starter tiers (100
// requests per 10 seconds); SearchRates the search endpoints' (5 a second per
// account, exempt from the 10-second bucket).
var (
	Rates       = []ratelimit.Rate{{N: 100, Per: 10 * time.Second}}
	SearchRates = []ratelimit.Rate{{N: 5, Per: time.Second}}
)

// NoteToContact is the HUBSPOT_DEFINED association type id for note→contact.
const NoteToContact = 202

// MaxNoteBody is the documented limit of hs_note_body, in characters: a longer
// body is refused with a 400, so callers cut it first.
const MaxNoteBody = 65536

// ContactProperties are the contact properties read back by FindContactByEmail and
// GetContact: search and read return only a few defaults unless asked.
var ContactProperties = []string{"email", "firstname", "lastname", "phone", "hubspot_owner_id"}

// maxPages bounds any paginated search so a bad cursor cannot loop forever.
const maxPages = 100

// Config configures a Client.
type Config struct {
	BaseURL    string // DefaultBaseURL if empty
	Token      string // private app access token
	HTTPClient *http.Client
	Timeout    time.Duration // per request; platform.DefaultTimeout if 0
	// Limit paces the app's requests, SearchLimit the search requests (nil: none); see
	// Rates, SearchRates and pkg/ratelimit.
	Limit, SearchLimit ratelimit.Limiter
}

// Client talks to one HubSpot portal. Safe for concurrent use.
type Client struct {
	h      platform.HTTP
	search platform.HTTP // the search endpoints, paced by their own limit only
	// Concurrent callers' requests of each kind, sent together (batch.go).
	byEmail        *batcher[string, foundContact]
	byID           *batcher[string, Contact]
	creates        *batcher[Note, Note]
	contactCreates *batcher[map[string]string, Contact]
	noteReads      *batcher[string, foundNote]
	upserts        *batcher[Note, upserted]
	updates        *batcher[noteUpdate, Note]
}

// New returns a Client for cfg.
func New(cfg Config) *Client {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	h := platform.HTTP{
		Dependency: "hubspot",
		BaseURL:    cfg.BaseURL,
		Client:     cfg.HTTPClient,
		Timeout:    cfg.Timeout,
		Limit:      cfg.Limit,
		Auth:       platform.Bearer(cfg.Token),
		ErrMsg:     errMsg,
		// A batch's answer holds up to MaxBatch notes of up to MaxNoteBody characters,
		// each up to six bytes as JSON (\uXXXX).
		MaxBody: MaxBatch*6*MaxNoteBody + platform.MaxBody,
	}
	search := h
	search.Limit = cfg.SearchLimit
	c := &Client{h: h, search: search}
	c.batchers()
	return c
}

// errMsg pulls HubSpot's {"category","message"} out of an error body.
func errMsg(body []byte) string {
	var e struct {
		Category string `json:"category"`
		Message  string `json:"message"`
	}
	if json.Unmarshal(body, &e) != nil || e.Message == "" {
		return ""
	}
	if e.Category == "" {
		return e.Message
	}
	return e.Category + ": " + e.Message
}

// Note is a note on a contact's timeline.
type Note struct {
	ID         string // set by HubSpot
	ContactID  string
	Body       string
	Timestamp  time.Time // where the note sits on the timeline
	OwnerID    string    // optional hubspot_owner_id
	ExternalID string    // our event id; required
}

// Contact is a HubSpot contact.
type Contact struct {
	ID         string
	Properties map[string]string
}

// Object is a raw CRM record as search returns it.
type Object struct {
	ID         string            `json:"id"`
	Properties map[string]string `json:"properties"`
}

// Filter is one search filter; filters passed together are ANDed.
type Filter struct {
	PropertyName string `json:"propertyName"`
	Operator     string `json:"operator"` // "EQ", "NEQ", "HAS_PROPERTY", …
	Value        string `json:"value,omitempty"`
}

var noteProps = []string{"hs_note_body", "hs_timestamp", "hubspot_owner_id", ExternalIDProperty}

// Search returns every objectType record matching all filters, following
// the "after" cursor page by page (pageSize 1..200; 0 means 100).
func (c *Client) Search(ctx context.Context, objectType string, filters []Filter, properties []string, pageSize int) ([]Object, error) {
	if pageSize <= 0 {
		pageSize = 100
	}
	type group struct {
		Filters []Filter `json:"filters"`
	}
	req := struct {
		FilterGroups []group  `json:"filterGroups,omitempty"`
		Properties   []string `json:"properties,omitempty"`
		Limit        int      `json:"limit"`
		After        string   `json:"after,omitempty"`
	}{Properties: properties, Limit: pageSize}
	if len(filters) > 0 {
		req.FilterGroups = []group{{Filters: filters}}
	}
	var all []Object
	for range maxPages {
		var resp struct {
			Results []Object `json:"results"`
			Paging  *struct {
				Next *struct {
					After string `json:"after"`
				} `json:"next"`
			} `json:"paging"`
		}
		path := "/crm/v3/objects/" + platform.PathEscape(objectType) + "/search"
		if err := c.search.Do(ctx, http.MethodPost, path, nil, req, &resp); err != nil {
			return nil, err
		}
		all = append(all, resp.Results...)
		if resp.Paging == nil || resp.Paging.Next == nil || resp.Paging.Next.After == "" {
			return all, nil
		}
		if resp.Paging.Next.After == req.After {
			return nil, &platform.Error{Dependency: "hubspot", Msg: "search cursor did not advance"}
		}
		req.After = resp.Paging.Next.After
	}
	return nil, &platform.Error{Dependency: "hubspot", Msg: "search exceeded " + strconv.Itoa(maxPages) + " pages"}
}

// ErrNoUniqueProperty says HubSpot does not hold ExternalIDProperty with unique values
// and would not make it so: Exacto cannot then keep one note per reply, and refuses to
// start.
var ErrNoUniqueProperty = errors.New("hubspot: the note property " + ExternalIDProperty + " with unique values is not available")

// EnsureNoteProperty makes sure the portal has ExternalIDProperty on notes, a text
// property with unique values, creating it (and its group) when absent. A property of
// that name without unique values, or a refusal to create one, is ErrNoUniqueProperty
// with HubSpot's words: hasUniqueValue cannot be changed once set, so a person must
// act. Other failures (401, 429, 5xx) come back as they are.
func (c *Client) EnsureNoteProperty(ctx context.Context) error {
	if found, err := c.noteProperty(ctx); found || err != nil {
		return err
	}
	err := c.h.Do(ctx, http.MethodGet, "/crm/v3/properties/notes/groups/"+PropertyGroup, nil, nil, nil)
	if platform.StatusOf(err) == http.StatusNotFound {
		err = c.h.Do(ctx, http.MethodPost, "/crm/v3/properties/notes/groups", nil,
			map[string]any{"name": PropertyGroup, "label": "Exacto"}, nil)
		if platform.StatusOf(err) == http.StatusConflict { // made meanwhile
			err = nil
		}
	}
	if err != nil {
		return err
	}
	create := map[string]any{
		"name": ExternalIDProperty, "label": "Exacto event id", "type": "string", "fieldType": "text",
		"groupName": PropertyGroup, "hasUniqueValue": true,
		"description": "The Exacto event this note records: one note per event (Exacto reads and upserts notes by it).",
	}
	err = c.h.Do(ctx, http.MethodPost, "/crm/v3/properties/notes", nil, create, nil)
	switch s := platform.StatusOf(err); {
	case err == nil:
		return nil
	case s == http.StatusConflict:
		// Created meanwhile (read it again, once), or the name is taken by an archived
		// property the read does not show.
		if found, err := c.noteProperty(ctx); found || err != nil {
			return err
		}
		return fmt.Errorf("%w: HubSpot says a note property %s exists (409) but does not show it: it may be archived; restore it with unique values, or purge it",
			ErrNoUniqueProperty, ExternalIDProperty)
	case s == http.StatusBadRequest || s == http.StatusForbidden:
		return fmt.Errorf("%w: HubSpot refused to create it: %v", ErrNoUniqueProperty, err)
	}
	return err
}

// noteProperty reads the portal's ExternalIDProperty: found with unique values is
// ready; found without is ErrNoUniqueProperty; not found is found false.
func (c *Client) noteProperty(ctx context.Context) (found bool, err error) {
	var prop struct {
		Name           string `json:"name"`
		HasUniqueValue bool   `json:"hasUniqueValue"`
	}
	err = c.h.Do(ctx, http.MethodGet, "/crm/v3/properties/notes/"+ExternalIDProperty, nil, nil, &prop)
	switch {
	case platform.StatusOf(err) == http.StatusNotFound:
		return false, nil
	case err != nil:
		return false, err
	case !prop.HasUniqueValue:
		return true, fmt.Errorf("%w: the portal has a note property %s without unique values (HubSpot cannot change that once set): delete or rename it",
			ErrNoUniqueProperty, ExternalIDProperty)
	}
	return true, nil
}

// notesBatch is the answer of notes/batch/read and notes/batch/upsert: results, and
// per-input errors when HubSpot answers 207.
type notesBatch struct {
	Results []noteResult `json:"results"`
	Errors  []struct {
		Category string `json:"category"`
		Message  string `json:"message"`
	} `json:"errors"`
}

// noteResult is one note of a notes batch answer; New says the upsert created it.
type noteResult struct {
	Object
	New bool `json:"new"`
}

// NoteByExternalID reads the note carrying key by the unique property (no search:
// what HubSpot has committed, without the search index's lag); found is false if none.
//
// Concurrent reads go as one batch read (batch.go).
func (c *Client) NoteByExternalID(ctx context.Context, key string) (n Note, found bool, err error) {
	if key == "" {
		return Note{}, false, errors.New("hubspot: empty external id")
	}
	f, err := c.noteReads.do(ctx, key)
	return f.note, f.ok, err
}

func (c *Client) noteByExternalID(ctx context.Context, key string) (n Note, found bool, err error) {
	req := map[string]any{"idProperty": ExternalIDProperty, "inputs": []map[string]string{{"id": key}},
		"properties": noteProps, "propertiesWithHistory": []string{}}
	var resp notesBatch
	if err := c.h.Do(ctx, http.MethodPost, "/crm/v3/objects/notes/batch/read", nil, req, &resp); err != nil {
		if platform.StatusOf(err) == http.StatusNotFound {
			return Note{}, false, nil
		}
		return Note{}, false, err
	}
	for _, o := range resp.Results {
		if o.Properties[ExternalIDProperty] == key {
			return noteFrom(o.Object), true, nil
		}
	}
	return Note{}, false, nil // a missing key is a 207 error or no result
}

// UpsertNote creates the note keyed n.ExternalID, or updates the one HubSpot has
// under that key (batch upsert by idProperty): however often it is repeated — after a
// timeout whose outcome was unknown, say — there is one note. It does not associate
// the note (the batch upsert cannot): Associate does. created says HubSpot made it now.
// Concurrent upserts go as one request (batch.go).
func (c *Client) UpsertNote(ctx context.Context, n Note) (note Note, created bool, err error) {
	if n.ExternalID == "" {
		return Note{}, false, errors.New("hubspot: note needs an ExternalID")
	}
	u, err := c.upserts.do(ctx, n)
	return u.note, u.created, err
}

func (c *Client) upsertNote(ctx context.Context, n Note) (note Note, created bool, err error) {
	req := map[string]any{"inputs": []map[string]any{{"idProperty": ExternalIDProperty, "id": n.ExternalID, "properties": n.properties()}}}
	var resp notesBatch
	if err := c.h.Do(ctx, http.MethodPost, "/crm/v3/objects/notes/batch/upsert", nil, req, &resp); err != nil {
		return Note{}, false, err
	}
	if len(resp.Results) != 1 {
		// A 207 names each input's error by category: a rate limit or HubSpot's own
		// failure may pass on retry; a validation error will not. No result and no
		// error is an answer we cannot read: tried again.
		e := &platform.Error{Dependency: "hubspot", Status: http.StatusMultiStatus, Transient: true, Msg: "note upsert answered no result"}
		if len(resp.Errors) > 0 {
			cat := resp.Errors[0].Category
			e.Msg = "note upsert: " + cat + ": " + resp.Errors[0].Message
			e.Transient = transientCategories[cat]
		}
		return Note{}, false, e
	}
	n.ID = resp.Results[0].ID
	return n, resp.Results[0].New, nil
}

// properties are n's note properties as HubSpot takes them: now when n has no time.
func (n *Note) properties() map[string]string {
	if n.Timestamp.IsZero() {
		n.Timestamp = time.Now()
	}
	props := map[string]string{
		"hs_timestamp":     n.Timestamp.UTC().Format("2006-01-02T15:04:05.000Z"),
		"hs_note_body":     n.Body,
		ExternalIDProperty: n.ExternalID,
	}
	if n.OwnerID != "" {
		props["hubspot_owner_id"] = n.OwnerID
	}
	return props
}

// CreateNote creates the note keyed n.ExternalID on n.ContactID's timeline in one
// request: the note and its association (POST /crm/v3/objects/notes with an
// associations object, the notes guide). For a key no attempt can have written yet:
// a note already holding it makes HubSpot refuse a second (409, the key's property
// having unique values; assumed, as for contacts), and EnsureNote is the way to make
// sure of one after a lost answer.
//
// Concurrent creates go as one batch create (batch.go).
func (c *Client) CreateNote(ctx context.Context, n Note) (Note, error) {
	if n.ExternalID == "" || n.ContactID == "" {
		return Note{}, errors.New("hubspot: note needs an ExternalID and a ContactID")
	}
	return c.creates.do(ctx, n)
}

// noteCreate is the body that creates n with its association to its contact: the
// single create's, and each input of a batch create.
func noteCreate(n *Note) map[string]any {
	return map[string]any{"properties": n.properties(), "associations": []map[string]any{{
		"to":    map[string]string{"id": n.ContactID},
		"types": []map[string]any{{"associationCategory": "HUBSPOT_DEFINED", "associationTypeId": NoteToContact}},
	}}}
}

func (c *Client) createNote(ctx context.Context, n Note) (Note, error) {
	var resp Object
	if err := c.h.Do(ctx, http.MethodPost, "/crm/v3/objects/notes", nil, noteCreate(&n), &resp); err != nil {
		return Note{}, err
	}
	if resp.ID == "" {
		return Note{}, &platform.Error{Dependency: "hubspot", Status: http.StatusCreated, Transient: true, Msg: "note create answered no id"}
	}
	n.ID = resp.ID
	return n, nil
}

// transientCategories are the batch error categories that may pass on retry (the
// error-handling guide names RATE_LIMITS; the others are assumed from HubSpot's
// standard error categories).
var transientCategories = map[string]bool{"RATE_LIMITS": true, "RATE_LIMIT": true, "INTERNAL_ERROR": true, "SERVICE_UNAVAILABLE": true, "TIMEOUT": true}

// Associate gives note noteID the default association to contact contactID (v4,
// note→contact). Associating twice leaves one association.
func (c *Client) Associate(ctx context.Context, noteID, contactID string) error {
	if noteID == "" || contactID == "" {
		return errors.New("hubspot: association needs a note and a contact")
	}
	return c.h.Do(ctx, http.MethodPut, "/crm/v4/objects/note/"+platform.PathEscape(noteID)+
		"/associations/default/contact/"+platform.PathEscape(contactID), nil, nil, nil)
}

// EnsureNote makes sure the note keyed n.ExternalID exists on n.ContactID's timeline
// and returns it: read by the key; when absent, upserted (so a repeat after a lost
// answer is the same note); associated with the contact either way (an attempt may
// have died between the write and the association). A note already there keeps its
// body: a later update (the classification) is not undone. created says this call
// made the note.
func (c *Client) EnsureNote(ctx context.Context, n Note) (note Note, created bool, err error) {
	if n.ContactID == "" {
		return Note{}, false, errors.New("hubspot: note needs a ContactID")
	}
	note, found, err := c.NoteByExternalID(ctx, n.ExternalID)
	if err != nil {
		return Note{}, false, err
	}
	if !found {
		if note, created, err = c.UpsertNote(ctx, n); err != nil {
			return Note{}, false, err
		}
	}
	note.ContactID = n.ContactID
	return note, created, c.Associate(ctx, note.ID, n.ContactID)
}

var existingIDRe = regexp.MustCompile(`Existing ID: ?(\d+)`)

// ExistingID reads the id HubSpot names in the 409 that refuses a second contact with
// an e-mail (seen in practice, not in HubSpot's reference: callers read the contact by
// e-mail again when this finds nothing).
func ExistingID(err error) (string, bool) {
	var pe *platform.Error
	if !errors.As(err, &pe) || pe.Status != http.StatusConflict {
		return "", false
	}
	m := existingIDRe.FindStringSubmatch(pe.Msg)
	if m == nil {
		return "", false
	}
	return m[1], true
}

func noteFrom(o Object) Note {
	n := Note{
		ID:         o.ID,
		Body:       o.Properties["hs_note_body"],
		OwnerID:    o.Properties["hubspot_owner_id"],
		ExternalID: o.Properties[ExternalIDProperty],
	}
	n.Timestamp = parseTime(o.Properties["hs_timestamp"])
	return n
}

// ContactByEmail reads the contact with email by the unique email property (no
// search, so no index lag); found is false if none. Concurrent reads go as one batch
// read (batch.go).
func (c *Client) ContactByEmail(ctx context.Context, email string) (Contact, bool, error) {
	email = strings.ToLower(strings.TrimSpace(email))
	if email == "" {
		return Contact{}, false, errors.New("hubspot: empty email")
	}
	f, err := c.byEmail.do(ctx, email)
	return f.contact, f.ok, err
}

func (c *Client) contactByEmail(ctx context.Context, email string) (Contact, bool, error) {
	var resp Object
	q := url.Values{"idProperty": {"email"}, "properties": {strings.Join(ContactProperties, ",")}}
	err := c.h.Do(ctx, http.MethodGet, "/crm/v3/objects/contacts/"+platform.PathEscape(email), q, nil, &resp)
	if platform.StatusOf(err) == http.StatusNotFound {
		return Contact{}, false, nil
	}
	if err != nil {
		return Contact{}, false, err
	}
	return Contact(resp), true, nil
}

// CreateContact creates a contact with props. A contact with the same email already
// there is a 409 (HubSpot's message names it: ExistingID). Concurrent creates go as
// one batch create (batch.go).
func (c *Client) CreateContact(ctx context.Context, props map[string]string) (Contact, error) {
	if props["email"] == "" {
		// A batch's answer is matched to its inputs by e-mail: one without goes alone.
		return c.createContact(ctx, props)
	}
	return c.contactCreates.do(ctx, props)
}

func (c *Client) createContact(ctx context.Context, props map[string]string) (Contact, error) {
	var resp Object
	if err := c.h.Do(ctx, http.MethodPost, "/crm/v3/objects/contacts", nil, map[string]any{"properties": props}, &resp); err != nil {
		return Contact{}, err
	}
	return Contact(resp), nil
}

// UpdateContact sets props on contact id (a read when props is empty).
func (c *Client) UpdateContact(ctx context.Context, id string, props map[string]string) (Contact, error) {
	if len(props) == 0 {
		return c.GetContact(ctx, id)
	}
	var resp Object
	if err := c.h.Do(ctx, http.MethodPatch, "/crm/v3/objects/contacts/"+platform.PathEscape(id), nil,
		map[string]any{"properties": props}, &resp); err != nil {
		return Contact{}, err
	}
	return Contact(resp), nil
}

// GetContact reads a contact by id; a missing one is a permanent 404 error.
// Concurrent reads go as one batch read (batch.go).
func (c *Client) GetContact(ctx context.Context, id string) (Contact, error) {
	return c.byID.do(ctx, id)
}

func (c *Client) getContact(ctx context.Context, id string) (Contact, error) {
	var resp Object
	q := url.Values{"properties": {strings.Join(ContactProperties, ",")}}
	if err := c.h.Do(ctx, http.MethodGet, "/crm/v3/objects/contacts/"+platform.PathEscape(id), q, nil, &resp); err != nil {
		return Contact{}, err
	}
	return Contact(resp), nil
}

// EmailOf is the e-mail of contact id, "" when it has none or HubSpot no longer has
// the contact.
func (c *Client) EmailOf(ctx context.Context, id string) (string, error) {
	contact, err := c.GetContact(ctx, id)
	if platform.StatusOf(err) == http.StatusNotFound {
		return "", nil
	}
	return contact.Properties["email"], err
}

// UpdateNote sets props on note id and returns the note as HubSpot answers it.
// Setting the same values again changes nothing, so a repeated update is
// harmless. A note that does not exist is a permanent 404 error. Concurrent updates
// go as one batch update (batch.go).
func (c *Client) UpdateNote(ctx context.Context, id string, props map[string]string) (Note, error) {
	if id == "" || len(props) == 0 {
		return Note{}, errors.New("hubspot: note update needs an id and properties")
	}
	return c.updates.do(ctx, noteUpdate{id, props})
}

func (c *Client) updateNote(ctx context.Context, id string, props map[string]string) (Note, error) {
	var resp Object
	if err := c.h.Do(ctx, http.MethodPatch, "/crm/v3/objects/notes/"+platform.PathEscape(id), nil,
		map[string]any{"properties": props}, &resp); err != nil {
		return Note{}, err
	}
	return noteFrom(resp), nil
}

// NotesOfContact returns every note associated with contact id, oldest first as the
// search pages them. It searches notes with the documented associations.contact
// pseudo-property ("search through associations"), so one call per page.
func (c *Client) NotesOfContact(ctx context.Context, contactID string) ([]Note, error) {
	objs, err := c.objectsOfContact(ctx, "notes", contactID, noteProps)
	if err != nil {
		return nil, err
	}
	out := make([]Note, len(objs))
	for i, o := range objs {
		out[i] = noteFrom(o)
		out[i].ContactID = contactID
	}
	return out, nil
}

// objectsOfContact returns every objectType record associated with contact id: one
// search with the associations.contact pseudo-property, 200 a page.
func (c *Client) objectsOfContact(ctx context.Context, objectType, contactID string, props []string) ([]Object, error) {
	if contactID == "" {
		return nil, errors.New("hubspot: empty contact id")
	}
	return c.Search(ctx, objectType, []Filter{{PropertyName: "associations.contact", Operator: "EQ", Value: contactID}}, props, 200)
}

// Deal is a HubSpot deal (the default properties the deals search returns).
type Deal struct {
	ID       string
	Name     string // dealname
	Stage    string // dealstage
	Pipeline string
	Amount   string
	Created  time.Time // createdate
}

var dealProps = []string{"dealname", "dealstage", "pipeline", "amount", "closedate", "createdate"}

// DealsOfContact returns every deal associated with contact id.
func (c *Client) DealsOfContact(ctx context.Context, contactID string) ([]Deal, error) {
	objs, err := c.objectsOfContact(ctx, "deals", contactID, dealProps)
	if err != nil {
		return nil, err
	}
	out := make([]Deal, len(objs))
	for i, o := range objs {
		p := o.Properties
		out[i] = Deal{ID: o.ID, Name: p["dealname"], Stage: p["dealstage"], Pipeline: p["pipeline"], Amount: p["amount"],
			Created: parseTime(p["createdate"])}
	}
	return out, nil
}

// Meeting outcomes (hs_meeting_outcome's internal values).
const (
	MeetingScheduled   = "SCHEDULED"
	MeetingCompleted   = "COMPLETED"
	MeetingRescheduled = "RESCHEDULED"
	MeetingNoShow      = "NO_SHOW"
	MeetingCanceled    = "CANCELED"
)

// Meeting is a HubSpot meeting engagement.
type Meeting struct {
	ID      string
	Title   string    // hs_meeting_title
	Start   time.Time // hs_meeting_start_time
	End     time.Time // hs_meeting_end_time
	Outcome string    // hs_meeting_outcome
	At      time.Time // hs_timestamp
}

// Held reports whether the meeting stands: neither cancelled nor moved to another.
func (m Meeting) Held() bool {
	return !strings.EqualFold(m.Outcome, MeetingCanceled) && !strings.EqualFold(m.Outcome, MeetingRescheduled)
}

var meetingProps = []string{"hs_meeting_title", "hs_meeting_start_time", "hs_meeting_end_time", "hs_meeting_outcome", "hs_timestamp"}

// MeetingsOfContact returns every meeting associated with contact id.
func (c *Client) MeetingsOfContact(ctx context.Context, contactID string) ([]Meeting, error) {
	objs, err := c.objectsOfContact(ctx, "meetings", contactID, meetingProps)
	if err != nil {
		return nil, err
	}
	out := make([]Meeting, len(objs))
	for i, o := range objs {
		p := o.Properties
		out[i] = Meeting{ID: o.ID, Title: p["hs_meeting_title"], Start: parseTime(p["hs_meeting_start_time"]),
			End: parseTime(p["hs_meeting_end_time"]), Outcome: p["hs_meeting_outcome"], At: parseTime(p["hs_timestamp"])}
	}
	return out, nil
}

// parseTime reads a HubSpot datetime property: ISO 8601, or Unix milliseconds; zero
// if it is neither.
func parseTime(v string) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UTC()
	}
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.UnixMilli(ms).UTC()
	}
	return time.Time{}
}

// ContactsByEmail returns every contact whose email is email (HubSpot's EQ on a
// string property ignores case): more than one is a duplicate made outside Exacto.
func (c *Client) ContactsByEmail(ctx context.Context, email string) ([]Contact, error) {
	if email == "" {
		return nil, errors.New("hubspot: empty email")
	}
	objs, err := c.Search(ctx, "contacts", []Filter{{PropertyName: "email", Operator: "EQ", Value: strings.ToLower(email)}}, ContactProperties, 100)
	if err != nil {
		return nil, err
	}
	out := make([]Contact, len(objs))
	for i, o := range objs {
		out[i] = Contact(o)
	}
	return out, nil
}
