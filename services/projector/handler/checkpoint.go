package handler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/kvstore"
	"exacto.dev/pkg/projection"
	"exacto.dev/pkg/stream"
)

// Checkpoints. On one node the projections and the contact directory are persisted
// asynchronously (stream.Derived): a power cut can take their last writes while the
// projector's acks, which the server syncs, survive — and an acked event is never
// delivered again. So the projector keeps, in each of those buckets, the stream
// sequence below which every event it takes is applied (the consumer's ack floor,
// written after the writes it covers: a bucket that kept the checkpoint kept them), and
// on start applies again, straight from the stream, every event from the lowest
// checkpoint to the last one delivered. The fold is idempotent and commutative
// (pkg/lifecycle), so applying an event twice changes nothing.

// checkpointBuckets are the buckets the projector writes.
var checkpointBuckets = []string{
	stream.ProjectionBucket("contacts", "", 1).Bucket, stream.ProjectionBucket("campaigns", "", 1).Bucket,
	stream.ProjectionBucket("suppression", "", 1).Bucket, stream.ContactIDs,
}

// checkpointEvery is how often the checkpoint moves (a later one only means less to
// apply again after a cut).
var checkpointEvery = time.Second

type checkpoints struct {
	js      jetstream.JetStream
	buckets []jetstream.KeyValue
	log     *slog.Logger
}

// openCheckpoints binds the buckets; nil when they are synced (nothing to recover).
func openCheckpoints(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (*checkpoints, error) {
	c := &checkpoints{js: js, log: log}
	for _, name := range checkpointBuckets {
		kv, err := js.KeyValue(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("bucket %s: %w", name, err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			return nil, err
		}
		if st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.PersistMode != jetstream.AsyncPersistMode {
			return nil, nil
		}
		c.buckets = append(c.buckets, kv)
	}
	return c, nil
}

// lowest is the least checkpoint of the buckets (0 where one has none).
func (c *checkpoints) lowest(ctx context.Context) (uint64, error) {
	low := uint64(0)
	for i, kv := range c.buckets {
		e, err := kv.Get(ctx, kvstore.CheckpointKey)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		seq, err := strconv.ParseUint(string(e.Value()), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("checkpoint of %s: %w", kv.Bucket(), err)
		}
		if i == 0 || seq < low {
			low = seq
		}
	}
	return low, nil
}

// recover applies again every event the projector may have applied since the lowest
// checkpoint: from it to the last one stored (the consumer's own record of what it
// delivered may be a moment old). An event that fails is logged and left to the live
// projector, which dead-letters it: a start never loops on it. Then the campaign and
// suppression entries computed from contact records the cut took are recomputed.
func (c *checkpoints) recover(ctx context.Context, stores projection.Stores, dir *contacts.Directory) (int, error) {
	from, err := c.lowest(ctx)
	if err != nil {
		return 0, err
	}
	// Never ran: nothing was applied. (Its consumer is gone after every restart when
	// the server kept its state in memory: its checkpoint says it ran.)
	if ran, err := consumer.Ran(ctx, c.js, stream.Projector); err != nil || !ran {
		return 0, err
	}
	contactsStream, err := c.js.Stream(ctx, "KV_"+checkpointBuckets[0])
	if err != nil {
		return 0, err
	}
	held := contactsStream.CachedInfo().State.LastSeq // revisions above it were lost, if any
	// Nothing applied of an event not on disk yet (stream.DurableThrough): the stream
	// up to its end is, before the replay applies it.
	if err := stream.Durable(ctx, c.js, stream.Events); err != nil {
		return 0, err
	}
	p, err := projection.Replay(ctx, c.js, stores, projection.ReplayOptions{FromSeq: from + 1, Dir: dir,
		Skip: func(seq uint64, err error) {
			c.log.Warn("projector: an event failed to apply again; the live projector takes it", "seq", seq, "err", err)
		}})
	if err != nil {
		return int(p.Done), err
	}
	if p.Done == 0 {
		return 0, nil
	}
	if n, err := projection.Repair(ctx, stores, held); err != nil {
		return int(p.Done), fmt.Errorf("repair: %w", err)
	} else if n > 0 {
		c.log.Info("projector: recomputed entries whose contact record a stop took", "entries", n)
	}
	return int(p.Done), nil
}

// keep moves the checkpoint to the consumer's ack floor every checkpointEvery until
// ctx ends.
func (c *checkpoints) keep(ctx context.Context) {
	var last uint64
	t := time.NewTicker(checkpointEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cons, err := c.js.Consumer(ctx, stream.Events, stream.Projector)
		if err != nil {
			continue
		}
		info, err := cons.Info(ctx)
		if err != nil || info.AckFloor.Stream == last {
			continue
		}
		floor := []byte(strconv.FormatUint(info.AckFloor.Stream, 10))
		ok := true
		for _, kv := range c.buckets {
			if _, err := kv.Put(ctx, kvstore.CheckpointKey, floor); err != nil {
				if ctx.Err() == nil { // not the stop
					c.log.Warn("projector checkpoint", "bucket", kv.Bucket(), "err", err)
				}
				ok = false
			}
		}
		if ok {
			last = info.AckFloor.Stream
		}
	}
}
