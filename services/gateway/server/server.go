// Package server is the webhook gateway: it verifies each delivery over its raw bytes,
// splits it into events, normalises each into the envelope and answers 200 only after
// JetStream has acknowledged every one of them.
package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/providers/meta"
	"exacto.dev/pkg/providers/registry"
	"exacto.dev/pkg/stream"
	"exacto.dev/pkg/telemetry"
)

var tracer = telemetry.Tracer("gateway")

// Endpoint is one configured endpoint, built for serving.
type Endpoint struct {
	Tenant, ID   string
	Spec         providers.Spec
	Provider     providers.Provider
	AuthMethod   string
	PublicURL    string
	VerifyTokens []string
	tokenSum     [32]byte
}

// Server serves POST /hooks/{endpoint_id}/{path_token}.
type Server struct {
	endpoints      map[string]*Endpoint
	js             jetstream.JetStream
	index          jetstream.KeyValue
	arrivals       jetstream.KeyValue
	bodyLimit      int64
	maxEvents      int
	publishTimeout time.Duration
	log            *slog.Logger
	now            func() time.Time
	metrics        *metrics
	// commits coalesces concurrent events into atomic batches (nil: group commit off,
	// every event its own publish and fsync).
	commits *committer
}

// Options are what New needs.
type Options struct {
	Config *config.Config
	JS     jetstream.JetStream
	Log    *slog.Logger
	Now    func() time.Time // nil: time.Now
}

// New builds the gateway from a validated config. The topology must already exist.
func New(ctx context.Context, o Options) (*Server, error) {
	s := &Server{
		endpoints:      map[string]*Endpoint{},
		js:             o.JS,
		bodyLimit:      o.Config.Gateway.BodyLimit,
		maxEvents:      o.Config.Gateway.MaxEvents,
		publishTimeout: o.Config.Gateway.PublishTimeout,
		log:            o.Log,
		now:            o.Now,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	var err error
	if s.index, err = o.JS.KeyValue(ctx, stream.EventIndex); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", stream.EventIndex, err)
	}
	if s.arrivals, err = o.JS.KeyValue(ctx, stream.Arrivals); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", stream.Arrivals, err)
	}
	if s.metrics, err = newMetrics(o.Config.WorkflowVersion); err != nil {
		return nil, err
	}
	if gc := o.Config.Gateway.GroupCommit; gc.MaxEvents > 1 {
		s.commits = newCommitter(o.JS, gc.MaxEvents, gc.MaxWait, s.publishTimeout, s.metrics.batch)
	}
	for _, t := range o.Config.Tenants {
		for i := range t.Endpoints {
			ec := &t.Endpoints[i]
			spec, ok := registry.Lookup(ec.Provider)
			if !ok {
				return nil, fmt.Errorf("endpoint %s: unknown provider %q", ec.ID, ec.Provider)
			}
			p, err := spec.New(ec.ProviderConfig())
			if err != nil {
				return nil, fmt.Errorf("endpoint %s: %w", ec.ID, err)
			}
			ep := &Endpoint{
				Tenant: t.ID, ID: ec.ID, Spec: spec, Provider: p,
				AuthMethod: spec.Auth(ec.ProviderConfig()),
				PublicURL:  ec.PublicURL,
				tokenSum:   sha256.Sum256([]byte(ec.PathToken.Value)),
			}
			if ec.VerifyToken.Value != "" {
				ep.VerifyTokens = []string{ec.VerifyToken.Value}
			}
			s.endpoints[ec.ID] = ep
			s.metrics.zero(ep)
		}
	}
	return s, nil
}

// Close stops the group committer; call it once no request is in flight.
func (s *Server) Close() {
	if s.commits != nil {
		s.commits.close()
	}
}

// Handler routes the webhook URLs; everything else is 404.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/hooks/{endpoint}/{token}", s.serveHook)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { notFound(w) })
	return recoverPanics(s.log, mux)
}

// HTTPServer is the gateway's listener with timeouts that slow or hostile clients
// cannot hold open.
func (s *Server) HTTPServer(addr string) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           s.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      s.publishTimeout + 30*time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}

// dummySum is compared against for unknown endpoints, so an unknown endpoint and a
// wrong token cost the same time.
var dummySum = sha256.Sum256([]byte("exacto: no such endpoint"))

