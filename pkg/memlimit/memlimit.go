// Package memlimit keeps a process under a soft memory limit without starving it.
//
// Go's garbage collector lets the heap grow to twice what survived the last cycle
// (GOGC=100) before it collects again: a process whose live heap is 80 MiB peaks near
// 160 MiB. A soft limit (runtime/debug.SetMemoryLimit, as GOMEMLIMIT) makes it collect
// sooner instead. A fixed limit the live heap outgrows would make the collector run
// back to back (the runtime caps it at half the CPU, which is still a stall), so Keep
// raises the limit whenever the live heap needs it: the collector has a quarter of the
// live heap to allocate into before it runs again (at least a sixth while a raise is
// pending, see Keep), and the limit only trims the doubling, never the work.
package memlimit

import (
	"context"
	"fmt"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
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

// Limit is the soft limit for a process whose configured limit is base and whose live
// heap (what survived the last collection) is live: base, or one and a quarter times
// the live heap when that is more. A quarter, not a half: in interleaved runs of
// `exacto up` at load (2026-12-04) peak RSS fell from 186-196 to 148-163 MiB and the
// process's CPU did not rise (57-71 s against 62-68 s).
func Limit(base, live int64) int64 {
	return max(base, live+live/4)
}

// Keep sets base as the process's soft memory limit now and then, every interval until
// ctx ends, sets it again to Limit(base, live heap): raised as the live heap grows
// past four fifths of base, back down to base as it shrinks. Changes of less than a
// sixteenth are left out (raised a little late, the collector still has at least a sixth of the
// live heap to allocate into). changed, if not nil, is told each change.
func Keep(ctx context.Context, base int64, interval time.Duration, changed func(limit, live int64)) {
	debug.SetMemoryLimit(base)
	t := time.NewTicker(interval)
	go func() {
		defer t.Stop()
		keep(ctx, base, t.C, liveHeap, debug.SetMemoryLimit, changed)
	}()
}

// keep is Keep's loop, with its clock, its reading of the live heap and its setting of
// the limit given; the limit is base when it starts.
func keep(ctx context.Context, base int64, tick <-chan time.Time, live func() int64, set func(int64) int64, changed func(limit, live int64)) {
	cur := base
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		l := live()
		want := Limit(base, l)
		if want == cur || (want != base && abs(want-cur) < cur/16) {
			continue
		}
		cur = want
		set(cur)
		if changed != nil {
			changed(cur, l)
		}
	}
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// liveHeap is the heap the last collection found live, in bytes.
func liveHeap() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}
