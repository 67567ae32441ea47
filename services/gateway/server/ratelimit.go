package server

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"exacto.dev/pkg/config"
)

// admission paces the verified deliveries each endpoint and each tenant takes (config
// gateway.rate_limit): a flood against one URL is answered 429 with Retry-After, while
// the other endpoints, and tenants, keep their pace. A token bucket per endpoint and per
// tenant, in this process: replicas of the gateway each take their own share. A
// delivery takes a token of both or of neither, under its tenant's lock: a refused
// reservation is given back whole only when no other was made after it.
type admission struct {
	endpoint, tenants map[string]*rate.Limiter // built once, read only
	locks             map[string]*sync.Mutex   // by tenant
}

func newAdmission(c *config.Config) *admission {
	rl := c.Gateway.RateLimit
	a := &admission{endpoint: map[string]*rate.Limiter{}, tenants: map[string]*rate.Limiter{}, locks: map[string]*sync.Mutex{}}
	bucket := func(perSecond float64) *rate.Limiter {
		if perSecond <= 0 {
			return nil
		}
		return rate.NewLimiter(rate.Limit(perSecond), max(1, int(math.Ceil(perSecond*rl.Burst.Seconds()))))
	}
	for _, t := range c.Tenants {
		a.locks[t.ID] = &sync.Mutex{}
		if l := bucket(rl.Tenant.Rate); l != nil {
			a.tenants[t.ID] = l
		}
		for _, e := range t.Endpoints {
			if l := bucket(rl.Endpoint.Rate); l != nil {
				a.endpoint[e.ID] = l
			}
		}
	}
	return a
}

// admit takes a token of ep's bucket and of its tenant's, or reports how long until
// both would have one (then it took none). The time is read under the tenant's lock:
// a bucket given an earlier time than its last (a request that read the clock, then
// waited for the lock) moves its clock back, and the next request is given the tokens
// of that interval again (a flood got 521 deliveries through where 520 were allowed).
func (a *admission) admit(tenant, endpoint string, clock func() time.Time) (ok bool, retryAfter time.Duration) {
	el, tl := a.endpoint[endpoint], a.tenants[tenant]
	if el == nil && tl == nil {
		return true, 0
	}
	mu := a.locks[tenant]
	mu.Lock()
	defer mu.Unlock()
	now := clock()
	var taken [2]*rate.Reservation
	for i, l := range [2]*rate.Limiter{el, tl} {
		if l != nil {
			taken[i] = l.ReserveN(now, 1)
			retryAfter = max(retryAfter, taken[i].DelayFrom(now))
		}
	}
	if retryAfter == 0 {
		return true, 0
	}
	for _, r := range taken {
		if r != nil {
			r.CancelAt(now)
		}
	}
	return false, retryAfter
}
