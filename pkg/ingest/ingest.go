// Package ingest turns a verified webhook delivery into stored events: the endpoint's
// provider splits and normalises it, each event becomes its envelope (a deterministic
// id), and the envelopes not stored yet are published to EXACTO_EVENTS with
// Nats-Msg-Id. The gateway runs it on every delivery it has verified; the quarantine's
// replay runs it on a delivery the gateway kept, so a replayed event is exactly the
// event the gateway would have stored.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/privacy"
	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/providers/registry"
	"exacto.dev/pkg/stream"
)

// Endpoint is one configured endpoint, built: its provider's verifier and normaliser.
type Endpoint struct {
	Tenant, ID string
	Spec       providers.Spec
	Provider   providers.Provider
	AuthMethod string // the envelope's authmethod
	// SecretHeaders are the request headers that carry this endpoint's secret or
	// signature: never kept.
	SecretHeaders []string
	// Credentials are the endpoint's path token and secrets: never kept, wherever they
	// appear (a proxy's X-Forwarded-Uri holds the path token).
	Credentials []string
	// MaxEventAge is how old an event may be when it arrives (Spec.MaxEventAge): an
	// older one is past the provider's retries, a replay of a captured delivery.
	MaxEventAge time.Duration
}

// NewEndpoint builds endpoint ec of tenant.
func NewEndpoint(tenant string, ec *config.Endpoint) (*Endpoint, error) {
	spec, ok := registry.Lookup(ec.Provider)
	if !ok {
		return nil, fmt.Errorf("endpoint %s: unknown provider %q", ec.ID, ec.Provider)
	}
	p, err := spec.New(ec.ProviderConfig())
	if err != nil {
		return nil, fmt.Errorf("endpoint %s: %w", ec.ID, err)
	}
	ep := &Endpoint{Tenant: tenant, ID: ec.ID, Spec: spec, Provider: p, AuthMethod: spec.Auth(ec.ProviderConfig()),
		MaxEventAge: spec.MaxEventAge(ec.MaxEventAge)}
	ep.SecretHeaders = append(ep.SecretHeaders, spec.SignatureHeaders...)
	if ec.SecretHeader != "" {
		ep.SecretHeaders = append(ep.SecretHeaders, ec.SecretHeader)
	}
	if ec.Generic != nil && ec.Generic.Header != "" {
		ep.SecretHeaders = append(ep.SecretHeaders, ec.Generic.Header)
	}
	for _, s := range append(append([]config.Secret{ec.PathToken}, ec.Secrets...), ec.SigningSecrets...) {
		if s.Value != "" {
			ep.Credentials = append(ep.Credentials, s.Value)
		}
	}
	return ep, nil
}

// FindEndpoint builds endpoint id of tenant as cfg configures it now.
func FindEndpoint(cfg *config.Config, tenant, id string) (*Endpoint, error) {
	for _, t := range cfg.Tenants {
		for i := range t.Endpoints {
			if t.ID == tenant && t.Endpoints[i].ID == id {
				return NewEndpoint(tenant, &t.Endpoints[i])
			}
		}
	}
	return nil, fmt.Errorf("the config (%s) has no endpoint %s of tenant %s", cfg.Source, id, tenant)
}

// Reasons a verified delivery is refused for its content (Refusal.Reason); each is
// also the gateway's error code of the same case.
const (
	BodyTooLarge  = "body_too_large"
	TooManyEvents = "too_many_events"
	Malformed     = "malformed_body"
	EmptyBatch    = "empty_batch"
	// Stale: a delivery whose every event is older than the endpoint's MaxEventAge, and
	// no signature over a fresh timestamp vouches for it. The provider retries no
	// longer, so it is a replay: nothing of it is stored or acted on, whatever the id
	// index remembers (an id it forgot could otherwise be stored again).
	Stale = "stale_event"
)

// Refusal says why a verified delivery cannot be turned into events: its content, not
// its sender. The gateway keeps such a delivery in the quarantine.
type Refusal struct {
	Reason  string
	Message string // never a secret: providers' errors name fields, not values of secrets
}

func (r *Refusal) Error() string { return r.Reason + ": " + r.Message }

// Delivery is one verified delivery of an endpoint.
type Delivery struct {
	Endpoint *Endpoint
	// Request is the delivery as the provider sent it; Request.Now is its receipt time.
	Request *providers.Request
	// Size is of the body as received, SHA256 (hex) of the body as stored: the
	// provider's body secret redacted (Spec.RedactBody), as the raw payloads and the
	// quarantine keep it.
	Size   int
	SHA256 string
}

