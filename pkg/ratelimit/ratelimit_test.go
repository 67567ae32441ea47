package ratelimit

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/stream"
)

// The sliding window, on a clock the test moves: N calls go at once, the next waits
// until the oldest leaves the (widened) window; a hold stops every call.
func TestStateSlidingWindow(t *testing.T) {
	rates := []Rate{{N: 3, Per: 10 * time.Second}, {N: 5, Per: time.Minute}}
	t0 := time.Unix(1_000_000, 0)
	var st state
	for i := range 3 {
		if d := st.wait(t0.Add(time.Duration(i)*time.Second), rates); d != 0 {
			t.Fatalf("call %d waits %v in an empty window", i, d)
		}
		st.take(t0.Add(time.Duration(i)*time.Second), rates)
	}
	// The fourth call: the first of three left at t0, the window is 11 s with headroom.
	if d := st.wait(t0.Add(3*time.Second), rates); d != 8*time.Second {
		t.Fatalf("fourth call waits %v, want 8s (t0 + 11s)", d)
	}
	st.take(t0.Add(11*time.Second), rates)
	st.take(t0.Add(12*time.Second), rates)
	// Five calls within the minute: the sixth waits for the first to leave 66 s.
	if d := st.wait(t0.Add(40*time.Second), rates); d != 26*time.Second {
		t.Fatalf("sixth call waits %v, want 26s (the minute rate)", d)
	}
	if len(st.Calls[0]) != 3 || len(st.Calls[1]) != 5 {
		t.Fatalf("state keeps %d and %d calls, want at most N each", len(st.Calls[0]), len(st.Calls[1]))
	}
	// A hold waits longer than the windows.
	st.hold(t0.Add(40*time.Second), 90*time.Second)
	if d := st.wait(t0.Add(40*time.Second), rates); d != 90*time.Second {
		t.Fatalf("held: waits %v, want 90s", d)
	}
	if st.hold(t0.Add(40*time.Second), time.Second) {
		t.Fatal("a shorter hold shortened the longer one")
	}
}

// Two limiters over one bucket key are one budget: the calls they let through together
// never exceed N in any window of Per (measured when Wait returned), and the bucket
// holds the account's calls under a digest of its credential, never the credential.
func TestSharedIsOneBudgetAcrossReplicas(t *testing.T) {
	conn := brokertest.Start(t, "")
	ctx := context.Background()
	kv, err := conn.JS.KeyValue(ctx, stream.RateLimits)
	if err != nil {
		t.Fatal(err)
	}
	rate := Rate{N: 10, Per: 400 * time.Millisecond}
	key := Key("smartlead", "sl-secret-key")
	replicas := []*Shared{NewShared(kv, key, rate), NewShared(kv, key, rate)}
	var mu sync.Mutex
	var times []time.Time
	var wg sync.WaitGroup
	for w := range 6 { // three workers per replica
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 6 {
				if err := replicas[w%2].Wait(ctx); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				times = append(times, time.Now())
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	if len(times) != 36 {
		t.Fatalf("%d calls went, want 36", len(times))
	}
	for i := rate.N; i < len(times); i++ {
		if gap := times[i].Sub(times[i-rate.N]); gap < rate.Per {
			t.Fatalf("calls %d and %d are %v apart: %d calls in less than %v", i-rate.N, i, gap, rate.N+1, rate.Per)
		}
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(e.Value()); strings.Contains(got, "sl-secret-key") || strings.Contains(e.Key(), "sl-secret-key") {
		t.Fatalf("the bucket holds the credential: %s %s", e.Key(), got)
	}
}

// A hold set by one replica (a 429's Retry-After) stops the other's calls until it ends.
func TestSharedHoldStopsEveryReplica(t *testing.T) {
	conn := brokertest.Start(t, "")
	ctx := context.Background()
	kv, err := conn.JS.KeyValue(ctx, stream.RateLimits)
	if err != nil {
		t.Fatal(err)
	}
	key := Key("hubspot", "token")
	a, b := NewShared(kv, key, Rate{N: 100, Per: time.Second}), NewShared(kv, key, Rate{N: 100, Per: time.Second})
	held := time.Now()
	if err := a.Hold(ctx, 700*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := b.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(held); waited < 650*time.Millisecond {
		t.Fatalf("the other replica called %v after a 700ms hold", waited)
	}
	// A context that ends first ends the wait with its error, taking nothing.
	if err := a.Hold(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := b.Wait(short); err == nil {
		t.Fatal("a wait past its context's end returned no error")
	}
}

func TestLocal(t *testing.T) {
	l := NewLocal(Rate{N: 2, Per: time.Hour})
	clock := time.Unix(0, 0)
	l.now = func() time.Time { return clock }
	ctx := context.Background()
	for range 2 {
		if err := l.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := l.Wait(short); err == nil {
		t.Fatal("a third call within the hour went through")
	}
}

func TestParse(t *testing.T) {
	got, err := Parse("1000/1h, 60/1m")
	if err != nil || !slices.Equal(got, []Rate{{60, time.Minute}, {1000, time.Hour}}) {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"", "60", "x/1m", "0/1m", "60/", "60/soon", "60/-1m", "60/1m,"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
