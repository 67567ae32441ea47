// Package handler is the stopper service: on a human reply, an unsubscribe, a spam
// complaint or a bounce it stops the contact's sequence on the sending platform (Instantly, Smartlead), and
// publishes one sequence.stopped per cause event. It is a deterministic safety rule:
// it does not wait for the classifier, so a reply stops the sequence even if its
// classification fails.
//
// Rules:
//   - What stops: reply.received and message.received unless Message.Auto (an
//     out-of-office is no human answer); lead.unsubscribed and email.complained (both
//     also put the address on the platform's block list); email.bounced unless the
//     bounce is soft (hard and unknown stop). Anything else, and an event naming no
//     e-mail address (a WhatsApp message with only a phone), completes without effect.
//   - Where: an Instantly or Smartlead event stops the lead on its own platform, in the
//     event's campaign when it names one (else in every campaign the lead is in); a
//     lead confirmed absent there is a permanent error (dead letter with the reason):
//     the webhook is unsigned, so the platform is the truth. An event of any other
//     provider (a generic signer's reply, a HubSpot unsubscribe) stops the contact in
//     every sending platform of the tenant where its e-mail is found, in every
//     campaign; found nowhere, there is nothing to stop.
//   - Check, act, confirm: the lead's state is read first and a stopped lead gets no
//     write; after a write it is read again, and a stop not yet visible is a transient
//     error, so the next attempt finds it stopped (or repeats a write that is harmless
//     to repeat). Every call goes through Event.Call (pacer, breaker).
//   - Unsubscribes also block the address at the platform (Instantly block list,
//     Smartlead global unsubscribe); the tenant-wide suppression list is the
//     suppressor's job.
//   - Nothing here ever resumes a lead, and the stopper does not consume delivered or
//     opened events: a late one cannot undo a stop.
//   - One sequence.stopped per cause event (a deterministic id, stored once by the
//     Deriver), with Status "stopped", or "already_stopped" when the first attempt found
//     every lead stopped and wrote nothing.
package handler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform/accounts"
	"exacto.dev/pkg/platform/instantly"
	"exacto.dev/pkg/platform/smartlead"
	"exacto.dev/pkg/retry"
	"exacto.dev/pkg/service"
	"exacto.dev/pkg/stream"
)

// The sending platforms, also the dependency names of Event.Call.
const (
	Instantly = "instantly"
	Smartlead = "smartlead"
)

// sequencesStopped counts stops by cause and whether they came within the cause's SLO
// (from the cause's receipt at the gateway).
var sequencesStopped, _ = otel.Meter("exacto/stopper").Int64Counter("exacto_sequences_stopped",
	metric.WithDescription("sequences stopped, by cause, status and whether within the cause event's SLO target"))

// Why a sequence is stopped.
const (
	causeReply       = "reply"
	causeUnsubscribe = "unsubscribe"
	causeBounce      = "bounce"
	causeComplaint   = "complaint"
)

// Status of a sequence.stopped event.
const (
	StatusStopped        = "stopped"
	StatusAlreadyStopped = "already_stopped"
)

// stopInterest is the interest status that stops an Instantly lead. Instantly v2
// documents no per-lead pause (a lead's status is read-only) and no neutral interest
// value without a custom label, so the stop is an interest status, which completes the
// sequence. Not Interested is chosen for every cause, a reply not yet classified
// included: a negative label can only reduce outreach, while Interested may start
// subsequences keyed on the lead's interest (and the classifier's label, not this one,
// is what people act on). Unverified against the live API: that the status change
// completes an active lead in every campaign type, and that Instantly's AI interest
// may later relabel the lead without resuming it.
const stopInterest = instantly.NotInterested

// Platforms gives a tenant's platform clients; ok is false for a tenant the config
// does not know.
type Platforms func(tenant string) (accounts.Clients, bool)

