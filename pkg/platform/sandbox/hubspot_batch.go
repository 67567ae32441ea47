package sandbox

import (
	"maps"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// HubSpot routes of the properties API, the notes batch API and v4 associations.
const (
	RouteHubSpotPropertyGet   = "hubspot.properties.get"
	RouteHubSpotPropertyNew   = "hubspot.properties.create"
	RouteHubSpotGroupGet      = "hubspot.property-groups.get"
	RouteHubSpotGroupNew      = "hubspot.property-groups.create"
	RouteHubSpotNoteRead      = "hubspot.notes.batch-read"
	RouteHubSpotNoteUpsert    = "hubspot.notes.batch-upsert"
	RouteHubSpotNoteAssociate = "hubspot.notes.associate"
	// The batch endpoints the client sends concurrent requests to (hubspot/batch.go).
	RouteHubSpotContactBatchRead = "hubspot.contacts.batch-read"
	RouteHubSpotContactBatchNew  = "hubspot.contacts.batch-create"
	RouteHubSpotNoteBatchCreate  = "hubspot.notes.batch-create"
	RouteHubSpotNoteBatchUpdate  = "hubspot.notes.batch-update"
)

// maxBatchInputs is the most inputs HubSpot's batch endpoints take.
const maxBatchInputs = 100

// hsProperty is a custom note property of the portal.
type hsProperty struct {
	Name           string `json:"name"`
	Label          string `json:"label"`
	Type           string `json:"type"`
	FieldType      string `json:"fieldType"`
	GroupName      string `json:"groupName"`
	HasUniqueValue bool   `json:"hasUniqueValue"`
}

// RefuseUniqueNoteProperties makes the portal refuse a note property with unique
// values, as HubSpot might (its reference lists unique properties for companies,
// deals, tickets, custom objects and contacts, never notes).
func (s *Server) RefuseUniqueNoteProperties(refuse bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hubspot.refuseUnique = refuse
}

// SetNoteProperty defines (or replaces) a note property as if made in HubSpot's UI.
func (s *Server) SetNoteProperty(name string, unique bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hubspot.props[name] = &hsProperty{Name: name, Label: name, Type: "string", FieldType: "text", HasUniqueValue: unique}
}

// NoteProperty reports whether the portal has note property name, and if its values
// are unique.
func (s *Server) NoteProperty(name string) (exists, unique bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.hubspot.props[name]
	return p != nil, p != nil && p.HasUniqueValue
}

func (s *Server) mountHubSpotBatch(mux *http.ServeMux) {
	a, d := s.hubspotAuth, hubspotDeny
	s.handle(mux, "GET /crm/v3/properties/notes/{name}", RouteHubSpotPropertyGet, a, d, s.hsPropertyGet)
	s.handle(mux, "POST /crm/v3/properties/notes", RouteHubSpotPropertyNew, a, d, s.hsPropertyCreate)
	s.handle(mux, "GET /crm/v3/properties/notes/groups/{name}", RouteHubSpotGroupGet, a, d, s.hsGroupGet)
	s.handle(mux, "POST /crm/v3/properties/notes/groups", RouteHubSpotGroupNew, a, d, s.hsGroupCreate)
	s.handle(mux, "POST /crm/v3/objects/notes/batch/read", RouteHubSpotNoteRead, a, d, s.hsNotesRead)
	s.handle(mux, "POST /crm/v3/objects/notes/batch/upsert", RouteHubSpotNoteUpsert, a, d, s.hsNotesUpsert)
	s.handle(mux, "PUT /crm/v4/objects/note/{id}/associations/default/contact/{cid}", RouteHubSpotNoteAssociate, a, d, s.hsAssociate)
	s.handle(mux, "POST /crm/v3/objects/contacts/batch/read", RouteHubSpotContactBatchRead, a, d, s.hsContactsRead)
	s.handle(mux, "POST /crm/v3/objects/contacts/batch/create", RouteHubSpotContactBatchNew, a, d, s.hsContactsCreate)
	s.handle(mux, "POST /crm/v3/objects/notes/batch/create", RouteHubSpotNoteBatchCreate, a, d, s.hsNotesCreate)
	s.handle(mux, "POST /crm/v3/objects/notes/batch/update", RouteHubSpotNoteBatchUpdate, a, d, s.hsNotesUpdate)
}

// readBatch reads a batch request's inputs and idProperty; ok false: refused with a 400
// (not JSON, no inputs, or more than HubSpot takes).
func readBatch[T any](w http.ResponseWriter, r *http.Request) (inputs []T, idProperty string, ok bool) {
	var req struct {
		IDProperty string `json:"idProperty"`
		Inputs     []T    `json:"inputs"`
	}
	if err := readJSON(r, &req); err != nil {
		hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR", err.Error())
		return nil, "", false
	}
	if n := len(req.Inputs); n == 0 || n > maxBatchInputs {
		hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR", "inputs: between 1 and "+strconv.Itoa(maxBatchInputs)+" are taken, got "+strconv.Itoa(n))
		return nil, "", false
	}
	return req.Inputs, req.IDProperty, true
}

// batchID is an input that names a record.
type batchID struct {
	ID string `json:"id"`
}

// hsContactsRead serves contacts/batch/read, by id or (idProperty email) by e-mail:
// inputs with no contact are errors of a 207 answer, as notes/batch/read's are.
func (s *Server) hsContactsRead(w http.ResponseWriter, r *http.Request) {
	inputs, idProperty, ok := readBatch[batchID](w, r)
	if !ok {
		return
	}
	if idProperty != "" && idProperty != "email" {
		hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR", "idProperty "+idProperty+" is not a unique property of contacts")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	answerBatchRead(w, "CONTACT", inputs, func(id string) *Object {
		if idProperty != "email" {
			return s.hubspot.contactByID[id]
		}
		if same := s.hubspot.byEmail[strings.ToLower(id)]; len(same) > 0 {
			return same[len(same)-1]
		}
		return nil
	})
}

