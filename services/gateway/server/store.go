package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/stream"
)

// storeGuard refuses deliveries, loudly, before the store is full: 507 with
// Retry-After, counted as store_full, while the account's JetStream storage is at
// gateway.store_limit or the embedded server's disk has less than
// gateway.min_free_disk free; and a tenant's, as tenant_quota, while its history holds
// its tenants[].event_limit events (so one tenant's flood leaves the others room).
// Left to grow, a store on a full disk fails its writes (nats-server then stops
// JetStream); a limit set on the stream itself would discard history or, with
// DiscardNew, fail every publish alike with no word of why. Checked at most every
// storeCheckEvery, by the request that finds the last check old; the others go on
// with its answer meanwhile.
type storeGuard struct {
	js      jetstream.JetStream
	limit   int64            // bytes of JetStream storage the account may hold (0: no limit)
	events  map[string]int64 // tenant -> the most events its history may hold (tenants[].event_limit)
	minFree int64            // bytes the data dir's disk must keep free
	dir     string           // the embedded server's data dir ("": its disk is not this process's to watch)
	now     func() time.Time

	mu        sync.Mutex
	checkedAt time.Time
	overLimit string                            // why the store is at gateway.store_limit, at the last reading ("": it is not); under mu
	full      atomic.Pointer[string]            // why the store takes no more; nil: it takes
	tenants   atomic.Pointer[map[string]string] // why a tenant's history takes no more, by tenant
	used      atomic.Int64                      // bytes the account stores, at the last check
	free      atomic.Int64                      // bytes free on the data dir's disk, at the last check (-1: not watched)
}

// newStoreGuard guards js's store under cfg's limits; dir is the embedded server's
// data dir ("": none to watch).
func newStoreGuard(js jetstream.JetStream, cfg *config.Config, dir string, now func() time.Time) *storeGuard {
	g := &storeGuard{js: js, limit: cfg.Gateway.StoreLimit, minFree: cfg.Gateway.MinFreeDisk, dir: dir, now: now,
		events: map[string]int64{}}
	for _, t := range cfg.Tenants {
		if t.EventLimit > 0 {
			g.events[t.ID] = t.EventLimit
		}
	}
	g.used.Store(-1) // not read yet
	g.free.Store(-1)
	return g
}

// storeCheckEvery bounds how stale the guard's answer is: a burst of 1 MiB bodies at
// the rate limit writes about 20 GB in ten seconds, so checks are frequent and cheap (one
// account-info request and one statfs).
const storeCheckEvery = 2 * time.Second

// refusal is why the store takes no more deliveries of tenant now, with its code
// (store_full, or tenant_quota for the tenant's own event_limit); "" when it takes them.
func (g *storeGuard) refusal(ctx context.Context, tenant string) (code, why string) {
	if g.mu.TryLock() { // one request checks; the others take the last answer
		if now := g.now(); now.Sub(g.checkedAt) >= storeCheckEvery {
			// Not on the request's context: a client that hangs up at once must not
			// cancel every check and freeze the answer.
			g.check(context.WithoutCancel(ctx))
			g.checkedAt = now
		}
		g.mu.Unlock()
	}
	if why := g.full.Load(); why != nil {
		return "store_full", *why
	}
	if full := g.tenants.Load(); full != nil && (*full)[tenant] != "" {
		return "tenant_quota", (*full)[tenant]
	}
	return "", ""
}

func (g *storeGuard) check(ctx context.Context) {
	var why []string
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	info, err := g.js.AccountInfo(cctx)
	cancel()
	if err == nil { // else the last reading of the store's limit stands
		g.used.Store(int64(info.Store))
		g.overLimit = ""
		if g.limit > 0 && int64(info.Store) >= g.limit {
			g.overLimit = fmt.Sprintf("the store holds %s, its limit is %s (gateway.store_limit)", mib(int64(info.Store)), mib(g.limit))
		}
		g.checkTenants(ctx)
	}
	if g.overLimit != "" {
		why = append(why, g.overLimit)
	}
	g.free.Store(-1)
	if g.dir != "" {
		if free, err := freeDisk(g.dir); err == nil {
			g.free.Store(free)
			if free < g.minFree {
				why = append(why, fmt.Sprintf("the disk of the data dir has %s free, under gateway.min_free_disk %s",
					mib(free), mib(g.minFree)))
			}
		}
	}
	if len(why) == 0 {
		g.full.Store(nil)
		return
	}
	msg := strings.Join(why, "; ")
	g.full.Store(&msg)
}

// checkTenants counts each limited tenant's events: the stream's count by subject
// (events.<tenant>.<provider>.<type>: a few dozen subjects a tenant, cheap to sum).
func (g *storeGuard) checkTenants(ctx context.Context) {
	if len(g.events) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := g.js.Stream(cctx, stream.Events)
	if err != nil {
		return // the last answer stands
	}
	full := map[string]string{}
	for tenant, limit := range g.events {
		info, err := st.Info(cctx, jetstream.WithSubjectFilter("events."+tenant+".>"))
		if err != nil {
			return
		}
		var n int64
		for _, k := range info.State.Subjects {
			n += int64(k)
		}
		if n >= limit {
			full[tenant] = fmt.Sprintf("tenant %s's history holds %d events, its event_limit is %d", tenant, n, limit)
		}
	}
	g.tenants.Store(&full)
}

// mib writes n bytes in MiB, as the config's sizes are thought of.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
