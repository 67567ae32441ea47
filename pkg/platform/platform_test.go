package platform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"exacto.dev/pkg/ratelimit"
	"exacto.dev/pkg/retry"
)

func TestClassifyStatuses(t *testing.T) {
	cases := []struct {
		status    int
		transient bool
	}{
		{200, false}, {201, false}, {204, false},
		{400, false}, {401, false}, {403, false}, {404, false}, {409, false}, {422, false},
		{429, true}, {500, true}, {502, true}, {503, true}, {504, true},
	}
	for _, c := range cases {
		resp := &http.Response{StatusCode: c.status, Header: http.Header{}}
		err := Classify("dep", resp, nil)
		if c.status < 300 {
			if err != nil {
				t.Errorf("%d: got %v, want nil", c.status, err)
			}
			continue
		}
		var pe *Error
		if !errors.As(err, &pe) || pe.Status != c.status || pe.Dependency != "dep" {
			t.Fatalf("%d: got %#v", c.status, err)
		}
		if IsTransient(err) != c.transient {
			t.Errorf("%d: transient=%v, want %v", c.status, IsTransient(err), c.transient)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	resp := &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"3"}}}
	err := Classify("hubspot", resp, nil)
	if !IsTransient(err) || RetryAfter(err) != 3*time.Second {
		t.Errorf("429: %v (after %v)", err, RetryAfter(err))
	}
}

func TestClassifyTransport(t *testing.T) {
	if err := Classify("d", nil, context.DeadlineExceeded); !IsTransient(err) {
		t.Errorf("deadline: %v", err)
	}
	if err := Classify("d", nil, fmt.Errorf("wrapped: %w", context.Canceled)); IsTransient(err) {
		t.Errorf("canceled should not be transient: %v", err)
	}
	// A closed port: connection refused is transient.
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	h := &HTTP{Dependency: "d", BaseURL: url, Timeout: time.Second}
	if err := h.Do(context.Background(), "GET", "/x", nil, nil, nil); !IsTransient(err) || StatusOf(err) != 0 {
		t.Errorf("refused: %v", err)
	}
}

func TestDoTimeoutAndRedaction(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	h := &HTTP{Dependency: "d", BaseURL: srv.URL, Timeout: 50 * time.Millisecond, Auth: QueryKey("api_key", "s3cret")}
	err := h.Do(context.Background(), "GET", "/slow", nil, nil, nil)
	if !IsTransient(err) {
		t.Fatalf("timeout: %v", err)
	}
	if msg := err.Error(); strings.Contains(msg, "s3cret") {
		t.Errorf("key leaked into error: %s", msg)
	}
}

// The consumers read a platform error's class through pkg/retry.
func TestClassForTheConsumers(t *testing.T) {
	limited := Classify("hubspot", &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {" 3 "}}}, nil)
	if e := retry.Of(fmt.Errorf("write note: %w", limited)); e.Class != retry.Transient || e.RetryAfter != 3*time.Second || e.Dependency != "hubspot" || e.Status != 429 {
		t.Fatalf("429: %+v", e)
	}
	if e := retry.Of(Classify("instantly", &http.Response{StatusCode: 401, Header: http.Header{}}, nil)); e.Class != retry.Permanent {
		t.Fatalf("401: %+v", e)
	}
}

// The consumers see each answer of a platform with the class, status and Retry-After
// it carries.
func TestClassesThroughRetry(t *testing.T) {
	cases := []struct {
		status     int
		retryAfter string
		class      retry.Class
		after      time.Duration
	}{
		{200, "", -1, 0},
		{204, "", -1, 0},
		{429, "3", retry.Transient, 3 * time.Second},
		// (an HTTP-date Retry-After is read by retry.ParseRetryAfter, tested there against a fixed clock)
		{429, "soon", retry.Transient, 0},
		{503, "7", retry.Transient, 7 * time.Second},
		{500, "", retry.Transient, 0},
		{502, "", retry.Transient, 0},
		{504, "", retry.Transient, 0},
		{400, "", retry.Permanent, 0},
		{401, "", retry.Permanent, 0},
		{403, "", retry.Permanent, 0},
		{404, "", retry.Permanent, 0},
		{409, "", retry.Permanent, 0},
		{422, "", retry.Permanent, 0},
	}
	for _, c := range cases {
		resp := &http.Response{StatusCode: c.status, Header: http.Header{}}
		if c.retryAfter != "" {
			resp.Header.Set("Retry-After", c.retryAfter)
		}
		err := Classify("hubspot", resp, nil)
		if c.class == -1 {
			if err != nil {
				t.Errorf("%d: %v", c.status, err)
			}
			continue
		}
		e := retry.Of(err)
		if e.Class != c.class || e.RetryAfter != c.after || e.Status != c.status || e.Dependency != "hubspot" {
			t.Errorf("%d %q: %+v", c.status, c.retryAfter, e)
		}
	}
}

func TestTransportErrorsAreTransient(t *testing.T) {
	for _, err := range []error{context.DeadlineExceeded, syscall.ECONNREFUSED, &net.OpError{Op: "dial", Err: syscall.ECONNRESET}} {
		if e := retry.Of(Classify("hubspot", nil, err)); e.Class != retry.Transient {
			t.Errorf("%v: %+v", err, e)
		}
	}
}

