package consumer

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"exacto.dev/pkg/envelope"
)

// The consumer metrics: every event metric carries the consumer, tenant, provider,
// event type and workflow version (docs/observability.md lists them all).
var (
	meter = otel.Meter("exacto/consumer")

	// deadLetters counts dead letters: alert on any increase.
	deadLetters, _ = meter.Int64Counter("exacto_dead_letters",
		metric.WithDescription("events dead-lettered, by consumer, tenant, provider, type, workflow version and error class"))
	attempts, _ = meter.Int64Counter("exacto_consumer_attempts",
		metric.WithDescription("attempts at an event, by whether it was the event's first attempt and its result (completed, retry, dead_letter)"))
	duplicates, _ = meter.Int64Counter("exacto_consumer_duplicates",
		metric.WithDescription("redeliveries of an event the guard had already completed: acknowledged with no effect"))
	effectsFound, _ = meter.Int64Counter("exacto_duplicate_effects_avoided",
		metric.WithDescription("attempts that found their effect already made at the outside party (an earlier attempt's write that timed out after commit) and did not make it again"))
	latency, _ = meter.Float64Histogram("exacto_consumer_receipt_to_completed_seconds",
		metric.WithDescription("from the event's receipt at the gateway (for a derived event: its derivation) to its completion by the consumer"),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 1800, 3600))
	sloEvents, _ = meter.Int64Counter("exacto_slo_events",
		metric.WithDescription("events completed by a consumer, by SLO class and whether within the class's target"))
	// deferred is the time an urgent consumer held the process's others back: its rate
	// is the share of the time they waited (consumer.Precedence).
	deferred, _ = meter.Float64Counter("exacto_consumer_deferred_seconds",
		metric.WithDescription("time the process's other consumers deferred to this urgent consumer, behind (its events waiting for a worker, or in its hands while the cores are short)"),
		metric.WithUnit("s"))
)

// eventAttrs are the labels every event metric carries. A runner keeps each set it
// made (a set sorts and hashes its labels: per event and metric, that was a few
// percent of a consumer's CPU); their number is bounded by the tenants, providers and
// types of the config, and by attrCacheMax.
func (r *runner) eventAttrs(env envelope.Envelope, more ...attribute.KeyValue) metric.MeasurementOption {
	key := make([]byte, 0, 96)
	for _, s := range []string{env.Tenant, env.Provider, env.Type} {
		key = append(append(key, s...), 0)
	}
	for _, kv := range more {
		key = append(append(append(key, kv.Key...), '='), kv.Value.String()...)
		key = append(key, 0)
	}
	if o, ok := r.attrs.Load(string(key)); ok {
		return o.(metric.MeasurementOption)
	}
	o := eventAttrs(r.name, r.o.WorkflowVersion, env, more...)
	if r.attrCount.Add(1) <= attrCacheMax {
		r.attrs.Store(string(key), o)
	}
	return o
}

// attrCacheMax bounds the label sets a runner keeps.
const attrCacheMax = 4096

func eventAttrs(consumer, version string, env envelope.Envelope, more ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(append([]attribute.KeyValue{
		attribute.String("consumer", token(consumer)), attribute.String("tenant", token(env.Tenant)),
		attribute.String("provider", token(env.Provider)), attribute.String("type", token(env.Type)),
		attribute.String("workflow_version", token(version))}, more...)...))
}

// attempted records one attempt's result.
func (r *runner) attempted(ctx context.Context, env envelope.Envelope, attempt int, result string) {
	attempts.Add(ctx, 1, r.eventAttrs(env, attribute.Bool("first_attempt", attempt <= 1), attribute.String("result", result)))
}

