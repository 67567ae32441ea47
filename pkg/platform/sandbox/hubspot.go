package sandbox

import (
	"cmp"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// HubSpot routes (names for SetFault and Requests).
const (
	RouteHubSpotNoteCreate    = "hubspot.notes.create"
	RouteHubSpotNoteSearch    = "hubspot.notes.search"
	RouteHubSpotNoteUpdate    = "hubspot.notes.update"
	RouteHubSpotContactCreate = "hubspot.contacts.create"
	RouteHubSpotContactSearch = "hubspot.contacts.search"
	RouteHubSpotContactGet    = "hubspot.contacts.get"
	RouteHubSpotContactUpdate = "hubspot.contacts.update"
)

// The unique custom note property that carries our event id; in a real
// portal it is created once with hasUniqueValue=true.
const NoteExternalIDProperty = "exacto_event_id"

// MaxNoteBody is HubSpot's documented limit of hs_note_body, in characters.
const MaxNoteBody = 65536

// NoteToContactAssociation is HubSpot's HUBSPOT_DEFINED note→contact type.
const NoteToContactAssociation = 202

// Association is one association written with a note.
type Association struct {
	ToID     string
	TypeID   int
	Category string
}

// Object is a stored HubSpot record (note or contact), as the sandbox sees it.
type Object struct {
	ID           string
	Properties   map[string]string
	CreatedAt    time.Time
	UpdatedAt    time.Time
	Associations []Association
	in           *[]*Object // the list it is stored in (notes, deals, meetings…)
}

type hubspotState struct {
	nextID   int
	contacts []*Object // creation order = search order
	notes    []*Object
	// The indexes: by id, and notes by a property's value (each built when first
	// asked for, then kept up to date by every write of a note's properties).
	contactByID map[string]*Object
	noteByID    map[string]*Object
	notesBy     map[string]map[string]*Object // property → value → the first note with it
	linked      map[string][]*Object          // contact id → the objects associated with it
	byEmail     map[string][]*Object          // lower-cased e-mail → its contacts, in creation order
	searchLag   time.Duration
	// props are the custom note properties, groups the note property groups (a new
	// portal has neither: Exacto makes its own); refuseUnique refuses unique values.
	props        map[string]*hsProperty
	groups       map[string]bool
	refuseUnique bool
}

func (h *hubspotState) init() {
	h.nextID = 1000
	h.props, h.groups = map[string]*hsProperty{}, map[string]bool{}
	h.contactByID, h.noteByID, h.notesBy = map[string]*Object{}, map[string]*Object{}, map[string]map[string]*Object{}
	h.linked, h.byEmail = map[string][]*Object{}, map[string][]*Object{}
}

// indexEmail files contact c under its e-mail now, and no longer under was.
func (h *hubspotState) indexEmail(c *Object, was string) {
	if was != "" {
		h.byEmail[was] = slices.DeleteFunc(h.byEmail[was], func(o *Object) bool { return o == c })
	}
	if e := strings.ToLower(c.Properties["email"]); e != "" {
		h.byEmail[e] = append(h.byEmail[e], c)
		slices.SortFunc(h.byEmail[e], byCreation)
	}
}

// byCreation orders objects as they were made: their ids are one counting sequence.
func byCreation(a, b *Object) int {
	return cmp.Or(cmp.Compare(len(a.ID), len(b.ID)), strings.Compare(a.ID, b.ID))
}

// store appends o to list, with its associations indexed.
func (h *hubspotState) store(list *[]*Object, o *Object) {
	o.in = list
	*list = append(*list, o)
	for _, a := range o.Associations {
		h.link(o, a.ToID)
	}
}

// link indexes o's association with contactID.
func (h *hubspotState) link(o *Object, contactID string) {
	if !slices.Contains(h.linked[contactID], o) {
		h.linked[contactID] = append(h.linked[contactID], o)
	}
}

// indexed is what a search reads instead of all of list when every filter group has
// an EQ filter an index answers: objects of list associated with a contact (linked),
// or contacts with an e-mail (byEmail); the candidates of every group, in creation
// order, which the search then filters as it would all of list. ok false otherwise.
// (HubSpot's search is indexed; a scan of every contact for each search made the
// sandbox, not the client, most of a load's CPU: 58 s of a 500/s run's 83.)
func (h *hubspotState) indexed(list *[]*Object, req hsSearchReq) (objs []*Object, ok bool) {
	if len(req.FilterGroups) == 0 {
		return nil, false
	}
	for _, g := range req.FilterGroups {
		if i := slices.IndexFunc(g.Filters, func(f hsFilter) bool { return f.PropertyName == "associations.contact" && f.Operator == "EQ" }); i >= 0 {
			for _, o := range h.linked[g.Filters[i].Value] {
				if o.in == list {
					objs = append(objs, o)
				}
			}
			continue
		}
		if i := slices.IndexFunc(g.Filters, func(f hsFilter) bool { return f.PropertyName == "email" && f.Operator == "EQ" && f.Value != "" }); i >= 0 && list == &h.contacts {
			objs = append(objs, h.byEmail[strings.ToLower(g.Filters[i].Value)]...)
			continue
		}
		return nil, false
	}
	slices.SortFunc(objs, byCreation)
	return slices.Compact(objs), true
}

func (h *hubspotState) addContact(o *Object) {
	h.store(&h.contacts, o)
	h.contactByID[o.ID] = o
	h.indexEmail(o, "")
}

func (h *hubspotState) addNote(o *Object) {
	h.store(&h.notes, o)
	h.noteByID[o.ID] = o
	for name, idx := range h.notesBy {
		if v, ok := o.Properties[name]; ok && idx[v] == nil {
			idx[v] = o
		}
	}
}

// setNoteProperties sets props on n, the others kept.
func (h *hubspotState) setNoteProperties(n *Object, props map[string]string) {
	if n.Properties == nil {
		n.Properties = map[string]string{}
	}
	for name, idx := range h.notesBy {
		v, ok := props[name]
		if !ok {
			continue
		}
		if old, had := n.Properties[name]; had && idx[old] == n {
			delete(idx, old)
		}
		if idx[v] == nil {
			idx[v] = n
		}
	}
	maps.Copy(n.Properties, props)
}

// noteWith is the first note whose property name is value, nil if none.
func (h *hubspotState) noteWith(name, value string) *Object {
	idx := h.notesBy[name]
	if idx == nil {
		idx = map[string]*Object{}
		for _, n := range h.notes {
			if v, ok := n.Properties[name]; ok && idx[v] == nil {
				idx[v] = n
			}
		}
		h.notesBy[name] = idx
	}
	return idx[value]
}

func (h *hubspotState) id() string {
	h.nextID++
	return strconv.Itoa(h.nextID)
}

func clone(o *Object) Object {
	c := *o
	c.Properties = maps.Clone(o.Properties)
	c.Associations = append([]Association(nil), o.Associations...)
	return c
}

// Notes returns a copy of every stored note, in creation order.
func (s *Server) Notes() []Object {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Object, 0, len(s.hubspot.notes))
	for _, n := range s.hubspot.notes {
		out = append(out, clone(n))
	}
	return out
}

