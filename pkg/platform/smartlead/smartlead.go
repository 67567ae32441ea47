// Package smartlead is a small client for the Smartlead API v1: pause a lead in a
// campaign, unsubscribe it (from one campaign or all), and read the lead, the
// campaign's leads by the documented filters and the lead's message history, to
// confirm state at the source.
//
// Endpoints (api.smartlead.ai/api-reference; docs/platforms.md says, for each, what the
// reference verifies and what is assumed):
//
//	POST /api/v1/campaigns/{campaign_id}/leads/{lead_id}/pause
//	POST /api/v1/campaigns/{campaign_id}/leads/{lead_id}/unsubscribe
//	POST /api/v1/leads/{lead_id}/unsubscribe        all campaigns
//	GET  /api/v1/leads/?email=…                     lead by e-mail: id, is_unsubscribed,
//	                                                lead_campaign_data (no status per campaign)
//	GET  /api/v1/campaigns/{campaign_id}/leads      offset/limit pages; filters status,
//	                                                emailStatus, event_time_gt
//	GET  /api/v1/campaigns/{campaign_id}/leads/{lead_id}/message-history
//	GET  /api/v1/campaigns                          every campaign, one answer (no pages)
//
// Auth: the api_key query parameter on every request (kept out of error messages by
// platform.HTTP). Rate: per API key, 60 requests a minute and 1,000 an hour
// (guides/rate-limits), 10 every 2 seconds (the help centre): Rates paces all three.
package smartlead

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"exacto.dev/pkg/platform"
	"exacto.dev/pkg/ratelimit"
)

// DefaultBaseURL is Smartlead's API host.
const DefaultBaseURL = "https://server.smartlead.ai"

// maxPages bounds a listing of a whole campaign's leads (100 leads a page).
const maxPages = 100

// Rates are Smartlead's documented limits per API key: the guide's 60 a minute and
// 1,000 an hour, and the help centre's 10 every 2 seconds (the guide's burst is 10 a
// second).
var Rates = []ratelimit.Rate{{N: 10, Per: 2 * time.Second}, {N: 60, Per: time.Minute}, {N: 1000, Per: time.Hour}}

// Config configures a Client.
type Config struct {
	BaseURL    string // DefaultBaseURL if empty
	APIKey     string
	HTTPClient *http.Client
	Timeout    time.Duration
	// Limit paces the key's requests (nil: none); see Rates and pkg/ratelimit.
	Limit ratelimit.Limiter
}

// Client talks to one Smartlead account. Safe for concurrent use.
type Client struct {
	h platform.HTTP
}

// New returns a Client for cfg.
func New(cfg Config) *Client {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	return &Client{h: platform.HTTP{
		Dependency: "smartlead",
		BaseURL:    cfg.BaseURL,
		Client:     cfg.HTTPClient,
		Timeout:    cfg.Timeout,
		Limit:      cfg.Limit,
		Auth:       platform.QueryKey("api_key", cfg.APIKey),
		ErrMsg:     errMsg,
		RetryAfter: retryAfter,
	}}
}

