package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Consumer state in memory, its ack floor checkpointed. nats-server writes a file
// consumer's state (delivered, acked, pending) up to ten times a second while it
// changes, each write synced under sync: always — the largest share of the fsyncs
// left per webhook. That state is derived: the guards say what each consumer did. So
// on one embedded node (Options.Checkpoints set) the consumer keeps its state in the
// server's memory (mem_storage), and the runner writes its ack floor to
// EXACTO_CONSUMER_CHECKPOINTS every second. When the server restarts (with the
// process) the consumer is gone; the runner creates it again to deliver from the
// checkpoint on: what was acked after the checkpoint comes again and its guard skips
// it, what was pending comes again at once.

// checkpointEvery is how often a consumer's ack floor is written when it moved.
const checkpointEvery = time.Second

// bindConsumer creates or updates the durable consumer for cfg. One that exists keeps
// its deliver policy (which cannot change) and, when this process keeps no checkpoints
// (a worker bound to another process's embedded server), its storage. With
// checkpoints, a new consumer keeps its state in memory and starts after its
// checkpoint, and one on disk (from an earlier version) is created again in memory
// after its ack floor, keeping its pause.
func bindConsumer(ctx context.Context, js jetstream.JetStream, streamName string, cfg jetstream.ConsumerConfig, checkpoints jetstream.KeyValue) (jetstream.Consumer, error) {
	c, err := js.Consumer(ctx, streamName, cfg.Durable)
	switch {
	case err == nil:
		info := c.CachedInfo()
		if checkpoints == nil || info.Config.MemoryStorage {
			cfg.MemoryStorage = info.Config.MemoryStorage
			cfg.DeliverPolicy, cfg.OptStartSeq = info.Config.DeliverPolicy, info.Config.OptStartSeq
			return js.CreateOrUpdateConsumer(ctx, streamName, cfg)
		}
		if err := js.DeleteConsumer(ctx, streamName, cfg.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, fmt.Errorf("consumer %s: create again with its state in memory: %w", cfg.Durable, err)
		}
		cfg.MemoryStorage, cfg.PauseUntil = true, info.Config.PauseUntil
		from(&cfg, info.AckFloor.Stream)
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return nil, err
	case checkpoints != nil:
		seq, err := checkpointOf(ctx, checkpoints, cfg.Durable)
		if err != nil {
			return nil, err
		}
		cfg.MemoryStorage = true
		from(&cfg, seq)
	}
	return js.CreateOrUpdateConsumer(ctx, streamName, cfg)
}

// from makes cfg deliver what follows stream sequence seq (everything when 0).
func from(cfg *jetstream.ConsumerConfig, seq uint64) {
	if seq == 0 {
		return
	}
	cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq+1
}

// checkpointOf is durable's checkpointed ack floor (0: none).
func checkpointOf(ctx context.Context, kv jetstream.KeyValue, durable string) (uint64, error) {
	e, err := kv.Get(ctx, durable)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("checkpoint of %s: %w", durable, err)
	}
	seq, err := strconv.ParseUint(string(e.Value()), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("checkpoint of %s: %q: %w", durable, e.Value(), err)
	}
	return seq, nil
}

// checkpoint writes c's ack floor to kv when it moved past last, and returns the
// floor written (last when nothing was).
func checkpoint(ctx context.Context, c jetstream.Consumer, kv jetstream.KeyValue, durable string, last uint64) uint64 {
	info, err := c.Info(ctx)
	if err != nil || info.AckFloor.Stream <= last {
		return last
	}
	if _, err := kv.Put(ctx, durable, []byte(strconv.FormatUint(info.AckFloor.Stream, 10))); err != nil {
		return last
	}
	return info.AckFloor.Stream
}
