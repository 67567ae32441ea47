// Package handler is the reconciler service: for every tenant whose
// reconcile.every is not 0 (default 1h) it runs a reconciliation pass (pkg/reconcile)
// on that interval, the first one FirstDelay after start, and logs a summary of each.
// A pass that fails is logged and retried at the next tick; passes of one tenant never
// overlap. `exacto reconcile` runs a pass on demand.
package handler

import (
	"context"
	"sync"
	"time"

	"exacto.dev/pkg/platform/accounts"
	"exacto.dev/pkg/reconcile"
	"exacto.dev/pkg/service"
)

// FirstDelay is how long after start the first pass of each tenant runs: long enough
// for the consumers and the projector to bind, short enough to catch up after a restart.
var FirstDelay = 30 * time.Second

// Run runs the schedule until ctx ends.
func Run(ctx context.Context, env *service.Env, up func()) error {
	deps, err := reconcile.Open(ctx, env.Conn.JS, env.Config)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	scheduled := 0
	for _, t := range env.Config.Tenants {
		every := t.Reconcile.Every.Duration
		if every <= 0 {
			env.Log.Info("reconciliation off", "tenant", t.ID)
			continue
		}
		clients, ok := env.Platforms.For(t.ID)
		if !ok {
			continue
		}
		scheduled++
		reconcile.ZeroMetrics(ctx, t.ID)
		wg.Add(1)
		go func(tenant string) {
			defer wg.Done()
			timer := time.NewTimer(min(FirstDelay, every))
			defer timer.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
				}
				pass(ctx, env, deps, tenant, clients)
				timer.Reset(every)
			}
		}(t.ID)
	}
	env.Log.Info("reconciler started", "tenants", scheduled)
	up()
	<-ctx.Done()
	wg.Wait()
	return nil
}

func pass(ctx context.Context, env *service.Env, deps *reconcile.Deps, tenant string, clients accounts.Clients) {
	start := time.Now()
	rep, err := deps.RunTenant(ctx, tenant, clients, env.Log, false)
	if err != nil {
		if ctx.Err() == nil {
			env.Log.Error("reconciliation pass failed", "tenant", tenant, "error", err)
		}
		return
	}
	log := env.Log.Info
	if len(rep.Errors) > 0 {
		log = env.Log.Warn
	}
	log("reconciliation pass", "tenant", tenant, "findings", len(rep.Findings), "new", rep.New,
		"applied", rep.Applied, "by_kind", rep.Summary(), "failed_checks", rep.Err(), "took", time.Since(start).Round(time.Millisecond))
}
