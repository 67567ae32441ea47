package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
)

// cpuProfile starts a CPU profile of the whole process when EXACTO_CPU_PROFILE names a
// file ("{pid}" in it is replaced by the process id, so that several processes of one
// run keep one each), for `go tool pprof`; the returned func ends it and is called
// when the command returns. A file that cannot be written is said and ignored.
func cpuProfile() (stop func()) {
	path := os.Getenv("EXACTO_CPU_PROFILE")
	if path == "" {
		return func() {}
	}
	path = strings.ReplaceAll(path, "{pid}", strconv.Itoa(os.Getpid()))
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
