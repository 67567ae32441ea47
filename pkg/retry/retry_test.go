package retry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"
)

func TestOfUnclassified(t *testing.T) {
	wrapped := fmt.Errorf("stop lead: %w", Permanently("instantly", errors.New("lead not found")))
	if Of(wrapped).Class != Permanent {
		t.Fatal("a wrapped permanent error lost its class")
	}
	if Of(errors.New("something odd")).Class != Transient {
		t.Fatal("unclassified errors are transient")
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
	p.Observe(&Error{Class: Transient, Dependency: "hubspot", Status: 429, RetryAfter: ParseRetryAfter("3", now), Err: errors.New("rate limited")})
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
