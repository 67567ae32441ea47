package server

import (
	"math"
	"time"

	"golang.org/x/time/rate"

	"exacto.dev/pkg/config"
)

// admission paces the deliveries each endpoint and each tenant takes (config
// gateway.rate_limit): a flood against one URL is answered 429 with Retry-After,
// before its body is read, while the other endpoints, and tenants, keep their pace.
// A token bucket per endpoint and per tenant, in this process: replicas of the gateway
// each take their own share. A delivery takes a token of both or of neither (a
// reservation of one refused is given back; two deliveries at once may each see the
// other's for that instant, no lock held across the two buckets on every request).
type admission struct {
	endpoint, tenants map[string]*rate.Limiter // built once, read only
}

func newAdmission(c *config.Config) *admission {
	rl := c.Gateway.RateLimit
	a := &admission{endpoint: map[string]*rate.Limiter{}, tenants: map[string]*rate.Limiter{}}
	bucket := func(perSecond float64) *rate.Limiter {
		if perSecond <= 0 {
			return nil
		}
		return rate.NewLimiter(rate.Limit(perSecond), max(1, int(math.Ceil(perSecond*rl.Burst.Seconds()))))
	}
	for _, t := range c.Tenants {
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
// both would have one (then it took none).
func (a *admission) admit(tenant, endpoint string, now time.Time) (ok bool, retryAfter time.Duration) {
	var taken [2]*rate.Reservation
	for i, l := range [2]*rate.Limiter{a.endpoint[endpoint], a.tenants[tenant]} {
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
