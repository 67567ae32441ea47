package consumer

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/privacy"
	"exacto.dev/pkg/stream"
)

// Deriver stores derived events (a classification, a stop) on EXACTO_EVENTS, once:
// their ids are deterministic, the index of stored ids catches a republish after the
// duplicate window (a worker resumed after a crash), and Nats-Msg-Id one within it. A
// New attempt's own derived event is not looked up (held.first): nothing can have
// stored it.
type Deriver struct {
	js        jetstream.JetStream
	index     jetstream.KeyValue
	forgotten *privacy.Forgotten
	// publish, when set, stores through the process's group committer: the derived
	// events of concurrent attempts (and webhooks) share one fsync.
	publish func(ctx context.Context, msg *nats.Msg) (wait func() (duplicate bool, err error), err error)
}

// Via makes d store through publish (ingest.Committer.Publish).
func (d *Deriver) Via(publish func(ctx context.Context, msg *nats.Msg) (func() (bool, error), error)) *Deriver {
	d.publish = publish
	return d
}

// NewDeriver binds the index once, so publishing costs no lookup of the bucket, and
// watches the forgotten people until ctx ends.
func NewDeriver(ctx context.Context, js jetstream.JetStream) (*Deriver, error) {
	index, err := js.KeyValue(ctx, stream.EventIndex)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", stream.EventIndex, err)
	}
	forgotten, err := privacy.WatchForgotten(ctx, js)
	if err != nil {
		return nil, err
	}
	return &Deriver{js: js, index: index, forgotten: forgotten}, nil
}

// Publish stores env unless it is stored already. In a runner's attempt through a
// committer it returns once env is queued: the runner completes the attempt only once
// env is stored.
func (d *Deriver) Publish(ctx context.Context, env envelope.Envelope) error {
	h := heldOf(ctx)
	if !h.first(env) {
		if stored, err := stream.Stored(ctx, d.index, env.ID); err != nil || stored {
			return err
		}
	}
	// A fact about a forgotten person (a CRM's answer naming them) keeps nothing of
	// them, as the gateway stores their events.
	d.forgotten.Anonymize(&env)
	msg, err := stream.EventMessage(ctx, env)
	if err != nil {
		return err
	}
	if d.publish != nil {
		// In a runner's attempt the attempt waits for it before it is completed, on its
		// own context; the handler does not.
		wctx := ctx
		if h != nil {
			wctx = h.ctx
		}
		wait, err := d.publish(wctx, msg)
		if err != nil {
			return err
		}
		if h != nil {
			h.add(wait)
			return nil
		}
		_, err = wait() // a duplicate is stored already: done
		return err
	}
	if _, err = d.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(stream.Events)); err != nil {
		return err
	}
	return stream.Durable(ctx, d.js, stream.Events)
}
