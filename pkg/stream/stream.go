// Package stream declares Exacto's JetStream topology in one place: the streams, the
// key-value buckets and the subjects every service uses. Start-up creates or updates
// them from here, so they never drift between services.
package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/telemetry"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Stream and bucket names (the contract's).
const (
	Events   = "EXACTO_EVENTS"
	DLQ      = "EXACTO_DLQ"
	Outcomes = "EXACTO_OUTCOMES"
	// Replays holds the events an operator sends back to one consumer from the DLQ
	// (`exacto dlq replay`), on replay.<consumer>.<tenant>.<provider>.<type>: the
	// history in EXACTO_EVENTS stays as it happened.
	Replays = "EXACTO_REPLAYS"
	// EventIndex maps every stored envelope id to its stream sequence, for DedupTTL:
	// the gateway answers late redeliveries (past the duplicate window) from it.
	EventIndex = "EXACTO_EVENT_INDEX"
	// Arrivals counts the duplicate deliveries of each envelope id.
	Arrivals = "EXACTO_ARRIVALS"
	// Guards holds each consumer's effect-once record per event (pkg/guard).
	Guards = "EXACTO_GUARDS"
	// ContactLocks serialises each consumer's work on one contact across replicas.
	ContactLocks = "EXACTO_CONTACT_LOCKS"
	// ConsumerCheckpoints holds each consumer's ack floor on one embedded node, where
	// the server keeps the consumers' own state in memory (pkg/consumer). Synced: a
	// lost checkpoint would make a consumer deliver the whole history again.
	ConsumerCheckpoints = "EXACTO_CONSUMER_CHECKPOINTS"
	// Confirmations keeps what the source said of each unsigned event (pkg/confirm).
	Confirmations = "EXACTO_CONFIRMATIONS"
	// RateLimits holds each platform account's recent calls, so every process paces
	// that account as one (pkg/ratelimit).
	RateLimits = "EXACTO_RATE_LIMITS"
	// Suppression is the tenant-wide do-not-contact list (pkg/suppression).
	Suppression = "EXACTO_SUPPRESSION"
	// ContactIDs is each contact's internal ids and every external id (pkg/contacts).
	ContactIDs = "EXACTO_CONTACT_IDS"
	// DLQActions records every replay and discard of a dead letter: who, why, when.
	DLQActions = "EXACTO_DLQ_ACTIONS"
	// Diffs is the reconciler's diff queue: each finding, where, and the repair.
	Diffs = "EXACTO_DIFFS"
	// Quarantine keeps every verified delivery the gateway could not turn into events
	// (pkg/quarantine), one message each on quarantine.<tenant>.<endpoint>.<id>.
	Quarantine = "EXACTO_QUARANTINE"
	// Rejected is a bounded log of the deliveries the gateway refused (Rejection):
	// what a user pointing a provider at Exacto needs to see why it is refused.
	Rejected = "EXACTO_REJECTED"
	// QuarantineActions records every replay of a quarantined delivery: who, why, when,
	// what it stored.
	QuarantineActions = "EXACTO_QUARANTINE_ACTIONS"
	// Privacy holds the deployment's key for hashing people's identities and the
	// erasures made with it (pkg/privacy): who was forgotten, by a keyed hash only, by
	// whom and why. Synced: a lost erasure would let a forgotten person's next event in.
	Privacy = "EXACTO_PRIVACY"
	// ProjectionPrefix starts the projections' buckets (pkg/projection):
	// EXACTO_PROJ_CONTACTS, _CAMPAIGNS, _SUPPRESSION live; a replay's go into
	// EXACTO_PROJ_<PROJECTION>_<NAME>.
	ProjectionPrefix = "EXACTO_PROJ_"
)

// Durable consumer names.
const (
	// IndexConsumer is the gateway's consumer that writes EventIndex from the stream.
	IndexConsumer = "gateway-index"
)