// answerBatchRead answers a batch read of ids: the records find gives, and an error of
// a 207 for each id it gives none (kind names the object type, as HubSpot's message
// does).
func answerBatchRead(w http.ResponseWriter, kind string, ids []batchID, find func(id string) *Object) {
	results, errs := []map[string]any{}, []hsError{}
	for _, id := range ids {
		o := find(id.ID)
		if o == nil {
			errs = append(errs, hsError{"error", "OBJECT_NOT_FOUND", "Could not get some " + kind + " objects, they may be deleted or not exist. Check that ids are valid. ids: " + id.ID})
			continue
		}
		results = append(results, hsJSON(o))
	}
	status := http.StatusOK
	if len(errs) > 0 {
		status = http.StatusMultiStatus
	}
	writeJSON(w, status, map[string]any{"status": "COMPLETE", "results": results, "errors": errs, "numErrors": len(errs)})
}

// hsContactsCreate serves contacts/batch/create: an e-mail HubSpot has, or one given
// twice, refuses the whole batch with a 409 and nothing is written (assumed, as for the
// notes' batch create).
func (s *Server) hsContactsCreate(w http.ResponseWriter, r *http.Request) {
	inputs, _, ok := readBatch[hsCreateReq](w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	emails := map[string]bool{}
	for _, in := range inputs {
		email := strings.ToLower(in.Properties["email"])
		if s.contactTaken(w, email) || twiceInBatch(w, emails, email, "email "+email) {
			return
		}
	}
	contacts := make([]*Object, len(inputs))
	for i, in := range inputs {
		contacts[i] = s.hsAddContact(in.Properties)
	}
	answerBatchWrite(w, http.StatusCreated, contacts)
}

// twiceInBatch refuses a batch write with a 409 when key (named what) is one an
// earlier input of the batch gave (seen); an empty key is never twice.
func twiceInBatch(w http.ResponseWriter, seen map[string]bool, key, what string) bool {
	if key != "" && seen[key] {
		hubspotError(w, http.StatusConflict, "CONFLICT", "Duplicate "+what+" within the batch")
		return true
	}
	seen[key] = true
	return false
}

// answerBatchWrite answers a batch write with the records it wrote, in the inputs' order.
func answerBatchWrite(w http.ResponseWriter, status int, objs []*Object) {
	results := make([]map[string]any, 0, len(objs))
	for _, o := range objs {
		results = append(results, hsJSON(o))
	}
	writeJSON(w, status, map[string]any{"status": "COMPLETE", "results": results})
}

// hsNotesCreate serves notes/batch/create: each input is a single create's body (its
// properties and associations). One input the single create would refuse refuses the
// whole batch with that answer, and nothing is written (assumed: the reference does
// not say whether a batch create is all or nothing).
func (s *Server) hsNotesCreate(w http.ResponseWriter, r *http.Request) {
	inputs, _, ok := readBatch[hsCreateReq](w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := map[string]bool{}
	notes := make([]*Object, len(inputs))
	for i, in := range inputs {
		o, ok := s.hsNewNote(w, in)
		if !ok {
			return
		}
		if k := in.Properties[NoteExternalIDProperty]; twiceInBatch(w, keys, k, NoteExternalIDProperty+"="+k) {
			return
		}
		notes[i] = o
	}
	for _, o := range notes {
		o.ID = s.hubspot.id()
		s.hubspot.addNote(o)
	}
	answerBatchWrite(w, http.StatusCreated, notes)
}

// hsNotesUpdate serves notes/batch/update: each input's properties set on the note
// with its id, the others kept. A missing note refuses the whole batch with a 404 and
// nothing is written (assumed, as for the batch create).
func (s *Server) hsNotesUpdate(w http.ResponseWriter, r *http.Request) {
	inputs, _, ok := readBatch[struct {
		ID         string            `json:"id"`
		Properties map[string]string `json:"properties"`
	}](w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, in := range inputs {
		n := s.hubspot.noteByID[in.ID]
		if n == nil {
			hubspotError(w, http.StatusNotFound, "OBJECT_NOT_FOUND", "Could not find NOTE "+in.ID)
			return
		}
		if !noteBodyFits(w, in.Properties) || !s.uniqueNoteID(w, in.Properties, n.ID) {
			return
		}
	}
	notes := make([]*Object, len(inputs))
	for i, in := range inputs {
		notes[i] = s.hubspot.noteByID[in.ID]
		s.hubspot.setNoteProperties(notes[i], in.Properties)
		notes[i].UpdatedAt = time.Now()
	}
	answerBatchWrite(w, http.StatusOK, notes)
}

func (s *Server) hsPropertyGet(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.hubspot.props[r.PathValue("name")]
	if p == nil {
		hubspotError(w, http.StatusNotFound, "OBJECT_NOT_FOUND", "Unable to find property "+r.PathValue("name")+" for object type notes")
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) hsPropertyCreate(w http.ResponseWriter, r *http.Request) {
	var p hsProperty
	if err := readJSON(r, &p); err != nil {
		hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR", err.Error())
		return
	}
	if p.Name == "" || p.Label == "" || p.Type == "" || p.FieldType == "" || p.GroupName == "" {
		hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR", "name, label, type, fieldType and groupName are required")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.hubspot.props[p.Name] != nil:
		hubspotError(w, http.StatusConflict, "OBJECT_ALREADY_EXISTS", "A property named '"+p.Name+"' already exists.")
	case !s.hubspot.groups[p.GroupName]:
		hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR", "Property group "+p.GroupName+" does not exist")
	case p.HasUniqueValue && s.hubspot.refuseUnique:
		hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR", "Unique value properties are not supported for object type notes")
	default:
		s.hubspot.props[p.Name] = &p
		writeJSON(w, http.StatusCreated, p)
	}
}

func (s *Server) hsGroupGet(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.hubspot.groups[r.PathValue("name")] {
		hubspotError(w, http.StatusNotFound, "OBJECT_NOT_FOUND", "Unable to find property group "+r.PathValue("name"))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"name": r.PathValue("name"), "label": r.PathValue("name")})
}

func (s *Server) hsGroupCreate(w http.ResponseWriter, r *http.Request) {
	var g struct {
		Name  string `json:"name"`
		Label string `json:"label"`
	}
	if err := readJSON(r, &g); err != nil || g.Name == "" || g.Label == "" {
		hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR", "name and label are required")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hubspot.groups[g.Name] {
		hubspotError(w, http.StatusConflict, "OBJECT_ALREADY_EXISTS", "A property group named '"+g.Name+"' already exists.")
		return
	}
	s.hubspot.groups[g.Name] = true
	writeJSON(w, http.StatusCreated, g)
}

// uniqueProperty answers 400 unless name is a note property with unique values, as
// HubSpot refuses a read or upsert by any other. Called with s.mu held.
func (s *Server) uniqueProperty(w http.ResponseWriter, name string) bool {
	if p := s.hubspot.props[name]; p == nil || !p.HasUniqueValue {
		hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR", "Unable to perform update/upsert by non-unique 0-46 property "+name)
		return false
	}
	return true
}

type hsError struct {
	Status   string `json:"status"`
	Category string `json:"category"`
	Message  string `json:"message"`
}

// hsNotesRead serves notes/batch/read by idProperty: what is committed, with no search
// lag; keys with no note are errors of a 207 answer (an assumption: the reference
// declares 207 without saying which inputs cause it).
func (s *Server) hsNotesRead(w http.ResponseWriter, r *http.Request) {
	inputs, idProperty, ok := readBatch[batchID](w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if idProperty != "" && !s.uniqueProperty(w, idProperty) {
		return
	}
	answerBatchRead(w, "NOTE", inputs, func(id string) *Object {
		if idProperty != "" {
			return s.hubspot.noteWith(idProperty, id)
		}
		return s.hubspot.noteByID[id]
	})
}

// hsNotesUpsert serves notes/batch/upsert: each input's note is the one whose unique
// idProperty holds its id — updated in place — or a new one; results carry "new".
func (s *Server) hsNotesUpsert(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Inputs []struct {
			IDProperty string            `json:"idProperty"`
			ID         string            `json:"id"`
			Properties map[string]string `json:"properties"`
		} `json:"inputs"`
	}
	if err := readJSON(r, &req); err != nil || len(req.Inputs) == 0 {
		hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR", "inputs are required")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, in := range req.Inputs {
		if in.ID == "" || !s.uniqueProperty(w, in.IDProperty) || !noteBodyFits(w, in.Properties) {
			if in.ID == "" {
				hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR", "id is required")
			}
			return
		}
	}
	results := []map[string]any{}
	for _, in := range req.Inputs {
		props := maps.Clone(in.Properties)
		if props == nil {
			props = map[string]string{}
		}
		props[in.IDProperty] = in.ID
		n, isNew := s.hubspot.noteWith(in.IDProperty, in.ID), false
		if n == nil {
			if props["hs_timestamp"] == "" {
				hubspotError(w, http.StatusBadRequest, "VALIDATION_ERROR", "Property hs_timestamp is required")
				return
			}
			n, isNew = &Object{ID: s.hubspot.id(), Properties: props, CreatedAt: time.Now()}, true
			s.hubspot.addNote(n)
		} else {
			s.hubspot.setNoteProperties(n, props)
			n.UpdatedAt = time.Now()
		}
		res := hsJSON(n)
		res["new"] = isNew
		results = append(results, res)
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "COMPLETE", "results": results})
}

// hsAssociate serves the v4 default association of a note with a contact (note →
// contact, type 202); associating twice keeps one.
func (s *Server) hsAssociate(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, c := s.hubspot.noteByID[r.PathValue("id")], s.hubspot.contactByID[r.PathValue("cid")]
	if n == nil || c == nil {
		hubspotError(w, http.StatusNotFound, "OBJECT_NOT_FOUND", "note "+r.PathValue("id")+" or contact "+r.PathValue("cid")+" does not exist")
		return
	}
	known := false
	for _, a := range n.Associations {
		known = known || (a.ToID == c.ID && a.TypeID == NoteToContactAssociation)
	}
	if !known {
		n.Associations = append(n.Associations, Association{ToID: c.ID, TypeID: NoteToContactAssociation, Category: "HUBSPOT_DEFINED"})
		s.hubspot.link(n, c.ID)
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "COMPLETE", "results": []map[string]any{{
		"from": map[string]string{"id": n.ID}, "to": map[string]string{"id": c.ID},
		"associationSpec": map[string]any{"associationCategory": "HUBSPOT_DEFINED", "associationTypeId": NoteToContactAssociation},
	}}})
}
