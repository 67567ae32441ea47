// Package hubspot is a small client for the HubSpot CRM v3 objects API: notes
// that carry our event id (so a write can be found again before it is
// repeated) and contacts looked up by email.
//
// Endpoints (developers.hubspot.com/docs/api-reference/crm-notes-v3/guide,
// .../crm/search-the-crm, .../error-handling):
//
//	POST  /crm/v3/objects/notes             create, with note→contact association 202
//	PATCH /crm/v3/objects/notes/{id}        update (the classification, the owner)
//	POST  /crm/v3/objects/notes/search      find by exacto_event_id, or a contact's notes
//	                                        (the associations.contact pseudo-property)
//	POST  /crm/v3/objects/contacts/search   find by email
//	POST  /crm/v3/objects/contacts          create
//	PATCH /crm/v3/objects/contacts/{id}     update
//	GET   /crm/v3/objects/contacts/{id}     read
//	POST  /crm/v3/objects/deals/search      a contact's deals (associations.contact)
//	POST  /crm/v3/objects/meetings/search   a contact's meetings (associations.contact)
//
// Auth is a private app token: "Authorization: Bearer <token>".
package hubspot

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"exacto.dev/pkg/platform"
)

// DefaultBaseURL is HubSpot's API host.
const DefaultBaseURL = "https://api.hubapi.com"

// ExternalIDProperty is the custom note property holding our event id. It must
// exist in the portal as a single-line text property with hasUniqueValue set,
// so HubSpot itself refuses a duplicate even if our search missed the first.
const ExternalIDProperty = "exacto_event_id"

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
	// Limit paces requests (nil: none, e.g. against the sandbox); see DefaultLimit.
	Limit *rate.Limiter
	// SearchLimit paces the search endpoints besides (DefaultSearchLimit).
	SearchLimit *rate.Limiter
}

// Client talks to one HubSpot portal. Safe for concurrent use.
type Client struct {
	h           platform.HTTP
	searchLimit *rate.Limiter
}

