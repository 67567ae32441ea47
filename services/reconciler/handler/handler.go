// Package handler is the reconciler service: for every tenant whose
// reconcile.every is not 0 (default 1h) it runs a reconciliation pass (pkg/reconcile)
// on that interval, the first one FirstDelay after start, and logs a summary of each.
// A pass that fails is logged and retried at the next tick; passes of one tenant never
// overlap. A scheduled pass waits while the projector is behind (quiet). `exacto
// reconcile` runs a pass on demand. It also applies each tenant's retention
// (tenants[].retention, pkg/privacy) once every RetentionEvery, the first time
// FirstDelay after start; `exacto retention` applies it on demand.
package handler

import (
	"context"
	"sync"
	"time"

	"exacto.dev/pkg/platform/accounts"
	"exacto.dev/pkg/privacy"
	"exacto.dev/pkg/reconcile"
	"exacto.dev/pkg/service"
	"exacto.dev/pkg/stream"
)

// FirstDelay is how long after start the first pass of each tenant runs: long enough
// for the consumers and the projector to bind, short enough to catch up after a restart.
var FirstDelay = 30 * time.Second

// A scheduled pass compares the projections with the platforms: while the projector
// works off a burst (more than QuietBacklog events it has not acked), the pass would
// report as missing what is only on its way, and take memory and cores from the
// consumers draining the burst. It waits, reading the backlog every QuietEvery, at most
// MaxQuietWait; then it runs anyway and says how far behind the projector was. They
// are variables for tests only.
var (
	QuietBacklog uint64 = 500
	QuietEvery          = 2 * time.Second
	MaxQuietWait        = 10 * time.Minute
)

// RetentionEvery is how often each tenant's retention is applied.
var RetentionEvery = 24 * time.Hour

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
		tenant := t.ID
		schedule(ctx, &wg, min(FirstDelay, every), every, func() {
			quiet(ctx, env, tenant)
			pass(ctx, env, deps, tenant, clients)
		})
	}
	for _, t := range env.Config.Tenants {
		r := t.Retention
		if r.Payloads.Duration <= 0 && r.Events.Duration <= 0 {
			continue
		}
		tenant := t.ID
		schedule(ctx, &wg, FirstDelay, RetentionEvery, func() {
			got, err := privacy.Retain(ctx, env.Conn.JS, tenant, r.Payloads.Duration, r.Events.Duration, time.Now())
			if err != nil && ctx.Err() == nil {
				env.Log.Warn("retention failed; tried again at the next run", "tenant", tenant, "err", err)
			} else {
				env.Log.Info("retention applied", "tenant", tenant, "compacted", got.Compacted, "removed", got.Removed, "waiting", got.Waiting, "erased", got.Deleted)
			}
		})
	}
	env.Log.Info("reconciler started", "tenants", scheduled)
	up()
	<-ctx.Done()
	wg.Wait()
	return nil
}

// schedule runs run first after first, then every every, until ctx ends; wg counts it.
func schedule(ctx context.Context, wg *sync.WaitGroup, first, every time.Duration, run func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		timer := time.NewTimer(first)
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
			run()
			timer.Reset(every)
		}
	}()
}

// quiet waits until the projector's backlog is at most QuietBacklog, at most
// MaxQuietWait. A backlog it cannot read (no projector consumer yet, the server busy)
// does not hold the pass.
func quiet(ctx context.Context, env *service.Env, tenant string) {
	start := time.Now()
	for said := false; ; said = true {
		n, ok := projectorBacklog(ctx, env)
		switch {
		case !ok || n <= QuietBacklog:
			if said {
				env.Log.Info("reconciliation: the projector caught up", "tenant", tenant, "backlog", n, "waited", time.Since(start).Round(time.Second))
			}
			return
		case time.Since(start) >= MaxQuietWait:
			env.Log.Warn("reconciliation runs with the projector behind: what it reports missing may be on its way", "tenant", tenant,
				"backlog", n, "waited", time.Since(start).Round(time.Second))
			return
		case !said:
			env.Log.Info("reconciliation waits for the projector to catch up", "tenant", tenant, "backlog", n, "at_most", MaxQuietWait)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(QuietEvery):
		}
	}
}

// projectorBacklog is the events of EXACTO_EVENTS the projector has not acked: not
// yet delivered, or delivered and not acked.
func projectorBacklog(ctx context.Context, env *service.Env) (uint64, bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := env.Conn.JS.Consumer(ctx, stream.Events, stream.Projector)
	if err != nil {
		return 0, false
	}
	info, err := c.Info(ctx)
	if err != nil {
		return 0, false
	}
	return info.NumPending + uint64(info.NumAckPending), true
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
