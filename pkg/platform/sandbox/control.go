package sandbox

import (
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Control routes, on the sandbox's own mux, let a process that did not start the
// sandbox (`exacto simulate`) drive it: set and clear faults, seed leads, and read
// what the platforms saw. Like the sandbox itself they answer loopback clients only.
const (
	ControlFaults = "/_sandbox/faults"
	ControlLeads  = "/_sandbox/leads"
	ControlState  = "/_sandbox/state"
)

// Routes lists every route name the sandbox mounts, for faults by dependency.
var Routes = []string{
	RouteHubSpotNoteCreate, RouteHubSpotNoteSearch, RouteHubSpotNoteUpdate,
	RouteHubSpotContactCreate, RouteHubSpotContactSearch, RouteHubSpotContactGet, RouteHubSpotContactUpdate,
	RouteHubSpotPropertyGet, RouteHubSpotPropertyNew, RouteHubSpotGroupGet, RouteHubSpotGroupNew,
	RouteHubSpotNoteRead, RouteHubSpotNoteUpsert, RouteHubSpotNoteAssociate,
	RouteInstantlyInterest, RouteInstantlyBlocklist, RouteInstantlyBlocklistGet, RouteInstantlyLeadList, RouteInstantlyLeadGet,
	RouteInstantlyCampaignGet, RouteInstantlyLabelList, RouteInstantlyLabelCreate, RouteInstantlySubsequences,
	RouteInstantlySubseqRemove, RouteInstantlyEmailGet, RouteInstantlyEmailList,
	RouteSmartleadPause, RouteSmartleadUnsubscribe, RouteSmartleadUnsubscribeAll, RouteSmartleadLeadByEmail, RouteSmartleadCampaignLeads,
	RouteSmartleadHistory,
}

// ControlFault is Fault as JSON, durations as strings ("10s").
type ControlFault struct {
	Latency            string `json:"latency,omitempty"`
	Status             int    `json:"status,omitempty"`
	RetryAfter         string `json:"retry_after,omitempty"`
	TimeoutAfterCommit string `json:"timeout_after_commit,omitempty"`
	DownFor            string `json:"down_for,omitempty"`
	Count              int    `json:"count,omitempty"`
}

// Fault converts c, or says which duration is not one.
func (c ControlFault) Fault() (Fault, error) {
	f := Fault{Status: c.Status, Count: c.Count}
	for _, d := range []struct {
		name string
		s    string
		to   *time.Duration
	}{{"latency", c.Latency, &f.Latency}, {"retry_after", c.RetryAfter, &f.RetryAfter},
		{"timeout_after_commit", c.TimeoutAfterCommit, &f.TimeoutAfterCommit}, {"down_for", c.DownFor, &f.DownFor}} {
		if d.s == "" {
			continue
		}
		v, err := time.ParseDuration(d.s)
		if err != nil || v < 0 {
			return Fault{}, &controlError{"fault." + d.name + ": want a duration such as 10s, got " + d.s}
		}
		*d.to = v
	}
	return f, nil
}

type controlError struct{ msg string }

func (e *controlError) Error() string { return e.msg }

// ControlFaultRequest is the body of POST /_sandbox/faults. Route is a route name
// (Routes) or a dependency (hubspot, instantly, smartlead): all of its routes.
type ControlFaultRequest struct {
	Route string       `json:"route"`
	Fault ControlFault `json:"fault"`
}

// ControlLeadsRequest is the body of POST /_sandbox/leads.
type ControlLeadsRequest struct {
	Campaign string   `json:"campaign"`
	Emails   []string `json:"emails"`
}

// ControlStateAnswer is what GET /_sandbox/state?email=E[&note=ID…] answers.
type ControlStateAnswer struct {
	Email       string          `json:"email"`
	Stops       int             `json:"stops"`       // accepted Instantly interest-status updates that stop (not a Raise)
	Raises      int             `json:"raises"`      // accepted updates that raised the label (a Raise); one also stops an active lead
	Blocklisted bool            `json:"blocklisted"` // on the Instantly block list
	Leads       []InstantlyLead `json:"leads"`       // the Instantly leads of the address
	Notes       int             `json:"notes"`       // HubSpot notes associated with the address's contacts
	NoteIDs     map[string]int  `json:"note_ids,omitempty"`
	// NoteOwners is the hubspot_owner_id of the notes asked for ("" for none).
	NoteOwners map[string]string `json:"note_owners,omitempty"`
}

// RoutesOf resolves a route or a dependency name ("instantly") to route names.
func RoutesOf(route string) []string {
	if slices.Contains(Routes, route) {
		return []string{route}
	}
	var out []string
	for _, r := range Routes {
		if strings.HasPrefix(r, route+".") {
			out = append(out, r)
		}
	}
	return out
}

func loopbackOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			writeJSON(w, http.StatusForbidden, map[string]any{"error": "the sandbox control answers loopback clients only"})
			return
		}
		h(w, r)
	}
}

