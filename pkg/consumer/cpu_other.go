//go:build !unix

package consumer

import "time"

// processCPU is unknown here: precedence then counts only the events that wait.
func processCPU() (time.Duration, bool) { return 0, false }
