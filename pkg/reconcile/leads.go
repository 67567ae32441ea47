package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/lifecycle"
	"exacto.dev/pkg/platform/instantly"
	"exacto.dev/pkg/platform/smartlead"
	"exacto.dev/pkg/projection"
)

// lead is one lead of one campaign at a sending platform, as the checks compare it.
type lead struct {
	Provider     string
	Campaign     string
	ID           string
	Email        string // normalised
	Active       bool   // the platform will still send it steps
	Unsubscribed bool
	Bounced      bool
	Replies      int
	LastReply    time.Time
	Interest     *int
	Raw          any // the platform's record, kept as the repair event's raw payload
}

func (l lead) where() string {
	return fmt.Sprintf("%s lead %s (%s) in campaign %s", l.Provider, l.ID, l.Email, l.Campaign)
}

// campaign is one campaign the projection knows, and the platform it runs on.
type campaign struct{ Provider, ID string }

// campaigns lists the tenant's campaigns from the campaigns projection (one shard per
// campaign is enough to name it); each is attributed to its platform by the campaign
// ids the stream named on a member's record ("instantly:<id>"), else by its form
// (Smartlead's ids are numbers, Instantly's UUIDs).
func (p *Pass) campaigns(ctx context.Context) ([]campaign, error) {
	keys, err := p.Reader.Campaigns.Keys(ctx, p.Tenant+".")
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []campaign
	for _, k := range keys {
		parts := strings.Split(k, ".")
		if len(parts) != 3 || seen[parts[1]] {
			continue
		}
		data, rev, err := p.Reader.Campaigns.Get(ctx, k)
		if err != nil {
			return nil, err
		}
		if rev == 0 {
			continue
		}
		var sh projection.Shard
		if err := json.Unmarshal(data, &sh); err != nil {
			return nil, fmt.Errorf("campaign shard %s: %w", k, err)
		}
		if sh.Campaign == "" {
			continue
		}
		seen[parts[1]] = true
		out = append(out, campaign{Provider: p.platformOf(ctx, sh), ID: sh.Campaign})
	}
	return out, nil
}

func (p *Pass) platformOf(ctx context.Context, sh projection.Shard) string {
	n := 0
	for id := range sh.Members {
		if n++; n > 5 {
			break
		}
		c, ok, err := p.Reader.Contact(ctx, p.Tenant, id)
		if err != nil || !ok {
			continue
		}
		for _, ext := range c.External[contacts.CampaignID] {
			if prov, cid, _ := strings.Cut(ext, ":"); cid == sh.Campaign {
				return prov
			}
		}
	}
	if _, err := strconv.ParseInt(sh.Campaign, 10, 64); err == nil {
		return "smartlead"
	}
	return "instantly"
}

// sourceCampaign is one campaign as its platform lists it.
type sourceCampaign struct {
	Provider, ID, Name string
	Active             bool
}

// sourceCampaigns lists the tenant's campaigns at each platform, once per pass. A
// platform whose listing fails is left out and its error kept: missedCampaigns
// reports it, and the leads of the campaigns the projection knows are still compared.
func (p *Pass) sourceCampaigns(ctx context.Context) ([]sourceCampaign, error) {
	if p.sLoaded {
		return p.sources, p.sourceErr
	}
	var out []sourceCampaign
	var errs []error
	if p.Clients.Instantly != nil {
		cs, err := p.Clients.Instantly.Campaigns(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("instantly campaign listing: %w", err))
		}
		for _, c := range cs {
			out = append(out, sourceCampaign{Provider: "instantly", ID: c.ID, Name: c.Name, Active: c.Active()})
		}
	}
	if p.Clients.Smartlead != nil {
		cs, err := p.Clients.Smartlead.Campaigns(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("smartlead campaign listing: %w", err))
		}
		for _, c := range cs {
			out = append(out, sourceCampaign{Provider: "smartlead", ID: strconv.FormatInt(c.ID, 10), Name: c.Name, Active: c.Active()})
		}
	}
	p.sources, p.sourceErr, p.sLoaded = out, errors.Join(errs...), true
	return out, p.sourceErr
}

