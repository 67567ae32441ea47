package dlq

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"exacto.dev/pkg/stream"
)

// watched is the latest summary, read by the gauges at each collection.
var watched struct {
	mu  sync.Mutex
	sum Summary
	slo time.Duration
	set bool
}

func init() {
	m := otel.Meter("exacto/dlq")
	open, _ := m.Int64ObservableGauge("exacto_dlq_open",
		metric.WithDescription("dead letters not yet replayed or discarded, by consumer"))
	oldest, _ := m.Float64ObservableGauge("exacto_dlq_oldest_open_seconds",
		metric.WithDescription("age of the oldest open dead letter: alert when above exacto_dlq_slo_seconds, and when it grows"))
	slo, _ := m.Float64ObservableGauge("exacto_dlq_slo_seconds",
		metric.WithDescription("how long a dead letter may wait (config dlq.slo)"))
	m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		watched.mu.Lock()
		defer watched.mu.Unlock()
		if !watched.set {
			return nil
		}
		// Every consumer has a series, at 0 when its queue is empty: an alert on an
		// absent series never fires.
		for _, sub := range stream.Subscriptions {
			o.ObserveInt64(open, int64(watched.sum.ByConsumer[sub.Durable]), metric.WithAttributes(attribute.String("consumer", sub.Durable)))
		}
		o.ObserveFloat64(oldest, watched.sum.Oldest.Seconds())
		o.ObserveFloat64(slo, watched.slo.Seconds())
		return nil
	}, open, oldest, slo)
}

// Watch summarizes the queue every interval for the gauges, and logs an alert while the
// oldest open dead letter is past the SLO (config dlq.slo), until ctx ends.
func (q *Queue) Watch(ctx context.Context, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		sum, err := q.Summarize(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn("dlq summary", "err", err)
		} else {
			watched.mu.Lock()
			watched.sum, watched.slo, watched.set = sum, q.cfg.SLO, true
			watched.mu.Unlock()
			if q.cfg.SLO > 0 && sum.Oldest > q.cfg.SLO {
				log.Error("dead letters waiting past their SLO", "open", sum.Open, "oldest", sum.Oldest.Round(time.Second), "slo", q.cfg.SLO)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
