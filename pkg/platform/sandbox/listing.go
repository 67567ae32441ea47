package sandbox

import (
	"cmp"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// Routes of the listings the reconciler reads (names for SetFault and Requests).
const (
	RouteInstantlyCampaignList = "instantly.campaigns.list"
	RouteSmartleadCampaignList = "smartlead.campaigns.list"
	RouteHubSpotDealSearch     = "hubspot.deals.search"
	RouteHubSpotMeetingSearch  = "hubspot.meetings.search"
)

func init() {
	Routes = append(Routes, RouteInstantlyCampaignList, RouteSmartleadCampaignList, RouteHubSpotDealSearch, RouteHubSpotMeetingSearch)
}

// HubSpot's HUBSPOT_DEFINED association types of a deal and a meeting to a contact.
const (
	DealToContactAssociation    = 3
	MeetingToContactAssociation = 200
)

// InstantlyCampaign is an Instantly campaign as the sandbox lists it (status: the v2
// campaign codes, 1 active, 2 paused, 3 completed…).
type InstantlyCampaign struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Status int    `json:"status"`
	// The campaign's stop settings (GET /api/v2/campaigns/{id}).
	StopOnReply     bool `json:"stop_on_reply"`
	StopOnAutoReply bool `json:"stop_on_auto_reply"`
	StopForCompany  bool `json:"stop_for_company"`
}

// SmartleadCampaign is a Smartlead campaign as the sandbox lists it (status ACTIVE,
// PAUSED, STOPPED, COMPLETED, DRAFTED…).
type SmartleadCampaign struct {
	ID     int64  `json:"id"`
	Name   string `json:"name"`
	Status string `json:"status"`
}

// listingState holds what only the listings read: the campaigns seeded with
// AddInstantlyCampaign and AddSmartleadCampaign (a lead's campaign is listed only once
// seeded, so AutoEnroll's campaigns never show), and HubSpot's deals and meetings.
type listingState struct {
	instantly []*InstantlyCampaign
	smartlead []*SmartleadCampaign
	deals     []*Object
	meetings  []*Object
}

// AddInstantlyCampaign seeds (or replaces) an Instantly campaign in the listing.
func (s *Server) AddInstantlyCampaign(id, name string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	upsert(&s.listing.instantly, InstantlyCampaign{ID: id, Name: name, Status: status},
		func(a, b *InstantlyCampaign) bool { return a.ID == b.ID })
}

// AddSmartleadCampaign seeds (or replaces) a Smartlead campaign in the listing.
func (s *Server) AddSmartleadCampaign(id int64, name, status string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	upsert(&s.listing.smartlead, SmartleadCampaign{ID: id, Name: name, Status: status},
		func(a, b *SmartleadCampaign) bool { return a.ID == b.ID })
}

// upsert replaces the element of list that is same as v, else appends v.
func upsert[T any](list *[]*T, v T, same func(a, b *T) bool) {
	for _, c := range *list {
		if same(c, &v) {
			*c = v
			return
		}
	}
	*list = append(*list, &v)
}

// AddDealFor seeds a deal associated with contactID (made in HubSpot, no webhook) and
// returns its id.
func (s *Server) AddDealFor(contactID string, props map[string]string) string {
	return s.addAssociated(&s.listing.deals, contactID, DealToContactAssociation, props)
}

// AddMeetingFor seeds a meeting associated with contactID and returns its id.
func (s *Server) AddMeetingFor(contactID string, props map[string]string) string {
	return s.addAssociated(&s.listing.meetings, contactID, MeetingToContactAssociation, props)
}

func (s *Server) addAssociated(list *[]*Object, contactID string, typeID int, props map[string]string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := &Object{ID: s.hubspot.id(), Properties: maps.Clone(props), CreatedAt: time.Now(),
		Associations: []Association{{ToID: contactID, TypeID: typeID, Category: "HUBSPOT_DEFINED"}}}
	if o.Properties == nil {
		o.Properties = map[string]string{}
	}
	if o.Properties["createdate"] == "" {
		o.Properties["createdate"] = o.CreatedAt.UTC().Format("2006-01-02T15:04:05.000Z")
	}
	s.hubspot.store(list, o)
	return o.ID
}

func (s *Server) mountListings(mux *http.ServeMux) {
	s.handle(mux, "GET /api/v2/campaigns", RouteInstantlyCampaignList, s.instantlyAuth, instantlyDeny, s.inCampaigns)
	s.handle(mux, "GET /api/v1/campaigns", RouteSmartleadCampaignList, s.smartleadAuth, smartleadDeny, s.slCampaigns)
	s.handle(mux, "POST /crm/v3/objects/deals/search", RouteHubSpotDealSearch, s.hubspotAuth, hubspotDeny,
		s.hsSearch(&s.listing.deals))
	s.handle(mux, "POST /crm/v3/objects/meetings/search", RouteHubSpotMeetingSearch, s.hubspotAuth, hubspotDeny,
		s.hsSearch(&s.listing.meetings))
}

// inCampaigns serves Instantly's GET /api/v2/campaigns: limit (1..100; 10 when
// absent, an assumption), starting_after (the last id of the previous page, answered
// as next_starting_after while more remain) and the optional numeric status filter.
func (s *Server) inCampaigns(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 10
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			instantlyError(w, http.StatusBadRequest, "querystring/limit must be between 1 and 100")
			return
		}
		limit = n
	}
	status, filter := 0, q.Get("status") != ""
	if filter {
		n, err := strconv.Atoi(q.Get("status"))
		if err != nil {
			instantlyError(w, http.StatusBadRequest, "querystring/status must be a number")
			return
		}
		status = n
	}
	after := q.Get("starting_after")
	s.mu.Lock()
	defer s.mu.Unlock()
	items := []InstantlyCampaign{}
	next := ""
	started := after == ""
	for _, c := range s.listing.instantly {
		if !started {
			started = c.ID == after
			continue
		}
		if filter && c.Status != status {
			continue
		}
		if len(items) == limit {
			next = items[len(items)-1].ID
			break
		}
		items = append(items, *c)
	}
	resp := map[string]any{"items": items}
	if next != "" {
		resp["next_starting_after"] = next
	}
	writeJSON(w, http.StatusOK, resp)
}

// slCampaigns serves Smartlead's GET /api/v1/campaigns: every campaign, newest (highest
// id) first, as a bare array.
func (s *Server) slCampaigns(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	out := make([]SmartleadCampaign, 0, len(s.listing.smartlead))
	for _, c := range s.listing.smartlead {
		out = append(out, *c)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b SmartleadCampaign) int { return cmp.Compare(b.ID, a.ID) })
	writeJSON(w, http.StatusOK, out)
}
