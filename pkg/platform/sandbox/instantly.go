package sandbox

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Instantly routes (names for SetFault and Requests).
const (
	RouteInstantlyInterest  = "instantly.leads.update-interest-status"
	RouteInstantlyBlocklist = "instantly.block-lists-entries.create"
	RouteInstantlyLeadList  = "instantly.leads.list"
	RouteInstantlyLeadGet   = "instantly.leads.get"
)

// Instantly lead status values (the v2 lead schema's "status").
const (
	InstantlyActive       = 1
	InstantlyPaused       = 2
	InstantlyCompleted    = 3
	InstantlyUnsubscribed = -2
)

// InstantlyAutoCampaign is the campaign AutoEnroll puts a lead in when the lookup
// names none.
const InstantlyAutoCampaign = "00000000-0000-4000-8000-5a4db0c0a000"

// InstantlyLead is a lead as the sandbox stores it.
type InstantlyLead struct {
	ID             string `json:"id"`
	Email          string `json:"email"`
	Campaign       string `json:"campaign,omitempty"`
	Status         int    `json:"status"`
	InterestStatus *int   `json:"lt_interest_status"`
	// EmailReplyCount and TimestampLastReply are Instantly's count of the lead's
	// replies and the last one's time (RFC 3339), as the v2 lead schema has them.
	EmailReplyCount    int    `json:"email_reply_count"`
	TimestampLastReply string `json:"timestamp_last_reply,omitempty"`
}

// InstantlyStop is one accepted update-interest-status call.
type InstantlyStop struct {
	Email    string
	Campaign string
	Interest *int
	At       time.Time
}

type instantlyState struct {
	nextID    int
	leads     []*InstantlyLead
	stops     []InstantlyStop
	blocklist []string
}

func (st *instantlyState) init() {}

// AddInstantlyLead seeds an active lead in campaign and returns its id.
func (s *Server) AddInstantlyLead(campaign, email string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inst.add(campaign, email)
}

func (st *instantlyState) add(campaign, email string) string {
	st.nextID++
	id := "00000000-0000-4000-8000-" + leftPad(strconv.Itoa(st.nextID), 12)
	st.leads = append(st.leads, &InstantlyLead{ID: id, Email: strings.ToLower(email), Campaign: campaign, Status: InstantlyActive})
	return id
}

// enrol, for AutoEnroll, adds each of emails that has no lead in campaign (in any
// campaign when campaign is "") as an active lead of campaign (InstantlyAutoCampaign
// when ""). The caller holds s.mu.
func (st *instantlyState) enrol(campaign string, emails []string) {
	for _, e := range emails {
		if e == "" {
			continue
		}
		known := false
		for _, l := range st.leads {
			if strings.EqualFold(l.Email, e) && (campaign == "" || l.Campaign == campaign) {
				known = true
				break
			}
		}
		if !known {
			c := campaign
			if c == "" {
				c = InstantlyAutoCampaign
			}
			st.add(c, e)
		}
	}
}

func leftPad(s string, n int) string { return strings.Repeat("0", max(0, n-len(s))) + s }

// Stops lists the accepted interest-status updates for email.
func (s *Server) Stops(email string) []InstantlyStop {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []InstantlyStop
	for _, st := range s.inst.stops {
		if strings.EqualFold(st.Email, email) {
			out = append(out, st)
		}
	}
	return out
}

// Blocklist returns the Instantly block list entries.
func (s *Server) Blocklist() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.inst.blocklist...)
}

// InstantlyBounced is the v2 lead status of a bounced lead.
const InstantlyBounced = -1

// UpdateInstantlyLead changes a stored lead as Instantly itself would, without any
// webhook (the lead unsubscribed through Instantly's link, replied, bounced);
// false if there is no such lead.
func (s *Server) UpdateInstantlyLead(id string, change func(*InstantlyLead)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.inst.leads {
		if l.ID == id {
			change(l)
			return true
		}
	}
	return false
}

// InstantlyLeadState returns a copy of a stored lead.
func (s *Server) InstantlyLeadState(id string) (InstantlyLead, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.inst.leads {
		if l.ID == id {
			return *l, true
		}
	}
	return InstantlyLead{}, false
}

func (s *Server) instantlyAuth(r *http.Request) bool {
	return r.Header.Get("Authorization") == "Bearer "+s.opts.InstantlyKey
}

func instantlyError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"statusCode": status, "error": http.StatusText(status), "message": msg})
}

