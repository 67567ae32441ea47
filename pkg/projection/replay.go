package projection

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/stream"
)

// A replay whose pulls come back empty while the stream still holds events to apply
// pulls again, waiting retryWait for them, and fails after stallAfter without progress.
var (
	stallAfter = 30 * time.Second
	retryWait  = time.Second
)

// Progress is how far a replay is.
type Progress struct {
	First, End  uint64 // the stream sequences the replay starts from and ends at
	Done, Total uint64 // events applied, events to apply
	LastSeq     uint64 // the stream sequence of the last event applied
	Rate        float64
	Left        time.Duration
}

func (p Progress) String() string {
	pct := 100.0
	if p.Total > 0 {
		pct = 100 * float64(p.Done) / float64(p.Total)
	}
	return fmt.Sprintf("%d/%d events (%.1f%%), %.0f events/s, %s left", p.Done, p.Total, pct, p.Rate, p.Left.Round(time.Second))
}

// ReplayOptions say which events to replay.
type ReplayOptions struct {
	FromSeq uint64    // replay from this stream sequence (0: from the first)
	Since   time.Time // or from the first event stored at or after this time
	// Dir names contacts as the live projector does (nil: derived ids only).
	Dir *contacts.Directory
	// Skip, if set, is told of an event that fails to apply (or panics) and the replay
	// goes on; unset, the replay stops with the error.
	Skip func(seq uint64, err error)
	// OnProgress, if set, hears progress at most every Every (default 1 s).
	OnProgress func(Progress)
	Every      time.Duration
	// Only, if set (a projection's name), is the one projection a replay into memory of
	// its own is read for: it builds that one and the contact records it is derived
	// from, not the other derived one (`exacto replay` without --into compares one
	// projection and keeps nothing). Unset, or into any other stores, all three.
	Only string
}

// Replay applies the events of EXACTO_EVENTS from opts' start up to the last one stored
// when it began into s, and returns how far it got. Cancelling ctx stops it between two
// events: Progress.LastSeq says where a resumed replay starts (LastSeq+1); the merge is
// idempotent, so resuming from an earlier point is harmless too. When nothing is stored
// at or after the start, it returns at once with Total 0. An empty pull ends it only when
// the stream confirms that no event is left up to that last one; while one is, it pulls
// again, and fails after stallAfter (30 s) without an event delivered.
func Replay(ctx context.Context, js jetstream.JetStream, s Stores, o ReplayOptions) (Progress, error) {
	if o.Only != "" && !slices.Contains(Names, o.Only) {
		return Progress{}, fmt.Errorf("replay of projection %q: want one of %s", o.Only, strings.Join(Names, ", "))
	}
	s.held = newHeld()
	_, c := s.Contacts.(*Memory)
	_, sh := s.Campaigns.(*Memory)
	s.held.back = c && sh // a rebuild of its own, in memory: written back
	if s.held.back && o.Only != "" {
		s.held.noMembers, s.held.noSuppression = o.Only == Contacts || o.Only == Suppression, o.Only == Contacts || o.Only == Campaigns
	}
	p, err := replay(ctx, js, s, o)
	if ferr := s.held.flush(context.WithoutCancel(ctx), s); err == nil { // what it holds is stored, whatever stopped it
		err = ferr
	}
	return p, err
}