// Cause says why env stops its contact's sequence ("reply", "unsubscribe", "bounce",
// "complaint"), or "" and why it does not.
func Cause(env envelope.Envelope) (cause, skip string) {
	switch env.Type {
	case envelope.TypeReplyReceived, envelope.TypeMessageReceived:
		if m := env.Data.Message; m != nil && m.Auto {
			return "", "an automatic reply is no human answer"
		}
		cause = causeReply
	case envelope.TypeLeadUnsubscribed:
		cause = causeUnsubscribe
	case envelope.TypeEmailComplained:
		cause = causeComplaint
	case envelope.TypeEmailBounced:
		if b := env.Data.Bounce; b != nil && b.Kind == "soft" {
			return "", "a soft bounce may deliver on a later try"
		}
		cause = causeBounce
	default:
		return "", env.Type + " stops no sequence"
	}
	if email(env) == "" && !smartleadByID(env) {
		return "", "the event names no e-mail address, so no e-mail sequence to stop"
	}
	return cause, ""
}

// optOut reports whether cause is the contact's own "never again": an unsubscribe or a
// spam complaint, which also put the address on the platform's block list.
func optOut(cause string) bool { return cause == causeUnsubscribe || cause == causeComplaint }

func email(env envelope.Envelope) string {
	if c := env.Data.Contact; c != nil {
		return strings.TrimSpace(c.Email)
	}
	return ""
}

func campaignID(env envelope.Envelope) string {
	if c := env.Data.Campaign; c != nil {
		return c.ID
	}
	return ""
}

// smartleadByID: a Smartlead event without an e-mail still names its lead and campaign.
func smartleadByID(env envelope.Envelope) bool {
	return env.Provider == Smartlead && env.Data.Contact != nil && env.Data.Contact.ExternalID != "" && campaignID(env) != ""
}

// SendingPlatforms are the platforms env's contact is stopped on: the event's own
// when it comes from one, else every one.
func SendingPlatforms(env envelope.Envelope) []string {
	switch env.Provider {
	case Instantly, Smartlead:
		return []string{env.Provider}
	}
	return []string{Instantly, Smartlead}
}

// Dependencies are what the handler calls for env: nothing for an event that stops
// nothing, so a platform outage never holds it.
func Dependencies(env envelope.Envelope) []string {
	if cause, _ := Cause(env); cause == "" {
		return nil
	}
	return SendingPlatforms(env)
}

// stop is what one platform did for an event.
type stop struct {
	found  bool   // the contact is a lead there
	wrote  bool   // a write was made in this attempt
	leadID string // the platform's lead id
}

type handler struct {
	d         *consumer.Deriver
	platforms Platforms
	dir       *contacts.Directory
	log       *slog.Logger
}

// New returns the stopper's handler. dir, if not nil, records the ids the platforms
// confirmed (lead, campaign, message) on the contact.
func New(d *consumer.Deriver, platforms Platforms, dir *contacts.Directory, log *slog.Logger) consumer.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return (&handler{d: d, platforms: platforms, dir: dir, log: log}).handle
}

func (h *handler) handle(ctx context.Context, ev consumer.Event) error {
	env := ev.Envelope
	cause, skip := Cause(env)
	if cause == "" {
		h.log.Info("nothing to stop", "id", env.ID, "type", env.Type, "provider", env.Provider, "why", skip)
		return nil
	}
	clients, ok := h.platforms(env.Tenant)
	if !ok {
		return retry.Permanently(stream.Stopper, fmt.Errorf("tenant %q is not configured", env.Tenant))
	}
	stops := map[string]stop{}
	for _, p := range SendingPlatforms(env) {
		var s stop
		var err error
		switch p {
		case Instantly:
			s, err = h.instantly(ctx, ev, clients.Instantly, cause)
		case Smartlead:
			s, err = h.smartlead(ctx, ev, clients.Smartlead, cause)
		}
		if err != nil {
			return err
		}
		if !s.found && p == env.Provider {
			where := ""
			if c := campaignID(env); c != "" {
				where = " in campaign " + c
			}
			return retry.Permanently(p, fmt.Errorf("lead %s confirmed absent at %s%s: the event's lead does not exist there",
				contactName(env), p, where))
		}
		if s.found {
			stops[p] = s
		}
	}
	if len(stops) == 0 {
		h.log.Info("nothing to stop", "id", env.ID, "type", env.Type, "provider", env.Provider,
			"why", "the contact is a lead on no sending platform of the tenant")
		return nil
	}
	wrote := false
	for _, s := range stops {
		wrote = wrote || s.wrote
	}
	status := StatusStopped
	if !wrote && ev.Attempt <= 1 && !ev.Resumed {
		// A later attempt may follow an earlier one's write: only the first can tell.
		status = StatusAlreadyStopped
	} else if !wrote {
		ev.EffectFound(ctx) // an earlier attempt's stop went through before it died
	}
	data := envelope.Data{ProviderType: envelope.TypeSequenceStopped, Status: status}
	if s, ok := stops[env.Provider]; ok && s.leadID != "" && env.Data.Contact != nil {
		// The platform's own lead id, as confirmed there (the webhook's was a hint).
		c := *env.Data.Contact
		c.ExternalID = s.leadID
		data.Contact = &c
	}
	if err := h.record(ctx, env, stops); err != nil {
		return err
	}
	h.log.InfoContext(ctx, "sequence stopped", "id", env.ID, "cause", cause, "status", status, "platforms", slices.Sorted(maps.Keys(stops)))
	class, within := ev.SLO()
	sequencesStopped.Add(ctx, 1, ev.MetricAttrs(attribute.String("cause", cause), attribute.String("status", status),
		attribute.String("slo_class", class), attribute.Bool("within_slo", within)))
	return h.d.Publish(ctx, envelope.Derive(env, stream.Stopper, envelope.TypeSequenceStopped, data, time.Now()))
}