// NotesWithExternalID counts notes carrying externalID.
func (s *Server) NotesWithExternalID(externalID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, o := range s.hubspot.notes {
		if o.Properties[NoteExternalIDProperty] == externalID {
			n++
		}
	}
	return n
}

// Contacts returns a copy of every stored contact, in creation order.
func (s *Server) Contacts() []Object {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Object, 0, len(s.hubspot.contacts))
	for _, c := range s.hubspot.contacts {
		out = append(out, clone(c))
	}
	return out
}

// AddContact seeds a contact and returns its id.
func (s *Server) AddContact(email string, props map[string]string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := maps.Clone(props)
	if p == nil {
		p = map[string]string{}
	}
	p["email"] = strings.ToLower(email)
	o := &Object{ID: s.hubspot.id(), Properties: p, CreatedAt: time.Now()}
	s.hubspot.addContact(o)
	return o.ID
}

// AddNote seeds a note (bypassing the API) and returns its id.
func (s *Server) AddNote(props map[string]string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := &Object{ID: s.hubspot.id(), Properties: maps.Clone(props), CreatedAt: time.Now()}
	s.hubspot.addNote(o)
	return o.ID
}

// AddNoteFor seeds a note associated with contactID (bypassing the API, as a note
// typed by hand in HubSpot or written by another integration) and returns its id.
func (s *Server) AddNoteFor(contactID string, props map[string]string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := &Object{ID: s.hubspot.id(), Properties: maps.Clone(props), CreatedAt: time.Now(),
		Associations: []Association{{ToID: contactID, TypeID: NoteToContactAssociation, Category: "HUBSPOT_DEFINED"}}}
	if o.Properties == nil {
		o.Properties = map[string]string{}
	}
	if o.Properties["hs_timestamp"] == "" {
		o.Properties["hs_timestamp"] = o.CreatedAt.UTC().Format("2006-01-02T15:04:05.000Z")
	}
	s.hubspot.addNote(o)
	return o.ID
}

