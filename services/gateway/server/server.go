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
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/forwarded"
	"exacto.dev/pkg/ingest"
	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/providers/meta"
	"exacto.dev/pkg/quarantine"
	"exacto.dev/pkg/stream"
	"exacto.dev/pkg/telemetry"
)

var tracer = telemetry.Tracer("gateway")

// Endpoint is one configured endpoint, built for serving.
type Endpoint struct {
	*ingest.Endpoint
	PublicURL    string
	VerifyTokens []string
	tokenSum     [32]byte
}

// Server serves POST /hooks/{endpoint_id}/{path_token}.
type Server struct {
	endpoints      map[string]*Endpoint
	limits         config.Gateway
	publishTimeout time.Duration
	events         *ingest.Store
	quarantine     *quarantine.Store
	log            *slog.Logger
	now            func() time.Time
	metrics        *metrics
	admission      *admission
	proxies        forwarded.Trusted // whose X-Forwarded-Proto is believed
	store          *storeGuard
	rejections     *rejections // the log of refused deliveries
	// commits coalesces concurrent events into atomic batches (nil: group commit off,
	// every event its own publish and fsync); ownCommits: made here, closed by Close.
	commits    *ingest.Committer
	ownCommits bool
}

// Options are what New needs.
type Options struct {
	Config *config.Config
	JS     jetstream.JetStream
	Log    *slog.Logger
	Now    func() time.Time // nil: time.Now
	// Commit, when set, is the process's group committer (exacto up: shared with the
	// consumers' derived events); nil: the gateway makes its own when the config asks.
	Commit *ingest.Committer
	// Checkpoints, when set (one embedded node), keeps the index writer's consumer state
	// in the server's memory and its ack floor here (Indexer).
	Checkpoints jetstream.KeyValue
	// StoreDir is the embedded server's data dir, whose free space the gateway watches
	// (gateway.min_free_disk); "" for a server of its own.
	StoreDir string
}

// New builds the gateway from a validated config. The topology must already exist.
func New(ctx context.Context, o Options) (*Server, error) {
	s := &Server{
		endpoints:      map[string]*Endpoint{},
		limits:         o.Config.Gateway,
		publishTimeout: o.Config.Gateway.PublishTimeout,
		log:            o.Log,
		now:            o.Now,
		admission:      newAdmission(o.Config),
		proxies:        o.Config.Proxies(),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	var err error
	s.store = newStoreGuard(o.JS, o.Config, o.StoreDir, s.now)
	s.rejections = newRejections(o.JS.Conn(), s.now, func(id string) bool { _, ok := s.endpoints[id]; return ok })
	if s.metrics, err = newMetrics(o.Config.WorkflowVersion, s.store); err != nil {
		return nil, err
	}
	var publish ingest.Publish
	s.commits = o.Commit
	// A server its process syncs shares one round of fdatasyncs among every delivery
	// waiting (stream.Durable): that is its group commit, with no window and no batch.
	byProcess, err := stream.SyncedByProcess(ctx, o.JS)
	if err != nil {
		return nil, err
	}
	if gc := o.Config.Gateway.GroupCommit; s.commits == nil && gc.MaxEvents > 1 && !byProcess {
		s.commits, s.ownCommits = ingest.NewCommitter(o.JS, gc.MaxEvents, gc.MaxWait, s.publishTimeout), true
	}
	if s.commits != nil {
		publish = s.commits.Publish
	}
	if s.events, err = ingest.OpenStore(ctx, o.JS, publish, s.log); err != nil {
		return nil, err
	}
	if s.quarantine, err = quarantine.New(ctx, o.JS); err != nil {
		return nil, err
	}
	for _, t := range o.Config.Tenants {
		for i := range t.Endpoints {
			ec := &t.Endpoints[i]
			built, err := ingest.NewEndpoint(t.ID, ec)
			if err != nil {
				return nil, err
			}
			ep := &Endpoint{Endpoint: built, PublicURL: ec.PublicURL, tokenSum: sha256.Sum256([]byte(ec.PathToken.Value))}
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
	if s.ownCommits {
		s.commits.Close()
	}
}

// Handler routes the webhook URLs; everything else is 404.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/hooks/{endpoint}/{token}", s.serveHook)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// A URL of no endpoint's shape (a token forgotten, a typo): refused, and logged
		// as refused like any other, so the one pointing a provider here sees why.
		rec := &access{start: time.Now(), method: r.Method, endpoint: "", remote: s.proxies.Remote(r),
			status: http.StatusNotFound, reason: "not_found", message: "not a webhook URL: POST /hooks/<endpoint>/<path_token>"}
		defer s.logAccess(rec)
		notFound(w)
	})
	return recoverPanics(s.log, closeChunked(mux))
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

// answer is the JSON body of a 200: what was stored, or the quarantine that keeps the
// delivery.
type answer struct {
	ingest.Result
	Quarantined  int    `json:"quarantined,omitempty"`
	QuarantineID string `json:"quarantine_id,omitempty"`
	// AlreadyQuarantined: a retry of a delivery the quarantine already keeps.
	AlreadyQuarantined bool   `json:"already_quarantined,omitempty"`
	Reason             string `json:"reason,omitempty"` // why it is quarantined
}

func (s *Server) serveHook(w http.ResponseWriter, r *http.Request) {
	rec := &access{start: time.Now(), method: r.Method, endpoint: r.PathValue("endpoint"), remote: s.proxies.Remote(r)}
	defer s.logAccess(rec)
	ep := s.route(r.PathValue("endpoint"), r.PathValue("token"))
	if ep == nil {
		rec.status, rec.reason, rec.message = http.StatusNotFound, "not_found", "no such webhook endpoint, or a wrong path token"
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
		rec.status, rec.reason, rec.message = http.StatusMethodNotAllowed, "method_not_allowed", "use POST"
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, rec.status, rec.reason, "use POST")
		return
	}
	if code, why := s.store.refusal(r.Context(), ep.Tenant); why != "" {
		w.Header().Set("Retry-After", "60")
		s.reject(w, rec, http.StatusInsufficientStorage, code, why+": nothing is stored until there is room; retry later")
		return
	}
	if !jsonContentType(r.Header.Get("Content-Type")) {
		s.reject(w, rec, http.StatusBadRequest, "wrong_content_type", "the body must be JSON")
		return
	}
	// Up to the quarantine's cap, not body_limit: a verified body over the limit is
	// kept, so it must be read whole to be verified. What is over the cap is refused
	// unread (its announced length) or as soon as the cap is passed.
	if r.ContentLength > s.limits.QuarantineCap {
		w.Header().Set("Connection", "close") // rather than read the body to reuse the connection
		s.refuseOverCap(w, rec)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.limits.QuarantineCap))
	if err != nil {
		var over *http.MaxBytesError
		if errors.As(err, &over) {
			s.refuseOverCap(w, rec)
			return
		}
		s.reject(w, rec, http.StatusBadRequest, "unreadable_body", "the body could not be read")
		return
	}
	rec.bytes = len(body)
	req := &providers.Request{Method: r.Method, URL: fullURL(ep, r, s.proxies), Header: r.Header, Body: body, Now: s.now()}
	if err := ep.Provider.Verify(req); err != nil {
		if errors.Is(err, providers.ErrMalformed) {
			s.reject(w, rec, http.StatusBadRequest, ingest.Malformed, err.Error())
			return
		}
		s.metrics.invalidSignature(ep)
		s.reject(w, rec, http.StatusUnauthorized, "invalid_signature", publicReason(err))
		return
	}
	// Paced once verified: a delivery takes a token only if its sender could sign it
	// (or, unsigned, holds the URL), so forgeries cannot spend a signed endpoint's
	// budget and hold its provider at 429.
	if ok, wait := s.admission.admit(ep.Tenant, ep.ID, s.now); !ok {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		s.reject(w, rec, http.StatusTooManyRequests, "rate_limited",
			"over the deliveries a second this endpoint or its tenant takes (gateway.rate_limit); retry after Retry-After seconds")
		return
	}
	// The hash of the body as stored, its secret redacted: a hash of the secret's bytes
	// shown on the console would let anyone guess the secret offline.
	sum := sha256.Sum256(ep.Spec.RedactBody(body))
	d := ingest.Delivery{Endpoint: ep.Endpoint, Request: req, Size: len(body), SHA256: hex.EncodeToString(sum[:])}
	ctx, cancel := context.WithTimeout(r.Context(), s.publishTimeout)
	defer cancel()
	envs, refused := d.Envelopes(s.limits)
	if refused != nil {
		s.keep(ctx, w, rec, d, refused)
		return
	}
	res, err := s.events.Store(ctx, envs)
	if err != nil {
		s.log.Warn("publish failed", "endpoint", ep.ID, "err", err)
		s.reject(w, rec, http.StatusServiceUnavailable, "store_unavailable", "the event store did not acknowledge; retry later")
		return
	}
	rec.status, rec.stored, rec.duplicates = http.StatusOK, res.Stored, res.Duplicates
	s.metrics.received(ep, envs, res.Duplicates)
	writeJSON(w, http.StatusOK, answer{Result: res})
}