// record keeps the ids the platforms confirmed on the contact: each platform's lead,
// and the event's campaign and message.
func (h *handler) record(ctx context.Context, env envelope.Envelope, stops map[string]stop) error {
	if h.dir == nil {
		return nil
	}
	for _, p := range slices.Sorted(maps.Keys(stops)) {
		seen := contacts.Seen{Email: email(env), External: map[string]string{}}
		if id := stops[p].leadID; id != "" {
			seen.External[contacts.SendingPlatformContactID] = p + ":" + id
		}
		if p == env.Provider {
			if c := campaignID(env); c != "" {
				seen.External[contacts.CampaignID] = p + ":" + c
			}
			if m := env.Data.Message; m != nil && m.ID != "" {
				seen.External[contacts.MessageID] = m.ID
			}
		}
		if _, err := h.dir.Record(ctx, env.Tenant, seen); err != nil {
			return err
		}
	}
	return nil
}

func contactName(env envelope.Envelope) string {
	if e := email(env); e != "" {
		return e
	}
	if c := env.Data.Contact; c != nil {
		return "id " + c.ExternalID
	}
	return "(none)"
}

// errNotYetStopped: the platform accepted the stop but does not show it yet (Instantly
// runs it as a background job). The next attempt reads again before writing.
var errNotYetStopped = errors.New("stop accepted but not yet visible")

// instantly stops every lead of the contact at Instantly (in the event's campaign
// when it is an Instantly event naming one).
func (h *handler) instantly(ctx context.Context, ev consumer.Event, c *instantly.Client, cause string) (stop, error) {
	env := ev.Envelope
	addr := email(env)
	if addr == "" {
		return stop{}, nil // Instantly finds leads by e-mail only
	}
	campaign := ""
	if env.Provider == Instantly {
		campaign = campaignID(env)
	}
	var leads []instantly.Lead
	if err := ev.Call(ctx, Instantly, func(ctx context.Context) (err error) {
		leads, err = c.FindLeads(ctx, campaign, addr)
		return err
	}); err != nil {
		return stop{}, err
	}
	if len(leads) == 0 {
		return stop{}, nil
	}
	s := stop{found: true}
	if len(leads) == 1 {
		s.leadID = leads[0].ID
	}
	blocked := false
	for _, l := range leads {
		block := optOut(cause) && l.Status != instantly.StatusUnsubscribed && !blocked
		halt := !l.Stopped()
		if block {
			if err := ev.Call(ctx, Instantly, func(ctx context.Context) error { return c.Unsubscribe(ctx, addr) }); err != nil {
				return s, err
			}
			blocked, s.wrote = true, true
		}
		if halt {
			if err := ev.Call(ctx, Instantly, func(ctx context.Context) error {
				return c.StopLead(ctx, l.Campaign, addr, stopInterest)
			}); err != nil {
				return s, err
			}
			s.wrote = true
		}
		if !block && !halt {
			continue
		}
		var now instantly.Lead
		if err := ev.Call(ctx, Instantly, func(ctx context.Context) (err error) {
			now, err = c.GetLead(ctx, l.ID)
			return err
		}); err != nil {
			return s, err
		}
		if !now.Stopped() {
			return s, retry.Transiently(Instantly, fmt.Errorf("lead %s in campaign %s: %w", l.ID, l.Campaign, errNotYetStopped))
		}
	}
	return s, nil
}

