package consumer

import (
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Settlings run off the caller's goroutine, on at most max kept goroutines reused from
// one to the next; those past max still run; stop ends the kept ones.
func TestSettlersKeepTheirGoroutines(t *testing.T) {
	s := newSettlers(2)
	caller := goroutineID()
	ran := make(chan uint64, 10)
	s.run(func() { ran <- goroutineID() })
	first := <-ran
	if first == caller {
		t.Fatal("a settling ran on its caller's goroutine")
	}
	waitIdle := func() { // the kept goroutine is back at its receive
		deadline := time.Now().Add(5 * time.Second)
		for {
			select {
			case s.work <- func() { ran <- goroutineID() }:
				return
			default:
			}
			if time.Now().After(deadline) {
				t.Fatal("the kept goroutine never took more work")
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitIdle()
	if again := <-ran; again != first {
		t.Fatalf("the next settling ran on goroutine %d, not the kept %d", again, first)
	}
	// Four at once while each blocks: two kept, two more started for one settling each.
	block := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(4)
	for range 4 {
		s.run(func() { defer wg.Done(); <-block })
	}
	if k := s.kept.Load(); k != 2 {
		t.Fatalf("%d goroutines kept, want at most 2", k)
	}
	close(block)
	wg.Wait()
	s.stop()
}

// goroutineID is the running goroutine's number, from its stack's header.
func goroutineID() uint64 {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _ := strconv.ParseUint(strings.Fields(strings.TrimPrefix(string(buf), "goroutine "))[0], 10, 64)
	return id
}
