package memlimit

import (
	"context"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]int64{
		"100MiB": 100 << 20, "2GiB": 2 << 30, "512KiB": 512 << 10, "1TiB": 1 << 40, "4096B": 4096, "4096": 4096, "off": 0,
	} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1MiB", "100MB", "1.5GiB", "MiB", "lots", "9999999TiB"} {
		if got, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %d, want an error", in, got)
		}
	}
}

func TestLimitLeavesAQuarterOfTheLiveHeap(t *testing.T) {
	const base = 100 << 20
	for _, tc := range []struct{ live, want int64 }{
		{0, base}, {40 << 20, base}, {80 << 20, base}, {96 << 20, 120 << 20}, {1 << 30, 5 << 28},
	} {
		if got := Limit(base, tc.live); got != tc.want {
			t.Errorf("Limit(100MiB, %d MiB) = %d MiB, want %d MiB", tc.live>>20, got>>20, tc.want>>20)
		}
	}
}

// keep follows the live heap up and back down to base, and leaves out changes of less
// than a sixteenth.
func TestKeepFollowsTheLiveHeap(t *testing.T) {
	const base = 100 << 20
	ctx, cancel := context.WithCancel(context.Background())
	tick := make(chan time.Time)
	lives := make(chan int64)
	var sets, told []int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		live := func() int64 {
			select {
			case l := <-lives:
				return l
			case <-ctx.Done():
				return 0
			}
		}
		keep(ctx, base, tick, live,
			func(l int64) int64 { sets = append(sets, l); return 0 },
			func(l, _ int64) { told = append(told, l) })
	}()
	for _, live := range []int64{
		50 << 20,  // under four fifths of base: stays
		100 << 20, // needs 125 MiB: raised
		104 << 20, // needs 130 MiB: less than a sixteenth more, left out
		200 << 20, // needs 250 MiB: raised
		185 << 20, // needs 231 MiB: more than a sixteenth less, lowered
		30 << 20,  // back to base
	} {
		tick <- time.Time{}
		lives <- live
	}
	tick <- time.Time{} // the last change is made before the next tick is taken
	cancel()
	<-done
	want := []int64{125 << 20, 250 << 20, 185<<20 + 185<<18, base}
	if len(sets) != len(want) {
		t.Fatalf("limits set %v MiB, want %v MiB", mibs(sets), mibs(want))
	}
	for i := range want {
		if sets[i] != want[i] {
			t.Fatalf("limits set %v MiB, want %v MiB", mibs(sets), mibs(want))
		}
	}
	if len(told) != len(want) || told[0] != want[0] || told[3] != want[3] {
		t.Fatalf("told %v MiB, want every limit set", mibs(told))
	}
}

func mibs(b []int64) []int64 {
	out := make([]int64, len(b))
	for i, v := range b {
		out[i] = v >> 20
	}
	return out
}
