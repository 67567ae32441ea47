package sandbox

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Instantly routes (names for SetFault and Requests).
const (
	RouteInstantlyInterest     = "instantly.leads.update-interest-status"
	RouteInstantlyBlocklist    = "instantly.block-lists-entries.create"
	RouteInstantlyBlocklistGet = "instantly.block-lists-entries.list"
	RouteInstantlyLeadList     = "instantly.leads.list"
	RouteInstantlyLeadGet      = "instantly.leads.get"
	RouteInstantlyCampaignGet  = "instantly.campaigns.get"
	RouteInstantlyLabelList    = "instantly.lead-labels.list"
	RouteInstantlyLabelCreate  = "instantly.lead-labels.create"
	RouteInstantlySubsequences = "instantly.subsequences.list"
	RouteInstantlySubseqRemove = "instantly.leads.subsequence-remove"
	RouteInstantlyEmailGet     = "instantly.emails.get"
	RouteInstantlyEmailList    = "instantly.emails.list"
)

// Instantly lead status values (the v2 lead schema's "status").
const (
	InstantlyActive       = 1
	InstantlyPaused       = 2
	InstantlyCompleted    = 3
	InstantlyBounced      = -1
	InstantlyUnsubscribed = -2
)

// instantlyInterests are the built-in interest values (lt_interest_status).
var instantlyInterests = []int{0, 1, 2, 3, 4, -1, -2, -3, -4}

// InstantlyAutoCampaign is the campaign AutoEnroll puts a lead in when the lookup
// names none.
const InstantlyAutoCampaign = "00000000-0000-4000-8000-5a4db0c0a000"

// InstantlyLead is a lead as the sandbox stores it.
type InstantlyLead struct {
	ID             string `json:"id"`
	Email          string `json:"email"`
	Campaign       string `json:"campaign,omitempty"`
	ListID         string `json:"list_id,omitempty"`
	Status         int    `json:"status"`
	InterestStatus *int   `json:"lt_interest_status"`
	// EmailReplyCount and TimestampLastReply are Instantly's count of the lead's
	// replies and the last one's time (RFC 3339), as the v2 lead schema has them.
	EmailReplyCount    int    `json:"email_reply_count"`
	TimestampLastReply string `json:"timestamp_last_reply,omitempty"`
	// SubsequenceID is the subsequence the lead is in, since SubsequenceSince.
	SubsequenceID    string    `json:"subsequence_id,omitempty"`
	SubsequenceSince time.Time `json:"-"`
	// TimestampLastInterestChange is when its interest value last changed (RFC 3339).
	TimestampLastInterestChange string `json:"timestamp_last_interest_change,omitempty"`
	// enrolIn is the subsequence Instantly's background job will put the lead in at
	// enrolAt: the value that starts it was given, the job has not run yet.
	enrolIn string
	enrolAt time.Time
}

// InstantlyStop is one accepted update-interest-status call.
type InstantlyStop struct {
	Email    string
	Campaign string
	Interest *int
	At       time.Time
}

// Raise reports whether the update gave a built-in positive value (Interested,
// Meeting Booked, Meeting Completed, Won): the label a reply's classification earns,
// not the stop of its sequence.
func (st InstantlyStop) Raise() bool {
	return st.Interest != nil && *st.Interest >= 1 && *st.Interest <= 4
}

// InstantlyLabel is a custom lead label.
type InstantlyLabel struct {
	ID             string `json:"id"`
	Label          string `json:"label"`
	Kind           string `json:"interest_status_label"`
	InterestStatus int    `json:"interest_status"`
	Description    string `json:"description,omitempty"`
}

// InstantlySubsequence is a campaign's subsequence: a lead given one of CRMStatus
// enters it, and is sent its first step FirstStep after (unless taken out before).
type InstantlySubsequence struct {
	ID             string `json:"id"`
	ParentCampaign string `json:"parent_campaign"`
	Name           string `json:"name"`
	Status         int    `json:"status"`
	Conditions     struct {
		CRMStatus []int `json:"crm_status"`
	} `json:"conditions"`
	FirstStep time.Duration `json:"-"`
}

