package privacy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/projection"
	"exacto.dev/pkg/stream"
)

// ErasedFromHeader, on an event an erasure or the retention rewrote, is the sequence of
// the event it replaces (erased from the stream since).
const ErasedFromHeader = "Exacto-Erased-From"

// rewriting suffixes the bucket an erasure copies a bucket's current entries into while
// it rewrites it; a run that died halfway finishes from it.
const rewriting = "__ERASING"

// complete is the key that says a rewrite's copy holds every entry.
const complete = "_copy_complete"

// idOnly are the buckets that hold ids, sequences and leases only, never anything
// naming a person: an erasure leaves them as they are.
var idOnly = []string{stream.Privacy, stream.EventIndex, stream.Arrivals, stream.ContactLocks, stream.ConsumerCheckpoints}

// Report is what an erasure changed.
type Report struct {
	// Events rewritten on EXACTO_EVENTS (each stored again, erased, in place of the
	// original, which is erased from disk); About of them were about the person.
	Events int `json:"events"`
	About  int `json:"about"`
	// Deleted: messages erased from other streams (dead letters, outcomes, quarantine).
	Deleted map[string]int `json:"deleted,omitempty"`
	// Removed: entries removed or changed in buckets; Rewritten: buckets written anew,
	// so that no earlier revision of an entry stays on disk.
	Removed   map[string]int `json:"removed,omitempty"`
	Rewritten []string       `json:"rewritten,omitempty"`
}

// Erase removes p's personal data from everything js's deployment keeps, and reports
// what it changed. The consumers must be paused and idle (the caller's job): they
// write the buckets rewritten here.
func Erase(ctx context.Context, js jetstream.JetStream, p *Person) (Report, error) {
	r := Report{Deleted: map[string]int{}, Removed: map[string]int{}}
	// The names in events about them name them in other events too; the events
	// themselves key what was kept of them (Confirmations).
	if _, err := each(ctx, js, stream.Events, "events."+p.Tenant+".>", 0, func(m jetstream.Msg) error {
		var env envelope.Envelope
		if envelope.Decode(m.Data(), &env) != nil {
			return nil
		}
		p.AddEvent(&env)
		if p.About(&env) && env.Data.Contact != nil {
			p.AddWord(env.Data.Contact.Name)
			p.AddWord(env.Data.Contact.ExternalID)
		}
		return nil
	}); err != nil {
		return r, err
	}
	// The index writer is let finish first: an entry it wrote late for an original
	// would name the erased event instead of its copy.
	indexed(ctx, js, 30*time.Second)
	last, err := rewriteEvents(ctx, js, p, 0, &r)
	if err != nil {
		return r, err
	}
	// What a gateway stored before it learnt of the erasure (its watch of the
	// forgotten set lags by a moment).
	if _, err := rewriteEvents(ctx, js, p, last, &r); err != nil {
		return r, err
	}
	if err := eraseMessages(ctx, js, p, &r); err != nil {
		return r, err
	}
	if err := eraseBuckets(ctx, js, p, &r); err != nil {
		return r, err
	}
	return r, stream.Durable(ctx, js, stream.Events)
}

// indexed waits up to within until the gateway's index writer has indexed every event.
func indexed(ctx context.Context, js jetstream.JetStream, within time.Duration) {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		c, err := js.Consumer(ctx, stream.Events, stream.IndexConsumer)
		if err != nil {
			return // no index writer here
		}
		info, err := c.Info(ctx)
		if err != nil || info.NumPending == 0 && info.NumAckPending == 0 {
			return
		}
	}
}

// rewriteEvents stores again, rewritten, every event after sequence from that names p,
// and erases the original from disk. It returns the last sequence looked at.
func rewriteEvents(ctx context.Context, js jetstream.JetStream, p *Person, from uint64, r *Report) (uint64, error) {
	return rewriteHistory(ctx, js, p.Tenant, from, 0, func(env *envelope.Envelope, _ *jetstream.MsgMetadata, data []byte) verdict {
		about := p.About(env)
		if !about && !p.Mentions(data) || !p.Rewrite(env) {
			return keep
		}
		r.Events++
		if about {
			r.About++
		}
		return rewritten
	})
}

// verdict is what becomes of one event of the history.
type verdict int

const (
	keep      verdict = iota
	rewritten         // stored again as judge left it, the original erased
	removed           // erased
)

