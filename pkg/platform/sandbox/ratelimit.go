package sandbox

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"exacto.dev/pkg/ratelimit"
)

// Limit groups: the platforms count every route of an account against one limit, and
// some routes against a limit of their own besides (HubSpot's search, Instantly's
// e-mail listing). The names are pkg/platform/accounts' limit names.
func limitGroups(route string) []string {
	dep, _, _ := strings.Cut(route, ".")
	switch {
	case route == RouteHubSpotNoteSearch || route == RouteHubSpotContactSearch ||
		route == RouteHubSpotDealSearch || route == RouteHubSpotMeetingSearch:
		return []string{"hubspot-search"} // outside HubSpot's 10-second bucket
	case route == RouteInstantlyEmailList:
		return []string{dep, "instantly-emails"}
	}
	return []string{dep}
}

// rateWindow is one limit group's sliding windows, per credential.
type rateWindow struct {
	rates []ratelimit.Rate
	calls map[string][][]time.Time // credential -> per rate, the calls in its window
}

// SetRateLimit makes the sandbox count group's requests (a platform name such as
// "smartlead", or "hubspot-search", "instantly-emails") per credential, and answer 429
// past any of rates, as the platform does: with Retry-After (seconds) and, for
// Smartlead, its X-RateLimit headers and error body. No rates: no limit.
func (s *Server) SetRateLimit(group string, rates ...ratelimit.Rate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(rates) == 0 {
		delete(s.limits, group)
		return
	}
	s.limits[group] = &rateWindow{rates: rates, calls: map[string][][]time.Time{}}
}

// RateLimited is how many requests of group were answered 429 by its limit.
func (s *Server) RateLimited(group string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limited[group]
}

// credential is what a platform counts a request against.
func credential(r *http.Request) string {
	if a := r.Header.Get("Authorization"); a != "" {
		return a
	}
	return r.URL.Query().Get("api_key")
}

// overLimit counts r against the limits of route's groups; limited is true (with the
// wait until the window frees) when one of them is full, and then nothing is counted.
func (s *Server) overLimit(route string, r *http.Request) (wait time.Duration, limited bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now, cred := time.Now(), credential(r)
	var groups []*rateWindow
	for _, g := range limitGroups(route) {
		w := s.limits[g]
		if w == nil {
			continue
		}
		calls := w.calls[cred]
		for i, rt := range w.rates {
			if i >= len(calls) {
				calls = append(calls, nil)
			}
			kept := calls[i][:0]
			for _, t := range calls[i] {
				if now.Sub(t) < rt.Per {
					kept = append(kept, t)
				}
			}
			calls[i] = kept
			if len(kept) >= rt.N {
				wait = max(wait, kept[0].Add(rt.Per).Sub(now))
				limited = true
			}
		}
		w.calls[cred] = calls
		if limited {
			s.limited[g]++
			return wait, true
		}
		groups = append(groups, w)
	}
	for _, w := range groups {
		for i := range w.rates {
			w.calls[cred][i] = append(w.calls[cred][i], now)
		}
	}
	return 0, false
}

// rateLimited answers a 429 in the platform's manner.
func rateLimited(w http.ResponseWriter, route string, wait time.Duration) {
	secs := int((wait + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	switch dep, _, _ := strings.Cut(route, "."); dep {
	case "smartlead": // guides/rate-limits
		w.Header().Set("X-RateLimit-Remaining", "0")
		w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(wait).Unix(), 10))
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"error": map[string]any{
			"code": "RATE_LIMIT_EXCEEDED", "message": "Too many requests. Please retry after " + strconv.Itoa(secs) + " seconds.", "retry_after": secs}})
	case "hubspot": // usage guidelines
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"status": "error", "message": "You have reached your ten_secondly_rolling limit.",
			"errorType": "RATE_LIMIT", "policyName": "TEN_SECONDLY_ROLLING"})
	default: // Instantly's documented 429 body
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"statusCode": 429, "error": "Too Many Requests", "message": "Rate limit exceeded"})
	}
}
