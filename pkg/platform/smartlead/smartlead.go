// Package smartlead is a small client for the Smartlead API v1: pause a lead
// in a campaign, unsubscribe it (from one campaign or all), and read its
// campaign status back to confirm state at the source.
//
// Endpoints (help.smartlead.ai/API-Documentation, api.smartlead.ai):
//
//	POST /api/v1/campaigns/{campaign_id}/leads/{lead_id}/pause
//	POST /api/v1/campaigns/{campaign_id}/leads/{lead_id}/unsubscribe
//	POST /api/v1/leads/{lead_id}/unsubscribe        all campaigns
//	GET  /api/v1/leads/?email=…                     lead by email
//	GET  /api/v1/campaigns/{campaign_id}/leads      offset/limit pages
//	GET  /api/v1/campaigns                          every campaign, one answer (no pages)
//
// Auth: the api_key query parameter on every request (kept out of error
// messages by platform.HTTP). Rate limit: 10 requests per 2 seconds.
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

	"golang.org/x/time/rate"

	"exacto.dev/pkg/platform"
)

// DefaultBaseURL is Smartlead's API host.
const DefaultBaseURL = "https://server.smartlead.ai"

// maxPages bounds a campaign-lead scan (100 leads a page).
const maxPages = 100

// Config configures a Client.
type Config struct {
	BaseURL    string // DefaultBaseURL if empty
	APIKey     string
	HTTPClient *http.Client
	Timeout    time.Duration
	// Limit paces requests (nil: none, e.g. against the sandbox); see DefaultLimit.
	Limit *rate.Limiter
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
	}}
}

func errMsg(body []byte) string {
	var e struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	if e.Error != "" {
		return e.Error
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
	Status       string // "STARTED", "INPROGRESS", "PAUSED", "COMPLETED", "STOPPED", "BLOCKED"
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

// CampaignLeadStatus finds leadID among campaignID's leads, paging with
// offset/limit; found is false if it is not in the campaign.
func (c *Client) CampaignLeadStatus(ctx context.Context, campaignID, leadID int64) (CampaignLead, bool, error) {
	var hit CampaignLead
	found := false
	err := c.campaignLeads(ctx, campaignID, func(cl CampaignLead) bool {
		if cl.LeadID == leadID {
			hit, found = cl, true
			return false
		}
		return true
	})
	return hit, found, err
}

// CampaignLeads lists every lead of campaignID with its status in the campaign and
// whether it is unsubscribed, paging with offset/limit.
func (c *Client) CampaignLeads(ctx context.Context, campaignID int64) ([]CampaignLead, error) {
	var all []CampaignLead
	err := c.campaignLeads(ctx, campaignID, func(cl CampaignLead) bool {
		all = append(all, cl)
		return true
	})
	return all, err
}

// campaignLeads calls each with campaignID's leads, page by page, until it returns false.
func (c *Client) campaignLeads(ctx context.Context, campaignID int64, each func(CampaignLead) bool) error {
	const limit = 100
	for page := range maxPages {
		var resp struct {
			Data []struct {
				MapID  int64  `json:"campaign_lead_map_id"`
				Status string `json:"status"`
				Lead   struct {
					ID           int64  `json:"id"`
					Email        string `json:"email"`
					Unsubscribed bool   `json:"is_unsubscribed"`
				} `json:"lead"`
			} `json:"data"`
		}
		q := url.Values{"offset": {strconv.Itoa(page * limit)}, "limit": {strconv.Itoa(limit)}}
		if err := c.h.Do(ctx, http.MethodGet, "/api/v1/campaigns/"+id(campaignID)+"/leads", q, nil, &resp); err != nil {
			return err
		}
		for _, d := range resp.Data {
			if !each(CampaignLead{MapID: d.MapID, LeadID: d.Lead.ID, Email: d.Lead.Email, Status: d.Status, Unsubscribed: d.Lead.Unsubscribed}) {
				return nil
			}
		}
		if len(resp.Data) < limit {
			return nil
		}
	}
	return &platform.Error{Dependency: "smartlead", Msg: "campaign lead scan exceeded " + strconv.Itoa(maxPages) + " pages"}
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

// DefaultLimit is Smartlead's documented rate, 10 requests per 2 seconds.
func DefaultLimit() *rate.Limiter { return rate.NewLimiter(rate.Every(200*time.Millisecond), 10) }