// Options sizes the topology.
type Options struct {
	DuplicateWindow time.Duration
	Replicas        int
	DedupTTL        time.Duration
	// Embedded: the server runs in this process (exacto up), so it never stops
	// without the process, and every recovery of a derived store runs on each start.
	// Only then are the derived stores persisted asynchronously: an external server
	// that crashed alone would lose their last writes while the processes that could
	// rebuild them go on.
	Embedded bool
	// SelfSync: the embedding process syncs the durable stores itself (pkg/broker's
	// Conn.SelfSynced); EXACTO_EVENTS is marked so (durable.go). Only an embedded
	// server's Ensure sets or clears the mark; another keeps it.
	SelfSync bool
}

// Derived are the stores written from EXACTO_EVENTS that need no fsync of their own
// (docs/durability.md): on one embedded node (R1, file storage) they are persisted
// asynchronously (nats-server's per-stream persist_mode async), so a write costs no
// fsync, while EXACTO_EVENTS and the stores an operator's action or an effect's record
// lives in stay synced. What a power cut may take from each:
//   - Outcomes: status lines of the event page; the guard record stays the truth.
//   - ContactLocks: leases, which every holder lost with the power anyway.
//   - Arrivals: duplicate delivery counters.
//   - Guards: an effect-once record; the event is then tried again, and every handler
//     looks at the platform before it writes (its effect is keyed there), so the
//     repetition makes no second effect.
//   - EventIndex: the index writer re-indexes from the stream on start (Indexer).
//   - ContactIDs and the live projections: the projector applies again, from the
//     stream, what followed its last checkpoint (services/projector).
//   - Rejected: the log of refused deliveries, a help to whoever sets up a provider.
//   - Confirmations: what a source said of an unsigned event; it is asked again.
//
// In a cluster (replicas above 1) nats-server refuses async persist: there the Raft
// log already shares one append among many writes.
var Derived = []string{Outcomes, "KV_" + ContactLocks, "KV_" + Arrivals, "KV_" + Guards, "KV_" + EventIndex,
	"KV_" + ContactIDs, "KV_" + ProjectionPrefix + "CONTACTS", "KV_" + ProjectionPrefix + "CAMPAIGNS", "KV_" + ProjectionPrefix + "SUPPRESSION", Rejected, "KV_" + Confirmations}

// confirmationStorage is where the confirmations bucket, a day of verdicts, is kept. In
// memory it sits in the heap of whoever runs the server: on one embedded node that is
// Exacto's own process, growing with a day's volume (about 800 bytes a reply), so there
// it is a file store persisted asynchronously (Derived). On a server Exacto does not
// embed (a cluster, where async persist is refused, or one node of the operator's) the
// memory is that server's operator's: memory, no disk write.
func (o Options) confirmationStorage() jetstream.StorageType {
	if o.Embedded && o.Replicas <= 1 {
		return jetstream.FileStorage
	}
	return jetstream.MemoryStorage
}

// persistMode is how the stream named name persists under o.
func (o Options) persistMode(name string) jetstream.PersistModeType {
	if o.Embedded && o.Replicas <= 1 && slices.Contains(Derived, name) {
		return jetstream.AsyncPersistMode
	}
	return jetstream.DefaultPersistMode
}

// EventSubject is where an event of tenant, provider and canonical type is stored.
func EventSubject(tenant, provider, typ string) string {
	return "events." + tenant + "." + provider + "." + typ
}

// EventFilter is the subject filter taking the events of tenant, provider and canonical
// type, each "" for any; a part that is no name (a space, a wildcard, an edge dot) is
// refused, named as "tenant", "provider" or "type".
func EventFilter(tenant, provider, typ string) (string, error) {
	parts := []struct{ name, v, any string }{{"tenant", tenant, "*"}, {"provider", provider, "*"}, {"type", typ, ">"}}
	filter := "events"
	for _, p := range parts {
		if strings.ContainsAny(p.v, " *>\t") || strings.HasPrefix(p.v, ".") || strings.HasSuffix(p.v, ".") {
			return "", fmt.Errorf("%s %q: a name, without spaces, wildcards or edge dots", p.name, p.v)
		}
		if p.v == "" {
			p.v = p.any
		}
		filter += "." + p.v
	}
	return filter, nil
}

