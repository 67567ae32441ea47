// Package handler is the stopper service: on a human reply, an unsubscribe, a spam
// complaint or a bounce it stops the contact's sequence on the sending platform
// (Instantly, Smartlead), and publishes one sequence.stopped per cause event. It is a
// deterministic safety rule: it does not wait for the classifier, so a reply stops the
// sequence even if its classification fails. When a reply's classification comes, it
// raises the lead's label at Instantly to what the reply earned (Interested, Meeting
// Booked), never lowering one.
//
// Rules:
//   - What stops: reply.received and message.received unless Message.Auto (an
//     out-of-office is no human answer); lead.unsubscribed and email.complained;
//     email.bounced unless the bounce is soft (hard and unknown stop). Anything else, and an event naming no
//     e-mail address (a WhatsApp message with only a phone), completes without effect;
//     a HubSpot event naming its contact by id alone (an opt-out) is stopped by the
//     e-mail the contact directory, else HubSpot, gives for that id.
//   - Where: an Instantly or Smartlead event stops the lead on its own platform, in the
//     event's campaign when it names one (else in every campaign the lead is in); a
//     lead confirmed absent there is a permanent error (dead letter with the reason).
//     An event of any other provider (a generic signer's reply, a HubSpot unsubscribe)
//     stops the contact in every sending platform of the tenant where its e-mail is
//     found, in every campaign; found nowhere, there is nothing to stop.
//   - How, per platform, is in instantly.go and smartlead.go: Instantly is read, then
//     written only where it does not stop the lead itself, with a neutral label and
//     never Not Interested, then read back (boundedly); Smartlead is paused without a
//     read (its reference has no per-lead status) and confirmed through the documented
//     filters. Every call goes through Event.Call (pacer, breaker).
//   - The stopper stops sequences; putting an opted-out address on the platforms' own
//     lists (Instantly's block list, Smartlead's global unsubscribe) is the
//     suppressor's, with the tenant-wide suppression list: one writer of each list, so
//     two consumers never race to add the same entry.
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
	"exacto.dev/pkg/retry"
	"exacto.dev/pkg/service"
	"exacto.dev/pkg/stream"
)

// The sending platforms, also the dependency names of Event.Call.
const (
	Instantly = "instantly"
	Smartlead = "smartlead"
)

var (
	meter = otel.Meter("exacto/stopper")
	// sequencesStopped counts stops by cause and whether they came within the cause's
	// SLO (from the cause's receipt at the gateway).
	sequencesStopped, _ = meter.Int64Counter("exacto_sequences_stopped",
		metric.WithDescription("sequences stopped, by cause, status and whether within the cause event's SLO target"))
	// pausesConfirmed counts Smartlead pauses by what the confirming listing showed.
	pausesConfirmed, _ = meter.Int64Counter("exacto_smartlead_pauses",
		metric.WithDescription("Smartlead pauses made, by tenant and whether the campaign's paused leads then showed the lead (confirmed, not_seen, error)"))
)

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
	if email(env) == "" && !smartleadByID(env) && hubspotID(env) == "" {
		return "", "the event names no e-mail address, so no e-mail sequence to stop"
	}
	return cause, ""
}

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

// hubspotID is the HubSpot contact id of a HubSpot event that names its contact by it
// alone (an opt-out): its e-mail is looked up before anything is stopped.
func hubspotID(env envelope.Envelope) string {
	if c := env.Data.Contact; env.Provider == "hubspot" && c != nil && c.Email == "" {
		return c.ExternalID
	}
	return ""
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
	if _, ok := classifiedLabel(env); ok {
		return []string{Instantly}
	}
	if cause, _ := Cause(env); cause == "" {
		return nil
	}
	if hubspotID(env) != "" {
		return append(SendingPlatforms(env), "hubspot")
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
	dir       *contacts.Directory // the e-mail of a contact HubSpot names by id (nil: ask HubSpot)
	log       *slog.Logger
	// What is read of Instantly campaigns once a while (instantly.go).
	campaigns    ofCampaign[instantly.Campaign]
	subsequences ofCampaign[[]instantly.Subsequence]
}

// New returns the stopper's handler. The lead id the platform confirmed rides on the
// sequence.stopped it publishes: the projector links it to the contact from there. dir
// (may be nil) names the e-mail of a contact HubSpot names by its id alone.
func New(d *consumer.Deriver, platforms Platforms, dir *contacts.Directory, log *slog.Logger) consumer.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return (&handler{d: d, platforms: platforms, dir: dir, log: log,
		campaigns: ofCampaign[instantly.Campaign]{ttl: campaignTTL}, subsequences: ofCampaign[[]instantly.Subsequence]{ttl: subsequenceTTL}}).handle
}

