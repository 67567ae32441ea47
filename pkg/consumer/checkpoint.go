package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/stream"
)

// Consumer state in memory, its ack floor checkpointed. nats-server writes a file
// consumer's state (delivered, acked, pending) up to ten times a second while it
// changes, each write synced under sync: always — the largest share of the fsyncs
// left per webhook. That state is derived: the guards say what each consumer did. So
// on one embedded node (Options.Checkpoints set) the consumer keeps its state in the
// server's memory (mem_storage), and the runner writes its ack floor to
// EXACTO_CONSUMER_CHECKPOINTS (synced) every checkpointEvery. When the server restarts
// (with the process) the consumer is gone; the runner creates it again to deliver
// from the checkpoint on: what was acked after the checkpoint comes again and its
// guard skips it, what was pending comes again at once.

// checkpointEvery is how often a consumer's ack floor is written when it moved: each
// write is an fsync, and each second of lag only a few more deliveries the guards skip.
const checkpointEvery = 5 * time.Second

// Bind creates or updates the durable consumer for cfg. One that exists keeps
// its deliver policy (which cannot change) and, when this process keeps no checkpoints
// (a worker bound to another process's embedded server), its storage. With
// checkpoints, a new consumer keeps its state in memory and starts after its
// checkpoint, paused as the service's replays consumer (on disk) is; one on disk
// (from an earlier version, or made by a process without checkpoints) is created
// again in memory after the later of its ack floor and the checkpoint, keeping its
// pause. Deleting it ends the pulls of any other process bound to it: they bind again
// when restarted.
func Bind(ctx context.Context, js jetstream.JetStream, streamName string, cfg jetstream.ConsumerConfig, checkpoints jetstream.KeyValue) (jetstream.Consumer, error) {
	c, err := js.Consumer(ctx, streamName, cfg.Durable)
	switch {
	case err == nil:
		info := c.CachedInfo()
		if checkpoints == nil || info.Config.MemoryStorage {
			cfg.MemoryStorage = info.Config.MemoryStorage
			cfg.DeliverPolicy, cfg.OptStartSeq = info.Config.DeliverPolicy, info.Config.OptStartSeq
			return js.CreateOrUpdateConsumer(ctx, streamName, cfg)
		}
		seq, err := checkpointOf(ctx, checkpoints, cfg.Durable)
		if err != nil {
			return nil, err
		}
		if err := js.DeleteConsumer(ctx, streamName, cfg.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, fmt.Errorf("consumer %s: create again with its state in memory: %w", cfg.Durable, err)
		}
		cfg.PauseUntil = info.Config.PauseUntil
		if err := from(ctx, js, streamName, &cfg, max(seq, info.AckFloor.Stream)); err != nil {
			return nil, err
		}
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return nil, err
	case checkpoints != nil:
		seq, err := checkpointOf(ctx, checkpoints, cfg.Durable)
		if err != nil {
			return nil, err
		}
		if err := from(ctx, js, streamName, &cfg, seq); err != nil {
			return nil, err
		}
		// A pause outlives the restart: the replays consumer, on disk, kept it.
		if r, err := js.Consumer(ctx, stream.Replays, replays(cfg.Durable)); err == nil {
			if until := r.CachedInfo().Config.PauseUntil; until != nil && until.After(time.Now()) {
				cfg.PauseUntil = until
			}
		}
	}
	if checkpoints != nil {
		cfg.MemoryStorage = true
	}
	return js.CreateOrUpdateConsumer(ctx, streamName, cfg)
}

// from makes cfg deliver what follows stream sequence seq (everything when 0), never
// past the stream's last event: with lazy sync a cut can take the stream's tail and
// leave a checkpoint above it, and the sequences it took are stored again.
func from(ctx context.Context, js jetstream.JetStream, streamName string, cfg *jetstream.ConsumerConfig, seq uint64) error {
	if seq == 0 {
		return nil
	}
	s, err := js.Stream(ctx, streamName)
	if err != nil {
		return err
	}
	if seq = min(seq, s.CachedInfo().State.LastSeq); seq > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq+1
	}
	return nil
}

// checkpointOf is durable's checkpointed ack floor (0: none).
func checkpointOf(ctx context.Context, kv jetstream.KeyValue, durable string) (uint64, error) {
	return stream.Checkpoint(ctx, kv, durable)
}

// KeepCheckpoints writes the ack floor of the consumer bound (nil: none yet) to kv
// every checkpointEvery until stop is closed, and once more then.
func KeepCheckpoints(js jetstream.JetStream, kv jetstream.KeyValue, durable string, bound func() jetstream.Consumer, stop <-chan struct{}) {
	last, _ := checkpointOf(context.Background(), kv, durable) // never written back
	write := func() {
		if c := bound(); c != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			last = checkpoint(ctx, js, c, kv, durable, last)
			cancel()
		}
	}
	t := time.NewTicker(checkpointEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			write()
		case <-stop:
			write()
			return
		}
	}
}

// checkpoint writes c's ack floor to kv when it moved past last, and returns the
// floor written (last when nothing was): a checkpoint never goes back. The events the
// attempts below the floor derived were stored before their acks, and are on disk
// before the checkpoint that passes their causes: a derived event is not synced on its
// own (settle.go), so a power cut that takes it leaves its cause to be delivered again.
func checkpoint(ctx context.Context, js jetstream.JetStream, c jetstream.Consumer, kv jetstream.KeyValue, durable string, last uint64) uint64 {
	info, err := c.Info(ctx)
	if err != nil || info.AckFloor.Stream <= last {
		return last
	}
	if err := stream.Durable(ctx, js, stream.Events); err != nil {
		return last
	}
	if _, err := kv.Put(ctx, durable, []byte(strconv.FormatUint(info.AckFloor.Stream, 10))); err != nil {
		return last
	}
	return info.AckFloor.Stream
}

// Ran says whether durable's consumer ever took events: it exists, or (its state in
// memory, the server restarted) it left a checkpoint.
func Ran(ctx context.Context, js jetstream.JetStream, durable string) (bool, error) {
	_, err := js.Consumer(ctx, stream.Events, durable)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return false, err
	}
	kv, err := js.KeyValue(ctx, stream.ConsumerCheckpoints)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	seq, err := checkpointOf(ctx, kv, durable)
	return seq > 0, err
}