// halfBlocks is a per-subject limit no stream reaches. Set on a stream without other
// limits, it makes nats-server (2.15, stream.go autoTuneFileStorageBlockSize) size the
// stream's blocks at 4 MiB, as a bucket's, instead of 8: the server holds a block whole
// in memory while it is written and while a consumer reads it, so a stream written and
// read at several places at once costs half as much memory.
const halfBlocks = math.MaxInt64

// Streams returns the stream declarations.
func Streams(o Options) []jetstream.StreamConfig {
	return []jetstream.StreamConfig{
		{
			Name:        Events,
			Description: "every verified provider event, append-only; Nats-Msg-Id = envelope id",
			Subjects:    []string{"events.>"},
			Storage:     jetstream.FileStorage,
			Retention:   jetstream.LimitsPolicy,
			Duplicates:  o.DuplicateWindow,
			Replicas:    o.Replicas,
			Discard:     jetstream.DiscardOld,
			// The gateway's group commit stores concurrent webhooks' events as one
			// atomic batch: one fsync for all of them.
			AllowAtomicPublish: true,
			MaxMsgsPerSubject:  halfBlocks,
		},
		{
			Name:        DLQ,
			Description: "dead letters: event, consumer, error, class, attempts, owner",
			Subjects:    []string{"dlq.>"},
			Storage:     jetstream.FileStorage,
			Duplicates:  o.DuplicateWindow,
			Replicas:    o.Replicas,
		},
		{
			Name:        Replays,
			Description: "dead letters sent back to one consumer by an operator",
			Subjects:    []string{"replay.>"},
			Storage:     jetstream.FileStorage,
			Duplicates:  o.DuplicateWindow,
			Replicas:    o.Replicas,
		},
		{
			Name:              Outcomes,
			Description:       "what each consumer did with each event",
			Subjects:          []string{"outcomes.>"},
			Storage:           jetstream.FileStorage,
			MaxMsgsPerSubject: halfBlocks,
			Duplicates:        o.DuplicateWindow,
			Replicas:          o.Replicas,
		},
		{
			Name:        Rejected,
			Description: "the deliveries the gateway refused: when, which endpoint, the answer and why (never a secret)",
			Subjects:    []string{RejectedSubject},
			Storage:     jetstream.FileStorage,
			Replicas:    o.Replicas,
			Discard:     jetstream.DiscardOld,
			MaxMsgs:     RejectedKept,
			MaxAge:      7 * 24 * time.Hour,
		},
		{
			// No MaxAge: a quarantined delivery stays until an operator purges it.
			Name:        Quarantine,
			Description: "verified deliveries the gateway could not turn into events; Nats-Msg-Id = quarantine id",
			Subjects:    []string{"quarantine.>"},
			Storage:     jetstream.FileStorage,
			Duplicates:  o.DuplicateWindow,
			Replicas:    o.Replicas,
		},
	}
}