// completed records an event's latency from receipt and whether it met its SLO.
func (r *runner) completed(ctx context.Context, env envelope.Envelope) {
	if env.ReceivedAt.IsZero() {
		return
	}
	took := time.Since(env.ReceivedAt)
	class, target := "other", time.Duration(0)
	if r.o.SLO != nil {
		class, target = r.o.SLO(env)
	}
	latency.Record(ctx, took.Seconds(), r.eventAttrs(env, attribute.String("slo_class", class)))
	if target > 0 {
		sloEvents.Add(ctx, 1, r.eventAttrs(env, attribute.String("slo_class", class), attribute.Bool("within_slo", took <= target)))
	}
}

// EffectFound tells the metrics that this attempt found its effect already made (a
// note found by its event key, a lead already stopped by us) and did not make it again.
func (ev Event) EffectFound(ctx context.Context) {
	if ev.runner != nil {
		effectsFound.Add(ctx, 1, ev.runner.eventAttrs(ev.Envelope))
	}
}

// Completed runs fn once the attempt's event is completed: its guard record says so and
// its ack is handed to the acker. An attempt that fails, or whose completion cannot be
// written (the event then comes back, and its next attempt finds the effect made), never
// runs it. A handler counts what it did through it: its own count once per event,
// however many attempts made or found the effect. (A completion whose answer was lost,
// a timeout, is read back, guard.Complete; one that cannot be read back either leaves
// the event to come back, find its record completed and be acked, counted by no one.)
// fn must be registered before the handler returns. Outside a runner (an Event built
// by hand) fn runs at once.
func (ev Event) Completed(ctx context.Context, fn func(context.Context)) {
	h := heldOf(ctx)
	if ev.runner == nil || h == nil {
		fn(ctx)
		return
	}
	h.mu.Lock()
	h.completed = append(h.completed, fn)
	h.mu.Unlock()
}

// zero makes the consumer's counters visible at 0 from its start, so that alerts on
// their rate and absence work before the first event (Prometheus practice).
func (r *runner) zero(ctx context.Context) {
	base := []attribute.KeyValue{attribute.String("consumer", r.name), attribute.String("workflow_version", r.o.WorkflowVersion)}
	at := metric.WithAttributes(base...)
	for _, c := range []metric.Int64Counter{duplicates, effectsFound, deadLetters} {
		c.Add(ctx, 0, at)
	}
	for _, res := range []string{"completed", "retry", "dead_letter"} {
		attempts.Add(ctx, 0, metric.WithAttributes(append(base, attribute.Bool("first_attempt", true), attribute.String("result", res))...))
	}
}

// observeQueue reports the consumer's queue from the server while Run lasts: events not
// yet delivered, delivered and not yet acknowledged, and the age of the oldest event
// not yet acknowledged (the first one above the ack floor that the consumer's filters
// take; an upper bound when later ones were acknowledged out of order).
func (r *runner) observeQueue(durable, streamName string) (stop func(), err error) {
	pending, err := meter.Int64ObservableGauge("exacto_consumer_pending",
		metric.WithDescription("events waiting for the consumer: not yet delivered plus delivered and not yet acknowledged"))
	if err != nil {
		return nil, err
	}
	ackPending, err := meter.Int64ObservableGauge("exacto_consumer_ack_pending",
		metric.WithDescription("events delivered to the consumer and not yet acknowledged"))
	if err != nil {
		return nil, err
	}
	age, err := meter.Float64ObservableGauge("exacto_consumer_queue_age_seconds", metric.WithUnit("s"),
		metric.WithDescription("age of the oldest event the consumer has not acknowledged (0 when none waits)"))
	if err != nil {
		return nil, err
	}
	parked, err := meter.Int64ObservableGauge("exacto_consumer_parked",
		metric.WithDescription("events this process holds off its workers while a dependency's breaker is open: each keeps one of the consumer's delivery slots"))
	if err != nil {
		return nil, err
	}
	slots, err := meter.Int64ObservableGauge("exacto_consumer_max_ack_pending",
		metric.WithDescription("the consumer's delivery slots: with as many events delivered and not acknowledged, the server delivers it nothing more"))
	if err != nil {
		return nil, err
	}
	at := metric.WithAttributes(attribute.String("consumer", durable))
	reg, err := meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		o.ObserveInt64(parked, r.parked.Load(), at)
		// The slots as configured, unless the server says otherwise (an operator may
		// have raised them for an outage): reported even when it does not answer.
		maxPending := int64(r.o.Sub.MaxAckPending)
		defer func() { o.ObserveInt64(slots, maxPending, at) }()
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		c, err := r.js.Consumer(ctx, streamName, durable)
		if err != nil {
			return nil // not bound (yet): nothing to report
		}
		info, err := c.Info(ctx)
		if err != nil {
			return nil
		}
		o.ObserveInt64(pending, int64(info.NumPending)+int64(info.NumAckPending), at)
		o.ObserveInt64(ackPending, int64(info.NumAckPending), at)
		maxPending = int64(info.Config.MaxAckPending)
		o.ObserveFloat64(age, r.oldestAge(ctx, streamName, info), at)
		return nil
	}, pending, ackPending, age, parked, slots)
	if err != nil {
		return nil, err
	}
	return func() { reg.Unregister() }, nil
}