// route finds the endpoint whose id and path token match. Tokens are compared as
// SHA-256 digests in constant time, so neither their content nor their length leaks.
func (s *Server) route(id, token string) *Endpoint {
	ep, ok := s.endpoints[id]
	want := dummySum
	if ok {
		want = ep.tokenSum
	}
	got := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 || !ok {
		return nil
	}
	return ep
}

// answer is the JSON body of a successful delivery.
type answer struct {
	Stored     int      `json:"stored"`
	Duplicates int      `json:"duplicates"`
	IDs        []string `json:"ids"`
}

func (s *Server) serveHook(w http.ResponseWriter, r *http.Request) {
	rec := &access{start: time.Now(), method: r.Method, endpoint: r.PathValue("endpoint"), remote: r.RemoteAddr}
	defer s.logAccess(rec)
	ep := s.route(r.PathValue("endpoint"), r.PathValue("token"))
	if ep == nil {
		rec.status, rec.reason = http.StatusNotFound, "not_found"
		notFound(w)
		return
	}
	rec.tenant, rec.provider = ep.Tenant, ep.Spec.Name
	// The trace of a delivery starts here and continues in every consumer of its events.
	ctx, span := tracer.Start(r.Context(), "webhook "+ep.Spec.Name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("exacto.tenant", ep.Tenant), attribute.String("exacto.endpoint", ep.ID)))
	defer func() {
		span.SetAttributes(attribute.Int("http.response.status_code", rec.status), attribute.Int("exacto.stored", rec.stored))
		span.End()
	}()
	r = r.WithContext(ctx)
	switch r.Method {
	case http.MethodPost:
	case http.MethodGet:
		if ep.Spec.Name == meta.Spec.Name {
			s.handshake(w, r, ep, rec)
			return
		}
		fallthrough
	default:
		rec.status, rec.reason = http.StatusMethodNotAllowed, "method_not_allowed"
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, rec.status, rec.reason, "use POST")
		return
	}
	if !jsonContentType(r.Header.Get("Content-Type")) {
		s.reject(w, rec, http.StatusBadRequest, "wrong_content_type", "the body must be JSON")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.bodyLimit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.reject(w, rec, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("the body is over %d bytes", s.bodyLimit))
			return
		}
		s.reject(w, rec, http.StatusBadRequest, "unreadable_body", "the body could not be read")
		return
	}
	rec.bytes = len(body)
	req := &providers.Request{Method: r.Method, URL: fullURL(ep, r), Header: r.Header, Body: body, Now: s.now()}
	if err := ep.Provider.Verify(req); err != nil {
		if errors.Is(err, providers.ErrMalformed) {
			s.reject(w, rec, http.StatusBadRequest, "malformed_body", err.Error())
			return
		}
		s.metrics.invalidSignature(ep)
		s.reject(w, rec, http.StatusUnauthorized, "invalid_signature", publicReason(err))
		return
	}
	evs, err := ep.Provider.Events(req)
	if err != nil {
		s.reject(w, rec, http.StatusBadRequest, "malformed_body", err.Error())
		return
	}
	switch {
	case len(evs) == 0:
		s.reject(w, rec, http.StatusBadRequest, "empty_batch", "the delivery holds no events")
		return
	case len(evs) > s.maxEvents:
		s.reject(w, rec, http.StatusRequestEntityTooLarge, "too_many_events", fmt.Sprintf("the delivery holds %d events, over the limit of %d", len(evs), s.maxEvents))
		return
	}
	sum := sha256.Sum256(body)
	received := s.now()
	envs := make([]envelope.Envelope, len(evs))
	for i, ev := range evs {
		envs[i] = ev.Envelope(ep.Spec, ep.Tenant, ep.ID, ep.AuthMethod, received, hex.EncodeToString(sum[:]))
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.publishTimeout)
	defer cancel()
	ans, err := s.store(ctx, envs)
	if err != nil {
		s.log.Warn("publish failed", "endpoint", ep.ID, "err", err)
		s.reject(w, rec, http.StatusServiceUnavailable, "store_unavailable", "the event store did not acknowledge; retry later")
		return
	}
	rec.status, rec.stored, rec.duplicates = http.StatusOK, ans.Stored, ans.Duplicates
	s.metrics.received(ep, envs, ans.Duplicates)
	writeJSON(w, http.StatusOK, ans)
}