// Buckets returns the key-value bucket declarations.
func Buckets(o Options) []jetstream.KeyValueConfig {
	return []jetstream.KeyValueConfig{
		{Bucket: EventIndex, Description: "envelope id -> stream sequence, for late duplicates", TTL: o.DedupTTL, Storage: jetstream.FileStorage, Replicas: o.Replicas},
		{Bucket: Arrivals, Description: "envelope id -> duplicate deliveries seen", TTL: o.DedupTTL, Storage: jetstream.FileStorage, Replicas: o.Replicas},
		// No TTL: a guard must not forget an effect while the stream holds its event (a
		// consumer created again from the stream's start would make it twice).
		{Bucket: Guards, Description: "consumer.event id -> effect-once record", Storage: jetstream.FileStorage, Replicas: o.Replicas},
		// No TTL: a suppression does not expire.
		{Bucket: Suppression, Description: "tenant.contact -> why and since when it is suppressed", Storage: jetstream.FileStorage, Replicas: o.Replicas},
		// No TTL: an erasure outlives everything (pkg/privacy).
		{Bucket: Privacy, Description: "hash key; tenant.keyed hash -> a forgotten person; erasures: who, why, when", Storage: jetstream.FileStorage, Replicas: o.Replicas},
		// No TTL: audit records and findings stay until an operator removes them.
		{Bucket: DLQActions, Description: "consumer.event id -> replays and discards of its dead letter", Storage: jetstream.FileStorage, Replicas: o.Replicas},
		{Bucket: Diffs, Description: "tenant.finding id -> a reconciliation finding and its repair", Storage: jetstream.FileStorage, Replicas: o.Replicas},
		{Bucket: QuarantineActions, Description: "quarantine id.time -> one replay of a quarantined delivery", Storage: jetstream.FileStorage, Replicas: o.Replicas},
		// No TTL: a contact's ids are its identity.
		{Bucket: ContactIDs, Description: "tenant identity keys -> contact id; contact id -> internal and external ids", Storage: jetstream.FileStorage, Replicas: o.Replicas},
		// The live projections: rebuilt from the stream by a replay, so they never expire.
		ProjectionBucket("contacts", "", o.Replicas),
		ProjectionBucket("campaigns", "", o.Replicas),
		ProjectionBucket("suppression", "", o.Replicas),
		// Locks are leases; the TTL only sweeps the ones a dead worker left behind.
		{Bucket: ContactLocks, Description: "consumer.tenant.contact -> lease of the worker handling it", TTL: time.Hour, Storage: jetstream.FileStorage, Replicas: o.Replicas},
		{Bucket: ConsumerCheckpoints, Description: "consumer -> its ack floor on EXACTO_EVENTS, when the server keeps its state in memory", Storage: jetstream.FileStorage, Replicas: o.Replicas},
		// A lost verdict costs one more question to the source, never an effect (the
		// source is asked again); a day outlives any consumer's retries.
		{Bucket: Confirmations, Description: "tenant.event id -> what the source said of an unsigned event (pkg/confirm)", TTL: 24 * time.Hour, Storage: o.confirmationStorage(), Replicas: o.Replicas},
		// Memory: pacing state is worth no fsync; lost, it costs one window of the
		// platform's own 429s. The TTL sweeps accounts idle for longer than any window.
		{Bucket: RateLimits, Description: "platform.account -> recent calls and hold (pkg/ratelimit)", TTL: 2 * time.Hour, Storage: jetstream.MemoryStorage, Replicas: o.Replicas},
	}
}

// IndexConsumerConfig is the gateway's index writer: headers only, since it needs just
// the Nats-Msg-Id and the sequence.
func IndexConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       IndexConsumer,
		Description:   "writes " + EventIndex + " from " + Events,
		FilterSubject: "events.>",
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		HeadersOnly:   true,
		AckWait:       30 * time.Second,
		MaxAckPending: 10000,
	}
}

