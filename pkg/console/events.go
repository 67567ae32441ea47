package console

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/stream"
)

// eventRow is one event in a list.
type eventRow struct {
	Seq      uint64
	Stored   time.Time
	Env      envelope.Envelope
	Contact  string
	Campaign string
}

func row(seq uint64, stored time.Time, data []byte) (eventRow, bool) {
	r := eventRow{Seq: seq, Stored: stored}
	if json.Unmarshal(data, &r.Env) != nil || r.Env.ID == "" {
		return r, false
	}
	if ct := r.Env.Data.Contact; ct != nil {
		r.Contact = ct.Email
		if r.Contact == "" {
			r.Contact = ct.Phone
		}
	}
	if cp := r.Env.Data.Campaign; cp != nil {
		r.Campaign = cp.ID
		if cp.Name != "" && cp.ID != "" {
			r.Campaign = cp.Name + " (" + cp.ID + ")"
		} else if cp.ID == "" {
			r.Campaign = cp.Name
		}
	}
	return r, true
}

// matches says whether the event answers query q (lower-cased): its envelope id,
// provider event id, object id, contact e-mail, phone or external id, campaign id or
// name, or the event it was derived from.
func (r eventRow) matches(q string) bool {
	e := r.Env
	fields := []string{e.ID, e.ProviderEventID, e.ObjectID, e.Data.Cause}
	if ct := e.Data.Contact; ct != nil {
		fields = append(fields, ct.Email, ct.Phone, ct.ExternalID)
	}
	if cp := e.Data.Campaign; cp != nil {
		fields = append(fields, cp.ID, cp.Name)
	}
	for _, f := range fields {
		if f != "" && strings.ToLower(f) == q {
			return true
		}
	}
	return false
}

// lookup finds envelope id's stream sequence in the index (0 when not stored).
func (c *console) lookup(ctx context.Context, id string) (uint64, error) {
	kv, err := c.js.KeyValue(ctx, stream.EventIndex)
	if err != nil {
		return 0, err
	}
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(string(e.Value()), 10, 64)
}

// recent reads the last depth events of the stream, oldest first, keeping those keep
// accepts (at most limit: the newest).
func (c *console) recent(ctx context.Context, depth, limit int, keep func(eventRow) bool) ([]eventRow, error) {
	st, err := c.js.Stream(ctx, stream.Events)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	if info.State.Msgs == 0 {
		return nil, nil
	}
	start := info.State.FirstSeq
	if last := info.State.LastSeq; last >= uint64(depth) && last-uint64(depth)+1 > start {
		start = last - uint64(depth) + 1
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start})
	if err != nil {
		return nil, err
	}
	var out []eventRow
	for seen := 0; seen < depth; {
		ci, err := cons.Info(ctx)
		if err != nil {
			return nil, err
		}
		if ci.NumPending == 0 {
			break
		}
		batch, err := cons.FetchNoWait(500)
		if err != nil {
			return nil, err
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			md, err := msg.Metadata()
			if err != nil {
				return nil, err
			}
			if md.Sequence.Stream > info.State.LastSeq {
				seen = depth
				continue
			}
			seen++
			if r, ok := row(md.Sequence.Stream, md.Timestamp, msg.Data()); ok && keep(r) {
				out = append(out, r)
				if len(out) > limit {
					out = out[1:]
				}
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, err
		}
		if n == 0 {
			break
		}
	}
	return out, nil
}

type searchData struct {
	Query   string
	Depth   int
	Results []eventRow
	Recent  bool // no query: the latest events
}

