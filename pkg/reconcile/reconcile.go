// Package reconcile compares what the sending platforms and the CRM say with what
// Exacto's projections and lists hold, because webhooks are never the whole truth: one
// may be lost, a person may act in the platform's own UI, another integration may write
// to the CRM. A pass runs every check for one tenant; each check is a small function in
// a file of its own (Check) and returns Findings.
//
// What a pass finds, and what it does:
//
//   - missed_unsubscribe: the platform shows a lead unsubscribed, blocked or bounced, and
//     the tenant's suppression list lacks the contact (the webhook was lost). Repaired at
//     once, the safest policy: a lead.unsubscribed (or email.bounced) event is stored on
//     EXACTO_EVENTS, so the suppressor suppresses, the stopper stops and the projector
//     projects it like any other event. Status "applied".
//   - active_but_suppressed: the contact is on the suppression list and a lead of it is
//     still active at the platform. Repaired at once the same way (an event of the
//     suppression's kind for that lead and campaign, which the stopper acts on).
//   - missed_campaign: a campaign active at Instantly or Smartlead (their campaign
//     listings) that the campaigns projection does not know: every webhook of it was
//     lost. Reported with its count of leads; its leads are compared like every
//     campaign's by the checks here. A listing that fails is the check's error.
//   - missed_reply / missed_meeting / missed_opportunity: the platform counts a reply
//     (or shows a meeting or won interest status) the projection lacks, or HubSpot
//     holds a deal or a meeting on a contact Exacto knows that the projection lacks
//     (provider hubspot; at most MaxCRMContacts contacts a pass). Reported ("open");
//     a missed reply carries its proposed reply.received event, a HubSpot deal or
//     meeting its opportunity.created or meeting.booked, published only when an
//     operator approves it (Queue.Decide) and only while fresh (config dlq.freshness
//     of the type): a follow-up to a stale reply is worse than none.
//   - duplicate_activity: two HubSpot notes for one reply: a note on the contact without
//     our exacto_event_id that repeats our note's reply text, or a second note naming
//     our event id in its body. Reported, never deleted.
//   - duplicate_contact: two HubSpot contacts with one e-mail (case ignored), or two
//     projection contacts with one e-mail key. Reported, never merged.
//   - impossible_state: a contact whose lifecycle holds discrepancies (a transition the
//     lifecycle table forbids), reported with the discrepancy's why; or, across
//     systems, a contact the projection shows replied or stopped in a campaign whose
//     lead is still active at the platform (not suppressed), reported with the stop
//     as the proposed repair.
//
// Nothing is ever deleted or merged at a platform or the CRM, and no outreach is sent: a
// repair is an event on the stream (so the history stays whole and a replay rebuilds
// it), made by the consumers that own each effect.
//
// Every finding goes to the diff queue (KV EXACTO_DIFFS, key <tenant>.<finding id>):
// what was found, where, the proposed repair, whether it was applied, its status (open,
// applied, approved, rejected) and the ids of the events published. Finding ids are
// deterministic (kind, tenant, provider, object), so a second pass that finds the same
// difference updates its LastSeen instead of adding a finding; events are deterministic
// too (envelope.ID over the reconciler, kind, provider and object), so a second pass
// publishes nothing new. Each new finding is counted once in exacto_reconcile_findings
// (kind, tenant, provider).
//
// A tenant with more HubSpot contacts than MaxCRMContacts is read a window a pass: each
// pass resumes after the last contact the previous one read (a cursor kept in the diff
// bucket, key <tenant>.cursor.hubspot), so passes cover every contact in turn whatever
// their interval.
//
// A dry run reads everything and returns the findings with what it would do, publishing
// nothing and writing nothing to the diff queue (nor moving the HubSpot cursor).
package reconcile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform/accounts"
	"exacto.dev/pkg/privacy"
	"exacto.dev/pkg/projection"
	"exacto.dev/pkg/suppression"
)

// Kinds of finding.
const (
	MissedUnsubscribe   = "missed_unsubscribe"
	ActiveButSuppressed = "active_but_suppressed"
	MissedReply         = "missed_reply"
	MissedMeeting       = "missed_meeting"
	MissedOpportunity   = "missed_opportunity"
	MissedCampaign      = "missed_campaign"
	DuplicateActivity   = "duplicate_activity"
	DuplicateContact    = "duplicate_contact"
	ImpossibleState     = "impossible_state"
)

// Statuses of a finding.
const (
	StatusOpen     = "open"     // reported; waits for a person
	StatusApplied  = "applied"  // repaired at once by the safe policy
	StatusApproved = "approved" // a person approved the proposed repair (published)
	StatusRejected = "rejected" // a person rejected it
)

// Worker names the reconciler in the events it publishes (their source).
const Worker = "reconciler"

// findings counts each new finding once.
var findings, _ = otel.Meter("exacto/reconcile").Int64Counter("exacto_reconcile_findings",
	metric.WithDescription("reconciliation findings, by kind, tenant and provider, counted once when first found"))