// Envelopes normalises d under the gateway limits lim: its envelopes, or why they
// cannot be (over body_limit, unparseable, no event, more than max_events, every event
// older than the endpoint's MaxEventAge). An event naming someone as no one can be
// named (envelope.Data.CheckIdentity) is kept unmapped.
func (d Delivery) Envelopes(lim config.Gateway) ([]envelope.Envelope, *Refusal) {
	ep := d.Endpoint
	if int64(d.Size) > lim.BodyLimit {
		return nil, &Refusal{BodyTooLarge, fmt.Sprintf("the body is %d bytes, over the limit of %d", d.Size, lim.BodyLimit)}
	}
	evs, err := ep.Provider.Events(d.Request)
	switch {
	case err != nil:
		return nil, &Refusal{Malformed, err.Error()}
	case len(evs) == 0:
		return nil, &Refusal{EmptyBatch, "the delivery holds no events"}
	case len(evs) > lim.MaxEvents:
		return nil, &Refusal{TooManyEvents, fmt.Sprintf("the delivery holds %d events, over the limit of %d", len(evs), lim.MaxEvents)}
	}
	envs := make([]envelope.Envelope, len(evs))
	var newest time.Time
	for i, ev := range evs {
		envs[i] = ev.Envelope(ep.Spec, ep.Tenant, ep.ID, ep.AuthMethod, d.Request.Now, d.SHA256)
		if err := envs[i].Data.CheckIdentity(); err != nil {
			// Kept whole, as unmapped: stored, never acted on, naming no one, while
			// the delivery's other events (an opt-out beside it in a batch) go on.
			envs[i].Type = envelope.TypeUnmapped
			envs[i].Data = envelope.Data{ProviderType: envs[i].Data.ProviderType, Raw: envs[i].Data.Raw, Status: "identity refused: " + err.Error()}
		}
		if envs[i].Time.After(newest) {
			newest = envs[i].Time
		}
	}
	// A replay is a delivery whose every event is older than the provider retries: a
	// live one may carry an old fact beside fresh ones (a read receipt's watermark is
	// when the read message was sent). A signature over a fresh timestamp proves the
	// delivery new whatever its events' age (a provider's manual resend).
	if age := d.Request.Now.Sub(newest); !d.Request.TimeSigned && age > ep.MaxEventAge {
		return nil, &Refusal{Stale, fmt.Sprintf("its newest event happened %s, %v before it arrived: past the %v a delivery of %s is retried (max_event_age), so a replay",
			newest.Format(time.RFC3339), age.Round(time.Second), ep.MaxEventAge, ep.Spec.Name)}
	}
	return envs, nil
}

// Publish sends msg to EXACTO_EVENTS; the returned func waits until msg is stored, or
// found a duplicate of a stored event.
type Publish func(ctx context.Context, msg *nats.Msg) (wait func() (duplicate bool, err error), err error)

// PublishOne publishes each message on its own (the gateway's group commit batches them).
func PublishOne(js jetstream.JetStream) Publish {
	return func(ctx context.Context, msg *nats.Msg) (func() (bool, error), error) {
		ack, err := js.PublishMsgAsync(msg, jetstream.WithExpectStream(stream.Events))
		if err != nil {
			return nil, err
		}
		return func() (bool, error) {
			select {
			case pa := <-ack.Ok():
				if pa.Stream == stream.Events {
					stream.NoteStored(js, pa.Sequence) // the next sync covers it
				}
				return pa.Duplicate, nil
			case err := <-ack.Err():
				return false, err
			case <-ctx.Done():
				return false, ctx.Err()
			}
		}, nil
	}
}

// PublishDurable publishes each message on its own; its wait returns once the message
// is stored and on disk (stream.Durable after the PubAck: the waits of concurrent
// publishers share one round of fdatasyncs where the process syncs the store).
func PublishDurable(js jetstream.JetStream) Publish {
	one := PublishOne(js)
	return func(ctx context.Context, msg *nats.Msg) (func() (bool, error), error) {
		wait, err := one(ctx, msg)
		if err != nil {
			return nil, err
		}
		return func() (bool, error) {
			dup, err := wait()
			if err == nil { // a duplicate too: its first copy may still wait for its sync
				err = stream.Durable(ctx, js, stream.Events)
			}
			return dup, err
		}, nil
	}
}

// Result is what storing a delivery's envelopes did: the gateway's 200 answer.
type Result struct {
	Stored     int      `json:"stored"`
	Duplicates int      `json:"duplicates"`
	IDs        []string `json:"ids"`
}

// indexLookupErrors counts the index lookups that failed (the event was stored all
// the same).
var indexLookupErrors, _ = otel.Meter("exacto/gateway").Int64Counter("exacto_gateway_index_lookup_errors",
	metric.WithDescription("lookups of the index of stored ids that failed; the event was stored all the same, deduplicated by the stream's window"))

