// Package platform holds what the provider clients (hubspot, instantly,
// smartlead) share: one error type that says whether a failed call may be
// retried, and a small JSON-over-HTTP helper.
package platform

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"exacto.dev/pkg/retry"
)

// Dependencies are the platforms Exacto calls, by the names their breakers, pacers and
// errors carry.
var Dependencies = []string{"hubspot", "instantly", "smartlead"}

// Error is a failed call to a dependency. Transient errors may succeed on
// retry (after RetryAfter, when the server said so); permanent ones will not.
type Error struct {
	Dependency string        // "hubspot", "instantly", "smartlead"
	Status     int           // HTTP status; 0 for transport failures
	RetryAfter time.Duration // from a Retry-After header; 0 if absent
	Transient  bool
	// Unsent: the request never left (its rate limit's wait ran out), so the error
	// says nothing of the dependency's health.
	Unsent bool
	Msg    string
}

func (e *Error) Error() string {
	kind := "permanent"
	if e.Transient {
		kind = "transient"
	}
	if e.Status == 0 {
		return fmt.Sprintf("%s: %s: %s", e.Dependency, kind, e.Msg)
	}
	return fmt.Sprintf("%s: %s: HTTP %d: %s", e.Dependency, kind, e.Status, e.Msg)
}

// Classify turns the outcome of one HTTP exchange into nil (2xx) or an *Error.
// A transport error wins over resp. The caller still owns resp.Body.
func Classify(dep string, resp *http.Response, err error) error {
	if err != nil {
		var pe *Error
		if errors.As(err, &pe) {
			return pe
		}
		return transportError(dep, err)
	}
	if resp == nil {
		return &Error{Dependency: dep, Transient: true, Msg: "no response"}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	return StatusError(dep, resp.StatusCode, resp.Header.Get("Retry-After"), http.StatusText(resp.StatusCode))
}

// StatusError classifies a non-2xx status; msg is kept for the log line.
func StatusError(dep string, status int, retryAfter, msg string) *Error {
	e := &Error{Dependency: dep, Status: status, Msg: msg, Transient: retry.StatusClass(status) == retry.Transient}
	if e.Transient {
		// Capped as a 429's hold is (MaxHold): a day's Retry-After is a provider's bug.
		e.RetryAfter = min(retry.ParseRetryAfter(retryAfter, time.Now()), MaxHold)
	}
	return e
}

func transportError(dep string, err error) *Error {
	e := &Error{Dependency: dep, Msg: err.Error()}
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		// The caller gave up; retrying is its decision, not ours.
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		// A timeout leaves the outcome unknown: the write may have landed.
		// Retry only behind an idempotency check (see hubspot.EnsureNote).
		e.Transient = true
		e.Msg = "timeout: " + e.Msg
	default:
		// Refused, reset, EOF, DNS: the dependency may be back soon.
		e.Transient = true
	}
	return e
}

// Retry gives the error its class for the consumers (pkg/retry).
func (e *Error) Retry() *retry.Error {
	c := retry.Permanent
	if e.Transient {
		c = retry.Transient
	}
	return &retry.Error{Class: c, Dependency: e.Dependency, Status: e.Status, RetryAfter: e.RetryAfter, Unsent: e.Unsent, Err: errors.New(e.Msg)}
}

// IsTransient reports whether err is an *Error that may succeed on retry.
func IsTransient(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Transient
}

// RetryAfter is the server-requested wait carried by err, or 0.
func RetryAfter(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}

// StatusOf is the HTTP status carried by err, or 0.
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}