// keep puts a verified delivery the gateway cannot turn into events in the quarantine
// and answers 200 once the quarantine has it on disk: the provider's retries would add
// nothing, and a provider that keeps being refused disables its webhook. Until then
// the answer is 503, so the provider retries and nothing is lost.
func (s *Server) keep(ctx context.Context, w http.ResponseWriter, rec *access, d ingest.Delivery, why *ingest.Refusal) {
	qr, body := quarantine.NewRecord(d, why)
	already, err := s.quarantine.Put(ctx, qr, body)
	if err != nil {
		s.log.Warn("quarantine failed", "endpoint", d.Endpoint.ID, "reason", why.Reason, "err", err)
		s.reject(w, rec, http.StatusServiceUnavailable, "quarantine_unavailable", "the quarantine did not acknowledge; retry later")
		return
	}
	if !already {
		s.metrics.quarantined(d.Endpoint, why.Reason, 1)
	}
	rec.status, rec.reason = http.StatusOK, "quarantined_"+why.Reason
	writeJSON(w, http.StatusOK, answer{Result: ingest.Result{IDs: []string{}}, Quarantined: 1, QuarantineID: qr.ID, AlreadyQuarantined: already, Reason: why.Reason})
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

// refuseOverCap answers a body over the quarantine's cap: never read whole, so never
// verified, it is kept nowhere.
func (s *Server) refuseOverCap(w http.ResponseWriter, rec *access) {
	s.reject(w, rec, http.StatusRequestEntityTooLarge, ingest.BodyTooLarge, fmt.Sprintf("the body is over %d bytes, the most the gateway reads", s.limits.QuarantineCap))
}

func (s *Server) reject(w http.ResponseWriter, rec *access, status int, code, msg string) {
	rec.status, rec.reason, rec.message = status, code, msg
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
func fullURL(ep *Endpoint, r *http.Request, proxies forwarded.Trusted) string {
	if ep.PublicURL != "" {
		if r.URL.RawQuery != "" {
			return ep.PublicURL + "?" + r.URL.RawQuery
		}
		return ep.PublicURL
	}
	return proxies.Scheme(r) + "://" + r.Host + r.URL.RequestURI()
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
