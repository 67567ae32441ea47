package stream

import "time"

// RejectedSubject is where the gateway logs a refused delivery; RejectedKept is how
// many the log keeps (the oldest go first, and any older than a week).
const (
	RejectedSubject = "rejected"
	RejectedKept    = 1000
)

// Rejection is a refused delivery as the log keeps it: never its path token, body or
// signature; the message is the one the sender was answered.
type Rejection struct {
	At       time.Time `json:"at"`
	Endpoint string    `json:"endpoint"` // as the URL named it (an unknown one too)
	Tenant   string    `json:"tenant,omitempty"`
	Provider string    `json:"provider,omitempty"`
	Method   string    `json:"method"`
	Status   int       `json:"status"`
	Reason   string    `json:"reason"`
	Message  string    `json:"message,omitempty"`
	Remote   string    `json:"remote"`
	// Skipped counts the refusals left out since the previous record (a flood is
	// logged at a bounded rate).
	Skipped int `json:"skipped,omitempty"`
}