// Store stores envelopes on EXACTO_EVENTS once.
type Store struct {
	js              jetstream.JetStream
	index, arrivals jetstream.KeyValue
	publish         Publish
	own             bool // publish is PublishOne: each delivery's events are made durable here (Durable)
	forgotten       *privacy.Forgotten
	log             *slog.Logger
}

// OpenStore binds the index of stored ids and the arrival counts, and watches the
// forgotten people until ctx ends; publish nil publishes each event on its own.
func OpenStore(ctx context.Context, js jetstream.JetStream, publish Publish, log *slog.Logger) (*Store, error) {
	s := &Store{js: js, publish: publish, log: log}
	if s.publish == nil {
		s.publish, s.own = PublishOne(js), true
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	var err error
	if s.index, err = js.KeyValue(ctx, stream.EventIndex); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", stream.EventIndex, err)
	}
	if s.arrivals, err = js.KeyValue(ctx, stream.Arrivals); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", stream.Arrivals, err)
	}
	if s.forgotten, err = privacy.WatchForgotten(ctx, js); err != nil {
		return nil, err
	}
	return s, nil
}

// Stored reports whether the index of stored events holds id.
func (s *Store) Stored(ctx context.Context, id string) (bool, error) {
	return stream.Stored(ctx, s.index, id)
}

// Store publishes every envelope not already stored and waits for every PubAck.
// Duplicates are caught twice: by the index of stored ids (late redeliveries, past the
// stream's window) and by Nats-Msg-Id within the window (concurrent redeliveries).
func (s *Store) Store(ctx context.Context, envs []envelope.Envelope) (Result, error) {
	res := Result{IDs: make([]string, 0, len(envs))}
	type pending struct {
		id   string
		wait func() (duplicate bool, err error)
	}
	var waits []pending
	var dups []string
	seen := map[string]bool{}
	for i := range envs {
		env := &envs[i]
		res.IDs = append(res.IDs, env.ID)
		if seen[env.ID] { // the same event twice in one delivery
			dups = append(dups, env.ID)
			continue
		}
		seen[env.ID] = true
		if stored, err := s.Stored(ctx, env.ID); err != nil {
			// The index is derived and may be away while the stream is healthy: the
			// event is stored anyway, and Nats-Msg-Id still refuses a duplicate within
			// the stream's window. A webhook is never refused for the index.
			s.log.Warn("index lookup failed; storing, the stream's duplicate window deduplicates", "id", env.ID, "err", err)
			indexLookupErrors.Add(ctx, 1)
		} else if stored {
			dups = append(dups, env.ID)
			continue
		}
		// A forgotten person's event keeps nothing of them (exacto forget): it is
		// stored anonymized, counted by the projections, acted on by no one.
		if s.forgotten.Anonymize(env) {
			s.log.Info("an event about a forgotten person stored anonymized", "id", env.ID, "anonymous", env.Erasure)
		}
		msg, err := stream.EventMessage(ctx, *env)
		if err != nil {
			return res, err
		}
		wait, err := s.publish(ctx, msg)
		if err != nil {
			return res, fmt.Errorf("publish %s: %w", env.ID, err)
		}
		waits = append(waits, pending{env.ID, wait})
	}
	for _, p := range waits {
		dup, err := p.wait()
		if err != nil {
			return res, fmt.Errorf("publish %s: %w", p.id, err)
		}
		if dup {
			dups = append(dups, p.id)
		} else {
			res.Stored++
		}
	}
	// A duplicate too: the copy stored first may not be on disk yet (its publisher is
	// still waiting for its sync), and this answer says it is.
	if s.own && len(envs) > 0 {
		if err := stream.Durable(ctx, s.js, stream.Events); err != nil {
			return res, err
		}
	}
	res.Duplicates = len(dups)
	for _, id := range dups {
		if err := s.countArrival(ctx, id); err != nil {
			s.log.Warn("arrival count", "id", id, "err", err)
		}
	}
	return res, nil
}

// countArrival adds one to the duplicate deliveries of id (compare-and-set, so
// concurrent gateways never lose a count).
func (s *Store) countArrival(ctx context.Context, id string) error {
	for range 10 {
		e, err := s.arrivals.Get(ctx, id)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if _, err := s.arrivals.Create(ctx, id, []byte("1")); err == nil {
				return nil
			}
		case err != nil:
			return err
		default:
			var n int
			fmt.Sscan(string(e.Value()), &n)
			if _, err := s.arrivals.Update(ctx, id, []byte(fmt.Sprint(n+1)), e.Revision()); err == nil {
				return nil
			}
		}
	}
	return errors.New("arrival count: too much contention")
}
