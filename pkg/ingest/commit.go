package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"exacto.dev/pkg/stream"
)

// Group commit. With sync always, nats-server fsyncs once per stored message, so a
// gateway that publishes one event at a time pays one fsync per webhook. The Committer
// coalesces the events of concurrent requests — webhooks, and under exacto up the
// derived events of its consumers too (service.Env.Commit) — into one atomic batch (Nats-Batch-Id,
// Nats-Batch-Sequence, Nats-Batch-Commit): the server stages the batch, stores its
// messages without syncing each, fsyncs the stream once and only then answers the
// commit — so one fsync covers the batch, and every request is still answered only
// after its own events are on disk. Each event keeps its subject and its Nats-Msg-Id.
// A batch is at most maxEvents events and waits at most maxWait after its first event;
// one batch is in flight at a time (the server commits a stream's batches one by one,
// so more in flight only makes each smaller).
//
// A batch that holds an event already stored (within the stream's duplicate window) is
// refused whole by the server; so is any other batch failure. Its events are then
// published one by one, which tells each one apart: stored, or a duplicate.
type Committer struct {
	js        jetstream.JetStream
	maxEvents int
	maxWait   time.Duration
	timeout   time.Duration
	in        chan *commitReq
	stop      context.CancelFunc
	done      chan struct{}
	// lost hears the connection drop: a commit in flight then stops waiting for an
	// answer that may never come (its server is gone) and its events go one by one.
	lost chan nats.Status
	// observe, when set (tests), sees each batch's size.
	observe func(n int)
}

type commitReq struct {
	msg  *nats.Msg
	done chan commitRes
}

type commitRes struct {
	duplicate bool
	err       error
}

// The batch headers of nats-server's atomic publish (ADR-50).
const (
	hdrBatchID     = "Nats-Batch-Id"
	hdrBatchSeq    = "Nats-Batch-Sequence"
	hdrBatchCommit = "Nats-Batch-Commit"
)

// commitBatch observes each batch's size.
var commitBatch, _ = otel.Meter("exacto/gateway").Int64Histogram("exacto_gateway_commit_batch_events",
	metric.WithDescription("events per group commit (one fsync each): webhooks' events, and under exacto up the consumers' derived events"),
	metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000))

// NewCommitter starts a group committer of batches of at most maxEvents, each closed at
// most maxWait after its first event; timeout bounds a batch's publish.
func NewCommitter(js jetstream.JetStream, maxEvents int, maxWait, timeout time.Duration) *Committer {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Committer{js: js, maxEvents: maxEvents, maxWait: maxWait, timeout: timeout,
		in: make(chan *commitReq, 4*maxEvents), stop: cancel, done: make(chan struct{}),
		lost: js.Conn().StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED)}
	go c.run(ctx)
	return c
}

// Publish queues msg for the next batch; the returned func waits for its result. It
// is a Publish.
func (c *Committer) Publish(ctx context.Context, msg *nats.Msg) (wait func() (duplicate bool, err error), err error) {
	req := &commitReq{msg: msg, done: make(chan commitRes, 1)}
	select {
	case <-c.done: // stopped: a request queued now would never be answered
		return nil, errors.New("group commit stopped: shutting down")
	default:
	}
	select {
	case c.in <- req:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.done:
		return nil, errors.New("group commit stopped: shutting down")
	}
	return func() (bool, error) {
		select {
		case r := <-req.done:
			return r.duplicate, r.err
		case <-ctx.Done():
			// Perhaps stored after all: the provider's retry is then a duplicate.
			return false, ctx.Err()
		}
	}, nil
}

// Close stops the Committer once no request is waiting for it.
func (c *Committer) Close() {
	c.stop()
	<-c.done
	c.js.Conn().RemoveStatusListener(c.lost)
}

func (c *Committer) run(ctx context.Context) {
	defer close(c.done)
	for {
		var batch []*commitReq
		select {
		case <-ctx.Done():
			return
		case r := <-c.in:
			batch = append(batch, r)
		}
		deadline := time.NewTimer(c.maxWait)
	collect:
		for len(batch) < c.maxEvents {
			select {
			case r := <-c.in:
				batch = append(batch, r)
			case <-deadline.C:
				break collect
			}
		}
		deadline.Stop()
		c.commit(batch)
	}
}

// commit stores batch and answers each of its requests.
func (c *Committer) commit(batch []*commitReq) {
	commitBatch.Record(context.Background(), int64(len(batch)))
	if c.observe != nil {
		c.observe(len(batch))
	}
	// Two requests carrying the same event (a provider's concurrent retry): the
	// first is published, the others are its duplicates.
	var lead []*commitReq
	follow := map[*commitReq][]*commitReq{}
	byID := map[string]*commitReq{}
	for _, r := range batch {
		id := r.msg.Header.Get(jetstream.MsgIDHeader)
		if first, ok := byID[id]; ok && id != "" {
			follow[first] = append(follow[first], r)
			continue
		}
		byID[id] = r
		lead = append(lead, r)
	}
	results := c.store(lead)
	for i, r := range lead {
		r.done <- results[i]
		for _, f := range follow[r] {
			f.done <- commitRes{duplicate: results[i].err == nil, err: results[i].err}
		}
	}
}