// Subscription is one consumer service's durable consumer over EXACTO_EVENTS: what it
// reads and how its deliveries are paced. Every replica of the service shares it.
type Subscription struct {
	Durable  string
	Subjects []string // filter subjects
	// Stream is the stream consumed (Events when empty); Service the consumer service
	// it belongs to (Durable when empty): its guards, outcomes and dead letters are the
	// service's, whichever of its subscriptions delivered the event.
	Stream  string
	Service string
	// AckWait bounds one attempt; it is also the guard's lease, so a worker that dies
	// mid-effect is resumed by another after it.
	AckWait time.Duration
	// MaxDeliver is how many attempts a transiently failing event gets before it is
	// dead-lettered. JetStream itself redelivers without limit: the consumer decides,
	// so an event is never left undelivered and unrecorded.
	MaxDeliver    int
	BackoffBase   time.Duration // first redelivery delay, doubled per attempt, with jitter
	BackoffMax    time.Duration
	MaxAckPending int
	// Workers is how many of its events each process handles at once, unless the
	// config says (consumers.<name>.workers). A service whose attempt is a chain of
	// calls to outside platforms needs as many as it has stops a second to make times
	// each chain's time (a real platform answers in tens to hundreds of milliseconds,
	// and its documented rate, pkg/ratelimit, paces them, not the number of workers);
	// one that works in memory needs about two a core.
	Workers int
	// Urgent: its effect keeps a person from being e-mailed again (a stopped sequence,
	// a suppression), so while it is behind the process's other consumers defer to it
	// (consumer.Precedence).
	Urgent bool
	// Idempotent: the service's effect is the same however often and in whatever order
	// it is made — a commutative merge (the projector), a derived event with a fixed id
	// (the classifier) — so an attempt claims nothing (no contact lease, no guard record
	// before it) and only what is not plain success is recorded: a failure, a dead
	// letter, a success after either. Its other events are completed once its
	// consumer's ack floor has passed them (consumer.Status).
	Idempotent bool
	// Forgotten: the service takes the events an erasure or the retention made
	// (pkg/privacy: about a forgotten person, or stored again in place of an original)
	// — the projector counts them. Every other service leaves them alone: nothing of
	// a forgotten person is left to act on, nobody may act on them, and a rewritten
	// event was acted on as it first was.
	Forgotten bool
}

// Consumer service names, which are also their durable consumers' names.
const (
	Classifier = "classifier"
	Stopper    = "stopper"
	CRMWriter  = "crmwriter"
	Suppressor = "suppressor"
	Projector  = "projector"
	// Reconciler is the scheduled comparison with the platforms (no durable consumer).
	Reconciler = "reconciler"
)

// subjects of the given canonical types, from every tenant and provider.
func subjects(types ...string) []string {
	out := make([]string, len(types))
	for i, t := range types {
		out[i] = "events.*.*." + t
	}
	return out
}

// Subscriptions is every consumer service's subscription: who consumes what, with
// which ack wait, attempts and backoff. Derived events (reply.classified,
// sequence.stopped) are published by the services onto the same stream.
var Subscriptions = []Subscription{
	// Ten attempts: an unsigned reply is asked of its source for a minute or so
	// (pkg/confirm) before the classifier concludes it unconfirmed.
	{Durable: Classifier, Subjects: subjects("reply.received", "message.received"),
		AckWait: 30 * time.Second, MaxDeliver: 10, BackoffBase: time.Second, BackoffMax: time.Minute, MaxAckPending: 1000, Workers: 4, Idempotent: true},
	// The stopper acts on any reply without waiting for its classification: a safety
	// rule, so it must keep up even when the classifier is down. The classification
	// only raises the lead's label at the platform afterwards.
	{Durable: Stopper, Subjects: subjects("reply.received", "message.received", "lead.unsubscribed", "email.bounced", "email.complained", "reply.classified"),
		AckWait: 30 * time.Second, MaxDeliver: 10, BackoffBase: time.Second, BackoffMax: 5 * time.Minute, MaxAckPending: 1000, Workers: 32, Urgent: true},
	// The crmwriter also reads HubSpot's own contact events, to ask HubSpot who an
	// id-only contact is (contact.identified).
	{Durable: CRMWriter, Subjects: append(subjects("reply.received", "reply.classified", "meeting.booked", "opportunity.created"),
		"events.*.hubspot.contact.updated", "events.*.hubspot.lead.status_changed", "events.*.hubspot.lead.unsubscribed"),
		AckWait: 60 * time.Second, MaxDeliver: 10, BackoffBase: 2 * time.Second, BackoffMax: 10 * time.Minute, MaxAckPending: 500, Workers: 8},
	{Durable: Suppressor, Subjects: subjects("lead.unsubscribed", "email.bounced", "email.complained", "reply.classified"),
		AckWait: 30 * time.Second, MaxDeliver: 10, BackoffBase: time.Second, BackoffMax: 5 * time.Minute, MaxAckPending: 1000, Workers: 8, Urgent: true},
	{Durable: Projector, Subjects: []string{"events.>"},
		AckWait: 30 * time.Second, MaxDeliver: 20, BackoffBase: 500 * time.Millisecond, BackoffMax: time.Minute, MaxAckPending: 5000, Workers: 4, Idempotent: true, Forgotten: true},
}