// InstantlyEmail is an e-mail of the unibox.
type InstantlyEmail struct {
	ID          string `json:"id"`
	MessageID   string `json:"message_id,omitempty"`
	Timestamp   string `json:"timestamp_email"`
	Subject     string `json:"subject,omitempty"`
	From        string `json:"from_address_email"`
	Lead        string `json:"lead"`
	LeadID      string `json:"lead_id,omitempty"`
	CampaignID  string `json:"campaign_id,omitempty"`
	Type        int    `json:"ue_type"`
	IsAutoReply int    `json:"is_auto_reply"`
	Body        struct {
		Text string `json:"text"`
		HTML string `json:"html,omitempty"`
	} `json:"body"`
}

type blockEntry struct {
	ID      string `json:"id"`
	Value   string `json:"bl_value"`
	Domain  bool   `json:"is_domain"`
	Created string `json:"timestamp_created"`
}

type instantlyState struct {
	nextID int
	leads  []*InstantlyLead // in the order they were added: their ids' order too
	// The indexes of leads and e-mails: a sandbox holding the leads of a campaign burst
	// (tens of thousands) answers each call without reading them all.
	byID         map[string]*InstantlyLead
	byEmail      map[string][]*InstantlyLead // by lower-cased address, in order added
	campaigns    map[string]bool             // campaigns some lead is in
	emailByID    map[string]*InstantlyEmail
	emailsByLead map[string][]*InstantlyEmail // by lower-cased address, oldest first
	// watched are the leads that may be due a subsequence step: given a value that
	// enrols them, or in a subsequence and not sent its step yet.
	watched      []*InstantlyLead
	stops        []InstantlyStop
	blocklist    []blockEntry
	labels       []*InstantlyLabel
	subsequences []*InstantlySubsequence
	emails       []*InstantlyEmail
	// subsequenceSends are the subsequence steps sent: a lead left in a subsequence
	// past its first step's delay (counted when the sandbox is next asked).
	subsequenceSends []string
	sent             map[string]bool // subsequenceSends, by lead id
	// labelsKeepActive makes an interest status leave an active lead active: the v2
	// reference does not say a status completes the sequence (only v1 does).
	labelsKeepActive bool
	// jobDelay is how long after an interest value is given the background job that
	// enrols the lead in a subsequence starting on it runs.
	jobDelay time.Duration
}

func (st *instantlyState) init() {
	st.jobDelay = DefaultInstantlyJobDelay
	st.byID, st.byEmail, st.campaigns = map[string]*InstantlyLead{}, map[string][]*InstantlyLead{}, map[string]bool{}
	st.emailByID, st.emailsByLead, st.sent = map[string]*InstantlyEmail{}, map[string][]*InstantlyEmail{}, map[string]bool{}
}

// DefaultInstantlyJobDelay is how long the sandbox's Instantly takes to run the
// background job that enrols a lead in a subsequence after its interest value changed
// (the reference says the update is a background job, not how long it takes).
const DefaultInstantlyJobDelay = 300 * time.Millisecond

// SetInstantlyJobDelay sets how long the enrolment job takes (0: at once).
func (s *Server) SetInstantlyJobDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inst.jobDelay = d
}

func (st *instantlyState) id() string {
	st.nextID++
	return "00000000-0000-4000-8000-" + leftPad(strconv.Itoa(st.nextID), 12)
}

// AddInstantlyLead seeds an active lead in campaign and returns its id.
func (s *Server) AddInstantlyLead(campaign, email string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inst.add(campaign, email)
}

// AddInstantlyListLead seeds a lead that is only in lead list listID (no campaign, so
// no sequence) and returns its id.
func (s *Server) AddInstantlyListLead(listID, email string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.inst.add("", email)
	s.inst.lead(id).ListID = listID
	return id
}