func replay(ctx context.Context, js jetstream.JetStream, s Stores, o ReplayOptions) (Progress, error) {
	st, err := js.Stream(ctx, stream.Events)
	if err != nil {
		return Progress{}, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return Progress{}, err
	}
	last := info.State.LastSeq
	first := max(info.State.FirstSeq, 1)
	switch {
	case o.FromSeq > 0:
		first = max(first, o.FromSeq)
	case !o.Since.IsZero():
		seq, err := FirstSince(ctx, st, o.Since)
		if err != nil {
			return Progress{}, err
		}
		if seq == 0 { // nothing stored at or after Since
			seq = last + 1
		}
		first = max(first, seq)
	}
	p := Progress{First: first, End: last, LastSeq: first - 1}
	if last >= first {
		p.Total = last - first + 1
	}
	if info.State.Msgs == 0 || last < first {
		return p, nil
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{"events.>"},
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: first}
	c, err := st.OrderedConsumer(ctx, cfg)
	if err != nil {
		return p, err
	}
	every := o.Every
	if every <= 0 {
		every = time.Second
	}
	began, lastReport := time.Now(), time.Now()
	report := func() {
		el := time.Since(began).Seconds()
		if el > 0 {
			p.Rate = float64(p.Done) / el
		}
		if p.Rate > 0 && p.Total > p.Done {
			p.Left = time.Duration(float64(p.Total-p.Done) / p.Rate * float64(time.Second))
		} else {
			p.Left = 0
		}
		if o.OnProgress != nil {
			o.OnProgress(p)
		}
	}
	// Pulling and decoding, naming each event's contact, and applying run in three
	// goroutines, a chunk at a time: two cores, about half the work each. Events are
	// named in stream order, as applying them would. The directory is loaded while the
	// first chunks are pulled (loading an entry costs about what reading an event does,
	// and there are two per contact): naming holds up to maxEarly chunks until it is in.
	pctx, stop := context.WithCancel(ctx)
	decoded, chunks, pulled, namedAll := make(chan chunk, 2), make(chan chunk, 2), make(chan struct{}), make(chan struct{})
	spent := make(chan []fetched, cap(chunks)+cap(decoded)+maxEarly+2) // applied chunks' lists, for pull to fill again
	go func() {
		defer close(pulled)
		pull(pctx, st, c, p.LastSeq, last, decoded, spent)
	}()
	// ids is set before naming begins: applying, which uses it too, takes chunks named.
	var ids Identities
	go func() { // names each event's contact, in order
		defer close(namedAll)
		var early []chunk
		if o.Dir != nil {
			loaded, limit := make(chan error, 1), 10*p.Total
			go func() {
				// A Get per contact costs a round trip: load the directory unless it is
				// much larger than the replay.
				dir, err := o.Dir.Preload(pctx, "", limit)
				if err == nil {
					ids = &memo{dir: dir, seen: map[memoKey]contacts.Record{}}
				}
				loaded <- err
			}()
			var err error
		wait:
			for {
				in := decoded
				if len(early) == maxEarly {
					in = nil
				}
				select {
				case err = <-loaded:
					break wait
				case ck := <-in:
					early = append(early, ck)
				}
			}
			if err != nil {
				select {
				case chunks <- chunk{err: err}:
				case <-pctx.Done():
				}
				return
			}
		}
		for {
			var ck chunk
			if len(early) > 0 {
				ck, early = early[0], early[1:]
			} else {
				select {
				case ck = <-decoded:
				case <-pctx.Done():
					return
				}
			}
			for i := range ck.events {
				if e := &ck.events[i]; e.ok {
					e.named = nameCaught(pctx, ids, e.env, o.Skip != nil)
				}
			}
			select {
			case chunks <- ck:
			case <-pctx.Done():
				return
			}
			if ck.err != nil || ck.end {
				return
			}
		}
	}()
	defer func() { stop(); <-pulled; <-namedAll }()
	for p.LastSeq < last {
		if ctx.Err() != nil {
			report()
			return p, ctx.Err()
		}
		var ck chunk
		select {
		case ck = <-chunks:
		case <-ctx.Done():
			continue
		}
		for _, e := range ck.events {
			if e.ok {
				if err := applyOne(ctx, s, ids, e.env, e.named, o.Skip != nil); err != nil {
					if o.Skip == nil {
						return p, fmt.Errorf("seq %d: %w", e.seq, err)
					}
					o.Skip(e.seq, err)
				}
			}
			p.Done++
			p.LastSeq = e.seq
		}
		clear(ck.events) // nothing of them is kept alive
		select {
		case spent <- ck.events[:0]:
		default:
		}
		if ck.err != nil {
			if ck.stalled {
				report()
			}
			return p, ck.err
		}
		if ck.end {
			p.LastSeq = last
		}
		if time.Since(lastReport) >= every {
			report()
			lastReport = time.Now()
		}
	}
	report()
	return p, nil
}

// maxEarly is how many chunks naming holds while the directory loads.
const maxEarly = 8

// batchSize is how many events one pull asks for: each pull of an ordered consumer makes
// a new consumer on the server, so fewer, larger pulls read faster.
const batchSize = 2000

// fetched is one event pulled: its stream sequence, and the envelope when it decodes to
// one with an id (an event that does not is counted, not applied).
type fetched struct {
	seq   uint64
	env   envelope.Envelope
	ok    bool
	named named
}

// chunk is what one pull gave: its events in order, then whether nothing is left to
// apply up to the end (end), or the error that ends the replay (stalled: for want of
// events the stream holds).
type chunk struct {
	events  []fetched
	end     bool
	stalled bool
	err     error
}

