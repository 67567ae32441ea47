// Package handler is the projector service: every event on EXACTO_EVENTS (provider
// events and derived ones) is merged into the contacts, campaigns and suppression
// projections (pkg/projection), through its own durable consumer.
//
// A transition the lifecycle table forbids is not applied: it is a discrepancy, logged,
// counted (exacto_projector_discrepancies) and kept in the contact's lifecycle view.
// Where two events cannot be ordered from themselves (equal times, no version), the
// projection uses a deterministic tie-break and the projector asks the source of truth
// (the sending platform, or HubSpot for HubSpot's events, through its client) what the
// contact's state is, logs what it found beside the pair (exacto_projector_undecided)
// and counts the answer (exacto_projector_source_answers), once per event however many
// pairs it left undecided: an effect that depends on that order reads the platform,
// never the tie-break.
package handler

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform/accounts"
	"exacto.dev/pkg/platform/hubspot"
	"exacto.dev/pkg/projection"
	"exacto.dev/pkg/service"
	"exacto.dev/pkg/stream"
)

var (
	meter            = otel.Meter("exacto/projector")
	discrepancies, _ = meter.Int64Counter("exacto_projector_discrepancies",
		metric.WithDescription("events the lifecycle table did not apply, by tenant, provider, type and rule"))
	undecided, _ = meter.Int64Counter("exacto_projector_undecided",
		metric.WithDescription("pairs of events whose order the events alone cannot decide, by tenant and provider"))
	sourceAnswers, _ = meter.Int64Counter("exacto_projector_source_answers",
		metric.WithDescription("what the source (Instantly, Smartlead, HubSpot) answered about an undecided pair's contact, by tenant, platform and answer (found, not_found, error, not_asked)"))
)

// Options configure the handler.
type Options struct {
	Stores projection.Stores
	Dir    *contacts.Directory
	// Platforms, if set, is asked about contacts whose events cannot be ordered.
	Platforms func(tenant string) (accounts.Clients, bool)
	Log       *slog.Logger
}

// New returns the projector's handler.
func New(o Options) consumer.Handler {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return func(ctx context.Context, ev consumer.Event) error {
		env := ev.Envelope
		res, err := projection.Apply(ctx, o.Stores, o.Dir, env)
		if err != nil {
			return err
		}
		for _, d := range res.Discrepancies {
			discrepancies.Add(ctx, 1, metric.WithAttributes(attribute.String("tenant", env.Tenant), attribute.String("provider", env.Provider),
				attribute.String("type", d.Type), attribute.String("rule", string(d.Rule))))
			o.Log.Warn("lifecycle discrepancy", "contact_id", res.Contact.ContactID, "event", d.Event, "type", d.Type,
				"would_be", d.Target, "state", d.State, "against", d.Against, "rule", d.Rule, "why", d.Why)
		}
		if len(res.Undecided) == 0 {
			return nil
		}
		// Every pair the event left undecided is about the same contact at the same
		// source: one question (platform searches are rate-limited and paced), one answer
		// counted, logged beside each pair.
		a := askSource(ctx, ev, o.Platforms, env)
		sourceAnswers.Add(ctx, 1, metric.WithAttributes(attribute.String("tenant", env.Tenant), attribute.String("platform", a.platform),
			attribute.String("answer", a.outcome)))
		for _, u := range res.Undecided {
			undecided.Add(ctx, 1, metric.WithAttributes(attribute.String("tenant", env.Tenant), attribute.String("provider", env.Provider)))
			o.Log.Warn("events cannot be ordered; asking the source", "contact_id", res.Contact.ContactID, "a", u.A, "b", u.B, "why", u.Why,
				"source", a.String(), "answer", a.outcome)
		}
		return nil
	}
}

// Outcomes of asking the source about an undecided pair (exacto_projector_source_answers).
const (
	Found    = "found"     // the platform knows the contact: its state is in the log
	NotFound = "not_found" // the platform has no such lead or contact
	Failed   = "error"     // the platform did not answer
	NotAsked = "not_asked" // no client, no way to name the contact, or no source for the provider
)

// answer is what the source said about an undecided pair's contact.
type answer struct {
	platform, outcome string
	text              string // for the log
}

func (a answer) String() string {
	if a.outcome == NotAsked {
		return "not asked: " + a.text
	}
	return a.platform + ": " + a.text
}

