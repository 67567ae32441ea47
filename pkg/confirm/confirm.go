// Package confirm confirms an unsigned event at its source before any effect is made
// of it. Instantly and Smartlead sign nothing: a delivery to their endpoint is
// authenticated by a path token (or a static header, or a secret in the body), which
// proves the sender knew the URL, not that the event happened — a URL is no
// authentication. Such an event (envelope "signed": false) is a hint: before a consumer
// stops a sequence, suppresses a contact, blocks an address or writes the CRM because
// of it, the platform is asked whether it holds what the event says (source.go): the
// reply among the lead's e-mails, the unsubscribe or the bounce on the lead.
//
// A consumer's handler is wrapped in a Gate (Wrap). For an event the handler acts on:
//
//   - signed events, and facts read from a platform's own API (the reconciler's,
//     authmethod source_api), pass;
//   - a derived event (reply.classified) is confirmed as its cause;
//   - the verdict of an event is kept (stream.Confirmations, memory storage, one day):
//     the first consumer to ask answers for all, one question per event;
//   - confirmed: the handler runs, and finds the source's own text of a reply in its
//     context (Text), so what reaches the CRM or the classifier is what the lead wrote,
//     never what the webhook claims;
//   - not confirmed: the attempt fails transiently (the platform may not show it yet)
//     for a while (Window, Asks); then the event is not acted on: a review item (diff queue,
//     kind unconfirmed_event: the event, the reason, what the source said) is recorded
//     once, counted (exacto_unconfirmed_events) and alerted, and the attempt completes.
//     Nothing is lost — the event stays in the history and the item holds it — and
//     nothing forged reaches a platform. An operator who confirms it at the platform
//     approves the item: a copy of the event, signed by that decision, is published and
//     acted on like any event.
package confirm

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform/accounts"
	"exacto.dev/pkg/reconcile"
	"exacto.dev/pkg/retry"
	"exacto.dev/pkg/stream"
)

// Kind is the review item's kind in the diff queue.
const Kind = "unconfirmed_event"

// An event its source does not show is asked about again, on the consumer's next
// attempts, until Window has passed since the gateway received it and at least Asks
// asks were made — a platform may show a reply or an unsubscribe some time after its
// webhook fires — or the consumer's last attempt comes; only then is it concluded
// unconfirmed. Window is a variable for tests only.
var Window = time.Minute

// Asks is the fewest asks before an event is concluded unconfirmed.
const Asks = 2

// final reports whether a verdict that does not confirm subject ends the asking.
func final(ev consumer.Event, subject envelope.Envelope) bool {
	return ev.Last || (ev.Attempt >= Asks && time.Since(subject.ReceivedAt) >= Window)
}

// indexLag is how long a derived event's cause may be missing from the event index
// because the index writer has not caught up (it trails the stream by moments).
const indexLag = 10 * time.Minute

// Operator is the worker name of the copy an operator's approval publishes.
const Operator = "operator"

var unconfirmed, _ = otel.Meter("exacto/confirm").Int64Counter("exacto_unconfirmed_events",
	metric.WithDescription("unsigned events their source did not confirm, kept for review and not acted on, by tenant, provider and type"))

// Verdict is what the source said of an event.
type Verdict struct {
	Confirmed bool      `json:"confirmed"`
	Said      string    `json:"said"`
	Text      string    `json:"text,omitempty"` // a reply's text as the source holds it
	At        time.Time `json:"at"`
}

// Needs reports whether env is a hint to confirm before acting on it: unsigned, and
// not read from the platform's own API. A derived event is as its cause.
func Needs(env envelope.Envelope) bool {
	return !env.Signed && env.AuthMethod != envelope.AuthSourceAPI
}

// Gate confirms the events of one consumer.
type Gate struct {
	// Sources are each tenant's platform clients.
	Sources func(tenant string) (accounts.Clients, bool)
	// Verdicts keeps each event's final verdict (stream.Confirmations).
	Verdicts jetstream.KeyValue
	// JS loads a derived event's cause from EXACTO_EVENTS.
	JS jetstream.JetStream
	// Review is the diff queue the review items go to.
	Review *reconcile.Queue
	// Publish stores a derived event: the event.unconfirmed of each event concluded
	// unconfirmed, so the projections, rebuilt from the stream alone, do not count it.
	Publish func(ctx context.Context, env envelope.Envelope) error
	Log     *slog.Logger

	// What this process knows of the verdicts: each one kept or read (a kept verdict
	// never changes), and the asks in flight, so that the consumers of one process that
	// need one event's verdict ask its source once and read the bucket once.
	mu     sync.Mutex
	known  map[string]Verdict
	asking map[string]chan struct{}
	// knownFor is how long a verdict is remembered at most (the constant knownFor when
	// zero): a generation of them is dropped whole that long after it began.
	knownFor time.Duration
	knownGen uint64
}