// pull pulls the events of c after seq up to last, decodes them and sends them on out, a
// chunk per pull (in a list from spent when one is there), until a chunk with end or err
// set, or ctx ends. An empty pull proves nothing (an ordered consumer reset, a
// reconnect, a leader change, a slow server): the stream says whether an event is still
// stored up to last. If none is, the rest was deleted: the end. If one is, pull again,
// waiting for it, but give up, with an error, after stallAfter without an event
// delivered.
func pull(ctx context.Context, st jetstream.Stream, c jetstream.Consumer, seq, last uint64, out chan<- chunk, spent <-chan []fetched) {
	progressAt := time.Now() // when the last event was delivered (or the replay began)
	wait := false            // the last pull came back empty while the stream still holds events to apply
	for seq < last {
		var batch jetstream.MessageBatch
		var err error
		if wait {
			batch, err = c.Fetch(batchSize, jetstream.FetchMaxWait(retryWait))
		} else {
			batch, err = c.FetchNoWait(batchSize)
		}
		var ck chunk
		select {
		case ck.events = <-spent: // an envelope is large: reuse the lists
		default:
			ck.events = make([]fetched, 0, batchSize) // grown by appends, a list costs twice its size
		}
		if err != nil {
			ck.err = err
		} else {
			for msg := range batch.Messages() {
				md, err := msg.Metadata()
				if err != nil {
					ck.err = err
					break
				}
				if md.Sequence.Stream > last { // stored after the end we fixed: done
					ck.end = true
					break
				}
				// Decoded in place: a fetched of its own would be moved to the heap.
				ck.events = append(ck.events, fetched{seq: md.Sequence.Stream})
				e := &ck.events[len(ck.events)-1]
				e.ok = envelope.Decode(msg.Data(), &e.env) == nil && e.env.ID != ""
				seq = e.seq
			}
			if err := batch.Error(); ck.err == nil && !ck.end && err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
				ck.err = err
			}
		}
		switch {
		case ck.err != nil || ck.end:
		case len(ck.events) > 0:
			progressAt, wait = time.Now(), false
		case seq < last:
			next, err := nextStored(ctx, st, seq+1)
			switch {
			case err != nil:
				ck.err = fmt.Errorf("after seq %d: %w", seq, err)
			case next == 0 || next > last:
				ck.end = true
			case time.Since(progressAt) >= stallAfter:
				ck.err, ck.stalled = fmt.Errorf("replay stalled: no event delivered for %s though the stream holds seq %d (applied up to seq %d of %d)",
					stallAfter, next, seq, last), true
			default:
				wait = true
			}
		}
		select {
		case out <- ck:
		case <-ctx.Done():
			return
		}
		if ck.err != nil || ck.end {
			return
		}
	}
}

// FirstSince returns the sequence of the first event stored at or after t, or 0 when
// none is: JetStream finds it from its own store times, as a consumer delivering by
// start time would start. Nothing is pulled (an empty pull would prove nothing): the
// consumer's starting point and the stream answer.
func FirstSince(ctx context.Context, st jetstream.Stream, t time.Time) (uint64, error) {
	c, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{FilterSubject: "events.>", AckPolicy: jetstream.AckNonePolicy,
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &t, MemoryStorage: true, InactiveThreshold: time.Minute})
	if err != nil {
		return 0, fmt.Errorf("events since %s: %w", t.Format(time.RFC3339Nano), err)
	}
	info := c.CachedInfo()
	defer st.DeleteConsumer(context.WithoutCancel(ctx), info.Name)
	// A consumer that delivered nothing yet reports the sequence before the one it starts
	// at: the first stored at or after t (the last one plus one when none is).
	seq, err := nextStored(ctx, st, info.Delivered.Stream+1)
	if err != nil {
		return 0, fmt.Errorf("events since %s: %w", t.Format(time.RFC3339Nano), err)
	}
	return seq, nil
}

// nextStored returns the sequence of the first event the stream still stores at or after
// seq, or 0 when none is.
func nextStored(ctx context.Context, st jetstream.Stream, seq uint64) (uint64, error) {
	msg, err := st.GetMsg(ctx, max(seq, 1), jetstream.WithGetMsgSubject("events.>"))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return msg.Sequence, nil
}

// applyOne applies env, named n; with catch, a panic is its error.
func applyOne(ctx context.Context, s Stores, ids Identities, env envelope.Envelope, n named, catch bool) (err error) {
	if catch {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
			}
		}()
	}
	_, err = applyNamed(ctx, s, ids, env, n)
	return err
}

// nameCaught names env; with catch, a panic is its error (applied, it is skipped).
func nameCaught(ctx context.Context, ids Identities, env envelope.Envelope, catch bool) (n named) {
	if catch {
		defer func() {
			if p := recover(); p != nil {
				n = named{err: fmt.Errorf("panic: %v", p)}
			}
		}()
	}
	return name(ctx, ids, env)
}

// memo resolves contacts through the directory once per contact during a replay: a
// million events must not cost a million directory round trips. A Record that merges
// contacts drops what the memo kept of the merged ones. It keeps of each record only
// what naming an event reads (its ids and the ids merged into it): the rest — keys,
// e-mails, external ids — would be a live heap the collector marks again and again,
// one record per contact of the history.
type memo struct {
	mu   sync.Mutex
	dir  *contacts.Directory
	seen map[memoKey]contacts.Record
}

// memoKey is who a Record names: the same keys, the same record.
type memoKey struct {
	tenant string
	id     contacts.Identity
}

func (m *memo) Record(ctx context.Context, tenant string, s contacts.Seen) (contacts.Record, error) {
	key := memoKey{tenant, s.Identity()}
	m.mu.Lock()
	rec, ok := m.seen[key]
	m.mu.Unlock()
	if ok {
		return rec, nil
	}
	rec, err := m.dir.Record(ctx, tenant, s)
	if err != nil {
		return rec, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(rec.Merged) > 0 {
		for k, r := range m.seen {
			if r.ContactID != rec.ContactID && slices.Contains(rec.Merged, r.ContactID) {
				delete(m.seen, k)
			}
		}
	}
	rec = contacts.Record{ContactID: rec.ContactID, AccountID: rec.AccountID, Merged: rec.Merged}
	m.seen[key] = rec
	return rec, nil
}