// platformLeads lists every lead of the tenant's campaigns at their platforms, once
// per pass: the campaigns the projection knows, and the campaigns active at a
// platform that it does not know (p.unknown, every webhook of them lost).
func (p *Pass) platformLeads(ctx context.Context) ([]lead, error) {
	if p.loaded {
		return p.leads, nil
	}
	camps, err := p.campaigns(ctx)
	if err != nil {
		return nil, err
	}
	known := map[campaign]bool{} // by platform and id: two platforms may use one id
	for _, c := range camps {
		known[c] = true
	}
	srcs, _ := p.sourceCampaigns(ctx) // its error is the missed_campaign check's
	p.unknown = nil
	for _, sc := range srcs {
		if sc.Active && !known[campaign{Provider: sc.Provider, ID: sc.ID}] {
			p.unknown = append(p.unknown, sc)
			camps = append(camps, campaign{Provider: sc.Provider, ID: sc.ID})
		}
	}
	var out []lead
	for _, c := range camps {
		switch c.Provider {
		case "instantly":
			if p.Clients.Instantly == nil {
				continue
			}
			ls, err := p.Clients.Instantly.CampaignLeads(ctx, c.ID)
			if err != nil {
				return nil, fmt.Errorf("instantly campaign %s: %w", c.ID, err)
			}
			for i := range ls {
				out = append(out, instantlyLead(c.ID, &ls[i]))
			}
		case "smartlead":
			if p.Clients.Smartlead == nil {
				continue
			}
			n, err := strconv.ParseInt(c.ID, 10, 64)
			if err != nil {
				continue
			}
			ls, err := p.Clients.Smartlead.CampaignLeads(ctx, n)
			if err != nil {
				return nil, fmt.Errorf("smartlead campaign %s: %w", c.ID, err)
			}
			for _, l := range ls {
				out = append(out, smartleadLead(c.ID, l))
			}
		}
	}
	slices.SortFunc(out, func(a, b lead) int {
		return strings.Compare(a.Provider+a.Campaign+a.ID, b.Provider+b.Campaign+b.ID)
	})
	p.leads, p.loaded = out, true
	return out, nil
}

// instantlyLead is l as a lead; its Raw points at l (a copy of each record, boxed, was a
// tenth of the live heap while a first pass held ten thousand leads).
func instantlyLead(campaign string, l *instantly.Lead) lead {
	return lead{Provider: "instantly", Campaign: campaign, ID: l.ID, Email: contacts.NormalizeEmail(l.Email),
		Active: l.Status == instantly.StatusActive, Unsubscribed: l.Status == instantly.StatusUnsubscribed,
		Bounced: l.Status == instantly.StatusBounced, Replies: l.EmailReplyCount, LastReply: l.LastReply(),
		Interest: l.InterestStatus, Raw: l}
}

func smartleadLead(campaign string, l smartlead.CampaignLead) lead {
	return lead{Provider: "smartlead", Campaign: campaign, ID: strconv.FormatInt(l.LeadID, 10), Email: contacts.NormalizeEmail(l.Email),
		Active: !l.Stopped(), Unsubscribed: l.Unsubscribed || strings.EqualFold(l.Status, "BLOCKED"),
		Raw: map[string]any{"campaign_lead_map_id": l.MapID, "status": l.Status,
			"lead": map[string]any{"id": l.LeadID, "email": l.Email, "is_unsubscribed": l.Unsubscribed}}}
}