// smartlead pauses the contact's lead at Smartlead in the event's campaign (a
// Smartlead event naming one), else in every campaign it is in.
func (h *handler) smartlead(ctx context.Context, ev consumer.Event, c *smartlead.Client, cause string) (stop, error) {
	env := ev.Envelope
	addr := email(env)
	var hint string // the webhook's lead id: unsigned, so only a hint
	if env.Provider == Smartlead && env.Data.Contact != nil {
		hint = env.Data.Contact.ExternalID
	}
	var leadID int64
	var campaigns []int64
	unsubscribed := false
	if addr != "" {
		var lead smartlead.Lead
		var found bool
		if err := ev.Call(ctx, Smartlead, func(ctx context.Context) (err error) {
			lead, found, err = c.LeadByEmail(ctx, addr)
			return err
		}); err != nil {
			return stop{}, err
		}
		if !found {
			return stop{}, nil
		}
		if hint != "" && hint != strconv.FormatInt(lead.ID, 10) {
			h.log.Warn("smartlead lead id differs from the webhook's; using the platform's", "id", env.ID,
				"webhook_lead_id", hint, "platform_lead_id", lead.ID)
		}
		leadID, campaigns, unsubscribed = lead.ID, lead.CampaignIDs, lead.Unsubscribed
	} else {
		n, err := strconv.ParseInt(hint, 10, 64)
		if err != nil {
			return stop{}, retry.Permanently(Smartlead, fmt.Errorf("lead id %q is not a number", hint))
		}
		leadID = n
	}
	if cid := campaignID(env); env.Provider == Smartlead && cid != "" {
		n, err := strconv.ParseInt(cid, 10, 64)
		if err != nil {
			return stop{}, retry.Permanently(Smartlead, fmt.Errorf("campaign id %q is not a number", cid))
		}
		campaigns = []int64{n}
	}
	s := stop{leadID: strconv.FormatInt(leadID, 10)}
	status := func(cid int64) (cl smartlead.CampaignLead, found bool, err error) {
		err = ev.Call(ctx, Smartlead, func(ctx context.Context) (err error) {
			cl, found, err = c.CampaignLeadStatus(ctx, cid, leadID)
			return err
		})
		return cl, found, err
	}
	for _, cid := range campaigns {
		cl, found, err := status(cid)
		if err != nil {
			return s, err
		}
		if !found {
			// The by-e-mail lookup named the campaign but its listing lacks the lead:
			// removed meanwhile. Nothing to stop in it.
			continue
		}
		s.found = true
		block := optOut(cause) && !unsubscribed && !cl.Unsubscribed
		halt := !cl.Stopped()
		if block {
			if err := ev.Call(ctx, Smartlead, func(ctx context.Context) error { return c.Unsubscribe(ctx, leadID) }); err != nil {
				return s, err
			}
			unsubscribed, s.wrote = true, true
		}
		if halt {
			if err := ev.Call(ctx, Smartlead, func(ctx context.Context) error { return c.PauseLead(ctx, cid, leadID) }); err != nil {
				return s, err
			}
			s.wrote = true
		}
		if !block && !halt {
			continue
		}
		now, found, err := status(cid)
		if err != nil {
			return s, err
		}
		if !found || !now.Stopped() {
			return s, retry.Transiently(Smartlead, fmt.Errorf("lead %d in campaign %d: %w", leadID, cid, errNotYetStopped))
		}
	}
	return s, nil
}

// Run runs the stopper's consumer until ctx ends.
func Run(ctx context.Context, env *service.Env, up func()) error {
	d, err := consumer.NewDeriver(ctx, env.Conn.JS)
	if err != nil {
		return err
	}
	dir, err := contacts.Open(ctx, env.Conn.JS)
	if err != nil {
		return err
	}
	// 8 at once: a stop is the most urgent effect, each one a chain of round trips
	// (lease, guard, read, write, read back, record, derive), and events of one contact
	// still run one at a time.
	return env.Consume(ctx, stream.Stopper, up, consumer.Options{Handle: New(d, env.Platforms.For, dir, env.Log), Dependencies: Dependencies, Workers: 8})
}
