// Package instantly is a small client for the Instantly API v2: stop a lead's
// sequence in a campaign, block an address after an unsubscribe, and read a
// lead back to confirm its state at the source.
//
// Endpoints (developer.instantly.ai/api-reference):
//
//	POST /api/v2/leads/update-interest-status   lead/update-the-interest-status-of-a-lead
//	POST /api/v2/block-lists-entries            blocklistentry (schema: bl_value)
//	POST /api/v2/leads/list                     list leads (campaign, contacts filters;
//	                                            starting_after / next_starting_after pages)
//	GET  /api/v2/leads/{id}                     get lead
//	GET  /api/v2/campaigns                      list campaigns (limit, starting_after /
//	                                            next_starting_after pages; numeric status)
//
// Auth: "Authorization: Bearer <API v2 key>". Instantly has no idempotency
// key, so every write here is chosen to be naturally repeatable: setting the
// same interest status twice, or blocking an address already blocked, leaves
// the same state.
package instantly

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"exacto.dev/pkg/platform"
)

// DefaultBaseURL is Instantly's API host.
const DefaultBaseURL = "https://api.instantly.ai"

// Interest status values (the lead's lt_interest_status). Giving a lead an
// interest status marks its sequence completed, which stops further steps.
const (
	OutOfOffice      = 0
	Interested       = 1
	MeetingBooked    = 2
	MeetingCompleted = 3
	Won              = 4
	NotInterested    = -1
	WrongPerson      = -2
	Lost             = -3
)

// Lead status values (the lead's status).
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
}

// Client talks to one Instantly workspace. Safe for concurrent use.
type Client struct {
	h platform.HTTP
}

// New returns a Client for cfg.
func New(cfg Config) *Client {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	return &Client{h: platform.HTTP{
		Dependency: "instantly",
		BaseURL:    cfg.BaseURL,
		Client:     cfg.HTTPClient,
		Timeout:    cfg.Timeout,
		Auth:       platform.Bearer(cfg.APIKey),
		ErrMsg:     errMsg,
	}}
}

func errMsg(body []byte) string {
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
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

// Campaign is an Instantly campaign, as the campaign listing gives it (the fields the
// reconciler reads).
type Campaign struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Status int    `json:"status"`
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

// LastReply is when Instantly last saw the lead reply (zero if never or unknown).
func (l Lead) LastReply() time.Time {
	t, _ := time.Parse(time.RFC3339Nano, l.TimestampLastReply)
	return t
}

// StopLead gives the lead in campaignID an interest status (e.g.
// NotInterested, Interested), which completes its sequence so Instantly
// sends no more steps. Instantly runs it as a background job: confirm with
// FindLead/GetLead. Repeating the call is harmless.
func (c *Client) StopLead(ctx context.Context, campaignID, email string, interest int) error {
	if email == "" {
		return errors.New("instantly: empty email")
	}
	req := struct {
		LeadEmail     string `json:"lead_email"`
		InterestValue int    `json:"interest_value"`
		CampaignID    string `json:"campaign_id,omitempty"`
	}{email, interest, campaignID}
	return c.h.Do(ctx, http.MethodPost, "/api/v2/leads/update-interest-status", nil, req, nil)
}

// Unsubscribe adds email (or a bare domain) to the workspace block list, which
// stops sends to it from every campaign. An entry that already exists counts
// as done.
func (c *Client) Unsubscribe(ctx context.Context, emailOrDomain string) error {
	if emailOrDomain == "" {
		return errors.New("instantly: empty block list value")
	}
	err := c.h.Do(ctx, http.MethodPost, "/api/v2/block-lists-entries", nil,
		map[string]string{"bl_value": strings.ToLower(emailOrDomain)}, nil)
	if platform.StatusOf(err) == http.StatusConflict {
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

// FindLeads returns every lead with email: one per campaign it is in (only
// campaignID's when set). The contacts filter makes one page enough.
func (c *Client) FindLeads(ctx context.Context, campaignID, email string) ([]Lead, error) {
	if email == "" {
		return nil, errors.New("instantly: empty email")
	}
	req := struct {
		Campaign string   `json:"campaign,omitempty"`
		Contacts []string `json:"contacts"`
		Limit    int      `json:"limit"`
	}{campaignID, []string{email}, 100}
	var resp struct {
		Items []Lead `json:"items"`
	}
	if err := c.h.Do(ctx, http.MethodPost, "/api/v2/leads/list", nil, req, &resp); err != nil {
		return nil, err
	}
	var out []Lead
	for _, l := range resp.Items {
		if strings.EqualFold(l.Email, email) {
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