// rewriteHistory passes every event of tenant after sequence from (up to upTo, 0: the
// last stored) to judge. An event judged rewritten is stored again as judge left it,
// on its subject, with ErasedFromHeader, and the index of stored ids names the copy;
// once the copies are on disk the originals (and the removed events) are erased with
// JetStream's secure delete, which overwrites their bytes. It returns the last sequence
// looked at.
func rewriteHistory(ctx context.Context, js jetstream.JetStream, tenant string, from, upTo uint64, judge func(env *envelope.Envelope, md *jetstream.MsgMetadata, data []byte) verdict) (uint64, error) {
	st, err := js.Stream(ctx, stream.Events)
	if err != nil {
		return 0, err
	}
	index, err := js.KeyValue(ctx, stream.EventIndex)
	if err != nil {
		return 0, err
	}
	var gone []uint64
	flush := func() error {
		if len(gone) == 0 {
			return nil
		}
		if err := stream.Durable(ctx, js, stream.Events); err != nil {
			return err
		}
		for _, seq := range gone {
			if err := st.SecureDeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				return fmt.Errorf("erase event %d: %w", seq, err)
			}
		}
		gone = gone[:0]
		return nil
	}
	last, err := each(ctx, js, stream.Events, "events."+tenant+".>", from, func(m jetstream.Msg) error {
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		if upTo > 0 && md.Sequence.Stream > upTo {
			return nil
		}
		var env envelope.Envelope
		if err := envelope.Decode(m.Data(), &env); err != nil {
			return nil // not an event of Exacto's: nothing it could act on
		}
		switch judge(&env, md, m.Data()) {
		case keep:
			return nil
		case rewritten:
			data, err := json.Marshal(env)
			if err != nil {
				return err
			}
			again := &nats.Msg{Subject: m.Subject(), Data: data, Header: nats.Header{}}
			again.Header.Set("Content-Type", "application/cloudevents+json")
			again.Header.Set(ErasedFromHeader, strconv.FormatUint(md.Sequence.Stream, 10))
			ack, err := js.PublishMsg(ctx, again)
			if err != nil {
				return fmt.Errorf("store the rewritten copy of %s: %w", env.ID, err)
			}
			// The id's index entry names the copy: `events show` finds it, and the
			// provider's retry of the event is still a duplicate.
			if _, err := index.Put(ctx, env.ID, []byte(strconv.FormatUint(ack.Sequence, 10))); err != nil {
				return fmt.Errorf("index %s: %w", env.ID, err)
			}
			stream.NoteStored(js, ack.Sequence)
		}
		// A removed event's index entry stays: the provider's retry of it is still a
		// duplicate (stream.Load finds the event gone).
		if gone = append(gone, md.Sequence.Stream); len(gone) >= 256 {
			return flush()
		}
		return nil
	})
	if err != nil {
		return last, err
	}
	return last, flush()
}

