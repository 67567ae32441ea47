// Package memlimit keeps a process under a soft memory limit without starving it.
//
// Go's garbage collector lets the heap grow to twice what survived the last cycle
// (GOGC=100) before it collects again: a process whose live heap is 80 MiB peaks near
// 160 MiB. A soft limit (runtime/debug.SetMemoryLimit, as GOMEMLIMIT) makes it collect
// sooner instead. Each collection marks the whole live heap, so how often it runs is
// what it costs: a limit that leaves the heap little room to allocate into makes it run
// many times as often (a quarter of the live heap cost `exacto up` twice the CPU of
// GOGC=100 over a burst's drain, docs/performance.md). Keep therefore raises the limit
// whenever the live heap needs it: the collector has half the live heap to allocate
// into before it runs again (at least about two fifths while a raise is pending, see
// Keep), beside the memory the runtime holds outside the heap (goroutine stacks, its
// own metadata), which the limit counts too, and never less than a quarter beside the
// unused part of the heap's spans (Limit); the limit trims the doubling, never the
// work.
package memlimit

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Parse reads a size as GOMEMLIMIT writes it: a number of bytes with an optional unit
// B, KiB, MiB, GiB or TiB ("100MiB"). "off" is no limit (0).
func Parse(s string) (int64, error) {
	if s == "off" {
		return 0, nil
	}
	units := []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}
	num, shift := s, uint(0)
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, shift = n, u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("memory limit %q: want a size such as 100MiB (B, KiB, MiB, GiB, TiB) or off", s)
	}
	return n << shift, nil
}

// Limit is the soft limit for a process whose configured limit is base, whose live heap
// (what survived the last collection) is live, whose runtime holds other outside the
// heap (stacks, its own metadata) and whose heap's spans hold unused bytes beside their
// objects: base, or one and a half times the live heap and other when that is more.
// Half, not a quarter (2026-12-04 evening, `exacto up` taking a burst of 10,000
// replies): 66 s of CPU and 89 ms p99 from receipt to sequence.stopped at 500/s,
// against 105 s and 403 ms, for a peak RSS of 250 MiB against 168
// (docs/performance.md, "Room to allocate"). The limit counts the unused part of the
// spans too, and no collection gives it back (a span stays as long as one object in it
// lives): a heap that has shrunk holds a lot of it, so the limit always leaves at least
// a quarter of the live heap beside it. Without that floor, 30 MB of unused spans
// after a burst's drain made the heap goal the live heap itself: a collection every
// 90 ms, each marking the whole heap, at idle (4.9 s of CPU in 10 s of idle after the
// memory row's burst, 0.44 s with it).
func Limit(base, live, other, unused int64) int64 {
	return max(base, live+live/2+other, least(live, other, unused))
}

// least is the lowest limit that leaves the collector a quarter of the live heap
// beside everything else the limit counts.
func least(live, other, unused int64) int64 { return live + live/4 + other + unused }

// usage is what the runtime holds: the live heap, its memory outside the heap, and the
// unused part of the heap's spans.
type usage struct{ live, other, unused int64 }

// Keep sets base as the process's soft memory limit now and then, every interval until
// ctx ends, sets it again to Limit(base, live heap, other, unused): raised as the process
// grows past two thirds of base, back down to base as it shrinks. Changes of less than
// a sixteenth are left out (raised a little late, the collector still has about two
// fifths of the live heap to allocate into), unless the limit in force leaves less than
// a quarter of the live heap beside the unused spans (in a fragmented heap a sixteenth
// of the limit can be all of that room). changed, if not nil, is told each change.
func Keep(ctx context.Context, base int64, interval time.Duration, changed func(limit, live int64)) {
	debug.SetMemoryLimit(base)
	t := time.NewTicker(interval)
	go func() {
		defer t.Stop()
		keep(ctx, base, t.C, read, debug.SetMemoryLimit, changed)
	}()
}

// keep is Keep's loop, with its clock, its reading of the runtime's memory and its
// setting of the limit given; the limit is base when it starts.
func keep(ctx context.Context, base int64, tick <-chan time.Time, read func() usage, set func(int64) int64, changed func(limit, live int64)) {
	cur := base
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		u := read()
		want := Limit(base, u.live, u.other, u.unused)
		if want == cur || (want != base && abs(want-cur) < cur/16 && cur >= least(u.live, u.other, u.unused)) {
			continue
		}
		cur = want
		set(cur)
		if changed != nil {
			changed(cur, u.live)
		}
	}
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// read is the live heap (what the last collection found live), the memory the runtime
// holds outside the heap (everything the limit counts, all it has mapped and not given
// back, but the heap's spans), and the unused part of those spans.
func read() usage {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"}, {Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/free:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}}
	metrics.Read(s)
	var v [6]int64
	for i, x := range s {
		if x.Value.Kind() != metrics.KindUint64 {
			return usage{}
		}
		v[i] = int64(x.Value.Uint64())
	}
	return usage{live: v[0], other: v[1] - v[2] - v[3] - v[4] - v[5], unused: v[5]}
}

// Batch makes the collector run less often for a batch job whose live heap is small: a
// replay's garbage is short-lived (decoded events, encoded records), and at GOGC=100
// the collector took a fifth of a rebuild's CPU (docs/performance.md, Replay). It sets
// GOGC to 400 under a soft memory limit of two and a half times smallHeap (or the
// process's own limit, when that is lower) until the live heap passes smallHeap, then
// gives the process its own settings back, so a large history costs no more memory
// than before. A GOGC in the environment is the operator's: left as it is. restore
// undoes it (at once; call it when the batch ends).
func Batch(smallHeap int64) (restore func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	oldLimit := debug.SetMemoryLimit(-1)
	oldGOGC := debug.SetGCPercent(batchGOGC)
	debug.SetMemoryLimit(min(oldLimit, smallHeap*5/2))
	back := sync.OnceFunc(func() {
		debug.SetGCPercent(oldGOGC)
		debug.SetMemoryLimit(oldLimit)
	})
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if read().live > smallHeap {
					back()
					return
				}
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
		back()
	}
}

// batchGOGC is Batch's GOGC: the collector at a quarter of its default frequency.
const batchGOGC = 400

// BatchHeap is the live heap a batch is small under: `exacto replay` of 50,000 events
// lives in 27 MB, so such a replay's heap peaks near 140 MB, and none goes past the
// soft limit of 320 MiB while its GOGC is 400.
const BatchHeap = 128 << 20