// SubscriptionOf finds a service's subscription by name.
func SubscriptionOf(name string) (Subscription, bool) {
	for _, s := range Subscriptions {
		if s.Durable == name {
			return s, true
		}
	}
	return Subscription{}, false
}

// Name is the consumer service s belongs to.
func (s Subscription) Name() string {
	if s.Service != "" {
		return s.Service
	}
	return s.Durable
}

// StreamName is the stream s consumes.
func (s Subscription) StreamName() string {
	if s.Stream != "" {
		return s.Stream
	}
	return Events
}

// Replays is the subscription of s's service to what an operator sends it back from
// the DLQ (EXACTO_REPLAYS): the same pacing, its own durable.
func (s Subscription) Replays() Subscription {
	r := s
	r.Service, r.Stream = s.Name(), Replays
	r.Durable = s.Name() + "_replays"
	r.Subjects = []string{"replay." + s.Name() + ".>"}
	return r
}

// Takes reports whether s's filter subjects match subject (NATS wildcards: "*" one
// token, ">" the rest).
func (s Subscription) Takes(subject string) bool {
	for _, f := range s.Subjects {
		if subjectMatches(f, subject) {
			return true
		}
	}
	return false
}

func subjectMatches(filter, subject string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, f := range ft {
		switch {
		case f == ">":
			return len(st) > i
		case i >= len(st):
			return false
		case f != "*" && f != st[i]:
			return false
		}
	}
	return len(ft) == len(st)
}

// ConsumerConfig is the JetStream consumer of s.
func (s Subscription) ConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:        s.Durable,
		Description:    "exacto " + s.Durable,
		FilterSubjects: s.Subjects,
		AckPolicy:      jetstream.AckExplicitPolicy,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckWait:        s.AckWait,
		MaxDeliver:     -1,
		MaxAckPending:  s.MaxAckPending,
	}
}

// DLQSubject is where a dead letter of consumer is stored.
func DLQSubject(consumer, tenant, provider, typ string) string {
	return "dlq." + consumer + "." + tenant + "." + provider + "." + typ
}

// OutcomeSubject is where consumer reports what it did with an event.
func OutcomeSubject(consumer, tenant, provider, typ string) string {
	return "outcomes." + consumer + "." + tenant + "." + provider + "." + typ
}

// QuarantineSubject is where the quarantined delivery id of tenant's endpoint is kept.
func QuarantineSubject(tenant, endpoint, id string) string {
	return "quarantine." + tenant + "." + endpoint + "." + id
}

// Ensure creates or updates every stream and bucket.
func Ensure(ctx context.Context, js jetstream.JetStream, o Options) error {
	for _, cfg := range Streams(o) {
		cfg.PersistMode = o.persistMode(cfg.Name)
		if cfg.Name == Events && o.Embedded && o.SelfSync {
			cfg.Metadata = map[string]string{SyncMetadata: SyncByProcess}
		}
		if s, err := js.Stream(ctx, cfg.Name); err == nil {
			// The server cannot change a stream's persist mode: it keeps the one it
			// was made with (a stream of an earlier version stays synced).
			cfg.PersistMode = s.CachedInfo().Config.PersistMode
			if err := keepsWhatMustLast(cfg.Name, cfg.PersistMode); err != nil {
				return err
			}
			if mark, ok := s.CachedInfo().Config.Metadata[SyncMetadata]; ok && !o.Embedded {
				cfg.Metadata = map[string]string{SyncMetadata: mark} // not this process's to change
			}
		}
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("stream %s: %w", cfg.Name, err)
		}
	}
	for _, cfg := range Buckets(o) {
		// The confirmations an earlier version kept in this process's heap move to
		// their file store (a cache: what it held is asked again). Only the server's
		// own process moves them; a part bound to it keeps what it finds.
		if cfg.Bucket == Confirmations && o.Embedded {
			if err := remakeIfStoredElsewhere(ctx, js, cfg); err != nil {
				return fmt.Errorf("bucket %s: %w", cfg.Bucket, err)
			}
		}
		if err := ensureBucket(ctx, js, cfg, o.persistMode("KV_"+cfg.Bucket)); err != nil {
			return fmt.Errorf("bucket %s: %w", cfg.Bucket, err)
		}
	}
	return nil
}