func (s *Server) mountControl(mux *http.ServeMux) {
	mux.HandleFunc("POST "+ControlFaults, loopbackOnly(s.ctlSetFault))
	mux.HandleFunc("DELETE "+ControlFaults, loopbackOnly(func(w http.ResponseWriter, _ *http.Request) {
		s.ClearFaults()
		writeJSON(w, http.StatusOK, map[string]any{"cleared": true})
	}))
	mux.HandleFunc("POST "+ControlLeads, loopbackOnly(s.ctlLeads))
	mux.HandleFunc("GET "+ControlState, loopbackOnly(s.ctlState))
	mux.HandleFunc("POST "+ControlHappened, loopbackOnly(s.ctlHappened))
}

func (s *Server) ctlSetFault(w http.ResponseWriter, r *http.Request) {
	var req ControlFaultRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid JSON body: " + err.Error()})
		return
	}
	routes := RoutesOf(req.Route)
	if len(routes) == 0 {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "unknown route or dependency " + strconvQuote(req.Route)})
		return
	}
	f, err := req.Fault.Fault()
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
		return
	}
	for _, rt := range routes {
		s.SetFault(rt, f)
	}
	writeJSON(w, http.StatusOK, map[string]any{"routes": routes})
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

func (s *Server) ctlLeads(w http.ResponseWriter, r *http.Request) {
	var req ControlLeadsRequest
	if err := readJSON(r, &req); err != nil || req.Campaign == "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "want {\"campaign\": ID, \"emails\": [...]}"})
		return
	}
	s.mu.Lock()
	s.inst.enrol(req.Campaign, req.Emails) // only those not yet leads of the campaign
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"leads": len(req.Emails)})
}

func (s *Server) ctlState(w http.ResponseWriter, r *http.Request) {
	email := strings.ToLower(r.URL.Query().Get("email"))
	if email == "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "email= is required"})
		return
	}
	a := ControlStateAnswer{Email: email, Leads: []InstantlyLead{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.inst.stops {
		switch {
		case !strings.EqualFold(st.Email, email):
		case st.Raise():
			a.Raises++
		default:
			a.Stops++
		}
	}
	a.Blocklisted = s.inst.blocked(email)
	for _, l := range s.inst.leads {
		if strings.EqualFold(l.Email, email) {
			a.Leads = append(a.Leads, *l)
		}
	}
	ids := map[string]bool{}
	for _, c := range s.hubspot.contacts {
		if strings.EqualFold(c.Properties["email"], email) {
			ids[c.ID] = true
		}
	}
	for _, n := range s.hubspot.notes {
		for _, as := range n.Associations {
			if ids[as.ToID] {
				a.Notes++
				break
			}
		}
	}
	if want := r.URL.Query()["note"]; len(want) > 0 {
		a.NoteIDs, a.NoteOwners = map[string]int{}, map[string]string{}
		for _, id := range want {
			a.NoteIDs[id] = 0
		}
		for _, n := range s.hubspot.notes {
			if id := n.Properties[NoteExternalIDProperty]; id != "" {
				if _, ok := a.NoteIDs[id]; ok {
					a.NoteIDs[id]++
					a.NoteOwners[id] = n.Properties["hubspot_owner_id"]
				}
			}
		}
	}
	writeJSON(w, http.StatusOK, a)
}
