// Package sandbox is a loopback stand-in for the HubSpot, Instantly and
// Smartlead APIs. One http.Server mounts all three under their documented
// paths, keeps state in memory, checks credentials, counts requests per route
// and injects faults on demand, so clients can be tested against real HTTP
// without reaching the providers.
package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"exacto.dev/pkg/listen"
)

// Credentials the sandbox accepts unless Options say otherwise.
const (
	HubSpotToken = "hs-sandbox-token"
	InstantlyKey = "instantly-sandbox-key"
	SmartleadKey = "smartlead-sandbox-key"
)

// Options configure a Server. Zero values take the defaults above.
type Options struct {
	// Addr is where to listen: a loopback address (default 127.0.0.1:0).
	Addr         string
	HubSpotToken string
	InstantlyKey string
	SmartleadKey string
	// AutoEnroll makes a lookup of a lead the sandbox does not know enrol it as an
	// active lead first, so that `exacto up` without accounts has sequences to stop.
	AutoEnroll bool
}

// Fault is injected into the next Count requests of a route (all of them if
// Count is 0) until cleared.
type Fault struct {
	Latency    time.Duration // sleep before handling
	Status     int           // answer with this status instead of handling (429/500/503/400…)
	RetryAfter time.Duration // sent as Retry-After seconds with Status (or DownFor's 503)
	// TimeoutAfterCommit applies the write, then holds the response this long
	// (or until the client hangs up), so the client times out after the
	// effect happened: the ambiguous case idempotency must survive.
	TimeoutAfterCommit time.Duration
	// DownFor answers 503 (or Status, if set) to every request for this long
	// after the fault is set, regardless of Count.
	DownFor time.Duration
	Count   int
}

type activeFault struct {
	Fault
	left  int // remaining applications; -1 = unlimited
	until time.Time
}

// Server is the sandbox. Its methods are safe for concurrent use.
type Server struct {
	URL string // base URL, e.g. http://127.0.0.1:54321

	opts Options
	srv  *http.Server
	ln   net.Listener

	mu       sync.Mutex
	faults   map[string]*activeFault
	counts   map[string]int
	inputs   map[string]int // records asked of a route: a batch request's inputs, 1 for any other
	last     map[string]time.Time
	times    map[string][]time.Time
	hubspot  hubspotState
	inst     instantlyState
	smart    smartleadState
	listing  listingState           // campaigns, deals and meetings (listing.go)
	limits   map[string]*rateWindow // SetRateLimit, by limit group
	limited  map[string]int         // 429s answered, by limit group
	stopping chan struct{}
}

// TB is the part of testing.TB that Start needs.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// Start runs a Server on 127.0.0.1:0 and closes it when the test ends.
func Start(tb TB) *Server {
	tb.Helper()
	return StartWith(tb, Options{})
}

// StartWith is Start with opts (their Addr defaults to 127.0.0.1:0).
func StartWith(tb TB, opts Options) *Server {
	tb.Helper()
	s, err := Listen(opts)
	if err != nil {
		tb.Fatalf("sandbox: %v", err)
	}
	tb.Cleanup(s.Close)
	return s
}

// Listen runs a Server on opts.Addr (127.0.0.1:0 by default); call Close when done.
func Listen(opts Options) (*Server, error) {
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	if opts.HubSpotToken == "" {
		opts.HubSpotToken = HubSpotToken
	}
	if opts.InstantlyKey == "" {
		opts.InstantlyKey = InstantlyKey
	}
	if opts.SmartleadKey == "" {
		opts.SmartleadKey = SmartleadKey
	}
	ln, err := listen.TCP("sandbox_addr", opts.Addr)
	if err != nil {
		return nil, err
	}
	s := &Server{
		URL:      "http://" + ln.Addr().String(),
		opts:     opts,
		ln:       ln,
		faults:   map[string]*activeFault{},
		counts:   map[string]int{},
		inputs:   map[string]int{},
		last:     map[string]time.Time{},
		times:    map[string][]time.Time{},
		limits:   map[string]*rateWindow{},
		limited:  map[string]int{},
		stopping: make(chan struct{}),
	}
	s.hubspot.init()
	s.inst.init()
	s.smart.init()
	mux := http.NewServeMux()
	s.mountHubSpot(mux)
	s.mountInstantly(mux)
	s.mountSmartlead(mux)
	s.mountControl(mux)
	s.mountListings(mux)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server, releasing requests held by faults.
func (s *Server) Close() {
	select {
	case <-s.stopping:
		return
	default:
		close(s.stopping)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
}

// SetFault injects f into route (one of the Route* constants).
func (s *Server) SetFault(route string, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	af := &activeFault{Fault: f, left: f.Count}
	if f.Count <= 0 {
		af.left = -1
	}
	if f.DownFor > 0 {
		af.until = time.Now().Add(f.DownFor)
	}
	s.faults[route] = af
}

// NoteWriteRoutes are the routes that write a HubSpot note: a New event's create (with
// its association), alone or in a batch of concurrent creates, and any other
// attempt's batch upsert.
var NoteWriteRoutes = []string{RouteHubSpotNoteCreate, RouteHubSpotNoteBatchCreate, RouteHubSpotNoteUpsert}

// SetNoteWriteFault sets f on both routes that write a HubSpot note.
func (s *Server) SetNoteWriteFault(f Fault) {
	for _, r := range NoteWriteRoutes {
		s.SetFault(r, f)
	}
}

// NoteWrites counts the notes asked of the routes that write a HubSpot note: a single
// request's one, a batch's inputs (Inputs).
func (s *Server) NoteWrites() int {
	n := 0
	for _, r := range NoteWriteRoutes {
		n += s.Inputs(r)
	}
	return n
}

// ClearFault removes route's fault; ClearFaults removes all.
func (s *Server) ClearFault(route string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.faults, route)
}

func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.faults)
}