// keepsWhatMustLast refuses a store that is not derived but was made persisted
// asynchronously (by a development version): its writes may sit in memory after their
// acknowledgement, where no fsync of its files reaches them, and the server cannot
// change a persist mode. Starting on it would answer for writes a power cut can take.
func keepsWhatMustLast(name string, mode jetstream.PersistModeType) error {
	if mode != jetstream.AsyncPersistMode || slices.Contains(Derived, name) {
		return nil
	}
	return fmt.Errorf("stream %s is persisted asynchronously, but what it holds must be on disk before it is acknowledged, "+
		"and a persist mode cannot be changed: move its data out (nats stream backup %s), delete the stream, start Exacto to make it again, and restore what it held",
		name, name)
}

// remakeIfStoredElsewhere deletes the stream of bucket cfg if it exists in another
// storage than cfg's, for ensureBucket to make it again.
func remakeIfStoredElsewhere(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) error {
	s, err := js.Stream(ctx, "KV_"+cfg.Bucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if s.CachedInfo().Config.Storage == cfg.Storage {
		return nil
	}
	return js.DeleteStream(ctx, "KV_"+cfg.Bucket)
}

// ensureBucket creates the stream of bucket cfg with persist mode, as nats.go makes a
// bucket's stream (a bucket's config has no persist mode, and the server cannot change
// it later). A bucket that exists keeps its mode — one made by an earlier version stays
// synced, one made asynchronous by `exacto up` stays so when a part alone connects to
// that server — and its description, TTL and replicas follow cfg.
func ensureBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, mode jetstream.PersistModeType) error {
	name := "KV_" + cfg.Bucket
	s, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		dup := 2 * time.Minute
		if cfg.TTL > 0 && cfg.TTL < dup {
			dup = cfg.TTL
		}
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name: name, Description: cfg.Description, Subjects: []string{"$KV." + cfg.Bucket + ".>"},
			MaxMsgsPerSubject: 1, MaxBytes: -1, MaxAge: cfg.TTL, MaxMsgSize: -1, Storage: cfg.Storage,
			Replicas: max(cfg.Replicas, 1), AllowRollup: true, DenyDelete: true, Duplicates: dup,
			MaxMsgs: -1, MaxConsumers: -1, AllowDirect: true, Discard: jetstream.DiscardNew, PersistMode: mode,
			// Entries that expire may carry a TTL of their own: an erasure that writes
			// the bucket anew (pkg/privacy) keeps what was left of each one's age.
			AllowMsgTTL: cfg.TTL > 0,
		})
		return err
	}
	if err != nil {
		return err
	}
	sc := s.CachedInfo().Config
	if err := keepsWhatMustLast(name, sc.PersistMode); err != nil {
		return err
	}
	dup := sc.Duplicates
	if cfg.TTL > 0 && cfg.TTL < dup {
		dup = cfg.TTL // the server refuses a duplicate window longer than the age
	}
	replicas := max(cfg.Replicas, 1)
	if sc.Description == cfg.Description && sc.MaxAge == cfg.TTL && sc.Duplicates == dup && sc.Replicas == replicas {
		return nil
	}
	sc.Description, sc.MaxAge, sc.Duplicates, sc.Replicas = cfg.Description, cfg.TTL, dup, replicas
	_, err = js.UpdateStream(ctx, sc)
	return err
}