// SetSearchLag hides objects younger than d from search, as HubSpot's search
// index trails writes by a few seconds.
func (s *Server) SetSearchLag(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hubspot.searchLag = d
}

func (s *Server) hubspotAuth(r *http.Request) bool {
	return r.Header.Get("Authorization") == "Bearer "+s.opts.HubSpotToken
}

func hubspotError(w http.ResponseWriter, status int, category, msg string) {
	writeJSON(w, status, map[string]any{
		"status": "error", "message": msg, "category": category,
		"correlationId": "sandbox-" + strconv.FormatInt(time.Now().UnixNano(), 36),
	})
}

func hubspotDeny(w http.ResponseWriter, _ *http.Request) {
	hubspotError(w, http.StatusUnauthorized, "INVALID_AUTHENTICATION",
		"Authentication credentials not found.")
}

func (s *Server) mountHubSpot(mux *http.ServeMux) {
	a, d := s.hubspotAuth, hubspotDeny
	s.handle(mux, "POST /crm/v3/objects/notes", RouteHubSpotNoteCreate, a, d, s.hsCreateNote)
	s.handle(mux, "PATCH /crm/v3/objects/notes/{id}", RouteHubSpotNoteUpdate, a, d, s.hsUpdateNote)
	s.handle(mux, "POST /crm/v3/objects/notes/search", RouteHubSpotNoteSearch, a, d, s.hsSearch(&s.hubspot.notes))
	s.handle(mux, "POST /crm/v3/objects/contacts", RouteHubSpotContactCreate, a, d, s.hsCreateContact)
	s.handle(mux, "POST /crm/v3/objects/contacts/search", RouteHubSpotContactSearch, a, d, s.hsSearch(&s.hubspot.contacts))
	s.handle(mux, "GET /crm/v3/objects/contacts/{id}", RouteHubSpotContactGet, a, d, s.hsGetContact)
	s.handle(mux, "PATCH /crm/v3/objects/contacts/{id}", RouteHubSpotContactUpdate, a, d, s.hsUpdateContact)
	s.mountHubSpotBatch(mux)
}

type hsCreateReq struct {
	Properties   map[string]string `json:"properties"`
	Associations []struct {
		To struct {
			ID string `json:"id"`
		} `json:"to"`
		Types []struct {
			Category string `json:"associationCategory"`
			TypeID   int    `json:"associationTypeId"`
		} `json:"types"`
	} `json:"associations"`
}

func hsJSON(o *Object) map[string]any {
	updated := o.UpdatedAt
	if updated.IsZero() {
		updated = o.CreatedAt
	}
	return map[string]any{
		"id": o.ID, "properties": o.Properties, "archived": false,
		"createdAt": o.CreatedAt.UTC().Format(time.RFC3339Nano), "updatedAt": updated.UTC().Format(time.RFC3339Nano),
	}
}

func (s *Server) hsCreateNote(w http.ResponseWriter, r *http.Request) {
	var req hsCreateReq
	if err := readJSON(r, &req); err != nil {
		hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR", err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.hsNewNote(w, req)
	if !ok {
		return
	}
	o.ID = s.hubspot.id()
	s.hubspot.addNote(o)
	writeJSON(w, http.StatusCreated, hsJSON(o))
}

// hsNewNote is the note req creates, not yet stored and without its id; or, answered
// on w, why HubSpot would refuse it. Called with s.mu held.
func (s *Server) hsNewNote(w http.ResponseWriter, req hsCreateReq) (*Object, bool) {
	if req.Properties["hs_timestamp"] == "" {
		hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR", "Property hs_timestamp is required")
		return nil, false
	}
	if !noteBodyFits(w, req.Properties) || !s.uniqueNoteID(w, req.Properties, "") {
		return nil, false
	}
	o := &Object{Properties: maps.Clone(req.Properties), CreatedAt: time.Now()}
	for _, as := range req.Associations {
		for _, t := range as.Types {
			if t.TypeID != NoteToContactAssociation {
				hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR",
					"sandbox knows only note-to-contact association type 202, got "+strconv.Itoa(t.TypeID))
				return nil, false
			}
			if s.hubspot.contactByID[as.To.ID] == nil {
				hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR", "contact "+as.To.ID+" does not exist")
				return nil, false
			}
			o.Associations = append(o.Associations, Association{ToID: as.To.ID, TypeID: t.TypeID, Category: t.Category})
		}
	}
	return o, true
}