// knownMax and knownFor bound the verdicts a Gate remembers, in number and in time: a
// reply's text rides on its verdict, and an erasure (pkg/privacy) reaches the bucket,
// not a process's memory. The consumers of an event ask within moments of each other,
// and a verdict forgotten is read again from the bucket.
const (
	knownMax = 4096
	knownFor = time.Minute
)

// Open builds a gate over the deployment's buckets, for tenants.
func Open(ctx context.Context, js jetstream.JetStream, tenants []string, sources func(string) (accounts.Clients, bool), log *slog.Logger) (*Gate, error) {
	kv, err := js.KeyValue(ctx, stream.Confirmations)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", stream.Confirmations, err)
	}
	q, err := reconcile.OpenQueue(ctx, js)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The count is visible at 0 from the start, so an alert on its increase works
	// before the first forgery.
	for _, t := range tenants {
		for _, p := range []string{"instantly", "smartlead"} {
			for _, typ := range []string{envelope.TypeReplyReceived, envelope.TypeLeadUnsubscribed, envelope.TypeEmailBounced} {
				unconfirmed.Add(ctx, 0, metric.WithAttributes(attribute.String("tenant", t), attribute.String("provider", p), attribute.String("type", typ)))
			}
		}
	}
	d, err := consumer.NewDeriver(ctx, js)
	if err != nil {
		return nil, err
	}
	return &Gate{Sources: sources, Verdicts: kv, JS: js, Review: q, Publish: d.Publish, Log: log}, nil
}

type textKey struct{}

// Text is the reply's text as its source holds it, when the event was confirmed there.
func Text(ctx context.Context) (string, bool) {
	t, ok := ctx.Value(textKey{}).(string)
	return t, ok
}

// Wrap confirms, before next runs, every event acts says next acts on.
func (g *Gate) Wrap(acts func(envelope.Envelope) bool, next consumer.Handler) consumer.Handler {
	return func(ctx context.Context, ev consumer.Event) error {
		env := ev.Envelope
		if !acts(env) || !Needs(env) {
			return next(ctx, ev)
		}
		v, subject, err := g.judge(ctx, ev)
		if err != nil {
			return err
		}
		if v == nil { // its cause is signed, or read from the platform
			return next(ctx, ev)
		}
		if v.Confirmed {
			if v.Text != "" {
				ctx = context.WithValue(ctx, textKey{}, v.Text)
			}
			return next(ctx, ev)
		}
		g.Log.WarnContext(ctx, "unsigned event not confirmed at its source: not acted on", "id", env.ID, "subject", subject,
			"provider", env.Provider, "type", env.Type, "said", v.Said)
		return nil
	}
}

// judge is the verdict on ev's event, of the event it depends on (subject: itself, or
// a derived event's cause), nil when that needs none.
func (g *Gate) judge(ctx context.Context, ev consumer.Event) (v *Verdict, subject string, err error) {
	env := ev.Envelope
	if env.AuthMethod != envelope.AuthDerived || env.Data.Cause == "" {
		kept, err := g.verdict(ctx, ev, env)
		return &kept, env.ID, err
	}
	// A derived event is as its cause, whose verdict is usually kept already (the
	// classifier confirmed the reply before classifying it): no need to load it.
	subject = env.Data.Cause
	if kept, ok, err := g.kept(ctx, env.Tenant+"."+subject); err != nil || ok {
		return &kept, subject, err
	}
	cause, found, err := stream.Load(ctx, g.JS, subject)
	if err != nil {
		return nil, subject, retry.Transiently("confirm", fmt.Errorf("load cause %s: %w", subject, err))
	}
	if !found && time.Since(env.ReceivedAt) < indexLag {
		// The index is written just after the stream: the cause is there in a moment.
		return nil, subject, retry.Transiently("confirm", fmt.Errorf("cause %s of %s is not in the event index yet", subject, env.ID))
	}
	if !found {
		// Older than the index keeps (a dead letter replayed days later): nothing left
		// to confirm it by, so a person decides (its own review item).
		kept, err := g.verdict(ctx, ev, env)
		return &kept, env.ID, err
	}
	if !Needs(cause) {
		return nil, subject, nil
	}
	kept, err := g.verdict(ctx, ev, cause)
	return &kept, subject, err
}