// A limiter paces requests at the provider's rate; a turn past the caller's deadline
// fails at once, transiently, marked unsent, carrying the wait, without sending anything. The wait is not
// part of the request's own timeout: a request that waited its turn is still sent.
func TestRateLimit(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	h := HTTP{Dependency: "dep", BaseURL: srv.URL, Limit: ratelimit.NewLocal(ratelimit.Rate{N: 1, Per: 40 * time.Millisecond})}
	began := time.Now()
	for range 5 {
		if err := h.Do(context.Background(), http.MethodGet, "/", nil, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	// A lower bound only: the limiter cannot let five through sooner.
	if d := time.Since(began); d < 160*time.Millisecond {
		t.Fatalf("5 requests at one per 40 ms took %v", d)
	}
	slow := HTTP{Dependency: "dep", BaseURL: srv.URL, Limit: ratelimit.NewLocal(ratelimit.Rate{N: 1, Per: time.Hour})}
	if err := slow.Do(context.Background(), http.MethodGet, "/", nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	before := hits.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := slow.Do(ctx, http.MethodGet, "/", nil, nil, nil)
	if !IsTransient(err) || !retry.Of(err).Unsent || hits.Load() != before {
		t.Fatalf("a wait past the deadline: %v, %d requests sent", err, hits.Load()-before)
	}
	// Told at once, with the wait (capped) for the consumer's pacer to hold the events.
	if ctx.Err() != nil || RetryAfter(err) != MaxHold {
		t.Fatalf("a turn an hour away: %v (retry after %v), the deadline %v", err, RetryAfter(err), ctx.Err())
	}
	// A turn that comes after longer than the request's timeout still sends it.
	paced := HTTP{Dependency: "dep", BaseURL: srv.URL, Timeout: 30 * time.Millisecond, Limit: ratelimit.NewLocal(ratelimit.Rate{N: 1, Per: 100 * time.Millisecond})}
	for range 2 {
		if err := paced.Do(context.Background(), http.MethodGet, "/", nil, nil, nil); err != nil {
			t.Fatalf("a request that waited longer than its timeout for its turn: %v", err)
		}
	}
}

// A 429 holds HoldLimit when set (an endpoint's own limit), not the account's, and
// leaves the wait off the error (the consumers' pacer would pause every call of the
// dependency); a Retry-After of a day holds at most MaxHold.
func TestTooManyRequestsHoldsItsOwnLimit(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "86400")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	account, endpoint := &recordingLimiter{}, &recordingLimiter{}
	h := HTTP{Dependency: "dep", BaseURL: srv.URL, Limit: ratelimit.All(account, endpoint), HoldLimit: endpoint}
	err := h.Do(context.Background(), http.MethodGet, "/", nil, nil, nil)
	if RetryAfter(err) != 0 || len(endpoint.holds) != 1 || endpoint.holds[0] != MaxHold || len(account.holds) != 0 {
		t.Fatalf("429 asking a day: %v; endpoint held %v, account held %v", err, endpoint.holds, account.holds)
	}
}

type recordingLimiter struct{ holds []time.Duration }

func (*recordingLimiter) Wait(context.Context) error { return nil }
func (l *recordingLimiter) Hold(_ context.Context, d time.Duration) error {
	l.holds = append(l.holds, d)
	return nil
}

// A 429 holds the account's limiter for the wait it asked — Retry-After, else what the
// client reads from the body — so the next call waits; the wait rides on the error too.
func TestTooManyRequestsHoldsTheLimiter(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch hits.Add(1) {
		case 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		case 2:
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(`{"wait_ms": 600}`))
		}
	}))
	defer srv.Close()
	h := HTTP{Dependency: "dep", BaseURL: srv.URL, Limit: ratelimit.NewLocal(ratelimit.Rate{N: 100, Per: time.Second}),
		RetryAfter: func(_ http.Header, body []byte) time.Duration {
			var b struct {
				WaitMS int `json:"wait_ms"`
			}
			json.Unmarshal(body, &b)
			return time.Duration(b.WaitMS) * time.Millisecond
		}}
	ctx := context.Background()
	err := h.Do(ctx, http.MethodGet, "/", nil, nil, nil)
	if !IsTransient(err) || RetryAfter(err) != time.Second {
		t.Fatalf("first 429: %v (retry after %v)", err, RetryAfter(err))
	}
	held := time.Now()
	err = h.Do(ctx, http.MethodGet, "/", nil, nil, nil)
	if waited := time.Since(held); waited < 900*time.Millisecond {
		t.Fatalf("the call after a 429 with Retry-After: 1 went %v later", waited)
	}
	if RetryAfter(err) != 600*time.Millisecond {
		t.Fatalf("second 429: the body's wait was not read: %v", err)
	}
	held = time.Now()
	if err := h.Do(ctx, http.MethodGet, "/", nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(held); waited < 500*time.Millisecond {
		t.Fatalf("the call after a 429 asking 600 ms went %v later", waited)
	}
}