// duplicateActivities counts CRM activities found twice for one event (a note written
// again by a path that bypassed the guard, or by hand).
var duplicateActivities, _ = otel.Meter("exacto/reconcile").Int64Counter("exacto_crm_duplicate_activities_found",
	metric.WithDescription("CRM activities found duplicated by reconciliation, by tenant and provider"))

// ZeroMetrics shows tenant's finding counters at 0 until a pass finds something, so
// that rate() and absence alerts work from the start.
func ZeroMetrics(ctx context.Context, tenant string) {
	for _, k := range []string{MissedUnsubscribe, ActiveButSuppressed, MissedCampaign, MissedReply, MissedMeeting, MissedOpportunity, DuplicateActivity, DuplicateContact, ImpossibleState} {
		findings.Add(ctx, 0, metric.WithAttributes(attribute.String("kind", k), attribute.String("tenant", tenant)))
	}
	duplicateActivities.Add(ctx, 0, metric.WithAttributes(attribute.String("tenant", tenant)))
}

// Finding is one difference between a platform or the CRM and Exacto's state.
type Finding struct {
	ID       string `json:"id"`
	Kind     string `json:"kind"`
	Tenant   string `json:"tenant"`
	Provider string `json:"provider"` // where the truth came from: instantly, smartlead, hubspot, exacto
	Contact  string `json:"contact,omitempty"`
	Campaign string `json:"campaign,omitempty"`
	Where    string `json:"where"`  // e.g. "instantly lead 0…1 in campaign X"
	Found    string `json:"found"`  // what differs
	Repair   string `json:"repair"` // what was done, or is proposed
	Applied  bool   `json:"applied"`
	Status   string `json:"status"`
	// Event is the id of the event published as the repair (at once, or on approval).
	Event     string    `json:"event,omitempty"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	Passes    int       `json:"passes"` // how many passes found it
	// Proposed is the event a person may approve (a missed reply's reply.received).
	Proposed *envelope.Envelope `json:"proposed,omitempty"`
	Decision *Decision          `json:"decision,omitempty"`

	// apply is the event the safe policy publishes at once.
	apply *envelope.Envelope
}

// Decision is a person's answer to a finding.
type Decision struct {
	Approve bool      `json:"approve"`
	By      string    `json:"by"`
	Why     string    `json:"why"`
	At      time.Time `json:"at"`
}

// FindingID is the deterministic id of a finding of kind about object.
func FindingID(kind, tenant, provider, object string) string {
	h := sha256.New()
	for _, p := range []string{kind, tenant, provider, object} {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return "fd_" + hex.EncodeToString(h.Sum(nil)[:12])
}

func newFinding(p *Pass, kind, provider, object string) Finding {
	return Finding{ID: FindingID(kind, p.Tenant, provider, object), Kind: kind, Tenant: p.Tenant, Provider: provider, Status: StatusOpen}
}

// Publisher stores an event on EXACTO_EVENTS once (consumer.Deriver.Publish).
type Publisher func(ctx context.Context, env envelope.Envelope) error

// Pass is one reconciliation of one tenant: what the checks read and how they repair.
type Pass struct {
	Tenant      string
	Clients     accounts.Clients
	Reader      projection.Reader
	Suppression *suppression.List
	Publish     Publisher
	// Forgotten are the people erased (pkg/privacy): a finding about one of them is
	// dropped, never recorded nor repaired — a platform still holds them, Exacto must not.
	Forgotten *privacy.Forgotten
	Log       *slog.Logger
	DryRun    bool
	Now       func() time.Time

	// MaxCRMContacts bounds how many contacts one pass reads at HubSpot for their deals
	// and meetings (DefaultMaxCRMContacts when 0).
	MaxCRMContacts int

	leads     []lead // the platforms' leads of the tenant's campaigns (loaded once)
	loaded    bool
	unknown   []sourceCampaign // active at a platform, unknown to the projection
	sources   []sourceCampaign // the platforms' campaign listings (loaded once)
	sourceErr error
	sLoaded   bool
	contacts  []passContact // the projection's contacts, summed up (loaded once)
	cLoaded   bool
	byEmail   map[string][]int // contacts' indexes by normalised e-mail (built once)
	queue     *Queue           // the pass's diff queue (Run), which keeps the HubSpot cursor
}

func (p *Pass) now() time.Time {
	if p.Now != nil {
		return p.Now().UTC()
	}
	return time.Now().UTC()
}

// maxPreload bounds the tenant's part of the contact directory a pass copies (about
// two entries a contact); a larger one is read a key at a time.
const maxPreload = 250_000

// Check is one comparison.
type Check struct {
	Name string
	Run  func(ctx context.Context, p *Pass) ([]Finding, error)
}

// Checks are every check, in the order a pass runs them: the repairs first.
var Checks = []Check{
	{MissedUnsubscribe, missedUnsubscribe},
	{ActiveButSuppressed, activeButSuppressed},
	{MissedCampaign, missedCampaigns},
	{MissedReply, missedOutcomes},
	{"hubspot_outcomes", crmOutcomes},
	{DuplicateActivity, duplicateActivity},
	{DuplicateContact, duplicateContact},
	{ImpossibleState, impossibleState},
}

// Report is what one pass did.
type Report struct {
	Tenant   string
	DryRun   bool
	Findings []Finding      // every finding of the pass, new or seen before
	New      int            // findings not in the diff queue before
	Applied  int            // repairs published in this pass
	ByKind   map[string]int // findings by kind
	Errors   []error        // checks that failed (the others still ran)
}

// Run runs every check for p's tenant, applies the safe repairs (unless p.DryRun) and
// records every finding in q (unless p.DryRun). A failing check is reported in
// Report.Errors and does not stop the others.
func Run(ctx context.Context, p *Pass, q *Queue) (Report, error) {
	if p.Log == nil {
		p.Log = slog.New(slog.DiscardHandler)
	}
	p.queue = q
	if p.Reader.Dir != nil {
		// The checks name every contact of the tenant through the directory: from a copy
		// read in one go, not a Get or two per contact (kvstore.KV.Scan says why).
		if dir, err := p.Reader.Dir.Preload(ctx, p.Tenant+".", maxPreload); err != nil {
			p.Log.Warn("reconcile: the contact directory is read key by key this pass", "tenant", p.Tenant, "error", err)
		} else {
			p.Reader.Dir = dir
		}
	}
	rep := Report{Tenant: p.Tenant, DryRun: p.DryRun, ByKind: map[string]int{}}
	for _, c := range Checks {
		fs, err := c.Run(ctx, p)
		if err != nil {
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			rep.Errors = append(rep.Errors, fmt.Errorf("%s: %w", c.Name, err))
			p.Log.Warn("reconcile check failed", "tenant", p.Tenant, "check", c.Name, "error", err)
		}
		for _, f := range fs {
			if p.forgotten(f) {
				continue
			}
			f, isNew, applied, err := p.settle(ctx, q, f)
			if err != nil {
				return rep, err
			}
			rep.Findings = append(rep.Findings, f)
			rep.ByKind[f.Kind]++
			if isNew {
				rep.New++
			}
			if applied {
				rep.Applied++
			}
		}
	}
	return rep, nil
}

// forgotten reports whether f is about a person who was forgotten.
func (p *Pass) forgotten(f Finding) bool {
	if p.Forgotten.Named(p.Tenant, contacts.Key("email", f.Contact)) {
		return true
	}
	for _, env := range []*envelope.Envelope{f.apply, f.Proposed} {
		if env != nil {
			if _, ok := p.Forgotten.Of(env); ok {
				return true
			}
		}
	}
	return false
}

// settle applies f's safe repair and records f in q.
func (p *Pass) settle(ctx context.Context, q *Queue, f Finding) (Finding, bool, bool, error) {
	now := p.now()
	f.FirstSeen, f.LastSeen, f.Passes = now, now, 1
	if p.DryRun {
		return f, false, false, nil
	}
	prev, seen, err := q.Get(ctx, f.Tenant, f.ID)
	if err != nil {
		return f, false, false, err
	}
	applied := false
	if f.apply != nil && !(seen && prev.Applied && prev.Event == f.apply.ID) {
		if err := p.Publish(ctx, *f.apply); err != nil {
			return f, false, false, fmt.Errorf("%s %s: publishing the repair: %w", f.Kind, f.Where, err)
		}
		applied = true
	}
	if f.apply != nil {
		f.Applied, f.Status, f.Event = true, StatusApplied, f.apply.ID
	}
	isNew, err := q.record(ctx, &f)
	if err != nil {
		return f, false, false, err
	}
	if isNew {
		findings.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", f.Kind),
			attribute.String("tenant", f.Tenant), attribute.String("provider", f.Provider)))
		if f.Kind == DuplicateActivity {
			duplicateActivities.Add(ctx, 1, metric.WithAttributes(attribute.String("tenant", f.Tenant), attribute.String("provider", f.Provider)))
		}
		p.Log.Info("reconcile finding", "tenant", f.Tenant, "kind", f.Kind, "provider", f.Provider,
			"where", f.Where, "found", f.Found, "repair", f.Repair, "applied", f.Applied, "id", f.ID)
	}
	return f, isNew, applied, nil
}

// Would says what a dry run would do with f.
func (f Finding) Would() string {
	if f.apply != nil {
		return "would publish " + f.apply.Type + " " + f.apply.ID
	}
	return "would report"
}

// Summary is a one-line count by kind, e.g. "missed_unsubscribe=1 duplicate_activity=2".
func (r Report) Summary() string {
	kinds := make([]string, 0, len(r.ByKind))
	for k := range r.ByKind {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	var b strings.Builder
	for i, k := range kinds {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", k, r.ByKind[k])
	}
	if b.Len() == 0 {
		return "no findings"
	}
	return b.String()
}

// Err joins the errors of the checks that failed.
func (r Report) Err() error { return errors.Join(r.Errors...) }