// store publishes every envelope not already stored and waits for every PubAck.
// Duplicates are caught twice: by the index of stored ids (late redeliveries, past the
// stream's window) and by Nats-Msg-Id within the window (concurrent redeliveries).
func (s *Server) store(ctx context.Context, envs []envelope.Envelope) (answer, error) {
	ans := answer{IDs: make([]string, 0, len(envs))}
	type pending struct {
		id   string
		wait func() (duplicate bool, err error)
	}
	var waits []pending
	var dups []string
	seen := map[string]bool{}
	for i := range envs {
		env := &envs[i]
		ans.IDs = append(ans.IDs, env.ID)
		if seen[env.ID] { // the same event twice in one delivery
			dups = append(dups, env.ID)
			continue
		}
		seen[env.ID] = true
		if stored, err := stream.Stored(ctx, s.index, env.ID); err != nil {
			return ans, err
		} else if stored {
			dups = append(dups, env.ID)
			continue
		}
		msg, err := stream.EventMessage(ctx, *env)
		if err != nil {
			return ans, err
		}
		wait, err := s.publish(ctx, msg)
		if err != nil {
			return ans, fmt.Errorf("publish %s: %w", env.ID, err)
		}
		waits = append(waits, pending{env.ID, wait})
	}
	for _, p := range waits {
		dup, err := p.wait()
		if err != nil {
			return ans, fmt.Errorf("publish %s: %w", p.id, err)
		}
		if dup {
			dups = append(dups, p.id)
		} else {
			ans.Stored++
		}
	}
	ans.Duplicates = len(dups)
	for _, id := range dups {
		if err := s.countArrival(ctx, id); err != nil {
			s.log.Warn("arrival count", "id", id, "err", err)
		}
	}
	return ans, nil
}

// publish sends msg to EXACTO_EVENTS, through the group committer when it is on; the
// returned func waits until msg is stored (or found a duplicate).
func (s *Server) publish(ctx context.Context, msg *nats.Msg) (wait func() (duplicate bool, err error), err error) {
	if s.commits != nil {
		return s.commits.publish(ctx, msg), nil
	}
	return publishOne(ctx, s.js, msg)
}

// countArrival adds one to the duplicate deliveries of id (compare-and-set, so
// concurrent gateways never lose a count).
func (s *Server) countArrival(ctx context.Context, id string) error {
	for range 10 {
		e, err := s.arrivals.Get(ctx, id)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if _, err := s.arrivals.Create(ctx, id, []byte("1")); err == nil {
				return nil
			}
		case err != nil:
			return err
		default:
			var n int
			fmt.Sscan(string(e.Value()), &n)
			if _, err := s.arrivals.Update(ctx, id, []byte(fmt.Sprint(n+1)), e.Revision()); err == nil {
				return nil
			}
		}
	}
	return errors.New("arrival count: too much contention")
}

// handshake answers Meta's GET subscription check.
func (s *Server) handshake(w http.ResponseWriter, r *http.Request, ep *Endpoint, rec *access) {
	challenge, ok := meta.Handshake(r.URL.Query(), ep.VerifyTokens)
	if !ok {
		rec.status, rec.reason = http.StatusForbidden, "handshake_refused"
		writeError(w, rec.status, rec.reason, "hub.mode or hub.verify_token does not match")
		return
	}
	rec.status = http.StatusOK
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, challenge)
}

func (s *Server) reject(w http.ResponseWriter, rec *access, status int, code, msg string) {
	rec.status, rec.reason = status, code
	s.metrics.rejected(rec.tenant, rec.provider, code)
	writeError(w, status, code, msg)
}

// publicReason says what failed without any signature or secret material.
func publicReason(err error) string {
	for _, e := range []error{providers.ErrMissingSignature, providers.ErrTimestamp, providers.ErrBadSecret, providers.ErrBadSignature} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return "verification failed"
}

// fullURL is the URL as the provider called it, for schemes that sign it: the
// endpoint's public_url when set, else rebuilt from the request.
func fullURL(ep *Endpoint, r *http.Request) string {
	if ep.PublicURL != "" {
		if r.URL.RawQuery != "" {
			return ep.PublicURL + "?" + r.URL.RawQuery
		}
		return ep.PublicURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if p := r.Header.Get("X-Forwarded-Proto"); p != "" {
		scheme = strings.TrimSpace(strings.Split(p, ",")[0])
	}
	return scheme + "://" + r.Host + r.URL.RequestURI()
}

// jsonContentType accepts JSON media types, and no type at all (some senders omit it).
func jsonContentType(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// notFound is the one answer for an unknown endpoint and a wrong token alike.
func notFound(w http.ResponseWriter) {
	writeError(w, http.StatusNotFound, "not_found", "no such webhook endpoint")
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"error": code, "message": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
