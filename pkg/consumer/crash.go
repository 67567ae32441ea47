package consumer

import (
	"os"
	"sync/atomic"
	"syscall"
)

// Crash points, for the reliability suite's kill -9 tests: with EXACTO_CRASH_AT set to
// one of them, the process kills itself (SIGKILL: no deferred code, no drain) the first
// time an event reaches that step. Unset, they cost one comparison.
const (
	CrashAfterGuard  = "after-guard"  // the guard says processing; no effect yet
	CrashAfterEffect = "after-effect" // the effect is made; the guard and JetStream do not know
	CrashAfterAck    = "after-ack"    // completed and acknowledged
)

var (
	crashAt = os.Getenv("EXACTO_CRASH_AT")
	crashed atomic.Bool
)

func crashPoint(name string) {
	if crashAt == name && crashed.CompareAndSwap(false, true) {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