// retryAfter reads a 429's wait where Smartlead's guide puts it besides Retry-After:
// the body's error.retry_after (seconds), else X-RateLimit-Reset (a Unix time).
func retryAfter(h http.Header, body []byte) time.Duration {
	var e struct {
		Error struct {
			RetryAfter float64 `json:"retry_after"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.RetryAfter > 0 {
		return time.Duration(e.Error.RetryAfter * float64(time.Second))
	}
	if reset, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64); err == nil {
		if d := time.Until(time.Unix(reset, 0)); d > 0 && d < time.Hour {
			return d
		}
	}
	return 0
}

// errMsg reads Smartlead's error bodies: {"error": "…"}, {"message": "…"}, or
// {"error": {"code", "message"}} (the rate-limit guide's and authentication's).
func errMsg(body []byte) string {
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	var text string
	if json.Unmarshal(e.Error, &text) == nil && text != "" {
		return text
	}
	var nested struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(e.Error, &nested) == nil && nested.Message != "" {
		return strings.TrimSpace(nested.Code + " " + nested.Message)
	}
	return e.Message
}

func id(n int64) string { return strconv.FormatInt(n, 10) }

// PauseLead pauses the lead's sequence in campaignID. Pausing a paused lead
// is harmless.
func (c *Client) PauseLead(ctx context.Context, campaignID, leadID int64) error {
	return c.h.Do(ctx, http.MethodPost, "/api/v1/campaigns/"+id(campaignID)+"/leads/"+id(leadID)+"/pause", nil, struct{}{}, nil)
}

// UnsubscribeFromCampaign stops all further sends of campaignID to the lead.
func (c *Client) UnsubscribeFromCampaign(ctx context.Context, campaignID, leadID int64) error {
	return c.h.Do(ctx, http.MethodPost, "/api/v1/campaigns/"+id(campaignID)+"/leads/"+id(leadID)+"/unsubscribe", nil, struct{}{}, nil)
}

// Unsubscribe unsubscribes the lead from every campaign, for opt-outs.
func (c *Client) Unsubscribe(ctx context.Context, leadID int64) error {
	return c.h.Do(ctx, http.MethodPost, "/api/v1/leads/"+id(leadID)+"/unsubscribe", nil, struct{}{}, nil)
}

// Lead is a Smartlead lead and the campaigns it belongs to.
type Lead struct {
	ID           int64   `json:"id"`
	Email        string  `json:"email"`
	Unsubscribed bool    `json:"is_unsubscribed"`
	CampaignIDs  []int64 `json:"-"`
}

// LeadByEmail finds a lead; found is false if Smartlead has none.
func (c *Client) LeadByEmail(ctx context.Context, email string) (Lead, bool, error) {
	if email == "" {
		return Lead{}, false, errors.New("smartlead: empty email")
	}
	var resp struct {
		Lead
		Campaigns []struct {
			CampaignID int64 `json:"campaign_id"`
		} `json:"lead_campaign_data"`
	}
	if err := c.h.Do(ctx, http.MethodGet, "/api/v1/leads/", url.Values{"email": {email}}, nil, &resp); err != nil {
		return Lead{}, false, err
	}
	if resp.ID == 0 { // Smartlead answers {} when there is no such lead
		return Lead{}, false, nil
	}
	l := resp.Lead
	for _, cd := range resp.Campaigns {
		l.CampaignIDs = append(l.CampaignIDs, cd.CampaignID)
	}
	return l, true, nil
}

// CampaignLead is a lead's state within one campaign.
type CampaignLead struct {
	MapID        int64
	LeadID       int64
	Email        string
	Status       string // STARTED, INPROGRESS, PAUSED, COMPLETED, STOPPED, BLOCKED (an open set)
	Unsubscribed bool
}

// Stopped reports whether the campaign will send the lead nothing more.
func (cl CampaignLead) Stopped() bool {
	switch strings.ToUpper(cl.Status) {
	case "PAUSED", "COMPLETED", "STOPPED", "BLOCKED":
		return true
	}
	return cl.Unsubscribed
}

// Filter narrows a campaign's lead listing with the documented filters; zero fields
// filter nothing.
type Filter struct {
	Status      string    // status=STARTED|INPROGRESS|COMPLETED|PAUSED|STOPPED
	EmailStatus string    // emailStatus=is_replied|is_bounced|is_unsubscribed|…
	ActiveAfter time.Time // event_time_gt: any activity (sent or reply) after it
}

func (f Filter) query() url.Values {
	q := url.Values{}
	if f.Status != "" {
		q.Set("status", f.Status)
	}
	if f.EmailStatus != "" {
		q.Set("emailStatus", f.EmailStatus)
	}
	if !f.ActiveAfter.IsZero() {
		q.Set("event_time_gt", f.ActiveAfter.UTC().Format("2006-01-02T15:04:05.000Z"))
	}
	return q
}

// CampaignLeads lists every lead of campaignID with its status in the campaign and
// whether it is unsubscribed, paging with offset/limit (at most 100 pages).
func (c *Client) CampaignLeads(ctx context.Context, campaignID int64) ([]CampaignLead, error) {
	var all []CampaignLead
	err := c.campaignLeads(ctx, campaignID, Filter{}, maxPages, func(cl CampaignLead) bool {
		all = append(all, cl)
		return true
	})
	return all, err
}

// FindInCampaign looks for leadID among campaignID's leads that f selects, reading at
// most pages pages: a filter that names the lead's recent activity keeps that to one
// page however large the campaign. found is false when the pages read do not hold it
// (absent, or further than the bound: the caller cannot tell, and must not conclude
// more than "not seen").
func (c *Client) FindInCampaign(ctx context.Context, campaignID, leadID int64, f Filter, pages int) (cl CampaignLead, found bool, err error) {
	err = c.campaignLeads(ctx, campaignID, f, pages, func(x CampaignLead) bool {
		if x.LeadID == leadID {
			cl, found = x, true
			return false
		}
		return true
	})
	if errors.Is(err, errPageBound) {
		err = nil
	}
	return cl, found, err
}

var errPageBound = errors.New("smartlead: campaign lead listing exceeded its page bound")

// campaignLeads calls each with campaignID's leads that f selects, page by page, until
// it returns false or pages pages were read (errPageBound if more remained). Smartlead
// documents two shapes of this answer ({total_leads, data[{…, lead}]} and {total,
// leads[…]}): both are read.
func (c *Client) campaignLeads(ctx context.Context, campaignID int64, f Filter, pages int, each func(CampaignLead) bool) error {
	const limit = 100
	for page := range pages {
		type leadFields struct {
			ID           int64  `json:"id"`
			Email        string `json:"email"`
			Unsubscribed bool   `json:"is_unsubscribed"`
		}
		var resp struct {
			Data []struct {
				MapID  int64      `json:"campaign_lead_map_id"`
				Status string     `json:"status"`
				Lead   leadFields `json:"lead"`
			} `json:"data"`
			Leads []struct {
				leadFields
				Status string `json:"status"`
			} `json:"leads"`
		}
		q := f.query()
		q.Set("offset", strconv.Itoa(page*limit))
		q.Set("limit", strconv.Itoa(limit))
		if err := c.h.Do(ctx, http.MethodGet, "/api/v1/campaigns/"+id(campaignID)+"/leads", q, nil, &resp); err != nil {
			return err
		}
		var got []CampaignLead
		for _, d := range resp.Data {
			got = append(got, CampaignLead{MapID: d.MapID, LeadID: d.Lead.ID, Email: d.Lead.Email, Status: d.Status, Unsubscribed: d.Lead.Unsubscribed})
		}
		for _, d := range resp.Leads {
			got = append(got, CampaignLead{LeadID: d.ID, Email: d.Email, Status: d.Status, Unsubscribed: d.Unsubscribed})
		}
		for _, cl := range got {
			if !each(cl) {
				return nil
			}
		}
		if len(got) < limit {
			return nil
		}
	}
	return errPageBound
}

// Message is one e-mail of a lead's message history in a campaign.
type Message struct {
	Type      string `json:"type"` // SENT or REPLY
	MessageID string `json:"message_id"`
	StatsID   string `json:"stats_id"`
	Time      string `json:"time"`
	From      string `json:"from"`
	To        string `json:"to"`
	Subject   string `json:"subject"`
	Body      string `json:"email_body"`
}

// Reply reports whether m is an e-mail the lead sent. A bounce notice also comes as a
// REPLY, from a mailer daemon: it is no reply.
func (m Message) Reply() bool {
	if !strings.EqualFold(m.Type, "REPLY") {
		return false
	}
	from := strings.ToLower(m.From)
	return !strings.Contains(from, "mailer-daemon") && !strings.Contains(from, "postmaster")
}

// At is the message's time (zero if unknown).
func (m Message) At() time.Time {
	t, _ := time.Parse(time.RFC3339Nano, m.Time)
	return t
}

// MessageHistory reads leadID's e-mails in campaignID, in plain text (history[]; the
// reference's own example names it messages[], read too).
func (c *Client) MessageHistory(ctx context.Context, campaignID, leadID int64) ([]Message, error) {
	var resp struct {
		History  []Message `json:"history"`
		Messages []Message `json:"messages"`
	}
	q := url.Values{"show_plain_text_response": {"true"}}
	if err := c.h.Do(ctx, http.MethodGet, "/api/v1/campaigns/"+id(campaignID)+"/leads/"+id(leadID)+"/message-history", q, nil, &resp); err != nil {
		return nil, err
	}
	return append(resp.History, resp.Messages...), nil
}

// Campaign is a Smartlead campaign, as the campaign listing gives it (the fields the
// reconciler reads).
type Campaign struct {
	ID     int64  `json:"id"`
	Name   string `json:"name"`
	Status string `json:"status"` // DRAFTED, ACTIVE, PAUSED, STOPPED, COMPLETED, ARCHIVED
}

// Active reports whether the campaign is sending.
func (c Campaign) Active() bool { return strings.EqualFold(c.Status, "ACTIVE") }

// Campaigns lists every campaign of the account. Smartlead's reference documents the
// answer as a bare array of campaigns (its example) and also as {"campaigns": [...]}
// (its field list): both are read.
func (c *Client) Campaigns(ctx context.Context) ([]Campaign, error) {
	var raw json.RawMessage
	if err := c.h.Do(ctx, http.MethodGet, "/api/v1/campaigns", nil, nil, &raw); err != nil {
		return nil, err
	}
	var list []Campaign
	if err := json.Unmarshal(raw, &list); err == nil {
		return list, nil
	}
	var wrapped struct {
		Campaigns []Campaign `json:"campaigns"`
		Data      []Campaign `json:"data"`
	}
	if err := json.Unmarshal(raw, &wrapped); err != nil {
		return nil, &platform.Error{Dependency: "smartlead", Msg: "decode campaign list: " + err.Error()}
	}
	return append(wrapped.Campaigns, wrapped.Data...), nil
}