// verdict is subject's final verdict: kept, or asked now. A verdict that does not
// confirm is final only once final says so; before, the attempt fails transiently so
// the source is asked again.
func (g *Gate) verdict(ctx context.Context, ev consumer.Event, subject envelope.Envelope) (Verdict, error) {
	key := subject.Tenant + "." + subject.ID
	done, leader := g.lead(key)
	if leader {
		defer g.unlead(key, done)
	} else {
		// Another consumer of this process is asking: its verdict, once kept, is ours.
		waited := ev.Awaiting(subject.Provider)
		select {
		case <-done:
			waited()
		case <-ctx.Done():
			waited()
			return Verdict{}, retry.Transiently("confirm", ctx.Err())
		}
	}
	if v, ok, err := g.kept(ctx, key); err != nil || ok {
		if err == nil && !v.Confirmed {
			err = g.reviewed(ctx, subject, v)
		}
		return v, err
	}
	var v Verdict
	var err error
	clients, known := g.Sources(subject.Tenant)
	switch {
	case !known:
		return Verdict{}, retry.Permanently("confirm", fmt.Errorf("tenant %q has no platforms to confirm %s at", subject.Tenant, subject.ID))
	case !Askable(subject):
		v = Verdict{Said: fmt.Sprintf("%s keeps no trace of %s that Exacto can read", subject.Provider, subject.Type)}
	default:
		v, err = Ask(ctx, ev.Call, clients, subject)
		if err != nil {
			return Verdict{}, fmt.Errorf("confirm %s at %s: %w", subject.ID, subject.Provider, err)
		}
	}
	v.At = time.Now().UTC()
	if !v.Confirmed && !final(ev, subject) && Askable(subject) {
		return Verdict{}, retry.Transiently(subject.Provider, fmt.Errorf("%s not confirmed at %s yet: %s", subject.ID, subject.Provider, v.Said))
	}
	// The first verdict kept is every consumer's: two consumers concluding at once
	// (one seeing the reply, one not yet) act alike.
	data, _ := json.Marshal(v)
	_, err = g.Verdicts.Create(ctx, key, data)
	if err == nil {
		g.remember(key, v)
	}
	if errors.Is(err, jetstream.ErrKeyExists) {
		if v, ok, err := g.kept(ctx, key); err != nil || ok {
			if err == nil && !v.Confirmed {
				err = g.reviewed(ctx, subject, v)
			}
			return v, err
		}
	} else if err != nil {
		// Only the sharing is lost: the next consumer asks again.
		g.Log.WarnContext(ctx, "verdict not kept", "id", subject.ID, "err", err)
	}
	if !v.Confirmed {
		if err := g.review(ctx, subject, v); err != nil {
			return Verdict{}, err
		}
	}
	return v, nil
}

// remember notes v as the verdict kept under key.
func (g *Gate) remember(key string, v Verdict) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.known == nil || len(g.known) >= knownMax {
		g.known = map[string]Verdict{}
		g.knownGen++
		gen := g.knownGen
		time.AfterFunc(cmp.Or(g.knownFor, knownFor), func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.knownGen == gen {
				g.known = nil
			}
		})
	}
	g.known[key] = v
}

// lead makes the caller the one who asks the source of key's event, or returns what
// closes when the one asking now is done (leader false).
func (g *Gate) lead(key string) (done chan struct{}, leader bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if done, ok := g.asking[key]; ok {
		return done, false
	}
	if g.asking == nil {
		g.asking = map[string]chan struct{}{}
	}
	done = make(chan struct{})
	g.asking[key] = done
	return done, true
}

func (g *Gate) unlead(key string, done chan struct{}) {
	g.mu.Lock()
	delete(g.asking, key)
	g.mu.Unlock()
	close(done)
}

// kept is the verdict kept under key, ok false when there is none.
func (g *Gate) kept(ctx context.Context, key string) (Verdict, bool, error) {
	g.mu.Lock()
	v, ok := g.known[key]
	g.mu.Unlock()
	if ok {
		return v, true, nil
	}
	e, err := g.Verdicts.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Verdict{}, false, nil
	}
	if err != nil {
		return Verdict{}, false, retry.Transiently("confirm", fmt.Errorf("verdict %s: %w", key, err))
	}
	if json.Unmarshal(e.Value(), &v) != nil {
		return Verdict{}, false, nil
	}
	g.remember(key, v)
	return v, true, nil
}

