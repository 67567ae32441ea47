package service

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"exacto.dev/pkg/config"
)

// observeSLOs puts each SLO class's target and objective on /metrics, so that alert
// rules and dashboards read them from the config instead of repeating it.
func observeSLOs(cfg *config.Config) (stop func(), err error) {
	m := otel.Meter("exacto/slo")
	target, err := m.Float64ObservableGauge("exacto_slo_target_seconds", metric.WithUnit("s"),
		metric.WithDescription("an SLO class's target: receipt to completion by each consumer"))
	if err != nil {
		return nil, err
	}
	objective, err := m.Float64ObservableGauge("exacto_slo_objective",
		metric.WithDescription("an SLO class's objective: the share of its events to complete within target"))
	if err != nil {
		return nil, err
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, s := range cfg.SLOClasses() {
			at := metric.WithAttributes(attribute.String("slo_class", s.Name))
			o.ObserveFloat64(target, s.Target.Seconds(), at)
			o.ObserveFloat64(objective, s.Objective, at)
		}
		return nil
	}, target, objective)
	if err != nil {
		return nil, err
	}
	return func() { reg.Unregister() }, nil
}