// EventMessage is the message that stores env on EXACTO_EVENTS: on its subject, with
// Nats-Msg-Id = envelope id (the stream's dedup) and ctx's trace context. The gateway
// and the workers that publish derived events both build it here.
func EventMessage(ctx context.Context, env envelope.Envelope) (*nats.Msg, error) {
	data, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	msg := &nats.Msg{Subject: env.StreamSubject(), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, env.ID)
	msg.Header.Set("Content-Type", "application/cloudevents+json")
	telemetry.Inject(ctx, msg.Header)
	return msg, nil
}

// Stored reports whether the index of stored events (EventIndex) holds id.
func Stored(ctx context.Context, index jetstream.KeyValue, id string) (bool, error) {
	_, err := index.Get(ctx, id)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return false, nil
	}
	return false, fmt.Errorf("index lookup: %w", err)
}

// Load reads the stored event id through the index of stored events; found is false
// when the index does not hold it (never stored, or older than the index's TTL) or the
// event is gone (removed by the retention, pkg/privacy).
func Load(ctx context.Context, js jetstream.JetStream, id string) (env envelope.Envelope, found bool, err error) {
	index, err := js.KeyValue(ctx, EventIndex)
	if err != nil {
		return env, false, err
	}
	e, err := index.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return env, false, nil
	}
	if err != nil {
		return env, false, fmt.Errorf("index lookup: %w", err)
	}
	var seq uint64
	if _, err := fmt.Sscan(string(e.Value()), &seq); err != nil {
		return env, false, fmt.Errorf("index entry of %s: %w", id, err)
	}
	st, err := js.Stream(ctx, Events)
	if err != nil {
		return env, false, err
	}
	m, err := st.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return env, false, nil
	}
	if err != nil {
		return env, false, fmt.Errorf("event %s at sequence %d: %w", id, seq, err)
	}
	if err := json.Unmarshal(m.Data, &env); err != nil {
		return env, false, fmt.Errorf("event %s: %w", id, err)
	}
	return env, true, nil
}

// Scan calls fn with every message of st that an ordered consumer of cfg delivers, in
// stream order, and returns once it has seen every message stored when it began.
func Scan(ctx context.Context, st jetstream.Stream, cfg jetstream.OrderedConsumerConfig, fn func(jetstream.Msg) error) error {
	info, err := st.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.Msgs == 0 {
		return nil
	}
	c, err := st.OrderedConsumer(ctx, cfg)
	if err != nil {
		return err
	}
	for {
		ci, err := c.Info(ctx)
		if err != nil {
			return err
		}
		if ci.NumPending == 0 {
			return nil
		}
		batch, err := c.FetchNoWait(200)
		if err != nil {
			return err
		}
		for msg := range batch.Messages() {
			if err := fn(msg); err != nil {
				return err
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return err
		}
	}
}

// ProjectionBucket declares the bucket of projection name: the live one (into "") or a
// replay's (into NAME).
func ProjectionBucket(name, into string, replicas int) jetstream.KeyValueConfig {
	bucket := ProjectionPrefix + strings.ToUpper(name)
	desc := "live projection " + name
	if into != "" {
		bucket += "_" + strings.ToUpper(into)
		desc = "projection " + name + " rebuilt into " + into
	}
	return jetstream.KeyValueConfig{Bucket: bucket, Description: desc, Storage: jetstream.FileStorage, Replicas: replicas}
}

// ReplaySubject is where an operator's replay of an event to consumer is stored.
func ReplaySubject(consumer, tenant, provider, typ string) string {
	return "replay." + consumer + "." + tenant + "." + provider + "." + typ
}

// Checkpoint is durable's ack floor as ConsumerCheckpoints (kv) keeps it (0: none): on
// one embedded node, where the server keeps consumers' state in memory, what a consumer
// not bound again since a restart has handled.
func Checkpoint(ctx context.Context, kv jetstream.KeyValue, durable string) (uint64, error) {
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
