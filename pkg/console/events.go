package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/providers/registry"
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

// pageSize is how many events a page of the list shows.
const pageSize = 50

// listFilter is the events list's query: a search, the subject's parts, a status in the
// consumers, a span of stored time, and the page (the events stored before a sequence).
type listFilter struct {
	Query                  string
	Tenant, Provider, Type string
	Status                 string // "", waiting, failed, done
	From, To               string // datetime-local, UTC
	Before                 uint64
	from, to               time.Time
	subject                string // the stream's filter of tenant, provider and type
}

// statusFilters are the list's status choices.
var statusFilters = []string{"waiting", "failed", "done"}

func parseListFilter(q url.Values) (listFilter, error) {
	f := listFilter{Query: strings.TrimSpace(q.Get("q")), Tenant: q.Get("tenant"), Provider: q.Get("provider"),
		Type: q.Get("type"), Status: q.Get("status"), From: q.Get("from"), To: q.Get("to")}
	var err error
	if f.subject, err = stream.EventFilter(f.Tenant, f.Provider, f.Type); err != nil {
		return f, err
	}
	if f.Status != "" && !slices.Contains(statusFilters, f.Status) {
		return f, fmt.Errorf("status %q: want one of %s", f.Status, strings.Join(statusFilters, ", "))
	}
	for _, t := range []struct {
		in  string
		out *time.Time
	}{{f.From, &f.from}, {f.To, &f.to}} {
		if t.in == "" {
			continue
		}
		v, err := time.Parse("2006-01-02T15:04", t.in)
		if err != nil {
			return f, fmt.Errorf("time %q: want YYYY-MM-DDTHH:MM (UTC)", t.in)
		}
		*t.out = v
	}
	if b := q.Get("before"); b != "" {
		v, err := strconv.ParseUint(b, 10, 64)
		if err != nil || v == 0 {
			return f, fmt.Errorf("before %q: want a stream sequence", b)
		}
		f.Before = v
	}
	return f, nil
}

// inSpan says whether an event stored at t is in f's span of time.
func (f listFilter) inSpan(t time.Time) bool {
	return (f.from.IsZero() || !t.Before(f.from)) && (f.to.IsZero() || t.Before(f.to.Add(time.Minute)))
}

// query is f as URL parameters, with before set to page to the events stored before it.
func (f listFilter) query(before uint64) string {
	v := url.Values{}
	for k, x := range map[string]string{"q": f.Query, "tenant": f.Tenant, "provider": f.Provider, "type": f.Type, "status": f.Status, "from": f.From, "to": f.To} {
		if x != "" {
			v.Set(k, x)
		}
	}
	if before > 0 {
		v.Set("before", strconv.FormatUint(before, 10))
	}
	return v.Encode()
}

// eventState is one consumer's status of a listed event.
type eventState struct {
	Consumer, Status string
}

// listed is an event of the list with its status in each consumer that takes it.
type listed struct {
	eventRow
	States []eventState
	Done   bool // every consumer that takes it completed it
}

type searchData struct {
	listFilter
	Depth            int
	Results          []listed
	Exact            bool // the query was an envelope id, found in the index
	Older, Newer     string
	Scanned          string // the sequences a page looked at, when it found fewer than a page
	Tenants          []string
	Providers, Types []string
	StatusChoices    []string
}

func (c *console) search(w http.ResponseWriter, r *http.Request, u who) {
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	f, ferr := parseListFilter(r.URL.Query())
	d := searchData{listFilter: f, Depth: c.o.SearchDepth, Tenants: c.cfg.TenantIDs(), Providers: registry.Names(),
		Types: envelope.AllTypes, StatusChoices: statusFilters}
	v := view{Title: "Events", Nav: "events", Data: &d}
	if ferr != nil {
		v.Error = ferr.Error()
		c.render(w, http.StatusBadRequest, "events", u, v)
		return
	}
	var err error
	if strings.HasPrefix(f.Query, "ev_") { // an envelope id: the index knows where it is
		var rows []eventRow
		if rows, err = c.byID(ctx, f.Query); err == nil && len(rows) > 0 {
			d.Exact = true
			d.Results, err = c.withStates(ctx, rows)
		}
	}
	if !d.Exact && err == nil { // a search among the filter's events, or the list
		d.Results, err = c.list(ctx, &d)
	}
	if err != nil {
		v.Error = "search failed: " + err.Error()
	}
	c.render(w, http.StatusOK, "events", u, v)
}