func (r *runner) oldestAge(ctx context.Context, streamName string, info *jetstream.ConsumerInfo) float64 {
	if info.NumPending+uint64(info.NumAckPending) == 0 {
		return 0
	}
	s, err := r.js.Stream(ctx, streamName)
	if err != nil {
		return 0
	}
	filters := info.Config.FilterSubjects
	if len(filters) == 0 {
		filters = []string{info.Config.FilterSubject}
	}
	var oldest time.Time
	for _, f := range filters {
		opts := []jetstream.GetMsgOpt{}
		if f != "" {
			opts = append(opts, jetstream.WithGetMsgSubject(f))
		}
		m, err := s.GetMsg(ctx, info.AckFloor.Stream+1, opts...)
		if err == nil && (oldest.IsZero() || m.Time.Before(oldest)) {
			oldest = m.Time
		}
	}
	if oldest.IsZero() {
		return 0
	}
	return time.Since(oldest).Seconds()
}

// ObserveBreakers reports each dependency's breaker state: 0 closed, 1 half-open,
// 2 open.
func ObserveBreakers(b *Breakers) (stop func(), err error) {
	state, err := meter.Int64ObservableGauge("exacto_breaker_state",
		metric.WithDescription("circuit breaker state per dependency: 0 closed, 1 half-open, 2 open"))
	if err != nil {
		return nil, err
	}
	reg, err := meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		b.mu.Lock()
		defer b.mu.Unlock()
		for dep, cb := range b.byDep {
			v := int64(0)
			switch cb.State() {
			case gobreaker.StateHalfOpen:
				v = 1
			case gobreaker.StateOpen:
				v = 2
			}
			o.ObserveInt64(state, v, metric.WithAttributes(attribute.String("dependency", dep)))
		}
		return nil
	}, state)
	if err != nil {
		return nil, err
	}
	return func() { reg.Unregister() }, nil
}

// MetricAttrs are the labels of the event's metrics (consumer, tenant, provider, type,
// workflow version) and more, for a service's own metrics.
func (ev Event) MetricAttrs(more ...attribute.KeyValue) metric.MeasurementOption {
	if ev.runner == nil { // a handler called directly, as in its unit tests
		return eventAttrs("", "", ev.Envelope, more...)
	}
	return ev.runner.eventAttrs(ev.Envelope, more...)
}

// SLO is the event's SLO class and whether it is still within its target now.
func (ev Event) SLO() (class string, within bool) {
	if ev.runner == nil || ev.runner.o.SLO == nil {
		return "other", true
	}
	class, target := ev.runner.o.SLO(ev.Envelope)
	return class, target <= 0 || ev.Envelope.ReceivedAt.IsZero() || time.Since(ev.Envelope.ReceivedAt) <= target
}