// noteBodyFits answers 400 for a body over HubSpot's limit.
func noteBodyFits(w http.ResponseWriter, props map[string]string) bool {
	if utf8.RuneCountInString(props["hs_note_body"]) > MaxNoteBody {
		hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR",
			"Property hs_note_body is limited to "+strconv.Itoa(MaxNoteBody)+" characters")
		return false
	}
	return true
}

// uniqueNoteID answers 409 when props would give a second note (not self) the
// external id another holds, once the property is made with unique values: HubSpot
// refuses it, naming the holder. Called with s.mu held.
func (s *Server) uniqueNoteID(w http.ResponseWriter, props map[string]string, self string) bool {
	ext := props[NoteExternalIDProperty]
	if p := s.hubspot.props[NoteExternalIDProperty]; ext == "" || p == nil || !p.HasUniqueValue {
		return true
	}
	if n := s.hubspot.noteWith(NoteExternalIDProperty, ext); n != nil && n.ID != self {
		hubspotError(w, http.StatusConflict, "CONFLICT",
			"A note with "+NoteExternalIDProperty+"="+ext+" already exists. Existing ID: "+n.ID)
		return false
	}
	return true
}

// hsUpdateNote serves PATCH /crm/v3/objects/notes/{id}: the given properties
// are set, the others kept; associations are not touched.
func (s *Server) hsUpdateNote(w http.ResponseWriter, r *http.Request) {
	var req hsCreateReq
	if err := readJSON(r, &req); err != nil {
		hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR", err.Error())
		return
	}
	if !noteBodyFits(w, req.Properties) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.hubspot.noteByID[r.PathValue("id")]
	if n == nil {
		hubspotError(w, http.StatusNotFound, "OBJECT_NOT_FOUND", "resource not found")
		return
	}
	if !s.uniqueNoteID(w, req.Properties, n.ID) {
		return
	}
	s.hubspot.setNoteProperties(n, req.Properties)
	n.UpdatedAt = time.Now()
	writeJSON(w, http.StatusOK, hsJSON(n))
}

func (s *Server) hsCreateContact(w http.ResponseWriter, r *http.Request) {
	var req hsCreateReq
	if err := readJSON(r, &req); err != nil {
		hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR", err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.contactTaken(w, req.Properties["email"]) {
		return
	}
	writeJSON(w, http.StatusCreated, hsJSON(s.hsAddContact(req.Properties)))
}

// contactTaken answers 409 when HubSpot has a contact with email, naming it (a single
// create's and a batch's refusal). Called with s.mu held.
func (s *Server) contactTaken(w http.ResponseWriter, email string) bool {
	if same := s.hubspot.byEmail[strings.ToLower(email)]; email != "" && len(same) > 0 {
		hubspotError(w, http.StatusConflict, "CONFLICT", "Contact already exists. Existing ID: "+same[0].ID)
		return true
	}
	return false
}

// hsAddContact stores a new contact with props, its e-mail lower-cased. Called with
// s.mu held.
func (s *Server) hsAddContact(props map[string]string) *Object {
	p := maps.Clone(props)
	if p == nil {
		p = map[string]string{}
	}
	if email := strings.ToLower(p["email"]); email != "" {
		p["email"] = email
	}
	o := &Object{ID: s.hubspot.id(), Properties: p, CreatedAt: time.Now()}
	s.hubspot.addContact(o)
	return o
}

// hsGetContact serves a contact by id, or by e-mail with idProperty=email.
func (s *Server) hsGetContact(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var c *Object
	switch prop := r.URL.Query().Get("idProperty"); prop {
	case "":
		c = s.hubspot.contactByID[r.PathValue("id")]
	case "email":
		if same := s.hubspot.byEmail[strings.ToLower(r.PathValue("id"))]; len(same) > 0 {
			c = same[len(same)-1]
		}
	default:
		hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR", "idProperty "+prop+" is not a unique property of contacts")
		return
	}
	if c == nil {
		hubspotError(w, http.StatusNotFound, "OBJECT_NOT_FOUND", "resource not found")
		return
	}
	writeJSON(w, http.StatusOK, hsJSON(c))
}