// commitWait bounds the wait for a batch's commit answer: far above a healthy commit
// (milliseconds), and short enough that a commit lost with its stream leader does not
// hold every webhook of the gateway for the whole publish timeout (one batch is in
// flight at a time).
const commitWait = 2 * time.Second

// atomicOver is the batch size above which an atomic batch costs fewer fsyncs than its
// events one by one: nats-server fsyncs a committed batch's staging block, its staging
// directory twice and the stream once (docs/durability.md), one by one is one each.
const atomicOver = 4

// store publishes reqs as one atomic batch when they are more than atomicOver, else —
// or when the batch is refused or its answer does not come — one by one. On a server
// its process syncs (stream.SyncedByProcess), it publishes them one by one, in flight
// together, and asks for one sync of the stream when every PubAck is in: that is one
// fdatasync for the batch, and no staging.
func (c *Committer) store(reqs []*commitReq) []commitRes {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	byProcess, err := stream.SyncedByProcess(ctx, c.js)
	if err != nil { // not known who makes the batch durable: nobody is told stored
		out := make([]commitRes, len(reqs))
		for i := range out {
			out[i].err = err
		}
		return out
	}
	if byProcess {
		out := c.each(ctx, reqs)
		if err := stream.Durable(ctx, c.js, stream.Events); err != nil {
			for i := range out {
				if out[i].err == nil { // stored, perhaps, but not known to be durable
					out[i] = commitRes{err: err}
				}
			}
		}
		return out
	}
	if len(reqs) > atomicOver && c.js.Conn().IsConnected() {
		bctx, bcancel := context.WithTimeout(ctx, min(commitWait, c.timeout))
		err := c.atomic(bctx, reqs)
		bcancel()
		if err == nil {
			return make([]commitRes, len(reqs)) // all stored, none a duplicate
		}
	}
	// One by one, as without group commit: a batch the server committed though its
	// answer was lost makes each of its events a duplicate here, which is still right.
	return c.each(ctx, reqs)
}

// atomic publishes reqs as one atomic batch and waits for its commit's PubAck, which
// the server sends after the batch is fsynced.
func (c *Committer) atomic(ctx context.Context, reqs []*commitReq) error {
	nc := c.js.Conn()
	id := nuid.Next()
	for i, r := range reqs {
		m := &nats.Msg{Subject: r.msg.Subject, Data: r.msg.Data, Header: nats.Header{}}
		for k, v := range r.msg.Header {
			m.Header[k] = v
		}
		m.Header.Set(jetstream.ExpectedStreamHeader, stream.Events)
		m.Header.Set(hdrBatchID, id)
		m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
		if i < len(reqs)-1 {
			if err := nc.PublishMsg(m); err != nil {
				return err
			}
			continue
		}
		m.Header.Set(hdrBatchCommit, "1")
		for len(c.lost) > 0 { // what happened before this batch says nothing of it
			<-c.lost
		}
		answered := make(chan *nats.Msg, 1)
		failed := make(chan error, 1)
		go func() {
			resp, err := nc.RequestMsgWithContext(ctx, m)
			if err != nil {
				failed <- err
				return
			}
			answered <- resp
		}()
		var resp *nats.Msg
		select {
		case resp = <-answered:
		case err := <-failed:
			return err
		case st := <-c.lost:
			return fmt.Errorf("connection %v during the batch commit", st)
		}
		var ack struct {
			Stream string `json:"stream"`
			Count  int    `json:"count"`
			Error  *struct {
				Code        int    `json:"err_code"`
				Description string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(resp.Data, &ack); err != nil {
			return fmt.Errorf("batch commit answer: %w", err)
		}
		if ack.Error != nil {
			return fmt.Errorf("batch refused (%d): %s", ack.Error.Code, ack.Error.Description)
		}
		if ack.Stream != stream.Events || ack.Count != len(reqs) {
			return fmt.Errorf("batch commit stored %d of %d events in %q", ack.Count, len(reqs), ack.Stream)
		}
	}
	return nil
}

// each publishes reqs one by one (in flight together) and waits for every PubAck.
func (c *Committer) each(ctx context.Context, reqs []*commitReq) []commitRes {
	out := make([]commitRes, len(reqs))
	waits := make([]func() (bool, error), len(reqs))
	publish := PublishOne(c.js)
	for i, r := range reqs {
		waits[i], out[i].err = publish(ctx, r.msg)
	}
	for i, wait := range waits {
		if wait != nil {
			out[i].duplicate, out[i].err = wait()
		}
	}
	return out
}
