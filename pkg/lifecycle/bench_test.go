package lifecycle

import (
	"fmt"
	"testing"
	"time"

	"exacto.dev/pkg/envelope"
)

// BenchmarkApply builds a lead's lifecycle of six events through Apply (insert's fast
// path) and, as its baseline, through Merge(s, FromEvent(env)), which Apply was.
func BenchmarkApply(b *testing.B) {
	types := []string{envelope.TypeEmailSent, envelope.TypeEmailDelivered, envelope.TypeEmailOpened, envelope.TypeReplyReceived}
	var evs []envelope.Envelope
	for i := range 6 {
		evs = append(evs, ev(fmt.Sprintf("ev_%032d", i), types[i%4], time.Duration(i)*time.Minute))
	}
	for name, apply := range map[string]func(State, envelope.Envelope) State{
		"apply": Apply,
		"merge": func(s State, env envelope.Envelope) State { return Merge(s, FromEvent(env)) },
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var s State
				for _, env := range evs {
					s = apply(s, env)
				}
			}
		})
	}
}
