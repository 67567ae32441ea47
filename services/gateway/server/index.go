package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/stream"
)

// Indexer writes the index of stored envelope ids from the stream itself, through a
// durable consumer. Deriving it from the stream (rather than writing it beside each
// publish) means a crash between publish and index write loses no entry: the consumer
// redelivers until the entry is written. It takes the stream in batches and writes a
// batch's entries at once (pipelined puts, one wait for all), so it keeps up with the
// gateway; exacto_index_pending says how far behind it is.
//
// On one node the index is persisted asynchronously (stream.Derived): a power cut can
// take its last entries while the consumer's acks survive. So on start it goes back
// from the last entry the index holds and indexes again what follows (puts are
// idempotent).
//
// With checkpoints (one embedded node, service.Env.Checkpoints) its consumer keeps its
// state in the server's memory and its ack floor in EXACTO_CONSUMER_CHECKPOINTS, as the
// consumer services' do (pkg/consumer/checkpoint.go): after a restart it indexes again
// from its checkpoint, which costs a few idempotent puts instead of an fsync of the
// consumer's state per batch.
type Indexer struct {
	js          jetstream.JetStream
	cons        jetstream.Consumer
	index       jetstream.KeyValue
	checkpoints jetstream.KeyValue // nil: the consumer's state is on disk
	log         *slog.Logger
}

// indexBatch is how many entries one batch writes at most.
const indexBatch = 256

// NewIndexer binds the index consumer (creating or updating it from the topology) and,
// when the index is persisted asynchronously, rewinds it past what a power cut could
// have taken.
func NewIndexer(ctx context.Context, js jetstream.JetStream, checkpoints jetstream.KeyValue, log *slog.Logger) (*Indexer, error) {
	cons, err := consumer.Bind(ctx, js, stream.Events, stream.IndexConsumerConfig(), checkpoints)
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
	x := &Indexer{js: js, cons: cons, index: index, checkpoints: checkpoints, log: log}
	if err := x.rewind(ctx); err != nil {
		return nil, fmt.Errorf("index %s: %w", stream.EventIndex, err)
	}
	return x, nil
}

// rewind sets the index consumer back to the stream sequence after the last one the
// index holds, less what concurrent writers may have had in flight (the consumer's
// MaxAckPending), when its acks went further: the entries in between may be lost.
func (x *Indexer) rewind(ctx context.Context) error {
	s, err := x.js.Stream(ctx, "KV_"+stream.EventIndex)
	if err != nil {
		return err
	}
	info := s.CachedInfo()
	if info.Config.PersistMode != jetstream.AsyncPersistMode {
		return nil // synced: every acked entry is on disk
	}
	held, found, err := lastIndexed(ctx, s, info.State)
	if err != nil || (!found && info.State.LastSeq > 0) {
		return err // no entry left to go by: every one expired, long after its write
	}
	ci, err := x.cons.Info(ctx)
	if err != nil {
		return err
	}
	from := uint64(1)
	if margin := uint64(stream.IndexConsumerConfig().MaxAckPending); held > margin {
		from = held - margin
	}
	if ci.Delivered.Stream < from {
		return nil // nothing delivered past what the index surely holds
	}
	// The ack floor can lag far behind what was acked (one delivery waiting out its ack
	// wait): from there too, every entry after it may be lost.
	from = min(from, ci.AckFloor.Stream+1)
	if cfg := ci.Config; cfg.DeliverPolicy == jetstream.DeliverByStartSequencePolicy && from < cfg.OptStartSeq {
		// Created after its checkpoint (its state in memory): the server refuses a reset
		// before its start, so it is created again from there.
		cfg.OptStartSeq = from
		if err := x.js.DeleteConsumer(ctx, stream.Events, stream.IndexConsumer); err != nil {
			return err
		}
		if x.cons, err = x.js.CreateOrUpdateConsumer(ctx, stream.Events, cfg); err != nil {
			return err
		}
		x.log.Info("index: indexing again from before its last entry", "from", from, "last_indexed", held, "checkpoint", ci.Config.OptStartSeq-1)
		return nil
	}
	if _, err := x.js.ResetConsumerToSequence(ctx, stream.Events, stream.IndexConsumer, from); err != nil {
		return err
	}
	x.log.Info("index: indexing again from before its last entry", "from", from, "last_indexed", held, "ack_floor", ci.AckFloor.Stream)
	return nil
}

// lastIndexed is the stream sequence of the newest index entry: the value of the last
// put (a purge or delete marker has none: the one before it is read, up to 1,000 back).
func lastIndexed(ctx context.Context, s jetstream.Stream, st jetstream.StreamState) (held uint64, found bool, err error) {
	for seq := st.LastSeq; seq >= st.FirstSeq && seq > 0 && st.LastSeq-seq < 1000; seq-- {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, false, err
		}
		if held, err := strconv.ParseUint(string(m.Data), 10, 64); err == nil {
			return held, true, nil
		}
	}
	return 0, false, nil
}