// byID is the stored event with envelope id, by the index (none when not indexed).
func (c *console) byID(ctx context.Context, id string) ([]eventRow, error) {
	m, err := c.stored(ctx, id)
	if err != nil || m == nil {
		return nil, err
	}
	if rw, ok := row(m.Sequence, m.Time, m.Data); ok {
		return []eventRow{rw}, nil
	}
	return nil, nil
}

// stored is the stream's message of envelope id, found by the index (nil when the
// index has no such id).
func (c *console) stored(ctx context.Context, id string) (*jetstream.RawStreamMsg, error) {
	seq, err := c.lookup(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("index lookup: %w", err)
	}
	if seq == 0 {
		return nil, nil
	}
	st, err := c.js.Stream(ctx, stream.Events)
	var m *jetstream.RawStreamMsg
	if err == nil {
		m, err = st.GetMsg(ctx, seq)
	}
	if err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	return m, nil
}

// list is a page of the events d's filter and search take, newest first: the events
// stored before d.Before (or the latest) and in the span of time, looked for among the
// Depth sequences below the page's end.
func (c *console) list(ctx context.Context, d *searchData) ([]listed, error) {
	st, err := c.js.Stream(ctx, stream.Events)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil || info.State.Msgs == 0 {
		return nil, err
	}
	end := info.State.LastSeq
	if d.Before > 0 {
		end = min(end, d.Before-1)
	}
	if !d.to.IsZero() { // the span's end, wherever it is in the stream
		after, err := seqAt(ctx, st, d.to.Add(time.Minute))
		if err != nil {
			return nil, err
		}
		end = min(end, after-1)
	}
	floor := info.State.FirstSeq // the oldest event any page may show
	if !d.from.IsZero() {
		if floor, err = seqAt(ctx, st, d.from); err != nil {
			return nil, err
		}
	}
	if end < floor {
		return nil, nil
	}
	start := floor
	if end-start+1 > uint64(d.Depth) {
		start = end - uint64(d.Depth) + 1
	}
	lq := strings.ToLower(d.Query)
	var rows []eventRow
	err = stream.Scan(ctx, st, jetstream.OrderedConsumerConfig{FilterSubjects: []string{d.subject},
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start}, func(m jetstream.Msg) error {
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		if md.Sequence.Stream > end {
			return errStop
		}
		if rw, ok := row(md.Sequence.Stream, md.Timestamp, m.Data()); ok && d.inSpan(rw.Stored) && (lq == "" || rw.matches(lq)) {
			rw.Env.Data.Raw = nil // a page holds up to Depth events: not their payloads
			rows = append(rows, rw)
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, err
	}
	statuses, err := c.statuses(ctx)
	if err != nil {
		return nil, err
	}
	var out []listed
	oldest := start // the lowest sequence this page covered
	for i := len(rows) - 1; i >= 0; i-- {
		if len(out) == pageSize {
			oldest = rows[i+1].Seq
			break
		}
		l, err := c.state(ctx, statuses, rows[i])
		if err != nil {
			return nil, err
		}
		if d.Status == "" || d.Status == "done" && l.Done || d.Status != "done" && l.has(d.Status) {
			out = append(out, l)
		}
	}
	if oldest > floor {
		d.Older = "/console/events?" + d.query(oldest)
	}
	if d.Before > 0 {
		d.Newer = "/console/events?" + d.query(0)
	}
	if len(out) < pageSize {
		d.Scanned = fmt.Sprintf("sequences %d to %d", oldest, end)
	}
	return out, nil
}

// seqAt is the sequence of the first event stored at or after t (the one the next
// event will have when none is): the first message of an ordered consumer from t.
func seqAt(ctx context.Context, st jetstream.Stream, t time.Time) (uint64, error) {
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &t})
	if err != nil {
		return 0, err
	}
	ci, err := c.Info(ctx)
	if err != nil {
		return 0, err
	}
	if ci.NumPending == 0 {
		return info.State.LastSeq + 1, nil
	}
	m, err := c.Next(jetstream.FetchMaxWait(2 * time.Second))
	if errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoMessages) {
		return info.State.LastSeq + 1, nil // the pending ones gone since (the retention)
	}
	if err != nil {
		return 0, err
	}
	md, err := m.Metadata()
	if err != nil {
		return 0, err
	}
	return md.Sequence.Stream, nil
}

