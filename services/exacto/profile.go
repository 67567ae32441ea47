package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

// cpuProfile starts a CPU profile of the whole process when EXACTO_CPU_PROFILE names a
// file ("{pid}" in it is replaced by the process id, so that several processes of one
// run keep one each), for `go tool pprof`; the returned func ends it and is called
// when the command returns. A file that cannot be written is said and ignored.
func cpuProfile() (stop func()) {
	path := profilePath("EXACTO_CPU_PROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "exacto: EXACTO_CPU_PROFILE:", err)
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

// heapProfile writes, when EXACTO_HEAP_PROFILE names a file ("{pid}" as above), a heap
// profile of the process each time its live heap reaches a new high (looked at every
// heapEvery): the file holds the profile of the largest live heap, for `go tool pprof
// -sample_index=inuse_space`. The returned func stops it.
func heapProfile() (stop func()) {
	path := profilePath("EXACTO_HEAP_PROFILE")
	if path == "" {
		return func() {}
	}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(heapEvery)
		defer t.Stop()
		var peak uint64
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapAlloc <= peak {
				continue
			}
			peak = m.HeapAlloc
			f, err := os.Create(path)
			if err == nil {
				err = pprof.Lookup("heap").WriteTo(f, 0)
				f.Close()
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "exacto: EXACTO_HEAP_PROFILE:", err)
				return
			}
		}
	}()
	return func() { close(done); <-stopped }
}

const heapEvery = 500 * time.Millisecond

// profilePath is the file environment variable env names for a profile, "{pid}" in it
// replaced by the process id; empty when env is unset.
func profilePath(env string) string {
	return strings.ReplaceAll(os.Getenv(env), "{pid}", strconv.Itoa(os.Getpid()))
}