// projectionContacts are the tenant's contact records, with the ids the workers
// recorded in the directory, once per pass: each summed up as it is read (passContact).
func (p *Pass) projectionContacts(ctx context.Context) ([]passContact, error) {
	if p.cLoaded {
		return p.contacts, nil
	}
	var out []passContact
	if err := p.Reader.EachContact(ctx, p.Tenant, func(c projection.Contact) error {
		out = append(out, sumUp(c))
		return nil
	}); err != nil {
		return nil, err
	}
	// In the order of their ids: the HubSpot window's cursor walks them in it.
	slices.SortFunc(out, func(a, b passContact) int { return strings.Compare(a.ContactID, b.ContactID) })
	p.contacts, p.cLoaded = out, true
	return out, nil
}

// passContact is what the checks read of a projection contact: its ids and keys, and
// of the views its lifecycles give what the checks ask, computed once when the record
// is read. Not the record: its facts are most of its size, and a pass holds every
// contact of the tenant (BenchmarkPassContactHeld).
type passContact struct {
	ContactID string
	Keys      []string
	External  map[string][]string
	view      passView       // the contact-level view
	in        []campaignView // the effective view in each of its campaigns
	// outside is the effective view in a campaign it is not in, when that is not view.
	outside *passView
}

// passView is what the checks read of a lifecycle.View.
type passView struct {
	Status                              lifecycle.Status
	Replied, MeetingBooked, Opportunity bool
	Completed                           bool // its sequence stopped or completed (Reached holds Completed)
	// Meetings and Opportunities are the ids the view names.
	Meetings, Opportunities []string
	Discrepancies           []lifecycle.Discrepancy
}

func viewOf(v lifecycle.View) passView {
	return passView{Status: v.Status, Replied: v.Replied, MeetingBooked: v.MeetingBooked, Opportunity: v.Opportunity,
		Completed: slices.Contains(v.Reached, lifecycle.Completed),
		Meetings:  v.Meetings, Opportunities: v.Opportunities, Discrepancies: v.Discrepancies}
}

// campaignView is a contact's effective view in a campaign, and the discrepancies of
// the campaign's own lifecycle.
type campaignView struct {
	id  string
	v   passView
	own []lifecycle.Discrepancy
}

func sumUp(c projection.Contact) passContact {
	s := passContact{ContactID: c.ContactID, Keys: c.Keys, External: c.External, view: viewOf(c.View())}
	if out := viewOf(lifecycle.Effective(lifecycle.State{}, c.Lifecycle).View()); !reflect.DeepEqual(out, s.view) {
		s.outside = &out
	}
	for _, id := range slices.Sorted(maps.Keys(c.Campaigns)) {
		s.in = append(s.in, campaignView{id: id, v: viewOf(c.InCampaign(id)), own: c.Campaigns[id].View().Discrepancies})
	}
	return s
}

// View is what the checks read of the contact's own view (projection.Contact.View).
func (c passContact) View() passView { return c.view }

// InCampaign is what the checks read of the contact's effective view in campaign
// (projection.Contact.InCampaign).
func (c passContact) InCampaign(campaign string) passView {
	for _, in := range c.in {
		if in.id == campaign {
			return in.v
		}
	}
	if c.outside != nil {
		return *c.outside
	}
	return c.view
}

// contactsByEmail indexes the pass's projection contacts (their indexes in
// projectionContacts) by the normalised e-mails of their keys, once per pass.
func (p *Pass) contactsByEmail(ctx context.Context) ([]passContact, map[string][]int, error) {
	cs, err := p.projectionContacts(ctx)
	if err != nil || p.byEmail != nil {
		return cs, p.byEmail, err
	}
	p.byEmail = map[string][]int{}
	for i, c := range cs {
		for _, k := range c.Keys {
			if e, ok := strings.CutPrefix(k, "email:"); ok {
				if e = contacts.NormalizeEmail(e); !slices.Contains(p.byEmail[e], i) {
					p.byEmail[e] = append(p.byEmail[e], i)
				}
			}
		}
	}
	return cs, p.byEmail, nil
}

// emailOf is a contact record's first e-mail.
func emailOf(c passContact) string {
	for _, k := range c.Keys {
		if e, ok := strings.CutPrefix(k, "email:"); ok {
			return e
		}
	}
	return ""
}