func (s *Server) hsUpdateContact(w http.ResponseWriter, r *http.Request) {
	var req hsCreateReq
	if err := readJSON(r, &req); err != nil {
		hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR", err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.hubspot.contactByID[r.PathValue("id")]
	if c == nil {
		hubspotError(w, http.StatusNotFound, "OBJECT_NOT_FOUND", "resource not found")
		return
	}
	was := strings.ToLower(c.Properties["email"])
	for k, v := range req.Properties {
		if k == "email" {
			v = strings.ToLower(v)
		}
		c.Properties[k] = v
	}
	s.hubspot.indexEmail(c, was)
	c.UpdatedAt = time.Now()
	writeJSON(w, http.StatusOK, hsJSON(c))
}

type hsFilter struct {
	PropertyName string `json:"propertyName"`
	Operator     string `json:"operator"`
	Value        string `json:"value"`
}

type hsSearchReq struct {
	FilterGroups []struct {
		Filters []hsFilter `json:"filters"`
	} `json:"filterGroups"`
	Limit int    `json:"limit"`
	After string `json:"after"`
}

// hsSearch serves POST /crm/v3/objects/{type}/search: filter groups are ORed,
// filters within a group ANDed; paging is by an opaque "after" cursor. The
// pseudo-property associations.contact (EQ a contact id) matches the records
// associated with that contact, as HubSpot's "search through associations" does.
func (s *Server) hsSearch(list *[]*Object) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req hsSearchReq
		if err := readJSON(r, &req); err != nil {
			hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR", err.Error())
			return
		}
		if req.Limit == 0 {
			req.Limit = 10
		}
		if req.Limit < 0 || req.Limit > 200 {
			hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR", "limit must be between 1 and 200")
			return
		}
		offset := 0
		if req.After != "" {
			n, err := strconv.Atoi(req.After)
			if err != nil || n < 0 {
				hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR", "invalid after cursor")
				return
			}
			offset = n
		}
		for _, g := range req.FilterGroups {
			for _, f := range g.Filters {
				switch f.Operator {
				case "EQ", "NEQ", "HAS_PROPERTY", "NOT_HAS_PROPERTY":
				default:
					hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR", "sandbox does not support operator "+f.Operator)
					return
				}
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		cutoff := time.Now().Add(-s.hubspot.searchLag)
		var hits []*Object
		objs, ok := s.hubspot.indexed(list, req)
		if !ok {
			objs = *list
		}
		for _, o := range objs {
			if s.hubspot.searchLag > 0 && o.CreatedAt.After(cutoff) {
				continue
			}
			if matches(o, req) {
				hits = append(hits, o)
			}
		}
		resp := map[string]any{"total": len(hits)}
		results := []map[string]any{}
		end := min(offset+req.Limit, len(hits))
		for i := offset; i < end; i++ {
			results = append(results, hsJSON(hits[i]))
		}
		resp["results"] = results
		if end < len(hits) {
			next := strconv.Itoa(end)
			resp["paging"] = map[string]any{"next": map[string]any{"after": next, "link": "?after=" + next}}
		}
		writeJSON(w, http.StatusOK, resp)
	}
}

func matches(o *Object, req hsSearchReq) bool {
	if len(req.FilterGroups) == 0 {
		return true
	}
	for _, g := range req.FilterGroups {
		ok := true
		for _, f := range g.Filters {
			v, has := o.Properties[f.PropertyName]
			if f.PropertyName == "associations.contact" {
				v, has = "", false
				for _, a := range o.Associations {
					if a.ToID == f.Value {
						v, has = a.ToID, true
					}
				}
			}
			switch f.Operator {
			case "EQ":
				ok = ok && has && strings.EqualFold(v, f.Value)
			case "NEQ":
				ok = ok && !strings.EqualFold(v, f.Value)
			case "HAS_PROPERTY":
				ok = ok && has && v != ""
			case "NOT_HAS_PROPERTY":
				ok = ok && (!has || v == "")
			}
		}
		if ok {
			return true
		}
	}
	return false
}