// eraseMessages erases from disk every message naming p in the streams that are
// neither EXACTO_EVENTS nor a bucket: dead letters, replays, outcomes, the quarantine.
func eraseMessages(ctx context.Context, js jetstream.JetStream, p *Person, r *Report) error {
	names := js.StreamNames(ctx)
	var all []string
	for n := range names.Name() {
		all = append(all, n)
	}
	if err := names.Err(); err != nil {
		return err
	}
	for _, name := range all {
		if name == stream.Events || strings.HasPrefix(name, "KV_") || strings.HasPrefix(name, "OBJ_") {
			continue
		}
		st, err := js.Stream(ctx, name)
		if err != nil {
			return err
		}
		if _, err := each(ctx, js, name, "", 0, func(m jetstream.Msg) error {
			if !p.Mentions(m.Data()) && !p.mentionsHeaders(m.Headers()) {
				return nil
			}
			md, err := m.Metadata()
			if err != nil {
				return err
			}
			if err := st.SecureDeleteMsg(ctx, md.Sequence.Stream); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				return fmt.Errorf("erase %s %d: %w", name, md.Sequence.Stream, err)
			}
			r.Deleted[name]++
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

func (p *Person) mentionsHeaders(h nats.Header) bool {
	for _, vs := range h {
		for _, v := range vs {
			if p.Mentions([]byte(v)) {
				return true
			}
		}
	}
	return false
}

// eraseBuckets removes every entry naming p from every bucket but those holding ids
// only, and writes each bucket on disk anew: a bucket keeps earlier revisions of an
// entry in its files (nats-server drops them from its index, not from the disk), so an
// entry's old values would outlive its removal.
func eraseBuckets(ctx context.Context, js jetstream.JetStream, p *Person, r *Report) error {
	names := js.KeyValueStoreNames(ctx)
	var all []string
	for n := range names.Name() {
		all = append(all, n)
	}
	if err := names.Error(); err != nil {
		return err
	}
	slices.Sort(all)
	for _, name := range all {
		if strings.HasSuffix(name, rewriting) || slices.Contains(idOnly, name) {
			continue
		}
		kv, err := js.KeyValue(ctx, name)
		if err != nil {
			return err
		}
		st, err := js.Stream(ctx, "KV_"+name)
		if err != nil {
			return err
		}
		if err := finishRewrite(ctx, js, kv, st); err != nil {
			return err
		}
		h, err := current(ctx, kv)
		if err != nil {
			return fmt.Errorf("bucket %s: %w", name, err)
		}
		entries, deleted := h.entries, h.deleted
		var resets []string
		if name == stream.Guards {
			// A guard key deleted is a dead letter reset for its replay (consumer.Status
			// tells it by the marker): the rewrite keeps the markers.
			resets = deleted
		}
		removed := 0
		for k, v := range entries {
			// What a source said of an event about them holds their message in the
			// source's words (a phone number written their own way): it goes whole,
			// as their events' texts do. Another's verdict that names them is
			// scrubbed, as that person's event is.
			if tenant, id, ok := strings.Cut(k, "."); ok && name == stream.Confirmations && tenant == p.Tenant && p.EventAbout(id) {
				delete(entries, k)
				removed++
				continue
			}
			next, keep, err := p.scrubEntry(name, v)
			if err != nil {
				return fmt.Errorf("bucket %s, %s: %w", name, k, err)
			}
			if !keep {
				delete(entries, k)
				removed++
			} else if next != nil {
				entries[k] = next
				removed++
			}
		}
		if removed > 0 {
			r.Removed[name] = removed
		}
		if st.CachedInfo().Config.Storage == jetstream.MemoryStorage {
			// Nothing on disk: the entries are only put right.
			if err := putRight(ctx, kv, entries); err != nil {
				return fmt.Errorf("bucket %s: %w", name, err)
			}
			continue
		}
		if err := rewrite(ctx, js, kv, st, entries, h.written); err != nil {
			return fmt.Errorf("rewrite bucket %s: %w", name, err)
		}
		for _, k := range resets {
			if err := kv.Delete(ctx, k); err != nil {
				return fmt.Errorf("bucket %s: mark %s deleted again: %w", name, k, err)
			}
		}
		r.Rewritten = append(r.Rewritten, name)
	}
	return nil
}

// scrubEntry decides a bucket entry: dropped (keep false), changed (next), or kept as it
// is. The person's own entries go (their contact and directory records, index entries,
// suppression entries: Person.owns); a campaign shard loses their member; an entry of
// someone else's that names them (a property whose value is their address) has it
// replaced, as that person's events have — so the live projection still equals a
// rebuild from the rewritten history.
func (p *Person) scrubEntry(bucket string, value []byte) (next []byte, keep bool, err error) {
	if !p.Mentions(value) {
		return nil, true, nil
	}
	if strings.HasPrefix(bucket, stream.ProjectionPrefix+"CAMPAIGNS") {
		var sh projection.Shard
		if err := json.Unmarshal(value, &sh); err != nil {
			return nil, false, nil // unreadable and naming them: it goes
		}
		for _, id := range p.ContactIDs {
			delete(sh.Members, id)
		}
		if len(sh.Members) == 0 {
			return nil, false, nil
		}
		out, err := json.Marshal(sh)
		if err != nil || p.Mentions(out) {
			return nil, false, err
		}
		return out, true, nil
	}
	if p.owns(value) {
		return nil, false, nil
	}
	if out := p.scrubValue(value); out != nil && !p.Mentions(out) {
		return out, true, nil
	}
	return nil, false, nil
}

// held is what a bucket holds now: each entry, when it was written, and the keys whose
// last entry is a delete or purge marker, sorted.
type held struct {
	entries map[string][]byte
	written map[string]time.Time
	deleted []string
}

// current reads what kv holds now.
func current(ctx context.Context, kv jetstream.KeyValue) (held, error) {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return held{}, err
	}
	defer w.Stop()
	h, deleted := held{entries: map[string][]byte{}, written: map[string]time.Time{}}, map[string]bool{}
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				h.deleted = slices.Sorted(maps.Keys(deleted))
				return h, nil
			}
			if e.Operation() == jetstream.KeyValuePut {
				h.entries[e.Key()], h.written[e.Key()] = e.Value(), e.Created()
				delete(deleted, e.Key())
			} else {
				delete(h.entries, e.Key())
				delete(h.written, e.Key())
				deleted[e.Key()] = true
			}
		case <-ctx.Done():
			return held{}, ctx.Err()
		}
	}
}

// putRight makes kv hold entries where it held something else (a bucket in memory).
func putRight(ctx context.Context, kv jetstream.KeyValue, entries map[string][]byte) error {
	now, err := current(ctx, kv)
	if err != nil {
		return err
	}
	for k, v := range now.entries {
		next, ok := entries[k]
		switch {
		case !ok:
			if err := kv.Purge(ctx, k); err != nil {
				return err
			}
		case string(next) != string(v):
			if _, err := kv.Put(ctx, k, next); err != nil {
				return err
			}
		}
	}
	return nil
}

