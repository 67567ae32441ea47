// Package instantly is a small client for the Instantly API v2: stop a lead's
// sequence in a campaign, label the lead as its reply deserves, block an address
// after an unsubscribe, and read the lead, its campaign and its replies back to
// confirm what happened at the source.
//
// Endpoints (developer.instantly.ai/api-reference; docs/platforms.md says, for each,
// what the reference verifies and what is assumed):
//
//	POST /api/v2/leads/update-interest-status   set a lead's interest (a built-in value, a
//	                                            custom label's interest_status, or null);
//	                                            answered 202, a background job
//	POST /api/v2/leads/list                     leads (campaign, in_campaign, contacts filters;
//	                                            starting_after / next_starting_after pages)
//	GET  /api/v2/leads/{id}                     one lead (status, lt_interest_status, subsequence_id)
//	POST /api/v2/leads/subsequence/remove       take a lead out of a subsequence
//	GET  /api/v2/campaigns                      campaigns (limit, starting_after; numeric status)
//	GET  /api/v2/campaigns/{id}                 one campaign (stop_on_reply, stop_on_auto_reply,
//	                                            stop_for_company)
//	GET  /api/v2/subsequences?parent_campaign=  a campaign's subsequences (conditions.crm_status)
//	GET  /api/v2/lead-labels, POST              custom lead labels (interest_status_label)
//	GET  /api/v2/emails/{id}                    one e-mail of the unibox (a reply: ue_type 2)
//	GET  /api/v2/emails                         e-mails of a lead (lead, email_type=received);
//	                                            20 requests a minute, its own limit
//	GET  /api/v2/block-lists-entries?search=    block list entries; POST adds one (bl_value)
//
// Auth: "Authorization: Bearer <API v2 key>". Rate: 100 requests a second and 6,000 a
// minute per workspace, shared by API v1 and v2 (getting-started/rate-limit); 100 in
// any second is also at most 6,000 in any minute, so one sliding window paces both.
// Instantly has no idempotency key, so every write here is chosen to be naturally
// repeatable (the same interest value twice, a block-list entry looked up first).
package instantly

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"exacto.dev/pkg/platform"
	"exacto.dev/pkg/ratelimit"
)

// DefaultBaseURL is Instantly's API host.
const DefaultBaseURL = "https://api.instantly.ai"

// Rates are Instantly's documented limits per workspace (getting-started/rate-limit):
// 100 requests a second (which also keeps any minute under its 6,000).
var Rates = []ratelimit.Rate{{N: 100, Per: time.Second}}

// EmailListRates are the e-mail listing's own limit: 20 requests a minute (the list
// e-mails reference's description).
var EmailListRates = []ratelimit.Rate{{N: 20, Per: time.Minute}}

// Interest values (a lead's lt_interest_status; update-interest-status's
// interest_value). A custom lead label has its own value, its interest_status.
const (
	OutOfOffice      = 0
	Interested       = 1
	MeetingBooked    = 2
	MeetingCompleted = 3
	Won              = 4 // "Closed" in the older reference
	NotInterested    = -1
	WrongPerson      = -2
	Lost             = -3
	NoShow           = -4
)

// Positive reports whether an interest value is one of the built-in positive ones;
// among them a greater value is further along (Interested < Meeting Booked < Meeting
// Completed < Won).
func Positive(v int) bool { return v >= Interested && v <= Won }

// Lead status values (the lead's read-only status).
const (
	StatusActive       = 1
	StatusPaused       = 2
	StatusCompleted    = 3
	StatusBounced      = -1
	StatusUnsubscribed = -2
	StatusSkipped      = -3
)

// Config configures a Client.
type Config struct {
	BaseURL    string // DefaultBaseURL if empty
	APIKey     string
	HTTPClient *http.Client
	Timeout    time.Duration
	// Limit paces the workspace's requests (nil: none); EmailLimit the e-mail listing's
	// besides (nil: none). See Rates, EmailListRates and pkg/ratelimit.
	Limit, EmailLimit ratelimit.Limiter
}

// Client talks to one Instantly workspace. Safe for concurrent use.
type Client struct {
	h      platform.HTTP
	emails platform.HTTP // the e-mail listing, paced at its own rate too

	mu     sync.Mutex
	labels map[string]LeadLabel // custom labels found or made, by name
	values map[string][]int     // the values of every label listed of a name
	making sync.Mutex           // one EnsureLabel lists and makes at a time
}