func instantlyDeny(w http.ResponseWriter, _ *http.Request) {
	instantlyError(w, http.StatusUnauthorized, "Invalid API key")
}

func (s *Server) mountInstantly(mux *http.ServeMux) {
	a, d := s.instantlyAuth, instantlyDeny
	s.handle(mux, "POST /api/v2/leads/update-interest-status", RouteInstantlyInterest, a, d, s.inInterest)
	s.handle(mux, "POST /api/v2/block-lists-entries", RouteInstantlyBlocklist, a, d, s.inBlock)
	s.handle(mux, "POST /api/v2/leads/list", RouteInstantlyLeadList, a, d, s.inList)
	s.handle(mux, "GET /api/v2/leads/{id}", RouteInstantlyLeadGet, a, d, s.inGet)
}

func (s *Server) inInterest(w http.ResponseWriter, r *http.Request) {
	var req struct {
		LeadEmail     string `json:"lead_email"`
		InterestValue *int   `json:"interest_value"`
		CampaignID    string `json:"campaign_id"`
	}
	if err := readJSON(r, &req); err != nil {
		instantlyError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.LeadEmail == "" {
		instantlyError(w, http.StatusBadRequest, "body/lead_email is required")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inst.stops = append(s.inst.stops, InstantlyStop{Email: req.LeadEmail, Campaign: req.CampaignID, Interest: req.InterestValue, At: time.Now()})
	for _, l := range s.inst.leads {
		if !strings.EqualFold(l.Email, req.LeadEmail) || (req.CampaignID != "" && l.Campaign != req.CampaignID) {
			continue
		}
		l.InterestStatus = req.InterestValue
		// Instantly marks the sequence completed for a lead given an
		// interest status, so no further steps are sent.
		if req.InterestValue != nil && l.Status == InstantlyActive {
			l.Status = InstantlyCompleted
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"message": "Lead interest status update background job submitted"})
}

func (s *Server) inBlock(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Value string `json:"bl_value"`
	}
	if err := readJSON(r, &req); err != nil || req.Value == "" {
		instantlyError(w, http.StatusBadRequest, "body/bl_value is required")
		return
	}
	v := strings.ToLower(req.Value)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.inst.blocklist {
		if b == v {
			// Sandbox choice: a duplicate entry is a conflict, so clients
			// must treat "already blocked" as done.
			instantlyError(w, http.StatusConflict, "Block list entry already exists")
			return
		}
	}
	s.inst.blocklist = append(s.inst.blocklist, v)
	for _, l := range s.inst.leads {
		if l.Email == v {
			l.Status = InstantlyUnsubscribed
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": "bl-" + strconv.Itoa(len(s.inst.blocklist)), "bl_value": v,
		"is_domain": !strings.Contains(v, "@"), "timestamp_created": time.Now().UTC().Format(time.RFC3339),
	})
}

func (s *Server) inList(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Campaign      string   `json:"campaign"`
		Contacts      []string `json:"contacts"`
		Limit         int      `json:"limit"`
		StartingAfter string   `json:"starting_after"`
	}
	if err := readJSON(r, &req); err != nil {
		instantlyError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.Limit <= 0 {
		req.Limit = 100
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.AutoEnroll && len(req.Contacts) > 0 {
		s.inst.enrol(req.Campaign, req.Contacts)
	}
	items := []InstantlyLead{}
	started := req.StartingAfter == ""
	next := ""
	for _, l := range s.inst.leads {
		if !started {
			started = l.ID == req.StartingAfter
			continue
		}
		if req.Campaign != "" && l.Campaign != req.Campaign {
			continue
		}
		if len(req.Contacts) > 0 && !containsFold(req.Contacts, l.Email) {
			continue
		}
		if len(items) == req.Limit {
			next = items[len(items)-1].ID
			break
		}
		items = append(items, *l)
	}
	resp := map[string]any{"items": items}
	if next != "" {
		resp["next_starting_after"] = next
	}
	writeJSON(w, http.StatusOK, resp)
}

func containsFold(list []string, v string) bool {
	for _, x := range list {
		if strings.EqualFold(x, v) {
			return true
		}
	}
	return false
}

func (s *Server) inGet(w http.ResponseWriter, r *http.Request) {
	l, ok := s.InstantlyLeadState(r.PathValue("id"))
	if !ok {
		instantlyError(w, http.StatusNotFound, "Lead not found")
		return
	}
	writeJSON(w, http.StatusOK, l)
}