// rewrite makes kv's stream hold entries alone, each once, with nothing before them on
// disk: the entries are copied into a bucket of their own first (synced), then the
// stream is purged — nats-server removes the files of a purged stream — and they are
// written back. A run that dies after the purge is finished from the copy by the next
// (finishRewrite).
func rewrite(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, st jetstream.Stream, entries map[string][]byte, written map[string]time.Time) error {
	name := kv.Bucket()
	cfg := st.CachedInfo().Config
	// In a bucket whose entries expire (the confirmations: a day) each entry written
	// back keeps what was left of its age, as a TTL of its own: else every erasure would
	// start each entry's day again, and erasures a day apart would keep them for ever.
	// A bucket made before it allowed message TTLs starts them again.
	var left func(key string) time.Duration
	if cfg.MaxAge > 0 && cfg.AllowMsgTTL {
		now := time.Now()
		left = func(key string) time.Duration { return max(cfg.MaxAge-now.Sub(written[key]), time.Second) }
	}
	tmp, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name + rewriting, Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
		Description: "the entries of " + name + " while an erasure writes it anew"})
	if err != nil {
		return err
	}
	if err := putAll(ctx, js, tmp.Bucket(), entries, nil); err != nil {
		return err
	}
	if _, err := tmp.Put(ctx, complete, nil); err != nil {
		return err
	}
	// The copy is on disk before the bucket is purged, the bucket written back before
	// the copy goes: a power cut loses neither.
	if err := stream.Durable(ctx, js, "KV_"+tmp.Bucket()); err != nil {
		return err
	}
	if err := st.Purge(ctx); err != nil {
		return err
	}
	if err := putAll(ctx, js, name, entries, left); err != nil {
		return err
	}
	if err := stream.Durable(ctx, js, "KV_"+name); err != nil {
		return err
	}
	return js.DeleteKeyValue(ctx, tmp.Bucket())
}

// finishRewrite finishes a rewrite of kv that died: from its complete copy, or, when
// the copy is not complete (so the stream was not purged yet), by dropping the copy.
func finishRewrite(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, st jetstream.Stream) error {
	tmp, err := js.KeyValue(ctx, kv.Bucket()+rewriting)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := tmp.Get(ctx, complete); err == nil {
		copied, err := current(ctx, tmp)
		if err != nil {
			return err
		}
		entries := copied.entries // their ages start again: the copy has its own
		delete(entries, complete)
		if err := st.Purge(ctx); err != nil {
			return err
		}
		if err := putAll(ctx, js, kv.Bucket(), entries, nil); err != nil {
			return err
		}
		if err := stream.Durable(ctx, js, "KV_"+kv.Bucket()); err != nil {
			return err
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return err
	}
	return js.DeleteKeyValue(ctx, tmp.Bucket())
}

// putAll writes entries into bucket, pipelined, and waits for every acknowledgement;
// with ttl, each with the TTL it gives the key.
func putAll(ctx context.Context, js jetstream.JetStream, bucket string, entries map[string][]byte, ttl func(key string) time.Duration) error {
	keys := slices.Sorted(maps.Keys(entries))
	acks := make([]jetstream.PubAckFuture, 0, 1024)
	wait := func() error {
		for _, a := range acks {
			select {
			case <-a.Ok():
			case err := <-a.Err():
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		acks = acks[:0]
		return nil
	}
	for _, k := range keys {
		msg := &nats.Msg{Subject: "$KV." + bucket + "." + k, Data: entries[k]}
		if ttl != nil {
			msg.Header = nats.Header{jetstream.MsgTTLHeader: []string{strconv.FormatInt(int64(ttl(k)/time.Second), 10) + "s"}}
		}
		a, err := js.PublishMsgAsync(msg)
		if err != nil {
			return err
		}
		if acks = append(acks, a); len(acks) == cap(acks) {
			if err := wait(); err != nil {
				return err
			}
		}
	}
	return wait()
}

// each calls fn with every message of stream name on filter ("" every subject) after
// sequence from, up to the last one stored when it starts, in order (stream.Scan), and
// returns that last sequence.
func each(ctx context.Context, js jetstream.JetStream, name, filter string, from uint64, fn func(jetstream.Msg) error) (uint64, error) {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	last := info.State.LastSeq
	if last <= from {
		return last, nil
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if from > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from+1
	}
	if filter != "" {
		cfg.FilterSubjects = []string{filter}
	}
	return last, stream.Scan(ctx, st, cfg, func(m jetstream.Msg) error {
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		if md.Sequence.Stream > last {
			return nil // stored since it began (a copy this run wrote)
		}
		return fn(m)
	})
}
