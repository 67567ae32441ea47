package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/stream"
)

// Indexer writes the index of stored envelope ids from the stream itself, through a
// durable consumer. Deriving it from the stream (rather than writing it beside each
// publish) means a crash between publish and index write loses no entry: the consumer
// redelivers until the entry is written.
type Indexer struct {
	cons  jetstream.Consumer
	index jetstream.KeyValue
	log   *slog.Logger
}

// NewIndexer binds the index consumer (creating or updating it from the topology).
func NewIndexer(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (*Indexer, error) {
	cons, err := js.CreateOrUpdateConsumer(ctx, stream.Events, stream.IndexConsumerConfig())
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", stream.IndexConsumer, err)
	}
	index, err := js.KeyValue(ctx, stream.EventIndex)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", stream.EventIndex, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Indexer{cons: cons, index: index, log: log}, nil
}

// Run indexes until ctx ends.
func (x *Indexer) Run(ctx context.Context) error {
	// Each write finishes on its own context: one cut short by the stop would only be
	// written again, after a warning.
	writes := context.WithoutCancel(ctx)
	cc, err := x.cons.Consume(func(msg jetstream.Msg) {
		wctx, cancel := context.WithTimeout(writes, 10*time.Second)
		defer cancel()
		if err := x.handle(wctx, msg); err != nil {
			x.log.Warn("index write", "err", err)
			msg.Nak()
			return
		}
		msg.Ack()
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	// Stop, not drain: an entry not yet acknowledged is redelivered and written again,
	// which is harmless (Put is idempotent), and stopping never waits on a lost server.
	cc.Stop()
	<-cc.Closed()
	return nil
}

func (x *Indexer) handle(ctx context.Context, msg jetstream.Msg) error {
	id := msg.Headers().Get(jetstream.MsgIDHeader)
	if id == "" {
		return nil // not published by a gateway; nothing to index
	}
	md, err := msg.Metadata()
	if err != nil {
		return err
	}
	_, err = x.index.Put(ctx, id, []byte(strconv.FormatUint(md.Sequence.Stream, 10)))
	return err
}

// Lookup returns the stream sequence of a stored envelope id.
func Lookup(ctx context.Context, js jetstream.JetStream, id string) (uint64, error) {
	kv, err := js.KeyValue(ctx, stream.EventIndex)
	if err != nil {
		return 0, err
	}
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, fmt.Errorf("event %s is not in the index (unknown, or older than the dedup TTL)", id)
	}
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(string(e.Value()), 10, 64)
}