func (st *instantlyState) add(campaign, email string) string {
	l := &InstantlyLead{ID: st.id(), Email: strings.ToLower(email), Campaign: campaign, Status: InstantlyActive}
	st.leads = append(st.leads, l)
	st.byID[l.ID] = l
	st.byEmail[l.Email] = append(st.byEmail[l.Email], l)
	st.campaigns[campaign] = true
	return l.ID
}

func (st *instantlyState) lead(id string) *InstantlyLead { return st.byID[id] }

// leadsOf are email's leads (any case), in the order they were added.
func (st *instantlyState) leadsOf(email string) []*InstantlyLead {
	return st.byEmail[strings.ToLower(email)]
}

// leadIn is email's lead in campaign, nil if none.
func (st *instantlyState) leadIn(campaign, email string) *InstantlyLead {
	for _, l := range st.leadsOf(email) {
		if l.Campaign == campaign {
			return l
		}
	}
	return nil
}

// watch makes sendSubsequences look at l: it was given a value that may enrol it, or
// put in a subsequence.
func (st *instantlyState) watch(l *InstantlyLead) {
	if !slices.Contains(st.watched, l) {
		st.watched = append(st.watched, l)
	}
}

// enrol, for AutoEnroll, adds each of emails that has no lead in campaign (in any
// campaign when campaign is "") as an active lead of campaign (InstantlyAutoCampaign
// when ""). The caller holds s.mu.
func (st *instantlyState) enrol(campaign string, emails []string) {
	for _, e := range emails {
		if e == "" {
			continue
		}
		known := slices.ContainsFunc(st.leadsOf(e), func(l *InstantlyLead) bool { return campaign == "" || l.Campaign == campaign })
		if !known {
			st.add(cmpOr(campaign, InstantlyAutoCampaign), e)
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func leftPad(s string, n int) string { return strings.Repeat("0", max(0, n-len(s))) + s }

// Stops lists the accepted interest-status updates for email that stop a sequence
// (every one but a Raise).
func (s *Server) Stops(email string) []InstantlyStop {
	return s.interestUpdates(email, func(st InstantlyStop) bool { return !st.Raise() })
}

// Raises lists the accepted interest-status updates for email that raised its label
// to a positive value.
func (s *Server) Raises(email string) []InstantlyStop {
	return s.interestUpdates(email, InstantlyStop.Raise)
}

func (s *Server) interestUpdates(email string, keep func(InstantlyStop) bool) []InstantlyStop {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []InstantlyStop
	for _, st := range s.inst.stops {
		if strings.EqualFold(st.Email, email) && keep(st) {
			out = append(out, st)
		}
	}
	return out
}

// Blocklist returns the Instantly block list entries' values, one per entry.
func (s *Server) Blocklist() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.inst.blocklist))
	for i, e := range s.inst.blocklist {
		out[i] = e.Value
	}
	return out
}

func (st *instantlyState) blocked(email string) bool {
	domain := email[strings.LastIndexByte(email, '@')+1:]
	return slices.ContainsFunc(st.blocklist, func(e blockEntry) bool { return e.Value == email || e.Value == domain })
}

// UpdateInstantlyLead changes a stored lead as Instantly itself would, without any
// webhook (the lead unsubscribed through Instantly's link, replied, bounced);
// false if there is no such lead.
func (s *Server) UpdateInstantlyLead(id string, change func(*InstantlyLead)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.inst.lead(id); l != nil {
		change(l)
		s.inst.watch(l) // the change may have put it in a subsequence
		return true
	}
	return false
}

// InstantlyLeadState returns a copy of a stored lead.
func (s *Server) InstantlyLeadState(id string) (InstantlyLead, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.inst.lead(id); l != nil {
		return *l, true
	}
	return InstantlyLead{}, false
}