func (h *handler) handle(ctx context.Context, ev consumer.Event) error {
	env := ev.Envelope
	if value, ok := classifiedLabel(env); ok {
		clients, known := h.platforms(env.Tenant)
		if !known {
			return retry.Permanently(stream.Stopper, fmt.Errorf("tenant %q is not configured", env.Tenant))
		}
		return h.labelLead(ctx, ev, clients.Instantly, value)
	}
	cause, skip := Cause(env)
	if cause == "" {
		// Most classifications raise no label: a line each at info would be a line for
		// every reply, saying nothing happened.
		level := slog.LevelInfo
		if env.Type == envelope.TypeReplyClassified {
			level = slog.LevelDebug
		}
		h.log.Log(ctx, level, "nothing to stop", "id", env.ID, "type", env.Type, "provider", env.Provider, "why", skip)
		return nil
	}
	clients, ok := h.platforms(env.Tenant)
	if !ok {
		return retry.Permanently(stream.Stopper, fmt.Errorf("tenant %q is not configured", env.Tenant))
	}
	if id := hubspotID(env); id != "" {
		addr, err := h.dir.EmailOf(ctx, env.Tenant, "hubspot:"+id, askHubSpot(ev, clients, id))
		if err != nil {
			return fmt.Errorf("the e-mail of HubSpot contact %s: %w", id, err)
		}
		if addr == "" {
			h.log.Info("nothing to stop", "id", env.ID, "type", env.Type, "provider", env.Provider,
				"why", "HubSpot knows no e-mail of contact "+id)
			return nil
		}
		c := *env.Data.Contact
		c.Email = addr
		env.Data.Contact = &c
		ev.Envelope = env
	}
	stops := map[string]stop{}
	var errs []error
	for _, p := range SendingPlatforms(env) { // each on every attempt: one down holds no other
		var s stop
		var err error
		switch p {
		case Instantly:
			s, err = h.instantly(ctx, ev, clients.Instantly, cause)
		case Smartlead:
			s, err = h.smartlead(ctx, ev, clients.Smartlead)
		}
		if err == nil && !s.found && p == env.Provider {
			where := ""
			if c := campaignID(env); c != "" {
				where = " in campaign " + c
			}
			err = retry.Permanently(p, fmt.Errorf("lead %s confirmed absent at %s%s: the event's lead does not exist there",
				contactName(env), p, where))
		}
		errs = append(errs, err)
		if s.found {
			stops[p] = s
		}
	}
	if err := combine(errs...); err != nil {
		return err
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
	h.log.InfoContext(ctx, "sequence stopped", "id", env.ID, "cause", cause, "status", status, "platforms", slices.Sorted(maps.Keys(stops)))
	class, within := ev.SLO()
	ev.Completed(ctx, func(ctx context.Context) { // once per event, however many attempts
		sequencesStopped.Add(ctx, 1, ev.MetricAttrs(attribute.String("cause", cause), attribute.String("status", status),
			attribute.String("slo_class", class), attribute.Bool("within_slo", within)))
	})
	return h.d.Publish(ctx, envelope.Derive(env, stream.Stopper, envelope.TypeSequenceStopped, data, time.Now()))
}

// askHubSpot asks HubSpot for the e-mail of contact id (nil when the tenant has no
// HubSpot account: only the directory can tell).
func askHubSpot(ev consumer.Event, clients accounts.Clients, id string) func(context.Context) (string, error) {
	if clients.HubSpot == nil {
		return nil
	}
	return func(ctx context.Context) (email string, err error) {
		err = ev.Call(ctx, "hubspot", func(ctx context.Context) (err error) {
			email, err = clients.HubSpot.EmailOf(ctx, id)
			return err
		})
		return email, err
	}
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

// Run runs the stopper's consumer until ctx ends.
func Run(ctx context.Context, env *service.Env, up func()) error {
	d, err := env.Deriver(ctx)
	if err != nil {
		return err
	}
	gate, err := env.Gate(ctx)
	if err != nil {
		return err
	}
	for _, t := range env.Config.TenantIDs() { // visible at 0 from the start
		for _, o := range []string{"confirmed", "not_seen", "error"} {
			pausesConfirmed.Add(ctx, 0, metric.WithAttributes(attribute.String("tenant", t), attribute.String("outcome", o)))
		}
	}
	// Its workers (pkg/stream: 32) are many: a stop is the most urgent effect, each one
	// a chain of round trips (guard, read, write, read back, record, derive), and events
	// of one contact still run one at a time.
	dir, err := contacts.Open(ctx, env.Conn.JS)
	if err != nil {
		return err
	}
	h := gate.Wrap(Acts, New(d, env.Platforms.For, dir, env.Log))
	return env.Consume(ctx, stream.Stopper, up, consumer.Options{Handle: h, Acts: Acts, Dependencies: Dependencies})
}

// Acts says which events the stopper acts on (what an unsigned one must first be
// confirmed for, and what its consumer keeps a guard record of): a stop's cause, or a
// classification that raises a label. The handler does nothing with any other.
func Acts(env envelope.Envelope) bool {
	if _, ok := classifiedLabel(env); ok {
		return true
	}
	cause, _ := Cause(env)
	return cause != ""
}

// The console and `exacto events show` tell an event Acts leaves alone by it: it has
// no guard record (consumer.Statuses.OfEvent).
func init() { consumer.DeclareActs(stream.Stopper, Acts) }

// combine is the error of several independent effects of one event (nil when none
// failed): transient when any is (the event is tried again, and what succeeded is
// found done), else the first permanent one; the message names every failure.
func combine(errs ...error) error {
	errs = slices.DeleteFunc(errs, func(err error) bool { return err == nil })
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	pick := retry.Of(errs[0])
	for _, err := range errs {
		if e := retry.Of(err); e.Class == retry.Transient {
			pick = e
			break
		}
	}
	e := *pick
	e.Err = errors.Join(errs...)
	return &e
}