// errStop ends a scan early.
var errStop = errors.New("stop")

func (c *console) statuses(ctx context.Context) (*consumer.Statuses, error) {
	kv, err := c.js.KeyValue(ctx, stream.Guards)
	if err != nil {
		return nil, err
	}
	return consumer.NewStatuses(c.js, kv), nil
}

// withStates adds each row's status in the consumers.
func (c *console) withStates(ctx context.Context, rows []eventRow) ([]listed, error) {
	statuses, err := c.statuses(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]listed, len(rows))
	for i, rw := range rows {
		if out[i], err = c.state(ctx, statuses, rw); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// state is rw with its status in every consumer that takes it.
func (c *console) state(ctx context.Context, statuses *consumer.Statuses, rw eventRow) (listed, error) {
	l := listed{eventRow: rw, Done: true}
	subject := rw.Env.StreamSubject()
	for _, sub := range stream.Subscriptions {
		if !sub.Takes(subject) {
			continue
		}
		rec, ok, err := statuses.OfEvent(ctx, sub, rw.Env, rw.Seq)
		if err != nil {
			return l, err
		}
		status := guard.Received
		if ok {
			status = rec.Status
		}
		l.Done = l.Done && status == guard.Completed
		l.States = append(l.States, eventState{Consumer: sub.Name(), Status: status})
	}
	return l, nil
}

// has says whether an event is waiting (some consumer has not completed it and it has
// not failed) or failed (some consumer failed it: retrying, or dead-lettered).
func (l listed) has(status string) bool {
	for _, s := range l.States {
		failed := s.Status == guard.RetryableFailed || s.Status == guard.DeadLetter
		if status == "failed" && failed || status == "waiting" && !failed && s.Status != guard.Completed {
			return true
		}
	}
	return false
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
	// History is every consumer's attempts at it, oldest first (consumer.History).
	History    []consumer.Outcome
	HistoryCut bool
	HistoryErr string
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
	m, err := c.stored(ctx, id)
	if err != nil {
		c.render(w, http.StatusInternalServerError, "error", u, view{Title: "Event", Nav: "events", Error: err.Error()})
		return
	}
	if m == nil {
		c.render(w, http.StatusNotFound, "error", u, view{Title: "Event", Nav: "events", Error: "no stored event has this id (ids start with ev_; search by provider event id, contact or campaign instead)"})
		return
	}
	seq := m.Sequence
	rw, _ := row(seq, m.Time, m.Data)
	d := eventData{eventRow: rw, Subject: m.Subject, Arrivals: 1, Envelope: m.Data}
	if kv, err := c.js.KeyValue(ctx, stream.Arrivals); err == nil {
		if e, err := kv.Get(ctx, id); err == nil {
			n, _ := strconv.Atoi(string(e.Value()))
			d.Arrivals += n
		}
	}
	statuses, err := c.statuses(ctx)
	for _, sub := range stream.Subscriptions {
		cs := consumerStatus{Consumer: sub.Name()}
		if err != nil {
			cs.Err = err.Error()
		} else if rec, ok, gerr := statuses.OfEvent(ctx, sub, rw.Env, seq); gerr != nil {
			cs.Err = gerr.Error()
		} else {
			cs.Seen, cs.Record = ok, rec
		}
		d.Consumers = append(d.Consumers, cs)
	}
	if d.Derived, err = stream.DerivedFrom(ctx, c.js, rw.Env); err != nil {
		d.DerivedErr = err.Error()
	}
	if d.History, d.HistoryCut, err = consumer.History(ctx, c.js, rw.Env, rw.Stored); err != nil {
		d.HistoryErr = err.Error()
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
