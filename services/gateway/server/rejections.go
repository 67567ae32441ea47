package server

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"exacto.dev/pkg/stream"
)

// Refusals are logged at most rejectionsPerSecond a second, with a burst of
// rejectionsBurst: a flood of forgeries costs the store no more than that, and the
// next record counts what was left out.
const (
	rejectionsPerSecond = 20
	rejectionsBurst     = 100
)

// rejections logs refused deliveries to EXACTO_REJECTED (the console's Refused page):
// a user pointing a provider at Exacto sees why it is refused, not only a counter.
type rejections struct {
	nc    *nats.Conn
	now   func() time.Time
	known func(id string) bool // whether id is a configured endpoint

	mu      sync.Mutex
	tokens  float64
	last    time.Time
	skipped int
}

func newRejections(nc *nats.Conn, now func() time.Time, known func(string) bool) *rejections {
	return &rejections{nc: nc, now: now, known: known, tokens: rejectionsBurst}
}

// record logs a's refusal, unless over the rate. Fire and forget: the log is a help,
// never a reason to answer later.
func (r *rejections) record(a *access) {
	if r == nil || r.nc == nil {
		return
	}
	now := r.now()
	r.mu.Lock()
	r.tokens = min(rejectionsBurst, r.tokens+now.Sub(r.last).Seconds()*rejectionsPerSecond)
	r.last = now
	if r.tokens < 1 {
		r.skipped++
		r.mu.Unlock()
		return
	}
	r.tokens--
	skipped := r.skipped
	r.skipped = 0
	r.mu.Unlock()
	data, err := json.Marshal(stream.Rejection{At: now.UTC(), Endpoint: r.endpointName(a.endpoint), Tenant: a.tenant, Provider: a.provider,
		Method: a.method, Status: a.status, Reason: a.reason, Message: clip(a.message, 300), Remote: a.remote, Skipped: skipped})
	if err == nil {
		r.nc.Publish(stream.RejectedSubject, data)
	}
}

// endpointName is how the log names the endpoint a URL asked for: its id when it is
// one of ours, else only how long it was — a path token put where the id goes
// (segments swapped) must not be kept.
func (r *rejections) endpointName(id string) string {
	switch {
	case id == "":
		return "(none)"
	case r.known(id):
		return id
	}
	return fmt.Sprintf("(unknown, %d characters)", len(id))
}

// clip keeps at most n bytes of s, on a rune boundary: what the sender put in a URL is
// not the log's to keep whole.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
