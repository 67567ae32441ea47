package sandbox

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Smartlead routes (names for SetFault and Requests).
const (
	RouteSmartleadPause          = "smartlead.campaign-lead.pause"
	RouteSmartleadUnsubscribe    = "smartlead.campaign-lead.unsubscribe"
	RouteSmartleadUnsubscribeAll = "smartlead.lead.unsubscribe"
	RouteSmartleadLeadByEmail    = "smartlead.leads.by-email"
	RouteSmartleadCampaignLeads  = "smartlead.campaign.leads"
	RouteSmartleadHistory        = "smartlead.campaign-lead.message-history"
)

// SmartleadAutoCampaign is the campaign AutoEnroll puts a lead met by e-mail in.
const SmartleadAutoCampaign int64 = 900001

// SmartleadLead is a lead in one campaign as the sandbox stores it.
type SmartleadLead struct {
	LeadID       int64
	CampaignID   int64
	MapID        int64
	Email        string
	Status       string // "STARTED", "INPROGRESS", "PAUSED", "COMPLETED", …
	Unsubscribed bool
	// Replied and Bounced are the lead's e-mail status in the campaign; LastEvent its
	// last activity (a send or a reply), what event_time_gt filters on.
	Replied, Bounced bool
	LastEvent        time.Time
	History          []SmartleadMessage
}

// SmartleadMessage is one e-mail of a lead's message history in a campaign.
type SmartleadMessage struct {
	Type      string `json:"type"` // SENT or REPLY
	MessageID string `json:"message_id"`
	StatsID   string `json:"stats_id"`
	Time      string `json:"time"`
	From      string `json:"from"`
	To        string `json:"to"`
	Subject   string `json:"subject"`
	Body      string `json:"email_body"`
}

type smartleadState struct {
	nextID  int64
	leads   map[string]int64 // email → lead id
	members []*SmartleadLead // campaign memberships, in insertion order
	// The memberships by lead and by campaign, each in insertion order.
	byLead     map[int64][]*SmartleadLead
	byCampaign map[int64][]*SmartleadLead
	global     map[int64]bool // unsubscribed from all campaigns
	// auto holds the leads AutoEnroll created: the sandbox cannot know their
	// campaigns, so they join each campaign they are asked about. autoOrder is them
	// in the order made (their ids' order), autoEmail their addresses, and enrolled how
	// many of autoOrder each campaign has been given.
	auto      map[int64]bool
	autoOrder []int64
	autoEmail map[int64]string
	enrolled  map[int64]int
}

func (st *smartleadState) init() {
	st.nextID = 5000
	st.leads = map[string]int64{}
	st.global = map[int64]bool{}
	st.auto = map[int64]bool{}
	st.byLead, st.byCampaign = map[int64][]*SmartleadLead{}, map[int64][]*SmartleadLead{}
	st.autoEmail, st.enrolled = map[int64]string{}, map[int64]int{}
}

// autoCreated notes that AutoEnroll created lead id for email.
func (st *smartleadState) autoCreated(id int64, email string) {
	if !st.auto[id] {
		st.auto[id] = true
		st.autoOrder = append(st.autoOrder, id)
		st.autoEmail[id] = email
	}
}

// AddSmartleadLead seeds email as a started lead of campaignID and returns
// its lead id (the same id across campaigns).
func (s *Server) AddSmartleadLead(campaignID int64, email string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.smart.add(campaignID, email)
}

// AddSmartleadLeads seeds n started leads of campaignID, lead0@domain … lead{n-1}@domain,
// without activity (a large campaign).
func (s *Server) AddSmartleadLeads(campaignID int64, n int, domain string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range n {
		s.smart.add(campaignID, "lead"+strconv.Itoa(i)+"@"+domain)
	}
}

func (st *smartleadState) add(campaignID int64, email string) int64 {
	email = strings.ToLower(email)
	id, ok := st.leads[email]
	if !ok {
		st.nextID++
		id = st.nextID
		st.leads[email] = id
	}
	if m := st.member(campaignID, id); m != nil {
		return id
	}
	st.nextID++
	m := &SmartleadLead{LeadID: id, CampaignID: campaignID, MapID: st.nextID, Email: email, Status: "STARTED"}
	st.members = append(st.members, m)
	st.byLead[id] = append(st.byLead[id], m)
	st.byCampaign[campaignID] = append(st.byCampaign[campaignID], m)
	return id
}

// adopt holds email under the lead id a webhook carries (Smartlead's own id for it),
// so that the event is confirmed by that id; a lead known under another id, or an id
// another lead has, is a contradiction said as such.
func (st *smartleadState) adopt(email string, id int64) error {
	email = strings.ToLower(email)
	if known, ok := st.leads[email]; ok {
		if known != id {
			return fmt.Errorf("sandbox: Smartlead lead %s is lead %d here, not %d as the webhook says", email, known, id)
		}
		return nil
	}
	if _, used := st.byLead[id]; used {
		return fmt.Errorf("sandbox: Smartlead lead %d is another lead here, not %s as the webhook says", id, email)
	}
	st.leads[email] = id
	st.nextID = max(st.nextID, id) // ids made later do not meet it
	return nil
}