// reviewed makes sure subject's review item is recorded: one an earlier attempt failed
// to record after keeping the verdict is not lost.
func (g *Gate) reviewed(ctx context.Context, subject envelope.Envelope, v Verdict) error {
	_, recorded, err := g.Review.Get(ctx, subject.Tenant, reconcile.FindingID(Kind, subject.Tenant, subject.Provider, subject.ID))
	if err == nil && !recorded {
		err = g.review(ctx, subject, v)
	}
	if err != nil {
		return retry.Transiently("confirm", fmt.Errorf("review item of %s: %w", subject.ID, err))
	}
	return nil
}

// review puts subject's event.unconfirmed on the stream, then records subject as a
// review item, once, and counts it when new.
func (g *Gate) review(ctx context.Context, subject envelope.Envelope, v Verdict) error {
	if g.Publish != nil {
		if err := g.Publish(ctx, Unconfirmed(subject, v)); err != nil {
			return retry.Transiently("confirm", fmt.Errorf("event.unconfirmed of %s: %w", subject.ID, err))
		}
	}
	f := Finding(subject, v)
	isNew, err := g.Review.Report(ctx, &f)
	if err != nil {
		return retry.Transiently("confirm", fmt.Errorf("review item of %s: %w", subject.ID, err))
	}
	if isNew {
		unconfirmed.Add(ctx, 1, metric.WithAttributes(attribute.String("tenant", subject.Tenant),
			attribute.String("provider", subject.Provider), attribute.String("type", subject.Type)))
	}
	return nil
}

// Unconfirmed is the event.unconfirmed of subject (one id whoever concludes it). It
// names subject's contact by the key the lifecycle files it under and nothing more:
// what a forgery claims links no ids.
func Unconfirmed(subject envelope.Envelope, v Verdict) envelope.Envelope {
	data := envelope.Data{ProviderType: envelope.TypeEventUnconfirmed, Status: cmp.Or(v.Said, "not confirmed"), Campaign: subject.Data.Campaign}
	if c := subject.Data.Contact; c != nil {
		switch {
		case c.Email != "":
			data.Contact = &envelope.Contact{Email: c.Email}
		case c.Phone != "":
			data.Contact = &envelope.Contact{Phone: c.Phone}
		default:
			data.Contact = &envelope.Contact{ExternalID: c.ExternalID}
		}
	}
	return envelope.Derive(subject, "confirm", envelope.TypeEventUnconfirmed, data, v.At)
}

// Finding is the review item of an event its source did not confirm: where it came
// from, what it claims, what the source said, and — approved once a person confirmed
// it at the platform — a copy of it signed by that decision.
func Finding(subject envelope.Envelope, v Verdict) reconcile.Finding {
	contact, campaign := "", ""
	if c := subject.Data.Contact; c != nil {
		contact = cmp.Or(c.Email, c.Phone, c.ExternalID)
	}
	if c := subject.Data.Campaign; c != nil {
		campaign = c.ID
	}
	approved := envelope.Derive(subject, Operator, subject.Type, subject.Data, v.At)
	approved.Time, approved.Signed = subject.Time, true
	return reconcile.Finding{
		ID: reconcile.FindingID(Kind, subject.Tenant, subject.Provider, subject.ID), Kind: Kind,
		Tenant: subject.Tenant, Provider: subject.Provider, Contact: contact, Campaign: campaign,
		Where: fmt.Sprintf("%s event %s (%s) on endpoint %s, unsigned (%s)", subject.Provider, subject.ID, subject.Type,
			subject.Endpoint, subject.AuthMethod),
		Found: fmt.Sprintf("the webhook says %s of %s%s at %s; %s says: %s", subject.Type, contact, inCampaign(campaign),
			subject.Time.UTC().Format(time.RFC3339), subject.Provider, v.Said),
		Repair: "nothing was done: no consumer acts on it. Confirm it at " + subject.Provider +
			"; approving publishes a copy signed by your decision, which the consumers act on",
		Status: reconcile.StatusOpen, Proposed: &approved, FirstSeen: v.At, LastSeen: v.At, Passes: 1,
	}
}
