package reconcile

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/platform/accounts"
	"exacto.dev/pkg/privacy"
	"exacto.dev/pkg/projection"
	"exacto.dev/pkg/stream"
	"exacto.dev/pkg/suppression"
)

// Deps are what every pass of a deployment shares: the projections, the suppression
// list, the diff queue and the publisher.
type Deps struct {
	Reader      projection.Reader
	Suppression *suppression.List
	Queue       *Queue
	Publish     Publisher
	Forgotten   *privacy.Forgotten
}

// Open binds the deployment's projections, lists and diff queue in js. cfg gives the
// freshness limits an approval checks (config.DLQ.Fresh).
func Open(ctx context.Context, js jetstream.JetStream, cfg *config.Config) (*Deps, error) {
	stores, err := projection.Open(ctx, js, "", cfg.NATS.Replicas)
	if err != nil {
		return nil, err
	}
	dir, err := contacts.Open(ctx, js)
	if err != nil {
		return nil, err
	}
	skv, err := js.KeyValue(ctx, stream.Suppression)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", stream.Suppression, err)
	}
	q, err := OpenQueue(ctx, js)
	if err != nil {
		return nil, err
	}
	d, err := consumer.NewDeriver(ctx, js)
	if err != nil {
		return nil, err
	}
	q.Publish, q.Fresh = d.Publish, cfg.DLQ.Fresh
	forgotten, err := privacy.WatchForgotten(ctx, js)
	if err != nil {
		return nil, err
	}
	return &Deps{Reader: projection.Reader{Stores: stores, Dir: dir}, Suppression: suppression.New(stream.DurableKV(js, skv)), Queue: q, Publish: d.Publish, Forgotten: forgotten}, nil
}

// Pass is a pass of tenant over d with clients.
func (d *Deps) Pass(tenant string, clients accounts.Clients, log *slog.Logger, dryRun bool) *Pass {
	return &Pass{Tenant: tenant, Clients: clients, Reader: d.Reader, Suppression: d.Suppression,
		Publish: d.Publish, Log: log, DryRun: dryRun, Forgotten: d.Forgotten}
}

// RunTenant runs one pass of tenant.
func (d *Deps) RunTenant(ctx context.Context, tenant string, clients accounts.Clients, log *slog.Logger, dryRun bool) (Report, error) {
	return Run(ctx, d.Pass(tenant, clients, log, dryRun), d.Queue)
}