// enrolAuto adds every lead AutoEnroll created to campaignID, as a started lead,
// unless it is a member already. The caller holds s.mu.
func (st *smartleadState) enrolAuto(campaignID int64) {
	for _, id := range st.autoOrder[st.enrolled[campaignID]:] { // the ones made since the last time
		if st.member(campaignID, id) == nil {
			st.add(campaignID, st.autoEmail[id])
		}
	}
	st.enrolled[campaignID] = len(st.autoOrder)
}

// SmartleadLeadState returns lead's membership in campaign.
func (s *Server) SmartleadLeadState(campaignID, leadID int64) (SmartleadLead, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.smart.member(campaignID, leadID); m != nil {
		return *m, true
	}
	return SmartleadLead{}, false
}

// SmartleadLeadID is the id of the lead with email (0 if none).
func (s *Server) SmartleadLeadID(email string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.smart.leads[strings.ToLower(email)]
}

// UpdateSmartleadLead changes lead's membership in campaign as Smartlead itself would
// (no webhook); false if there is none.
func (s *Server) UpdateSmartleadLead(campaignID, leadID int64, change func(*SmartleadLead)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.smart.member(campaignID, leadID)
	if m == nil {
		return false
	}
	change(m)
	return true
}

// SmartleadUnsubscribedAll reports whether lead was unsubscribed globally.
func (s *Server) SmartleadUnsubscribedAll(leadID int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.smart.global[leadID]
}

// AddSmartleadReply records a reply of email in campaignID, as Smartlead's message
// history holds it (the lead enrolled when unknown): the e-mail status is_replied and
// the lead's last activity move with it. It returns the lead's id.
func (s *Server) AddSmartleadReply(campaignID int64, email, messageID, text string, at time.Time) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.smart.reply(campaignID, email, messageID, text, at)
}

func (st *smartleadState) reply(campaignID int64, email, messageID, text string, at time.Time) int64 {
	id := st.add(campaignID, email)
	m := st.member(campaignID, id)
	m.History = append(m.History, SmartleadMessage{Type: "REPLY", MessageID: messageID, Time: at.UTC().Format(time.RFC3339Nano),
		From: m.Email, To: "sdr@sandbox.smartlead", Body: text, StatsID: strconv.FormatInt(m.MapID, 10) + "-" + strconv.Itoa(len(m.History))})
	m.Replied = true
	m.LastEvent = maxTime(m.LastEvent, at)
	return id
}

// UnsubscribeSmartleadLead unsubscribes email from every campaign as Smartlead's own
// link does; false if there is no such lead.
func (s *Server) UnsubscribeSmartleadLead(email string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.smart.leads[strings.ToLower(email)]
	if ok {
		s.smart.unsubscribe(id)
	}
	return ok
}

func (st *smartleadState) unsubscribe(id int64) bool {
	found := false
	for _, m := range st.byLead[id] {
		m.Unsubscribed, found = true, true
	}
	if found {
		st.global[id] = true
	}
	return found
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (st *smartleadState) member(campaignID, leadID int64) *SmartleadLead {
	for _, m := range st.byLead[leadID] {
		if m.CampaignID == campaignID {
			return m
		}
	}
	return nil
}

func (s *Server) smartleadAuth(r *http.Request) bool {
	return r.URL.Query().Get("api_key") == s.opts.SmartleadKey
}

func smartleadError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": msg})
}

func smartleadDeny(w http.ResponseWriter, _ *http.Request) {
	smartleadError(w, http.StatusUnauthorized, "Invalid API key")
}

func (s *Server) mountSmartlead(mux *http.ServeMux) {
	a, d := s.smartleadAuth, smartleadDeny
	s.handle(mux, "POST /api/v1/campaigns/{cid}/leads/{lid}/pause", RouteSmartleadPause, a, d, s.slMember(func(m *SmartleadLead) {
		if m.Status != "COMPLETED" {
			m.Status = "PAUSED"
		}
	}))
	s.handle(mux, "POST /api/v1/campaigns/{cid}/leads/{lid}/unsubscribe", RouteSmartleadUnsubscribe, a, d, s.slMember(func(m *SmartleadLead) {
		m.Unsubscribed = true
	}))
	s.handle(mux, "POST /api/v1/leads/{lid}/unsubscribe", RouteSmartleadUnsubscribeAll, a, d, s.slUnsubscribeAll)
	s.handle(mux, "GET /api/v1/leads/{$}", RouteSmartleadLeadByEmail, a, d, s.slByEmail)
	s.handle(mux, "GET /api/v1/campaigns/{cid}/leads", RouteSmartleadCampaignLeads, a, d, s.slCampaignLeads)
	s.handle(mux, "GET /api/v1/campaigns/{cid}/leads/{lid}/message-history", RouteSmartleadHistory, a, d, s.slHistory)
}

func pathInt(r *http.Request, name string) (int64, bool) {
	n, err := strconv.ParseInt(r.PathValue(name), 10, 64)
	return n, err == nil && n > 0
}

