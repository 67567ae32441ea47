package consumer

import "sync/atomic"

// settlers run the settling of attempts whose effect is made (handle), each on a
// goroutine other than its worker's, so that the worker goes on to its next event.
// The goroutines are kept between attempts: one started per attempt grew its stack
// anew each time (guard record, outcome, ack), a few per cent of a consumer's CPU. At
// most max are kept; past them (a burst of slow settlings) a goroutine is started for
// one attempt.
type settlers struct {
	work chan func() // unbuffered: a send succeeds only when a kept goroutine is idle
	kept atomic.Int64
	max  int64
}

func newSettlers(max int) *settlers {
	return &settlers{work: make(chan func()), max: int64(max)}
}

// run runs f on a goroutine other than the caller's.
func (s *settlers) run(f func()) {
	select {
	case s.work <- f:
		return
	default:
	}
	if s.kept.Add(1) > s.max {
		s.kept.Add(-1)
		go f()
		return
	}
	go func() {
		for ok := true; ok; f, ok = <-s.work {
			f()
		}
	}()
}

// stop lets the kept goroutines end once idle; nothing may be run after it.
func (s *settlers) stop() { close(s.work) }