// Requests is how many requests route has received, faulted or not.
func (s *Server) Requests(route string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[route]
}

// ContactCreates counts the contacts asked of the routes that create a HubSpot
// contact: a single create's one, a batch's inputs.
func (s *Server) ContactCreates() int {
	return s.Inputs(RouteHubSpotContactCreate) + s.Inputs(RouteHubSpotContactBatchNew)
}

// Inputs is the number of records asked of route so far: its requests, each batch
// request counted by its inputs.
func (s *Server) Inputs(route string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inputs[route]
}

// TotalRequests is the number of requests across all routes.
func (s *Server) TotalRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.counts {
		n += c
	}
	return n
}

// LastRequest is when route last received a request (zero if never), so a
// test can assert that a client stayed quiet for a while.
func (s *Server) LastRequest(route string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last[route]
}

// maxTimes bounds the arrival times kept per route: the sandbox also runs inside a
// long-lived `exacto up`.
const maxTimes = 100_000

// RequestTimes is when each request to route arrived, in order (a fault set before
// them applies to the first ones), so a test can see what came after a 429. Past
// maxTimes requests to a route, it keeps the later ones.
func (s *Server) RequestTimes(route string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.times[route]...)
}

// take counts a request and returns the fault to apply to it, if any.
func (s *Server) take(route string, inputs int) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.counts[route]++
	s.inputs[route] += inputs
	s.last[route] = now
	if t := s.times[route]; len(t) == maxTimes {
		s.times[route] = append(t[:0:0], t[maxTimes/2:]...)
	}
	s.times[route] = append(s.times[route], now)
	af := s.faults[route]
	if af == nil {
		return nil
	}
	if af.DownFor > 0 {
		if time.Now().Before(af.until) {
			f := af.Fault
			if f.Status == 0 {
				f.Status = http.StatusServiceUnavailable
			}
			return &f
		}
		delete(s.faults, route)
		return nil
	}
	if af.left == 0 {
		delete(s.faults, route)
		return nil
	}
	if af.left > 0 {
		af.left--
	}
	f := af.Fault
	if af.left == 0 {
		delete(s.faults, route)
	}
	return &f
}

// authFunc reports whether a request carries the right credential.
type authFunc func(*http.Request) bool

// handle mounts h at pattern under route, wrapped with counting, faults, the
// platform's rate limit and auth. Faults and the limit act before auth, as an edge
// proxy or rate limiter would.
func (s *Server) handle(mux *http.ServeMux, pattern, route string, auth authFunc, deny http.HandlerFunc, h http.HandlerFunc) {
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if wait, limited := s.overLimit(route, r); limited {
			rateLimited(w, route, wait)
			return
		}
		f := s.take(route, batchInputs(pattern, r))
		if f != nil && f.Latency > 0 && !s.sleep(r.Context(), f.Latency) {
			return
		}
		if f != nil && f.Status != 0 {
			if f.RetryAfter > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(int(f.RetryAfter/time.Second)))
			}
			writeJSON(w, f.Status, map[string]any{"status": "error", "message": "sandbox fault " + strconv.Itoa(f.Status)})
			return
		}
		if !auth(r) {
			deny(w, r)
			return
		}
		if f != nil && f.TimeoutAfterCommit > 0 {
			rec := httptest.NewRecorder()
			h(rec, r) // commit
			s.sleep(r.Context(), f.TimeoutAfterCommit)
			copyRecorded(w, rec) // usually nobody is listening any more
			return
		}
		h(w, r)
	})
}

// sleep waits d; false if the client left or the server is stopping first.
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.stopping:
		return false
	}
}

func copyRecorded(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// readJSON decodes a bounded request body into v.
// batchInputs is how many inputs r carries: the length of its body's "inputs" for a
// batch endpoint (pattern has /batch/), left for its handler to read again; 1 for any
// other request.
func batchInputs(pattern string, r *http.Request) int {
	if !strings.Contains(pattern, "/batch/") || r.Body == nil {
		return 1
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, 32<<20)) // a batch of notes may be large
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req struct {
		Inputs []json.RawMessage `json:"inputs"`
	}
	if err != nil || json.Unmarshal(body, &req) != nil {
		return 1
	}
	return max(len(req.Inputs), 1)
}

func readJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 32<<20)) // a batch of notes may be large
	if err := dec.Decode(v); err != nil {
		return errors.New("invalid JSON body: " + err.Error())
	}
	return nil
}