// slMember applies change to a campaign membership; repeating it is a no-op.
func (s *Server) slMember(change func(*SmartleadLead)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		m, ok := s.slFind(w, r)
		if !ok {
			return
		}
		change(m)
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "data": "success"})
	}
}

// slFind finds the membership the path names, holding s.mu when ok (the caller
// unlocks); it answers the error itself when not.
func (s *Server) slFind(w http.ResponseWriter, r *http.Request) (*SmartleadLead, bool) {
	cid, ok1 := pathInt(r, "cid")
	lid, ok2 := pathInt(r, "lid")
	if !ok1 || !ok2 {
		smartleadError(w, http.StatusBadRequest, "campaign_id and lead_id must be numbers")
		return nil, false
	}
	s.mu.Lock()
	if s.opts.AutoEnroll && s.smart.auto[lid] {
		s.smart.enrolAuto(cid)
	}
	m := s.smart.member(cid, lid)
	if m == nil {
		s.mu.Unlock()
		smartleadError(w, http.StatusNotFound, "Lead not found in campaign")
		return nil, false
	}
	return m, true
}

func (s *Server) slHistory(w http.ResponseWriter, r *http.Request) {
	m, ok := s.slFind(w, r)
	if !ok {
		return
	}
	history := append([]SmartleadMessage{}, m.History...)
	from, to := "sdr@sandbox.smartlead", m.Email
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"history": history, "from": from, "to": to})
}

func (s *Server) slUnsubscribeAll(w http.ResponseWriter, r *http.Request) {
	lid, ok := pathInt(r, "lid")
	if !ok {
		smartleadError(w, http.StatusBadRequest, "lead_id must be a number")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.smart.global[lid] {
		writeJSON(w, http.StatusOK, map[string]any{"ok": false}) // "No Update" (the reference)
		return
	}
	if !s.smart.unsubscribe(lid) {
		smartleadError(w, http.StatusNotFound, "Lead not found - Invalid lead_id.")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true})
}

func (s *Server) slByEmail(w http.ResponseWriter, r *http.Request) {
	email := strings.ToLower(r.URL.Query().Get("email"))
	if email == "" {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"error": "email is required"})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.smart.leads[email]
	if !ok && s.opts.AutoEnroll {
		id, ok = s.smart.add(SmartleadAutoCampaign, email), true
		s.smart.autoCreated(id, email)
	}
	if !ok {
		writeJSON(w, http.StatusOK, map[string]any{}) // Smartlead answers {} for no lead
		return
	}
	camps := []map[string]any{}
	for _, m := range s.smart.byLead[id] {
		// The reference's lead_campaign_data: no status per campaign.
		camps = append(camps, map[string]any{"campaign_id": m.CampaignID, "campaign_lead_map_id": m.MapID,
			"campaign_name": "Campaign " + strconv.FormatInt(m.CampaignID, 10), "client_id": nil, "lead_category_id": nil})
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": id, "email": email, "is_unsubscribed": s.smart.global[id], "lead_campaign_data": camps,
	})
}

// slCampaignLeads serves a campaign's leads: offset, limit (at most 100), and the
// documented filters status, emailStatus (is_replied, is_bounced, is_unsubscribed,
// not_replied) and event_time_gt (activity after it).
func (s *Server) slCampaignLeads(w http.ResponseWriter, r *http.Request) {
	cid, ok := pathInt(r, "cid")
	if !ok {
		smartleadError(w, http.StatusBadRequest, "campaign_id must be a number")
		return
	}
	q := r.URL.Query()
	offset, _ := strconv.Atoi(q.Get("offset"))
	limit, _ := strconv.Atoi(q.Get("limit"))
	if limit <= 0 || limit > 100 {
		limit = 100
	}
	var after time.Time
	if v := q.Get("event_time_gt"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"error": "event_time_gt must be an ISO 8601 date"})
			return
		}
		after = t
	}
	status, emailStatus := strings.ToUpper(q.Get("status")), q.Get("emailStatus")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.AutoEnroll {
		s.smart.enrolAuto(cid)
	}
	var all []*SmartleadLead
	for _, m := range s.smart.byCampaign[cid] {
		unsub := m.Unsubscribed || s.smart.global[m.LeadID]
		if m.CampaignID != cid || (status != "" && m.Status != status) || (!after.IsZero() && !m.LastEvent.After(after)) {
			continue
		}
		switch emailStatus {
		case "is_replied":
			if !m.Replied {
				continue
			}
		case "not_replied":
			if m.Replied {
				continue
			}
		case "is_bounced":
			if !m.Bounced {
				continue
			}
		case "is_unsubscribed":
			if !unsub {
				continue
			}
		}
		all = append(all, m)
	}
	data := []map[string]any{}
	for i := max(offset, 0); i < len(all) && len(data) < limit; i++ {
		m := all[i]
		data = append(data, map[string]any{
			"campaign_lead_map_id": m.MapID, "status": m.Status,
			"lead": map[string]any{"id": m.LeadID, "email": m.Email, "is_unsubscribed": m.Unsubscribed || s.smart.global[m.LeadID]},
		})
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"total_leads": strconv.Itoa(len(all)), "offset": offset, "limit": limit, "data": data,
	})
}
