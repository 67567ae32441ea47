package memlimit

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
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

func TestLimitLeavesHalfTheLiveHeapBesideTheRest(t *testing.T) {
	const base = 100 << 20
	for _, tc := range []struct{ live, other, unused, want int64 }{
		{0, 0, 0, base}, {40 << 20, 8 << 20, 0, base}, {60 << 20, 8 << 20, 0, base}, {80 << 20, 8 << 20, 0, 128 << 20},
		{80 << 20, 40 << 20, 0, 160 << 20}, {1 << 30, 16 << 20, 0, 3<<29 + 16<<20},
		{80 << 20, 8 << 20, 10 << 20, 128 << 20}, // a little unused: half the live heap still covers it
		{80 << 20, 8 << 20, 40 << 20, 148 << 20}, // a lot: a quarter of the live heap beside it
	} {
		if got := Limit(base, tc.live, tc.other, tc.unused); got != tc.want {
			t.Errorf("Limit(100MiB, %d MiB, %d MiB, %d MiB) = %d MiB, want %d MiB", tc.live>>20, tc.other>>20, tc.unused>>20, got>>20, tc.want>>20)
		}
	}
}

// keep follows the live heap and the runtime's other memory up and back down to base,
// and leaves out changes of less than a sixteenth.
func TestKeepFollowsTheLiveHeap(t *testing.T) {
	const base = 100 << 20
	ctx, cancel := context.WithCancel(context.Background())
	tick := make(chan time.Time)
	reads := make(chan usage)
	var sets, told []int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		read := func() usage {
			select {
			case u := <-reads:
				return u
			case <-ctx.Done():
				return usage{}
			}
		}
		keep(ctx, base, tick, read,
			func(l int64) int64 { sets = append(sets, l); return 0 },
			func(l, _ int64) { told = append(told, l) })
	}()
	const other = 8 << 20
	for _, u := range []usage{
		{50 << 20, other, 0},     // needs 83 MiB: under base, stays
		{80 << 20, other, 0},     // needs 128 MiB: raised
		{84 << 20, other, 0},     // needs 134 MiB: less than a sixteenth more, left out
		{160 << 20, other, 0},    // needs 248 MiB: raised
		{140 << 20, other, 0},    // needs 218 MiB: more than a sixteenth less, lowered
		{140 << 20, 40 << 20, 0}, // the stacks grew: needs 250 MiB, raised
		{20 << 20, other, 0},     // back to base
		// fragmented: needs 105 MiB, less than a sixteenth more than base, but base leaves
		// the collector less than a quarter of the live heap beside the unused spans: raised
		{20 << 20, 20 << 20, 60 << 20},
		{20 << 20, other, 0}, // back to base
	} {
		tick <- time.Time{}
		reads <- u
	}
	tick <- time.Time{} // the last change is made before the next tick is taken
	cancel()
	<-done
	want := []int64{128 << 20, 248 << 20, 218 << 20, 250 << 20, base, 105 << 20, base}
	if len(sets) != len(want) {
		t.Fatalf("limits set %v MiB, want %v MiB", mibs(sets), mibs(want))
	}
	for i := range want {
		if sets[i] != want[i] {
			t.Fatalf("limits set %v MiB, want %v MiB", mibs(sets), mibs(want))
		}
	}
	if len(told) != len(want) || told[0] != want[0] || told[4] != want[4] {
		t.Fatalf("told %v MiB, want every limit set", mibs(told))
	}
}

// read's figures are the runtime's: a live heap, and memory outside it (at least the
// running goroutines' stacks).
func TestReadSeesTheRuntime(t *testing.T) {
	runtime.GC()
	u := read()
	if u.live <= 0 || u.other <= 0 {
		t.Fatalf("read() = %+v, want a live heap and other memory", u)
	}
}

func mibs(b []int64) []int64 {
	out := make([]int64, len(b))
	for i, v := range b {
		out[i] = v >> 20
	}
	return out
}

// A heap that has shrunk is fragmented: its spans hold few live objects, and the rest of
// each span is memory the limit counts but no collection gives back. The limit must
// leave the collector its room beside that too, or it runs without pause at an idle
// heap (seen after a burst's drain: a collection every 90 ms, each marking the whole
// heap, the goal equal to the live heap). The runtime's own heap goal under the limit
// is the check.
func TestLimitLeavesRoomInAFragmentedHeap(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	defer debug.SetGCPercent(debug.SetGCPercent(100)) // a low GOGC's own goal would be the lower
	// 96 MiB of 64-byte objects, one in four kept: every span stays in use, three
	// quarters of it unused.
	all := make([]*[64]byte, 96<<20/64)
	for i := range all {
		all[i] = new([64]byte)
	}
	kept := make([]*[64]byte, 0, len(all)/4)
	for i := 0; i < len(all); i += 4 {
		kept = append(kept, all[i])
	}
	all = nil
	// A collection, and the free pages given back: pages freed and not yet given back
	// count against the limit too, until the scavenger returns them (not tested here).
	debug.FreeOSMemory()
	u := read()
	limit := Limit(0, u.live, u.other, u.unused)
	debug.SetMemoryLimit(limit)
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}}
	metrics.Read(s)
	goal, unused := int64(s[0].Value.Uint64()), int64(s[1].Value.Uint64())
	if unused < 48<<20 {
		t.Fatalf("the heap is not fragmented (%d MiB unused): the test shows nothing", unused>>20)
	}
	if room := goal - u.live; room < u.live/8 {
		t.Errorf("heap goal %d MiB for a live heap of %d MiB (%d MiB of spans unused, limit %d MiB): room to allocate %d MiB, want at least an eighth of the live heap (the runtime keeps 3%% of its goal, at least 1 MiB, as headroom)",
			goal>>20, u.live>>20, unused>>20, limit>>20, room>>20)
	}
	runtime.KeepAlive(kept)
}

// gogc is the process's GOGC now, read without setting it (Batch's watcher may).
func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// Batch raises GOGC while the live heap is small and gives the process its own back
// once it is not, or when the batch ends; a GOGC in the environment is left alone.
func TestBatch(t *testing.T) {
	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")
	before, limit := gogc(), debug.SetMemoryLimit(-1)
	restore := Batch(64 << 20)
	if got, l := gogc(), debug.SetMemoryLimit(-1); got != batchGOGC || l != min(limit, 160<<20) {
		t.Fatalf("during a small batch: GOGC %d, limit %d", got, l)
	}
	restore()
	if got, l := gogc(), debug.SetMemoryLimit(-1); got != before || l != limit {
		t.Fatalf("after it: GOGC %d, limit %d; want %d, %d", got, l, before, limit)
	}
	// A live heap past the small one: back to the process's own setting mid-batch.
	restore = Batch(1 << 20)
	keep := make([][]byte, 0, 64)
	for range 64 {
		keep = append(keep, make([]byte, 1<<20))
	}
	runtime.GC() // the live heap, measured
	deadline := time.Now().Add(5 * time.Second)
	for gogc() != before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := gogc(); got != before {
		t.Errorf("GOGC with %d MiB live: %d, want %d", len(keep), got, before)
	}
	restore()
	runtime.KeepAlive(keep)
	t.Setenv("GOGC", "100")
	restore = Batch(1 << 40)
	if got := gogc(); got != before {
		t.Errorf("GOGC set in the environment, changed to %d", got)
	}
	restore()
}