// SetInstantlyCampaign seeds (or replaces) a campaign with its stop settings: with
// stopOnReply, Instantly stops a lead's sequence itself when the lead replies.
func (s *Server) SetInstantlyCampaign(id string, stopOnReply, stopOnAutoReply bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.instantlyCampaign(id)
	if c == nil {
		c = &InstantlyCampaign{ID: id, Name: id, Status: 1}
		s.listing.instantly = append(s.listing.instantly, c)
	}
	c.StopOnReply, c.StopOnAutoReply = stopOnReply, stopOnAutoReply
}

func (s *Server) instantlyCampaign(id string) *InstantlyCampaign {
	for _, c := range s.listing.instantly {
		if c.ID == id {
			return c
		}
	}
	return nil
}

// AddInstantlySubsequence seeds an active subsequence of campaign that a lead enters
// when given one of crmStatus, and is sent its first step firstStep later; it returns
// its id.
func (s *Server) AddInstantlySubsequence(campaign string, firstStep time.Duration, crmStatus ...int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub := &InstantlySubsequence{ID: s.inst.id(), ParentCampaign: campaign, Name: "Follow-up", Status: 1, FirstStep: firstStep}
	sub.Conditions.CRMStatus = crmStatus
	s.inst.subsequences = append(s.inst.subsequences, sub)
	return sub.ID
}

// InstantlySubsequenceSends lists the leads that were sent a subsequence step (left in
// a subsequence past its first step's delay), by lead id.
func (s *Server) InstantlySubsequenceSends() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inst.sendSubsequences(time.Now())
	return slices.Clone(s.inst.subsequenceSends)
}

// sendSubsequences runs the enrolment jobs that are due, then sends the first step of
// every subsequence whose delay has passed.
func (st *instantlyState) sendSubsequences(now time.Time) {
	for _, l := range st.watched {
		if l.enrolIn != "" && !now.Before(l.enrolAt) {
			l.SubsequenceID, l.SubsequenceSince, l.Status = l.enrolIn, l.enrolAt, InstantlyActive
			l.enrolIn, l.enrolAt = "", time.Time{}
		}
	}
	for _, l := range st.watched {
		if l.SubsequenceID == "" {
			continue
		}
		for _, sub := range st.subsequences {
			if sub.ID == l.SubsequenceID && !now.Before(l.SubsequenceSince.Add(sub.FirstStep)) && !st.sent[l.ID] {
				st.subsequenceSends = append(st.subsequenceSends, l.ID)
				st.sent[l.ID] = true
			}
		}
	}
	// A lead neither waiting for the job nor in a subsequence whose step is still to
	// come needs no more looking at (until it is given a value again).
	st.watched = slices.DeleteFunc(st.watched, func(l *InstantlyLead) bool {
		return l.enrolIn == "" && (l.SubsequenceID == "" || st.sent[l.ID])
	})
}

// SetInstantlyLabelsKeepActive makes interest statuses leave active leads active (the
// v2 reference never says they complete a sequence): a stop can then not be confirmed.
func (s *Server) SetInstantlyLabelsKeepActive(keep bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inst.labelsKeepActive = keep
}

// InstantlyLabels returns the workspace's custom lead labels.
func (s *Server) InstantlyLabels() []InstantlyLabel {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]InstantlyLabel, len(s.inst.labels))
	for i, l := range s.inst.labels {
		out[i] = *l
	}
	return out
}

// AddInstantlyReply records an e-mail lead sent in campaign (a reply, or an automatic
// one), as Instantly's unibox holds it, counts it on the lead (enrolled when unknown),
// and stops the lead's sequence when the campaign says so; it returns the e-mail's id.
func (s *Server) AddInstantlyReply(campaign, lead, emailID, text string, auto bool, at time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inst.reply(s.instantlyCampaign(campaign), campaign, lead, emailID, text, auto, at)
}

