package platform

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	json "github.com/segmentio/encoding/json"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"exacto.dev/pkg/ratelimit"
	"exacto.dev/pkg/telemetry"
)

var tracer = telemetry.Tracer("platform")

// MaxBody caps how much of a response we read: provider answers are small and
// a misbehaving proxy must not make us buffer without bound.
const MaxBody = 1 << 20

// DefaultTimeout bounds one request when the caller's context has no sooner
// deadline.
const DefaultTimeout = 10 * time.Second

// client is what an HTTP without a Client of its own sends with. Every worker of every
// consumer of a process calls the same few hosts at once; Go's default transport keeps
// two idle connections a host, so the others were closed after each call and dialled
// (and, at a real provider, TLS-handshaken) again for the next.
var client = &http.Client{Transport: func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return t
}()}

// HTTP sends JSON requests to one dependency and classifies the outcome.
type HTTP struct {
	Dependency string
	BaseURL    string // e.g. "https://api.hubapi.com"; no trailing slash
	Client     *http.Client
	Timeout    time.Duration            // per request; DefaultTimeout if 0
	Auth       func(*http.Request)      // sets the credential
	ErrMsg     func(body []byte) string // optional: pull a message out of an error body
	// RetryAfter, if set, reads a 429's wait from what the provider puts besides the
	// Retry-After header (a body field, a reset time); 0 when it says nothing.
	RetryAfter func(h http.Header, body []byte) time.Duration
	// Limit, if set, paces requests to the provider's documented rate (pkg/ratelimit:
	// shared by every process using the same account), so that a burst of events waits
	// here instead of collecting 429s; a 429 holds it for the wait the provider asked.
	Limit ratelimit.Limiter
	// HoldLimit is the limiter a 429 holds, when not Limit: a call paced by two
	// limiters (an endpoint's own rate within the account's) answered 429 by the
	// endpoint's limit holds that one, not every call of the account.
	HoldLimit ratelimit.Limiter
	// MaxBody caps how much of an answer is read (MaxBody if 0): a batch of records
	// answers more than one record.
	MaxBody int64
}

// DefaultHold is how long a 429 that names no wait holds the account's limiter;
// MaxHold bounds any wait a provider asks for (a Retry-After of a day is a provider's
// bug, and holding a tenant's every call that long is worse than asking again).
const (
	DefaultHold = time.Second
	MaxHold     = 10 * time.Minute
)

// Do sends method path?query with in as the JSON body (nil for none) and
// decodes a 2xx body into out (nil to discard). Non-2xx and transport
// failures come back as *Error.
func (h *HTTP) Do(ctx context.Context, method, path string, query url.Values, in, out any) (err error) {
	// One client span per call, in the trace of the event that made it; the query
	// string stays out of it (Smartlead's API key travels there).
	ctx, span := tracer.Start(ctx, method+" "+h.Dependency, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("http.request.method", method), attribute.String("url.path", path),
			attribute.String("exacto.dependency", h.Dependency)))
	defer func() {
		var e *Error
		if errors.As(err, &e) && e.Status != 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", e.Status))
		}
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	// The rate limit's wait comes before the request's timeout starts: a request that
	// waited its turn still gets its whole time at the provider. A wait the caller's
	// context ends was never sent, which says nothing of the provider's health.
	if h.Limit != nil {
		if err := h.Limit.Wait(ctx); err != nil {
			e := &Error{Dependency: h.Dependency, Transient: true, Unsent: true, Msg: "waiting for the rate limit: " + err.Error()}
			var we *ratelimit.WaitError
			if errors.As(err, &we) && h.HoldLimit == nil {
				// The account's budget is spent for a while: the consumer's pacer holds
				// the dependency's events in the stream until it comes back. (Not for an
				// endpoint's own limit: the account's other calls may go.)
				e.RetryAfter = min(we.Wait, MaxHold)
			}
			return e
		}
	}
	timeout := h.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	u := strings.TrimRight(h.BaseURL, "/") + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return &Error{Dependency: h.Dependency, Msg: "encode request: " + err.Error()}
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return &Error{Dependency: h.Dependency, Msg: "build request: " + err.Error()}
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if h.Auth != nil {
		h.Auth(req)
	}
	telemetry.Inject(ctx, req.Header)
	c := cmp.Or(h.Client, client)
	resp, err := c.Do(req)
	if err != nil {
		return Classify(h.Dependency, nil, redact(err, req.URL))
	}
	defer resp.Body.Close()
	data, rerr := io.ReadAll(io.LimitReader(resp.Body, cmp.Or(h.MaxBody, MaxBody)))
	if cerr := Classify(h.Dependency, resp, nil); cerr != nil {
		e := cerr.(*Error)
		if msg := h.errMsg(data); msg != "" {
			e.Msg = msg
		}
		if resp.StatusCode == http.StatusTooManyRequests {
			h.hold(ctx, e, resp.Header, data)
		}
		return e
	}
	if rerr != nil {
		// The write was accepted but we lost the answer: same as a timeout.
		return Classify(h.Dependency, nil, rerr)
	}
	if out == nil || len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &Error{Dependency: h.Dependency, Status: resp.StatusCode, Msg: "decode response: " + err.Error()}
	}
	return nil
}

// hold makes every caller of the account wait what a 429 asked (Retry-After, else what
// RetryAfter reads, else DefaultHold), and carries the wait on e for the consumer's
// pacer. A failing hold only loses pacing: the error is still e.
func (h *HTTP) hold(ctx context.Context, e *Error, header http.Header, body []byte) {
	if e.RetryAfter == 0 && h.RetryAfter != nil {
		e.RetryAfter = h.RetryAfter(header, body)
	}
	e.RetryAfter = min(e.RetryAfter, MaxHold)
	l := h.Limit
	if h.HoldLimit != nil {
		l = h.HoldLimit
	}
	if l != nil {
		_ = l.Hold(context.WithoutCancel(ctx), cmp.Or(e.RetryAfter, DefaultHold))
	}
	if h.HoldLimit != nil {
		// The endpoint's own limit holds its callers; the wait must not pause every
		// call of the dependency through the consumers' pacer.
		e.RetryAfter = 0
	}
}

func (h *HTTP) errMsg(body []byte) string {
	if h.ErrMsg != nil {
		if m := h.ErrMsg(body); m != "" {
			return m
		}
	}
	return snippet(body)
}

// snippet is a short, single-line excerpt of an error body for logs.
func snippet(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// redact keeps credentials passed in the query string (Smartlead's api_key)
// out of error messages, which end up in logs.
func redact(err error, u *url.URL) error {
	if u == nil || u.RawQuery == "" {
		return err
	}
	msg := err.Error()
	clean := *u
	q := clean.Query()
	for k := range q {
		if strings.Contains(strings.ToLower(k), "key") || strings.Contains(strings.ToLower(k), "token") {
			q.Set(k, "REDACTED")
		}
	}
	clean.RawQuery = q.Encode()
	msg = strings.ReplaceAll(msg, u.String(), clean.String())
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (r *redactedError) Error() string { return r.msg }
func (r *redactedError) Unwrap() error { return r.err }

// Bearer returns an Auth func that sets "Authorization: Bearer <token>".
func Bearer(token string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }
}

// QueryKey returns an Auth func that adds name=key to the query string.
func QueryKey(name, key string) func(*http.Request) {
	return func(r *http.Request) {
		q := r.URL.Query()
		q.Set(name, key)
		r.URL.RawQuery = q.Encode()
	}
}

// PathEscape is url.PathEscape, re-exported so clients need one import.
func PathEscape(s string) string { return url.PathEscape(s) }