// Run indexes until ctx ends.
func (x *Indexer) Run(ctx context.Context) error {
	stopObserving, err := x.observeLag()
	if err != nil {
		return err
	}
	defer stopObserving()
	// The consumer hands messages over as they come; the writer takes all those that
	// are waiting (at most indexBatch) as one batch.
	queue := make(chan jetstream.Msg, 2*indexBatch)
	// stopped ends the callback's wait once Run returns: nats.go may still call it
	// with a message it had taken (after cc.Closed() too: a send on a closed queue
	// panicked the gateway in a chaos run's stop). Such a message, never acked, is
	// delivered again.
	stopped := make(chan struct{})
	cc, err := x.cons.Consume(func(msg jetstream.Msg) {
		select {
		case queue <- msg:
		case <-stopped:
		}
	}, jetstream.PullMaxMessages(2*indexBatch))
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			var msgs []jetstream.Msg
			select {
			case <-ctx.Done():
				return
			case m := <-queue:
				msgs = append(msgs, m)
			}
		more:
			for len(msgs) < indexBatch {
				select {
				case m := <-queue:
					msgs = append(msgs, m)
				default:
					break more
				}
			}
			// Each batch finishes on its own context: one cut short by the stop would
			// only be written again, after a warning.
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			x.write(wctx, msgs)
			cancel()
		}
	}()
	var stopCheckpoints, checkpointsDone chan struct{}
	if x.checkpoints != nil {
		stopCheckpoints, checkpointsDone = make(chan struct{}), make(chan struct{})
		go func() {
			defer close(checkpointsDone)
			consumer.KeepCheckpoints(x.js, x.checkpoints, stream.IndexConsumer, func() jetstream.Consumer { return x.cons }, stopCheckpoints)
		}()
	}
	<-ctx.Done()
	<-done
	if stopCheckpoints != nil { // after the last batch's acks
		close(stopCheckpoints)
		<-checkpointsDone
	}
	// Stop, not drain: an entry not yet acknowledged is redelivered and written again,
	// which is harmless (Put is idempotent), and stopping never waits on a lost server.
	cc.Stop()
	close(stopped)
	<-cc.Closed()
	return nil
}

// write puts the index entry of every message of a batch, pipelined, then acks each
// one whose entry is stored; one that failed is redelivered.
func (x *Indexer) write(ctx context.Context, msgs []jetstream.Msg) {
	// No entry before its event is on disk: an entry of an event a power cut took would
	// answer the provider's retry of it as a duplicate.
	var last, stored uint64
	for _, msg := range msgs {
		if md, err := msg.Metadata(); err == nil {
			last = max(last, md.Sequence.Stream)
			stored = max(stored, md.Sequence.Stream+md.NumPending)
		}
	}
	if err := stream.DurableThrough(ctx, x.js, last, stored); err != nil {
		x.log.Warn("index: events not known to be on disk; indexing them later", "through", last, "err", err)
		for _, msg := range msgs {
			msg.Nak()
		}
		return
	}
	acks := make([]jetstream.PubAckFuture, len(msgs))
	for i, msg := range msgs {
		id := msg.Headers().Get(jetstream.MsgIDHeader)
		md, err := msg.Metadata()
		if id == "" || err != nil {
			continue // not published by a gateway (or no metadata): nothing to index
		}
		acks[i], err = x.js.PublishAsync("$KV."+stream.EventIndex+"."+id, []byte(strconv.FormatUint(md.Sequence.Stream, 10)))
		if err != nil {
			x.log.Warn("index write", "id", id, "err", err)
			msg.Nak()
			msgs[i] = nil
		}
	}
	for i, msg := range msgs {
		if msg == nil {
			continue
		}
		if f := acks[i]; f != nil {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				x.log.Warn("index write", "id", msg.Headers().Get(jetstream.MsgIDHeader), "err", err)
				msg.Nak()
				continue
			case <-ctx.Done():
				x.log.Warn("index write not confirmed", "id", msg.Headers().Get(jetstream.MsgIDHeader), "err", ctx.Err())
				msg.Nak()
				continue
			}
		}
		msg.Ack()
	}
}

// observeLag reports how many stored events the index does not hold yet.
func (x *Indexer) observeLag() (stop func(), err error) {
	meter := otel.Meter("exacto/gateway")
	pending, err := meter.Int64ObservableGauge("exacto_index_pending",
		metric.WithDescription("events stored and not yet in the index of stored ids: a duplicate of one arriving after the stream's duplicate window would be stored again"))
	if err != nil {
		return nil, err
	}
	reg, err := meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		info, err := x.cons.Info(ctx)
		if err != nil {
			return nil
		}
		o.ObserveInt64(pending, int64(info.NumPending)+int64(info.NumAckPending))
		return nil
	}, pending)
	if err != nil {
		return nil, err
	}
	return func() { reg.Unregister() }, nil
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