// New returns a Client for cfg.
func New(cfg Config) *Client {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	h := platform.HTTP{
		Dependency: "instantly",
		BaseURL:    cfg.BaseURL,
		Client:     cfg.HTTPClient,
		Timeout:    cfg.Timeout,
		Auth:       platform.Bearer(cfg.APIKey),
		ErrMsg:     errMsg,
		Limit:      cfg.Limit,
	}
	emails := h
	// A 429 of the listing is its own limit's (20 a minute): it holds that one only.
	emails.Limit, emails.HoldLimit = ratelimit.All(cfg.Limit, cfg.EmailLimit), cfg.EmailLimit
	return &Client{h: h, emails: emails, labels: map[string]LeadLabel{}, values: map[string][]int{}}
}

func errMsg(body []byte) string {
	var e struct {
		Message string `json:"message"`
		Error   string `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	if e.Message == "" {
		return e.Error
	}
	return e.Message
}

// Lead is an Instantly lead.
type Lead struct {
	ID             string `json:"id"`
	Email          string `json:"email"`
	Campaign       string `json:"campaign"`
	Status         int    `json:"status"`
	InterestStatus *int   `json:"lt_interest_status"`
	// EmailReplyCount and TimestampLastReply are what Instantly counted of the lead's
	// replies (the v2 lead schema's email_reply_count, timestamp_last_reply).
	EmailReplyCount    int    `json:"email_reply_count,omitempty"`
	TimestampLastReply string `json:"timestamp_last_reply,omitempty"`
	// SubsequenceID is the subsequence the lead is in, if any.
	SubsequenceID string `json:"subsequence_id,omitempty"`
	// TimestampLastInterestChange is when its interest value last changed (the v2
	// lead schema's timestamp_last_interest_change): a subsequence it starts is
	// entered by a background job some time after.
	TimestampLastInterestChange string `json:"timestamp_last_interest_change,omitempty"`
}

// maxLeadPages bounds a campaign's lead listing (100 leads a page).
const maxLeadPages = 1000

// CampaignLeads lists every lead of campaignID, page by page (limit 100, following
// next_starting_after until Instantly gives none).
func (c *Client) CampaignLeads(ctx context.Context, campaignID string) ([]Lead, error) {
	if campaignID == "" {
		return nil, errors.New("instantly: empty campaign id")
	}
	req := struct {
		Campaign      string `json:"campaign"`
		Limit         int    `json:"limit"`
		StartingAfter string `json:"starting_after,omitempty"`
	}{Campaign: campaignID, Limit: 100}
	return listAll("lead list", maxLeadPages, func(after string, page *listPage[Lead]) error {
		req.StartingAfter = after
		return c.h.Do(ctx, http.MethodPost, "/api/v2/leads/list", nil, req, page)
	})
}

// listPage is one page of an Instantly listing.
type listPage[T any] struct {
	Items []T    `json:"items"`
	Next  string `json:"next_starting_after"`
}

// listAll pages through an Instantly listing: fetch reads the page after the cursor
// ("" first, then each page's next_starting_after) until a page has no cursor or no
// items, at most pages times.
func listAll[T any](what string, pages int, fetch func(after string, page *listPage[T]) error) ([]T, error) {
	var all []T
	after := ""
	for range pages {
		var page listPage[T]
		if err := fetch(after, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if page.Next == "" || len(page.Items) == 0 {
			return all, nil
		}
		if page.Next == after {
			return nil, &platform.Error{Dependency: "instantly", Msg: what + " cursor did not advance"}
		}
		after = page.Next
	}
	return nil, &platform.Error{Dependency: "instantly", Msg: what + " exceeded the page bound"}
}

// Campaign status values (the v2 campaign schema's status).
const (
	CampaignDraft               = 0
	CampaignActive              = 1
	CampaignPaused              = 2
	CampaignCompleted           = 3
	CampaignRunningSubsequences = 4
	CampaignAccountSuspended    = -99
	CampaignAccountsUnhealthy   = -1
	CampaignBounceProtect       = -2
)

// Campaign is an Instantly campaign: what the listing gives, and the stop settings
// the campaign itself holds (GetCampaign).
type Campaign struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Status int    `json:"status"`
	// StopOnReply: Instantly stops the lead's sequence itself when the lead replies
	// ("Whether to stop the campaign on reply"); StopOnAutoReply likewise for automatic
	// replies; StopForCompany stops every lead of the replier's company (domain).
	StopOnReply     bool `json:"stop_on_reply"`
	StopOnAutoReply bool `json:"stop_on_auto_reply"`
	StopForCompany  bool `json:"stop_for_company"`
}

// Active reports whether the campaign is sending: active, or running its subsequences.
func (c Campaign) Active() bool {
	return c.Status == CampaignActive || c.Status == CampaignRunningSubsequences
}

// maxCampaignPages bounds the campaign listing (100 campaigns a page).
const maxCampaignPages = 100

// Campaigns lists every campaign of the workspace, page by page (limit 100, following
// next_starting_after until Instantly gives none).
func (c *Client) Campaigns(ctx context.Context) ([]Campaign, error) {
	return listAll("campaign list", maxCampaignPages, func(after string, page *listPage[Campaign]) error {
		q := url.Values{"limit": {"100"}}
		if after != "" {
			q.Set("starting_after", after)
		}
		return c.h.Do(ctx, http.MethodGet, "/api/v2/campaigns", q, nil, page)
	})
}

// GetCampaign reads one campaign with its stop settings; a missing one is a permanent
// 404 error.
func (c *Client) GetCampaign(ctx context.Context, id string) (Campaign, error) {
	if id == "" {
		return Campaign{}, errors.New("instantly: empty campaign id")
	}
	var cp Campaign
	err := c.h.Do(ctx, http.MethodGet, "/api/v2/campaigns/"+platform.PathEscape(id), nil, nil, &cp)
	return cp, err
}

// LastReply is when Instantly last saw the lead reply (zero if never or unknown).
func (l Lead) LastReply() time.Time {
	t, _ := time.Parse(time.RFC3339Nano, l.TimestampLastReply)
	return t
}

// SetInterest gives the lead in campaignID an interest value: a built-in one, a custom
// label's interest_status, or nil for "Lead". Instantly runs it as a background job:
// read the lead back to see it. The same value twice leaves the same state.
func (c *Client) SetInterest(ctx context.Context, campaignID, email string, value *int) error {
	if email == "" {
		return errors.New("instantly: empty email")
	}
	req := struct {
		LeadEmail     string `json:"lead_email"`
		InterestValue *int   `json:"interest_value"`
		CampaignID    string `json:"campaign_id,omitempty"`
	}{email, value, campaignID}
	return c.h.Do(ctx, http.MethodPost, "/api/v2/leads/update-interest-status", nil, req, nil)
}

// Interest kinds of a custom lead label (interest_status_label).
const (
	KindPositive = "positive"
	KindNeutral  = "neutral"
	KindNegative = "negative"
)

// LeadLabel is a custom lead label: its name, its kind, and the interest value
// Instantly generated for it.
type LeadLabel struct {
	ID             string `json:"id"`
	Label          string `json:"label"`
	Kind           string `json:"interest_status_label"`
	InterestStatus int    `json:"interest_status"`
	Description    string `json:"description,omitempty"`
}

// maxLabelPages bounds the label listing (100 a page).
const maxLabelPages = 20

// EnsureLabel returns the workspace's custom label named name of kind, creating it
// when there is none. The answer is kept for the client's life: labels are few and
// rarely change (ForgetLabel drops one Instantly no longer has). One caller of the
// client looks and makes at a time; two processes making it at once may both create
// one (the reference documents no uniqueness), so after a create the list is read
// again and every process settles on the same label: the least id of that name.
func (c *Client) EnsureLabel(ctx context.Context, name, kind, description string) (LeadLabel, error) {
	if l, ok := c.keptLabel(name); ok {
		return l, nil
	}
	c.making.Lock()
	defer c.making.Unlock()
	if l, ok := c.keptLabel(name); ok { // made while this caller waited
		return l, nil
	}
	l, found, err := c.findLabel(ctx, name, kind)
	if err != nil {
		return LeadLabel{}, err
	}
	if !found {
		req := map[string]string{"label": name, "interest_status_label": kind, "description": description}
		err := c.h.Do(ctx, http.MethodPost, "/api/v2/lead-labels", nil, req, &l)
		if err != nil && platform.StatusOf(err) != http.StatusConflict && platform.StatusOf(err) != http.StatusBadRequest {
			return LeadLabel{}, err
		}
		// Made (by this call, or by another process: a refused create is read back).
		made := l
		if l, found, err = c.findLabel(ctx, name, kind); err != nil {
			return LeadLabel{}, err
		}
		if !found {
			if made.ID == "" {
				return LeadLabel{}, errors.New("instantly: label " + strconv.Quote(name) + ": the create was refused and no such label is listed")
			}
			l = made // the listing has not caught up with the create
		}
	}
	c.mu.Lock()
	c.labels[name] = l
	c.mu.Unlock()
	return l, nil
}

func (c *Client) keptLabel(name string) (LeadLabel, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.labels[name]
	return l, ok
}

// IsLabel reports whether interest value v is a custom label named name of kind — any
// of them, when several processes made one each — listing the labels again when the
// value is not one known.
func (c *Client) IsLabel(ctx context.Context, name, kind string, v int) (bool, error) {
	c.mu.Lock()
	known := slices.Contains(c.values[name], v)
	c.mu.Unlock()
	if known {
		return true, nil
	}
	if _, _, err := c.findLabel(ctx, name, kind); err != nil {
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Contains(c.values[name], v), nil
}

// findLabel lists the labels named name of kind and returns the one with the least id;
// it keeps the values of them all (IsLabel).
func (c *Client) findLabel(ctx context.Context, name, kind string) (LeadLabel, bool, error) {
	all, err := listAll("lead label list", maxLabelPages, func(after string, page *listPage[LeadLabel]) error {
		q := url.Values{"limit": {"100"}, "search": {name}, "interest_status": {kind}}
		if after != "" {
			q.Set("starting_after", after)
		}
		return c.h.Do(ctx, http.MethodGet, "/api/v2/lead-labels", q, nil, page)
	})
	if err != nil {
		return LeadLabel{}, false, err
	}
	var best LeadLabel
	var values []int
	found := false
	for _, x := range all {
		if x.Label != name || x.Kind != kind {
			continue
		}
		values = append(values, x.InterestStatus)
		if !found || x.ID < best.ID {
			best, found = x, true
		}
	}
	c.mu.Lock()
	c.values[name] = values
	c.mu.Unlock()
	return best, found, nil
}

// ForgetLabel drops what the client kept of the label named name.
func (c *Client) ForgetLabel(name string) {
	c.mu.Lock()
	delete(c.labels, name)
	c.mu.Unlock()
}

// Subsequence status values (the campaign subsequence schema's status).
const SubsequenceActive = 1

// Subsequence is a campaign's follow-up sequence that a lead enters on its own
// conditions: CRMStatus lists the interest values that start it.
type Subsequence struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Status     int    `json:"status"`
	Conditions struct {
		CRMStatus []int `json:"crm_status"`
	} `json:"conditions"`
}

// StartsOn reports whether giving a lead interest value v would start s.
func (s Subsequence) StartsOn(v int) bool {
	if s.Status != SubsequenceActive {
		return false
	}
	for _, x := range s.Conditions.CRMStatus {
		if x == v {
			return true
		}
	}
	return false
}

// Subsequences lists campaignID's subsequences.
func (c *Client) Subsequences(ctx context.Context, campaignID string) ([]Subsequence, error) {
	if campaignID == "" {
		return nil, errors.New("instantly: empty campaign id")
	}
	return listAll("subsequence list", maxCampaignPages, func(after string, page *listPage[Subsequence]) error {
		q := url.Values{"limit": {"100"}, "parent_campaign": {campaignID}}
		if after != "" {
			q.Set("starting_after", after)
		}
		return c.h.Do(ctx, http.MethodGet, "/api/v2/subsequences", q, nil, page)
	})
}

// RemoveFromSubsequence takes lead id out of the subsequence it is in and returns the
// lead as Instantly answers.
func (c *Client) RemoveFromSubsequence(ctx context.Context, id string) (Lead, error) {
	if id == "" {
		return Lead{}, errors.New("instantly: empty lead id")
	}
	var l Lead
	err := c.h.Do(ctx, http.MethodPost, "/api/v2/leads/subsequence/remove", nil, map[string]string{"id": id}, &l)
	return l, err
}

// Blocked reports whether email, or its domain, is on the workspace's block list.
func (c *Client) Blocked(ctx context.Context, email string) (bool, error) {
	email = strings.ToLower(strings.TrimSpace(email))
	if email == "" {
		return false, errors.New("instantly: empty block list value")
	}
	domain := email
	if at := strings.LastIndexByte(email, '@'); at >= 0 {
		domain = email[at+1:]
	}
	var page listPage[struct {
		Value string `json:"bl_value"`
	}]
	if err := c.h.Do(ctx, http.MethodGet, "/api/v2/block-lists-entries", url.Values{"search": {email}, "limit": {"100"}}, nil, &page); err != nil {
		return false, err
	}
	for _, e := range page.Items {
		if v := strings.ToLower(e.Value); v == email || v == domain {
			return true, nil
		}
	}
	return false, nil
}

// Unsubscribe puts email (or a bare domain) on the workspace block list, which stops
// sends to it from every campaign. The reference documents no answer for an entry
// that exists, so the list is read first: blocking twice makes one entry.
func (c *Client) Unsubscribe(ctx context.Context, emailOrDomain string) error {
	blocked, err := c.Blocked(ctx, emailOrDomain)
	if err != nil || blocked {
		return err
	}
	err = c.h.Do(ctx, http.MethodPost, "/api/v2/block-lists-entries", nil,
		map[string]string{"bl_value": strings.ToLower(strings.TrimSpace(emailOrDomain))}, nil)
	if platform.StatusOf(err) == http.StatusConflict { // an entry made meanwhile
		return nil
	}
	return err
}

// FindLead returns the lead with email in campaignID; found is false if none.
func (c *Client) FindLead(ctx context.Context, campaignID, email string) (Lead, bool, error) {
	leads, err := c.FindLeads(ctx, campaignID, email)
	if err != nil || len(leads) == 0 {
		return Lead{}, false, err
	}
	return leads[0], true, nil
}

// FindLeads returns every lead with email in a campaign: campaignID's, or each campaign
// it is in when campaignID is "". A lead only in a lead list has no sequence and is
// left out (in_campaign). The contacts filter makes one page enough.
func (c *Client) FindLeads(ctx context.Context, campaignID, email string) ([]Lead, error) {
	if email == "" {
		return nil, errors.New("instantly: empty email")
	}
	req := struct {
		Campaign   string   `json:"campaign,omitempty"`
		InCampaign bool     `json:"in_campaign,omitempty"`
		Contacts   []string `json:"contacts"`
		Limit      int      `json:"limit"`
	}{campaignID, campaignID == "", []string{email}, 100}
	var resp struct {
		Items []Lead `json:"items"`
	}
	if err := c.h.Do(ctx, http.MethodPost, "/api/v2/leads/list", nil, req, &resp); err != nil {
		return nil, err
	}
	var out []Lead
	for _, l := range resp.Items {
		if strings.EqualFold(l.Email, email) && l.Campaign != "" {
			out = append(out, l)
		}
	}
	return out, nil
}

// GetLead reads a lead by id; a missing one is a permanent 404 error.
func (c *Client) GetLead(ctx context.Context, id string) (Lead, error) {
	var l Lead
	err := c.h.Do(ctx, http.MethodGet, "/api/v2/leads/"+platform.PathEscape(id), nil, nil, &l)
	return l, err
}

// Stopped reports whether l will receive no more steps of its sequence.
func (l Lead) Stopped() bool { return l.Status != StatusActive }

// E-mail types of the unibox (an e-mail's ue_type).
const (
	EmailFromCampaign = 1
	EmailReceived     = 2
	EmailSent         = 3
	EmailScheduled    = 4
)

// Email is one e-mail of the unibox.
type Email struct {
	ID          string `json:"id"`
	MessageID   string `json:"message_id"`
	Timestamp   string `json:"timestamp_email"`
	Subject     string `json:"subject"`
	From        string `json:"from_address_email"`
	Lead        string `json:"lead"`
	LeadID      string `json:"lead_id"`
	CampaignID  string `json:"campaign_id"`
	Type        int    `json:"ue_type"`
	IsAutoReply int    `json:"is_auto_reply"` // 0 or 1
	Body        struct {
		Text string `json:"text"`
		HTML string `json:"html"`
	} `json:"body"`
}

// Received reports whether e is an e-mail the lead sent (a reply), not one of ours.
func (e Email) Received() bool { return e.Type == EmailReceived }

// Time is when the e-mail server dated e (zero if unknown).
func (e Email) Time() time.Time {
	t, _ := time.Parse(time.RFC3339Nano, e.Timestamp)
	return t
}

// GetEmail reads one e-mail of the unibox by its id; a missing one is a permanent 404.
func (c *Client) GetEmail(ctx context.Context, id string) (Email, error) {
	if id == "" {
		return Email{}, errors.New("instantly: empty e-mail id")
	}
	var e Email
	err := c.h.Do(ctx, http.MethodGet, "/api/v2/emails/"+platform.PathEscape(id), nil, nil, &e)
	return e, err
}

// ReceivedEmails lists the newest e-mails lead sent (in campaignID when set), at most
// limit. The listing has its own, tight rate (EmailListRates).
func (c *Client) ReceivedEmails(ctx context.Context, lead, campaignID string, limit int) ([]Email, error) {
	if lead == "" {
		return nil, errors.New("instantly: empty lead")
	}
	q := url.Values{"lead": {lead}, "email_type": {"received"}, "sort_order": {"desc"}, "limit": {strconv.Itoa(max(1, min(limit, 100)))}}
	if campaignID != "" {
		q.Set("campaign_id", campaignID)
	}
	var page listPage[Email]
	if err := c.emails.Do(ctx, http.MethodGet, "/api/v2/emails", q, nil, &page); err != nil {
		return nil, err
	}
	return page.Items, nil
}