func (st *instantlyState) reply(c *InstantlyCampaign, campaign, lead, emailID, text string, auto bool, at time.Time) string {
	lead = strings.ToLower(lead)
	l := st.leadIn(campaign, lead)
	if l == nil {
		l = st.lead(st.add(campaign, lead))
	}
	if emailID == "" {
		emailID = st.id()
	}
	e := &InstantlyEmail{ID: emailID, Timestamp: at.UTC().Format(time.RFC3339Nano), From: lead, Lead: lead, LeadID: l.ID,
		CampaignID: campaign, Type: 2, MessageID: "<" + emailID + "@sandbox.instantly>"}
	if auto {
		e.IsAutoReply = 1
	}
	e.Body.Text = text
	st.emails = append(st.emails, e)
	if st.emailByID[e.ID] == nil { // the first of an id, as a listing finds it
		st.emailByID[e.ID] = e
	}
	st.emailsByLead[lead] = append(st.emailsByLead[lead], e)
	l.EmailReplyCount++
	l.TimestampLastReply = e.Timestamp
	if c != nil && l.Status == InstantlyActive && ((c.StopOnReply && !auto) || (c.StopOnAutoReply && auto)) {
		l.Status = InstantlyCompleted
	}
	return emailID
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
	s.handle(mux, "GET /api/v2/block-lists-entries", RouteInstantlyBlocklistGet, a, d, s.inBlocklist)
	s.handle(mux, "POST /api/v2/leads/list", RouteInstantlyLeadList, a, d, s.inList)
	s.handle(mux, "GET /api/v2/leads/{id}", RouteInstantlyLeadGet, a, d, s.inGet)
	s.handle(mux, "GET /api/v2/campaigns/{id}", RouteInstantlyCampaignGet, a, d, s.inCampaign)
	s.handle(mux, "GET /api/v2/lead-labels", RouteInstantlyLabelList, a, d, s.inLabels)
	s.handle(mux, "POST /api/v2/lead-labels", RouteInstantlyLabelCreate, a, d, s.inLabelCreate)
	s.handle(mux, "GET /api/v2/subsequences", RouteInstantlySubsequences, a, d, s.inSubsequences)
	s.handle(mux, "POST /api/v2/leads/subsequence/remove", RouteInstantlySubseqRemove, a, d, s.inSubsequenceRemove)
	s.handle(mux, "GET /api/v2/emails/{id}", RouteInstantlyEmailGet, a, d, s.inEmail)
	s.handle(mux, "GET /api/v2/emails", RouteInstantlyEmailList, a, d, s.inEmails)
}

// knownInterest reports whether v is a built-in interest value or a custom label's.
func (st *instantlyState) knownInterest(v int) bool {
	return slices.Contains(instantlyInterests, v) ||
		slices.ContainsFunc(st.labels, func(l *InstantlyLabel) bool { return l.InterestStatus == v })
}

// inInterest serves update-interest-status: the lead (in campaign_id, else every lead
// of the address) gets the value; an active lead's sequence is completed (the v1
// reference's behaviour, assumed for v2; SetInstantlyLabelsKeepActive turns it off);
// and a lead given a value an active subsequence of its campaign starts on enters that
// subsequence — active again, to be sent its steps — when the background job runs,
// the job delay later (its timestamp_last_interest_change says when the value changed).
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
	if v := req.InterestValue; v != nil && !s.inst.knownInterest(*v) {
		instantlyError(w, http.StatusBadRequest, "Invalid interest value")
		return
	}
	now := time.Now()
	s.inst.stops = append(s.inst.stops, InstantlyStop{Email: req.LeadEmail, Campaign: req.CampaignID, Interest: req.InterestValue, At: now})
	for _, l := range s.inst.leadsOf(req.LeadEmail) {
		if req.CampaignID != "" && l.Campaign != req.CampaignID {
			continue
		}
		l.InterestStatus = req.InterestValue
		l.TimestampLastInterestChange = now.UTC().Format(time.RFC3339Nano)
		l.enrolIn, l.enrolAt = "", time.Time{}
		if req.InterestValue == nil {
			continue
		}
		if l.Status == InstantlyActive && !s.inst.labelsKeepActive {
			l.Status = InstantlyCompleted
		}
		for _, sub := range s.inst.subsequences {
			if sub.ParentCampaign == l.Campaign && sub.Status == 1 && slices.Contains(sub.Conditions.CRMStatus, *req.InterestValue) {
				l.enrolIn, l.enrolAt = sub.ID, now.Add(s.inst.jobDelay)
				s.inst.watch(l)
			}
		}
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"message": "Lead interest status update background job submitted"})
}

