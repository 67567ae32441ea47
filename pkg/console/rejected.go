package console

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/stream"
)

// rejectedShown is how many of the latest refusals the Refused page shows.
const rejectedShown = 200

type rejectedData struct {
	Rows []stream.Rejection
}

// rejected lists the latest deliveries the gateway refused, newest first: what a user
// pointing a provider at Exacto needs to see why it is refused.
func (c *console) rejected(w http.ResponseWriter, r *http.Request, u who) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	var d rejectedData
	v := view{Title: "Refused deliveries", Nav: "rejected", Data: &d}
	if err := c.latestRejections(ctx, &d); err != nil {
		v.Error = "the log of refused deliveries: " + err.Error()
	}
	c.render(w, http.StatusOK, "rejected", u, v)
}

func (c *console) latestRejections(ctx context.Context, d *rejectedData) error {
	st, err := c.js.Stream(ctx, stream.Rejected)
	if err != nil {
		return err
	}
	info, err := st.Info(ctx)
	if err != nil || info.State.Msgs == 0 {
		return err
	}
	start := info.State.FirstSeq
	if last := info.State.LastSeq; last-start+1 > rejectedShown {
		start = last - rejectedShown + 1
	}
	err = stream.Scan(ctx, st, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start},
		func(m jetstream.Msg) error {
			var rj stream.Rejection
			if json.Unmarshal(m.Data(), &rj) == nil {
				d.Rows = append(d.Rows, rj)
			}
			return nil
		})
	slices.Reverse(d.Rows)
	return err
}