// New returns a Client for cfg.
func New(cfg Config) *Client {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	return &Client{h: platform.HTTP{
		Dependency: "hubspot",
		BaseURL:    cfg.BaseURL,
		Client:     cfg.HTTPClient,
		Timeout:    cfg.Timeout,
		Limit:      cfg.Limit,
		Auth:       platform.Bearer(cfg.Token),
		ErrMsg:     errMsg,
	}, searchLimit: cfg.SearchLimit}
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
		if c.searchLimit != nil {
			if err := c.searchLimit.Wait(ctx); err != nil {
				return nil, &platform.Error{Dependency: "hubspot", Transient: true, Msg: "waiting for the search rate limit: " + err.Error()}
			}
		}
		if err := c.h.Do(ctx, http.MethodPost, path, nil, req, &resp); err != nil {
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

// SearchNoteByExternalID finds the note carrying key; found is false if none.
func (c *Client) SearchNoteByExternalID(ctx context.Context, key string) (n Note, found bool, err error) {
	if key == "" {
		return Note{}, false, errors.New("hubspot: empty external id")
	}
	objs, err := c.Search(ctx, "notes", []Filter{{PropertyName: ExternalIDProperty, Operator: "EQ", Value: key}}, noteProps, 10)
	if err != nil || len(objs) == 0 {
		return Note{}, false, err
	}
	return noteFrom(objs[0]), true, nil
}

// CreateNote writes n and associates it with n.ContactID. It does not look for
// an existing note first: callers that may repeat a write use EnsureNote.
func (c *Client) CreateNote(ctx context.Context, n Note) (Note, error) {
	if n.ExternalID == "" || n.ContactID == "" {
		return Note{}, errors.New("hubspot: note needs ExternalID and ContactID")
	}
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
	type assocType struct {
		Category string `json:"associationCategory"`
		TypeID   int    `json:"associationTypeId"`
	}
	type to struct {
		ID string `json:"id"`
	}
	type assoc struct {
		To    to          `json:"to"`
		Types []assocType `json:"types"`
	}
	req := struct {
		Properties   map[string]string `json:"properties"`
		Associations []assoc           `json:"associations"`
	}{props, []assoc{{To: to{n.ContactID}, Types: []assocType{{"HUBSPOT_DEFINED", NoteToContact}}}}}
	var resp Object
	if err := c.h.Do(ctx, http.MethodPost, "/crm/v3/objects/notes", nil, req, &resp); err != nil {
		return Note{}, err
	}
	n.ID = resp.ID
	return n, nil
}

// EnsureNote creates n unless a note with n.ExternalID already exists, and
// returns the note that is there either way. It is safe to call again after
// a timeout whose outcome is unknown: the search finds the committed note,
// and if the search index lags, the unique property turns the second create
// into a 409 that names the existing note.
func (c *Client) EnsureNote(ctx context.Context, n Note) (note Note, created bool, err error) {
	if existing, found, err := c.SearchNoteByExternalID(ctx, n.ExternalID); err != nil || found {
		return existing, false, err
	}
	note, err = c.CreateNote(ctx, n)
	if err == nil {
		return note, true, nil
	}
	if id, ok := ExistingID(err); ok {
		n.ID = id
		return n, false, nil
	}
	return Note{}, false, err
}

var existingIDRe = regexp.MustCompile(`Existing ID: ?(\d+)`)

// ExistingID reads the id HubSpot names in the 409 that refuses a second record
// with a unique value (a contact's email, a note's exacto_event_id).
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

// FindContactByEmail returns the contact with email; found is false if none.
func (c *Client) FindContactByEmail(ctx context.Context, email string) (Contact, bool, error) {
	objs, err := c.Search(ctx, "contacts", []Filter{{PropertyName: "email", Operator: "EQ", Value: strings.ToLower(email)}}, ContactProperties, 10)
	if err != nil || len(objs) == 0 {
		return Contact{}, false, err
	}
	return Contact(objs[0]), true, nil
}

// UpsertContact finds the contact by email and updates props on it, or
// creates it with props if absent.
func (c *Client) UpsertContact(ctx context.Context, email string, props map[string]string) (Contact, error) {
	if email == "" {
		return Contact{}, errors.New("hubspot: empty email")
	}
	existing, found, err := c.FindContactByEmail(ctx, email)
	if err != nil {
		return Contact{}, err
	}
	if found {
		return c.UpdateContact(ctx, existing.ID, props)
	}
	p := maps.Clone(props)
	if p == nil {
		p = map[string]string{}
	}
	p["email"] = email
	created, err := c.CreateContact(ctx, p)
	if id, ok := ExistingID(err); ok {
		// Created concurrently (or by our own timed-out attempt).
		return c.UpdateContact(ctx, id, props)
	}
	return created, err
}

// CreateContact creates a contact with props. A contact with the same email
// already there is a 409 whose id ExistingID reads.
func (c *Client) CreateContact(ctx context.Context, props map[string]string) (Contact, error) {
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
func (c *Client) GetContact(ctx context.Context, id string) (Contact, error) {
	var resp Object
	q := url.Values{"properties": {strings.Join(ContactProperties, ",")}}
	if err := c.h.Do(ctx, http.MethodGet, "/crm/v3/objects/contacts/"+platform.PathEscape(id), q, nil, &resp); err != nil {
		return Contact{}, err
	}
	return Contact(resp), nil
}

// UpdateNote sets props on note id and returns the note as HubSpot answers it.
// Setting the same values again changes nothing, so a repeated update is
// harmless. A note that does not exist is a permanent 404 error.
func (c *Client) UpdateNote(ctx context.Context, id string, props map[string]string) (Note, error) {
	if id == "" || len(props) == 0 {
		return Note{}, errors.New("hubspot: note update needs an id and properties")
	}
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

// DefaultLimit is HubSpot's rate for private apps on the lowest tier, 100 requests per
// 10 seconds.
func DefaultLimit() *rate.Limiter { return rate.NewLimiter(rate.Every(100*time.Millisecond), 10) }

// DefaultSearchLimit is the search endpoints' own rate, 5 requests per second per token.
func DefaultSearchLimit() *rate.Limiter { return rate.NewLimiter(rate.Every(200*time.Millisecond), 5) }