// inBlock serves the block-list create. The reference documents no answer for a value
// already listed: the sandbox adds a second entry, the worst a client can meet, so a
// client must look before it writes.
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
	e := blockEntry{ID: "bl-" + strconv.Itoa(len(s.inst.blocklist)+1), Value: v, Domain: !strings.Contains(v, "@"),
		Created: time.Now().UTC().Format(time.RFC3339)}
	s.inst.blocklist = append(s.inst.blocklist, e)
	leads := s.inst.leadsOf(v) // an address's own leads; a domain's are every lead's to read
	if e.Domain {
		leads = s.inst.leads
	}
	for _, l := range leads {
		if l.Email == v || strings.HasSuffix(l.Email, "@"+v) {
			l.Status = InstantlyUnsubscribed
		}
	}
	writeJSON(w, http.StatusOK, e)
}

// inBlocklist serves the block-list listing: search matches an entry that is the
// searched value or contains it, or the domain of a searched address.
func (s *Server) inBlocklist(w http.ResponseWriter, r *http.Request) {
	search := strings.ToLower(r.URL.Query().Get("search"))
	domain := search[strings.LastIndexByte(search, '@')+1:]
	s.mu.Lock()
	defer s.mu.Unlock()
	items := []blockEntry{}
	for _, e := range s.inst.blocklist {
		if search == "" || strings.Contains(e.Value, search) || e.Value == domain {
			items = append(items, e)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
}

func (s *Server) inList(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Campaign      string   `json:"campaign"`
		InCampaign    bool     `json:"in_campaign"`
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
	s.inst.sendSubsequences(time.Now())
	if s.opts.AutoEnroll && len(req.Contacts) > 0 {
		s.inst.enrol(req.Campaign, req.Contacts)
	}
	items := []InstantlyLead{}
	started := req.StartingAfter == ""
	next := ""
	leads := s.inst.leads
	if len(req.Contacts) > 0 { // only theirs, still in the order added (ids' order)
		leads = nil
		for _, c := range req.Contacts {
			leads = append(leads, s.inst.leadsOf(c)...)
		}
		slices.SortFunc(leads, func(a, b *InstantlyLead) int { return strings.Compare(a.ID, b.ID) })
		leads = slices.Compact(leads)
		if !started { // those after the cursor, which may be any lead; none after an unknown one
			cursor := s.inst.lead(req.StartingAfter)
			leads = slices.DeleteFunc(leads, func(l *InstantlyLead) bool { return cursor == nil || l.ID <= cursor.ID })
			started = true
		}
	}
	for _, l := range leads {
		if !started {
			started = l.ID == req.StartingAfter
			continue
		}
		if (req.Campaign != "" && l.Campaign != req.Campaign) || (req.InCampaign && l.Campaign == "") {
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
	return slices.ContainsFunc(list, func(x string) bool { return strings.EqualFold(x, v) })
}

func (s *Server) inGet(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inst.sendSubsequences(time.Now())
	l := s.inst.lead(r.PathValue("id"))
	if l == nil {
		instantlyError(w, http.StatusNotFound, "Lead not found")
		return
	}
	writeJSON(w, http.StatusOK, l)
}

// inCampaign serves GET /api/v2/campaigns/{id}: a seeded campaign with its settings,
// or, for a campaign only known by its leads (AutoEnroll's), an active one that does
// not stop on replies.
func (s *Server) inCampaign(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.instantlyCampaign(id); c != nil {
		writeJSON(w, http.StatusOK, c)
		return
	}
	if id != "" && s.inst.campaigns[id] {
		writeJSON(w, http.StatusOK, InstantlyCampaign{ID: id, Name: id, Status: 1})
		return
	}
	instantlyError(w, http.StatusNotFound, "Campaign not found")
}

func (s *Server) inLabels(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	search, kind := strings.ToLower(q.Get("search")), q.Get("interest_status")
	s.mu.Lock()
	defer s.mu.Unlock()
	items := []InstantlyLabel{}
	for _, l := range s.inst.labels {
		if (search == "" || strings.Contains(strings.ToLower(l.Label), search)) && (kind == "" || l.Kind == kind) {
			items = append(items, *l)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
}

// firstCustomInterest is the first value the sandbox gives a custom label (Instantly
// generates them; the reference bounds subsequence conditions at ±30,000).
const firstCustomInterest = 10001

func (s *Server) inLabelCreate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Label       string `json:"label"`
		Kind        string `json:"interest_status_label"`
		Description string `json:"description"`
	}
	if err := readJSON(r, &req); err != nil || req.Label == "" {
		instantlyError(w, http.StatusBadRequest, "body/label is required")
		return
	}
	if !slices.Contains([]string{"positive", "negative", "neutral"}, req.Kind) {
		instantlyError(w, http.StatusBadRequest, "body/interest_status_label must be equal to one of the allowed values")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l := &InstantlyLabel{ID: s.inst.id(), Label: req.Label, Kind: req.Kind, Description: req.Description,
		InterestStatus: firstCustomInterest + len(s.inst.labels)}
	s.inst.labels = append(s.inst.labels, l)
	writeJSON(w, http.StatusOK, l)
}

func (s *Server) inSubsequences(w http.ResponseWriter, r *http.Request) {
	parent := r.URL.Query().Get("parent_campaign")
	s.mu.Lock()
	defer s.mu.Unlock()
	items := []InstantlySubsequence{}
	for _, sub := range s.inst.subsequences {
		if parent == "" || sub.ParentCampaign == parent {
			items = append(items, *sub)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
}

// inSubsequenceRemove takes a lead out of its subsequence; the sequence it was
// completed in stays completed.
func (s *Server) inSubsequenceRemove(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ID string `json:"id"`
	}
	if err := readJSON(r, &req); err != nil || req.ID == "" {
		instantlyError(w, http.StatusBadRequest, "body/id is required")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inst.sendSubsequences(time.Now())
	l := s.inst.lead(req.ID)
	if l == nil {
		instantlyError(w, http.StatusNotFound, "Lead not found")
		return
	}
	if l.SubsequenceID != "" {
		l.SubsequenceID, l.SubsequenceSince = "", time.Time{}
		if l.Status == InstantlyActive {
			l.Status = InstantlyCompleted
		}
	}
	writeJSON(w, http.StatusOK, l)
}

func (s *Server) inEmail(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.inst.emailByID[r.PathValue("id")]; e != nil {
		writeJSON(w, http.StatusOK, e)
		return
	}
	instantlyError(w, http.StatusNotFound, "Email not found")
}

// inEmails serves the e-mail listing: lead, campaign_id, email_type=received, newest
// first, limit.
func (s *Server) inEmails(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := strconv.Atoi(cmpOr(q.Get("limit"), "10"))
	if err != nil || limit < 1 || limit > 100 {
		instantlyError(w, http.StatusBadRequest, "querystring/limit must be between 1 and 100")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	items := []InstantlyEmail{}
	emails := s.inst.emails
	if lead := q.Get("lead"); lead != "" {
		emails = s.inst.emailsByLead[strings.ToLower(lead)]
	}
	for i := len(emails) - 1; i >= 0 && len(items) < limit; i-- {
		e := emails[i]
		if (q.Get("lead") != "" && !strings.EqualFold(e.Lead, q.Get("lead"))) ||
			(q.Get("campaign_id") != "" && e.CampaignID != q.Get("campaign_id")) ||
			(q.Get("email_type") == "received" && e.Type != 2) {
			continue
		}
		items = append(items, *e)
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
}