// askSource reads the contact's state at the source of the pair: the sending platform
// (Instantly, Smartlead) or the CRM (HubSpot), for the log beside an undecided pair and
// the count of answers: what the source says is the truth the tie-break may contradict.
func askSource(ctx context.Context, ev consumer.Event, platforms func(string) (accounts.Clients, bool), env envelope.Envelope) answer {
	email, id := "", ""
	if c := env.Data.Contact; c != nil {
		email, id = contacts.NormalizeEmail(c.Email), c.ExternalID
	}
	if platforms == nil {
		return answer{env.Provider, NotAsked, "no platform client"}
	}
	c, ok := platforms(env.Tenant)
	if !ok {
		return answer{env.Provider, NotAsked, "tenant has no platforms"}
	}
	var a answer
	call := func(fn func(ctx context.Context) error) answer {
		a.platform = env.Provider
		if err := ev.Call(ctx, env.Provider, fn); err != nil {
			return answer{env.Provider, Failed, err.Error()}
		}
		return a
	}
	switch {
	case env.Provider == "instantly" && email != "":
		return call(func(ctx context.Context) error {
			found, err := c.Instantly.FindLeads(ctx, "", email)
			var leads []string
			for _, l := range found {
				leads = append(leads, "campaign "+l.Campaign+" status "+strconv.Itoa(l.Status))
			}
			a.outcome, a.text = outcome(len(leads) > 0), strconv.Quote(fmtList(leads, "no lead"))
			return err
		})
	case env.Provider == "smartlead" && email != "":
		return call(func(ctx context.Context) error {
			l, found, err := c.Smartlead.LeadByEmail(ctx, email)
			a.outcome, a.text = outcome(found), "not a lead"
			if found {
				a.text = "lead " + strconv.FormatInt(l.ID, 10) + " unsubscribed=" + strconv.FormatBool(l.Unsubscribed)
			}
			return err
		})
	case env.Provider == "hubspot" && (email != "" || id != ""):
		// HubSpot is the source of its own contacts' properties: read the contact's
		// lifecycle stage, lead status and the property the event changed.
		f := hubspot.Filter{PropertyName: "email", Operator: "EQ", Value: email}
		if id != "" {
			f = hubspot.Filter{PropertyName: "hs_object_id", Operator: "EQ", Value: id}
		}
		props := []string{"lifecyclestage", "hs_lead_status"}
		if p := env.Data.Property; p != nil && p.Name != "" && !slices.Contains(props, p.Name) {
			props = append(props, p.Name)
		}
		return call(func(ctx context.Context) error {
			found, err := c.HubSpot.Search(ctx, "contacts", []hubspot.Filter{f}, props, 10)
			var out []string
			for _, o := range found {
				l := "contact " + o.ID
				for _, p := range props {
					l += " " + p + "=" + strconv.Quote(o.Properties[p])
				}
				out = append(out, l)
			}
			a.outcome, a.text = outcome(len(out) > 0), fmtList(out, "no contact")
			return err
		})
	case env.Provider == "instantly" || env.Provider == "smartlead" || env.Provider == "hubspot":
		return answer{env.Provider, NotAsked, "the event names the contact by nothing " + env.Provider + " can find it by"}
	}
	return answer{env.Provider, NotAsked, env.Provider + " is not a source the projector asks"}
}

func outcome(found bool) string {
	if found {
		return Found
	}
	return NotFound
}

func fmtList(l []string, none string) string {
	if len(l) == 0 {
		return none
	}
	return strings.Join(l, "; ")
}

// Run runs the projector's consumer until ctx ends.
func Run(ctx context.Context, env *service.Env, up func()) error {
	stores, err := projection.Open(ctx, env.Conn.JS, "", env.Config.NATS.Replicas)
	if err != nil {
		return err
	}
	n, unreadable, err := projection.SplitShards(ctx, stores)
	if err != nil {
		return fmt.Errorf("projector: moving an earlier build's campaign shards: %w", err)
	}
	if n > 0 {
		env.Log.Info("projector: moved an earlier build's campaign shards into 4,096 a campaign", "shards", n)
	}
	if len(unreadable) > 0 {
		env.Log.Warn("projector: an earlier build's campaign shards could not be read and stay as they are", "shards", unreadable)
	}
	stores = projection.Remembering(stores) // this process writes them: what it wrote is not read back
	dir, err := contacts.Open(ctx, env.Conn.JS)
	if err != nil {
		return err
	}
	cp, err := openCheckpoints(ctx, env.Conn.JS, env.Log)
	if err != nil {
		return err
	}
	if cp != nil {
		n, err := cp.recover(ctx, stores, dir)
		if err != nil {
			return fmt.Errorf("projector: applying again what a stop may have lost: %w", err)
		}
		if n > 0 {
			env.Log.Info("projector: applied again the events since the last checkpoint", "events", n)
		}
		kctx, stopKeeping := context.WithCancel(ctx)
		kept := make(chan struct{})
		go func() { cp.keep(kctx); close(kept) }()
		defer func() { stopKeeping(); <-kept }()
	}
	h := New(Options{Stores: stores, Dir: dir, Platforms: env.Platforms.For, Log: env.Log})
	for _, t := range env.Config.Tenants {
		// At 0 from the start, so that rate() and absence alerts work.
		at := metric.WithAttributes(attribute.String("tenant", t.ID))
		discrepancies.Add(ctx, 0, at)
		undecided.Add(ctx, 0, at)
	}
	return env.Consume(ctx, stream.Projector, up, consumer.Options{Handle: h})
}
