package retry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"
)

func TestHTTPClasses(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	cases := []struct {
		status     int
		retryAfter string
		class      Class
		after      time.Duration
	}{
		{200, "", -1, 0},
		{204, "", -1, 0},
		{429, "3", Transient, 3 * time.Second},
		{429, now.Add(10 * time.Second).Format(http.TimeFormat), Transient, 10 * time.Second},
		{429, "soon", Transient, 0},
		{503, "7", Transient, 7 * time.Second},
		{500, "", Transient, 0},
		{502, "", Transient, 0},
		{504, "", Transient, 0},
		{400, "", Permanent, 0},
		{401, "", Permanent, 0},
		{403, "", Permanent, 0},
		{404, "", Permanent, 0},
		{409, "", Permanent, 0},
		{422, "", Permanent, 0},
	}
	for _, c := range cases {
		resp := &http.Response{StatusCode: c.status, Header: http.Header{}}
		if c.retryAfter != "" {
			resp.Header.Set("Retry-After", c.retryAfter)
		}
		err := HTTP("hubspot", resp, now)
		if c.class == -1 {
			if err != nil {
				t.Errorf("%d: %v", c.status, err)
			}
			continue
		}
		e := Of(err)
		if e.Class != c.class || e.RetryAfter != c.after || e.Status != c.status || e.Dependency != "hubspot" {
			t.Errorf("%d %q: %+v", c.status, c.retryAfter, e)
		}
	}
}

func TestOfUnclassified(t *testing.T) {
	wrapped := fmt.Errorf("stop lead: %w", Permanently("instantly", errors.New("lead not found")))
	if Of(wrapped).Class != Permanent {
		t.Fatal("a wrapped permanent error lost its class")
	}
	if Of(errors.New("something odd")).Class != Transient {
		t.Fatal("unclassified errors are transient")
	}
	for _, err := range []error{context.DeadlineExceeded, syscall.ECONNREFUSED, &net.OpError{Op: "dial", Err: syscall.ECONNRESET}} {
		if !IsTransport(err) {
			t.Errorf("%v is a transport error", err)
		}
	}
	if IsTransport(errors.New("400")) {
		t.Fatal("not a transport error")
	}
}

func TestBackoffGrowsWithJitterWithinBounds(t *testing.T) {
	b := Backoff{Base: time.Second, Max: 30 * time.Second}
	for n := 1; n <= 40; n++ {
		ceiling := min(b.Max, time.Second<<min(n-1, 30))
		seen := map[time.Duration]bool{}
		for range 50 {
			d := b.Delay(n)
			if d < ceiling/2 || d > ceiling {
				t.Fatalf("attempt %d: %v outside [%v, %v]", n, d, ceiling/2, ceiling)
			}
			seen[d] = true
		}
		if len(seen) < 2 {
			t.Fatalf("attempt %d: no jitter", n)
		}
	}
}

func TestPacerPausesTheDependency(t *testing.T) {
	p := NewPacer()
	base := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	now := base
	p.now = func() time.Time { return now }
	p.Observe(HTTP("hubspot", &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"3"}}}, now))
	if p.Remaining("hubspot") != 3*time.Second || p.Remaining("instantly") != 0 {
		t.Fatalf("remaining %v / %v", p.Remaining("hubspot"), p.Remaining("instantly"))
	}
	p.Pause("hubspot", time.Second) // never shortens
	if p.Remaining("hubspot") != 3*time.Second {
		t.Fatal("a shorter pause shortened a running one")
	}
	now = base.Add(3 * time.Second)
	if p.Remaining("hubspot") != 0 {
		t.Fatal("still paused after Retry-After")
	}
	// Wait honours the context.
	p.now = time.Now
	p.Pause("crm", time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := p.Wait(ctx, "crm"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait: %v", err)
	}
	if err := p.Wait(context.Background(), "free"); err != nil {
		t.Fatal(err)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if d := ParseRetryAfter(" 3", now); d != 3*time.Second {
		t.Errorf("seconds: %v", d)
	}
	if d := ParseRetryAfter(now.Add(7*time.Second).Format(http.TimeFormat), now); d != 7*time.Second {
		t.Errorf("http-date: %v", d)
	}
	for _, v := range []string{"", "soon", "-1", now.Add(-time.Hour).Format(http.TimeFormat)} {
		if d := ParseRetryAfter(v, now); d != 0 {
			t.Errorf("%q: %v", v, d)
		}
	}
}
