// Package handler is the projector service: every event on EXACTO_EVENTS (provider
// events and derived ones) is merged into the contacts, campaigns and suppression
// projections (pkg/projection), through its own durable consumer.
//
// A transition the lifecycle table forbids is not applied: it is a discrepancy, logged,
// counted (exacto_projector_discrepancies) and kept in the contact's lifecycle view.
// Where two events cannot be ordered from themselves (equal times, no version), the
// projection uses a deterministic tie-break and the projector asks the source of truth
// (the sending platform, through its client) what the contact's state is, and logs
// what it found beside the pair (exacto_projector_undecided): an effect that depends on
// that order reads the platform, never the tie-break.
package handler

import (
	"context"
	"log/slog"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform/accounts"
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
		for _, u := range res.Undecided {
			undecided.Add(ctx, 1, metric.WithAttributes(attribute.String("tenant", env.Tenant), attribute.String("provider", env.Provider)))
			o.Log.Warn("events cannot be ordered; asking the source", "contact_id", res.Contact.ContactID, "a", u.A, "b", u.B, "why", u.Why,
				"source", askSource(ctx, ev, o.Platforms, env))
		}
		return nil
	}
}

// askSource reads the contact's state at its sending platform, for the log beside an
// undecided pair: what the platform says is the truth the tie-break may contradict.
func askSource(ctx context.Context, ev consumer.Event, platforms func(string) (accounts.Clients, bool), env envelope.Envelope) string {
	email := ""
	if c := env.Data.Contact; c != nil {
		email = contacts.NormalizeEmail(c.Email)
	}
	if platforms == nil || email == "" {
		return "not asked: no platform client or no e-mail"
	}
	c, ok := platforms(env.Tenant)
	if !ok {
		return "not asked: tenant has no platforms"
	}
	switch env.Provider {
	case "instantly":
		var leads []string
		err := ev.Call(ctx, "instantly", func(ctx context.Context) error {
			found, err := c.Instantly.FindLeads(ctx, "", email)
			for _, l := range found {
				leads = append(leads, "campaign "+l.Campaign+" status "+strconv.Itoa(l.Status))
			}
			return err
		})
		if err != nil {
			return "instantly: " + err.Error()
		}
		return "instantly: " + strconv.Quote(fmtList(leads))
	case "smartlead":
		var out string
		err := ev.Call(ctx, "smartlead", func(ctx context.Context) error {
			l, found, err := c.Smartlead.LeadByEmail(ctx, email)
			out = "not a lead"
			if found {
				out = "lead " + strconv.FormatInt(l.ID, 10) + " unsubscribed=" + strconv.FormatBool(l.Unsubscribed)
			}
			return err
		})
		if err != nil {
			return "smartlead: " + err.Error()
		}
		return "smartlead: " + out
	}
	return "not asked: " + env.Provider + " is not a sending platform"
}

func fmtList(l []string) string {
	if len(l) == 0 {
		return "no lead"
	}
	out := l[0]
	for _, s := range l[1:] {
		out += "; " + s
	}
	return out
}

// Run runs the projector's consumer until ctx ends.
func Run(ctx context.Context, env *service.Env, up func()) error {
	stores, err := projection.Open(ctx, env.Conn.JS, "", env.Config.NATS.Replicas)
	if err != nil {
		return err
	}
	dir, err := contacts.Open(ctx, env.Conn.JS)
	if err != nil {
		return err
	}
	h := New(Options{Stores: stores, Dir: dir, Platforms: env.Platforms.For, Log: env.Log})
	for _, t := range env.Config.Tenants {
		// At 0 from the start, so that rate() and absence alerts work.
		at := metric.WithAttributes(attribute.String("tenant", t.ID))
		discrepancies.Add(ctx, 0, at)
		undecided.Add(ctx, 0, at)
	}
	return env.Consume(ctx, stream.Projector, up, consumer.Options{Handle: h, Workers: 4})
}