func (c *console) search(w http.ResponseWriter, r *http.Request, u who) {
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	d := searchData{Query: q, Depth: c.o.SearchDepth}
	var err error
	switch {
	case q == "":
		d.Recent = true
		d.Results, err = c.recent(ctx, 50, 50, func(eventRow) bool { return true })
	case strings.HasPrefix(q, "ev_"):
		var seq uint64
		if seq, err = c.lookup(ctx, q); err == nil && seq > 0 {
			var st jetstream.Stream
			if st, err = c.js.Stream(ctx, stream.Events); err == nil {
				var m *jetstream.RawStreamMsg
				if m, err = st.GetMsg(ctx, seq); err == nil {
					if rw, ok := row(seq, m.Time, m.Data); ok {
						d.Results = []eventRow{rw}
					}
				}
			}
		}
		if err == nil && len(d.Results) == 0 { // not indexed (expired): scan as well
			lq := strings.ToLower(q)
			d.Results, err = c.recent(ctx, c.o.SearchDepth, 100, func(rw eventRow) bool { return rw.matches(lq) })
		}
	default:
		lq := strings.ToLower(q)
		d.Results, err = c.recent(ctx, c.o.SearchDepth, 100, func(rw eventRow) bool { return rw.matches(lq) })
	}
	slices.Reverse(d.Results) // newest first
	v := view{Title: "Events", Nav: "events", Data: d}
	if err != nil {
		v.Error = "search failed: " + err.Error()
	}
	c.render(w, http.StatusOK, "events", u, v)
}

// consumerStatus is one consumer's guard record of an event.
type consumerStatus struct {
	Consumer string
	Seen     bool
	guard.Record
	Err string
}

type eventData struct {
	eventRow
	// Derived are the events derived from this one (a reply's classification, the
	// sequence stopped for it): with Env.Data.Cause, the causal chain both ways.
	Derived    []envelope.Envelope
	DerivedErr string
	Subject    string
	Arrivals   int
	Consumers  []consumerStatus
	Envelope   json.RawMessage
	Letters    []letterRef
}

type letterRef struct {
	Seq      uint64
	Consumer string
	Status   string
}

func (c *console) event(w http.ResponseWriter, r *http.Request, u who) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	id := r.PathValue("id")
	seq, err := c.lookup(ctx, id)
	if err != nil {
		c.render(w, http.StatusInternalServerError, "error", u, view{Title: "Event", Nav: "events", Error: "index lookup: " + err.Error()})
		return
	}
	if seq == 0 {
		c.render(w, http.StatusNotFound, "error", u, view{Title: "Event", Nav: "events", Error: "no stored event has this id (ids start with ev_; search by provider event id, contact or campaign instead)"})
		return
	}
	st, err := c.js.Stream(ctx, stream.Events)
	var m *jetstream.RawStreamMsg
	if err == nil {
		m, err = st.GetMsg(ctx, seq)
	}
	if err != nil {
		c.render(w, http.StatusInternalServerError, "error", u, view{Title: "Event", Nav: "events", Error: "stream: " + err.Error()})
		return
	}
	rw, _ := row(seq, m.Time, m.Data)
	d := eventData{eventRow: rw, Subject: m.Subject, Arrivals: 1, Envelope: m.Data}
	if kv, err := c.js.KeyValue(ctx, stream.Arrivals); err == nil {
		if e, err := kv.Get(ctx, id); err == nil {
			n, _ := strconv.Atoi(string(e.Value()))
			d.Arrivals += n
		}
	}
	kv, err := c.js.KeyValue(ctx, stream.Guards)
	for _, sub := range stream.Subscriptions {
		cs := consumerStatus{Consumer: sub.Name()}
		if err != nil {
			cs.Err = err.Error()
		} else if rec, ok, gerr := consumer.Status(ctx, c.js, kv, sub, id, seq); gerr != nil {
			cs.Err = gerr.Error()
		} else {
			cs.Seen, cs.Record = ok, rec
		}
		d.Consumers = append(d.Consumers, cs)
	}
	if d.Derived, err = stream.DerivedFrom(ctx, c.js, rw.Env); err != nil {
		d.DerivedErr = err.Error()
	}
	if letters, err := c.dlq.List(ctx, dlqFilterFor(rw.Env)); err == nil {
		for _, l := range letters {
			if l.EventID == id {
				d.Letters = append(d.Letters, letterRef{Seq: l.Seq, Consumer: l.Consumer, Status: l.Status})
			}
		}
	}
	c.render(w, http.StatusOK, "event", u, view{Title: "Event " + id, Nav: "events", Data: d})
}
