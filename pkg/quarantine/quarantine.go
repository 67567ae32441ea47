// Package quarantine keeps every verified delivery the gateway could not turn into
// events — a body over gateway.body_limit, more events than gateway.max_events, a
// payload its provider's normaliser refuses, a delivery with no event — so that none is
// lost: after an upgrade (a fixed parser, a raised limit) an operator replays it through
// the current normaliser into the events it holds.
//
// Each kept delivery is one message of EXACTO_QUARANTINE on
// quarantine.<tenant>.<endpoint>.<id>: its data is the body byte for byte (a secret the
// provider carries in the body redacted, as in stored events), and its header
// Exacto-Quarantine holds the Record as JSON, so a listing reads headers only. The id
// is derived from the tenant, the endpoint and the body's SHA-256, and is the message's
// Nats-Msg-Id: a provider's retries of one refused delivery are kept once. Nothing that
// authenticates a delivery is kept: not the path token, not a signature, not a secret
// header, not a secret in another header's value. A body that would not fit the
// server's max_payload beside its record is cut to what fits, marked cut, and cannot be
// replayed.
//
// A replay runs the endpoint's provider as the config configures it now, under the
// config's gateway limits now, over the kept body and headers (never verifying again:
// the signature was verified on receipt and is not kept), builds the envelopes as the
// gateway does (ingest: the same deterministic ids) and stores them through the same
// path (index of stored ids, Nats-Msg-Id). Replaying twice stores the events once.
// Every replay is recorded in EXACTO_QUARANTINE_ACTIONS with who, why, when and what it
// stored; a replay that is still refused records nothing and changes nothing.
package quarantine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/dlq"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/ingest"
	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/stream"
)

// RecordHeader carries a kept delivery's Record, as JSON, on its message.
const RecordHeader = "Exacto-Quarantine"

// Statuses of a kept delivery.
const (
	Open     = "open"
	Replayed = "replayed"
)

// Record is what is kept of a refused delivery besides its body.
type Record struct {
	ID         string    `json:"id"`
	Tenant     string    `json:"tenant"`
	Endpoint   string    `json:"endpoint"`
	Provider   string    `json:"provider"`
	Reason     string    `json:"reason"` // an ingest reason: body_too_large, too_many_events, malformed_body, empty_batch
	Error      string    `json:"error"`
	ReceivedAt time.Time `json:"received_at"`
	// How the delivery was verified: the envelope's authmethod, and whether its
	// scheme signs the body.
	AuthMethod string `json:"auth_method"`
	Signed     bool   `json:"signed"`
	Method     string `json:"method"`
	Path       string `json:"path"` // the path token redacted; the query is not kept
	// Header is the request's headers without any that carries a credential, a
	// signature or the endpoint's secret, and with the endpoint's path token and
	// secrets redacted wherever else they appear; Removed names those left out.
	Header  http.Header `json:"header"`
	Removed []string    `json:"removed_headers,omitempty"`
	// Size and SHA256 are of the body as received; Cut says the kept body is only
	// its first bytes.
	Size   int    `json:"size"`
	SHA256 string `json:"sha256"`
	Cut    bool   `json:"cut"`
}

// Entry is one kept delivery and what operators did with it.
type Entry struct {
	Record
	Kept    int      `json:"kept_bytes"` // bytes of the body kept
	Status  string   `json:"status"`
	Actions []Action `json:"actions,omitempty"`
	Body    []byte   `json:"-"` // nil in a listing
}

// Action is one replay of a kept delivery.
type Action struct {
	By         string    `json:"by"`
	Why        string    `json:"why"`
	At         time.Time `json:"at"`
	Stored     int       `json:"stored"`
	Duplicates int       `json:"duplicates"` // events already stored
	IDs        []string  `json:"ids"`
}

// ID is the id of a delivery to tenant's endpoint whose body has SHA-256 bodySHA256
// (hex): "qr_" and 32 hex digits.
func ID(tenant, endpoint, bodySHA256 string) string {
	h := sha256.New()
	for _, part := range []string{tenant, endpoint, bodySHA256} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return "qr_" + hex.EncodeToString(h.Sum(nil)[:16])
}

var idPattern = regexp.MustCompile(`^qr_[0-9a-f]{32}$`)

// credentialWords mark a header as carrying a credential whatever the provider: its
// name containing one is never kept.
var credentialWords = []string{"authorization", "cookie", "signature", "secret", "token", "password", "api-key", "apikey"}

// NewRecord is what the quarantine keeps of d, refused for why, and the body it keeps
// (the provider's body secret redacted).
func NewRecord(d ingest.Delivery, why *ingest.Refusal) (Record, []byte) {
	ep := d.Endpoint
	scrub := func(v string) string {
		for _, c := range ep.Credentials {
			v = strings.ReplaceAll(v, c, "REDACTED")
		}
		return v
	}
	rec := Record{
		ID: ID(ep.Tenant, ep.ID, d.SHA256), Tenant: ep.Tenant, Endpoint: ep.ID, Provider: ep.Spec.Name,
		Reason: why.Reason, Error: scrub(why.Message), ReceivedAt: d.Request.Now.UTC(),
		AuthMethod: ep.AuthMethod, Signed: ep.Spec.Signed,
		Method: d.Request.Method, Path: "/hooks/" + ep.ID + "/REDACTED",
		Header: http.Header{}, Size: d.Size, SHA256: d.SHA256,
	}
	for name, vs := range d.Request.Header {
		lower := strings.ToLower(name)
		secret := slices.ContainsFunc(ep.SecretHeaders, func(h string) bool { return strings.EqualFold(h, name) }) ||
			slices.ContainsFunc(credentialWords, func(w string) bool { return strings.Contains(lower, w) })
		if secret {
			rec.Removed = append(rec.Removed, name)
			continue
		}
		for _, v := range vs {
			rec.Header[name] = append(rec.Header[name], scrub(v))
		}
	}
	slices.Sort(rec.Removed)
	return rec, ep.Spec.RedactBody(d.Request.Body)
}

// Store is the quarantine of one deployment.
type Store struct {
	js      jetstream.JetStream
	st      jetstream.Stream
	actions jetstream.KeyValue
	events  *ingest.Store
	now     func() time.Time
}

// New binds the quarantine, its actions and the event store replays write to.
func New(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	st, err := js.Stream(ctx, stream.Quarantine)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream.Quarantine, err)
	}
	actions, err := js.KeyValue(ctx, stream.QuarantineActions)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", stream.QuarantineActions, err)
	}
	events, err := ingest.OpenStore(ctx, js, nil, nil)
	if err != nil {
		return nil, err
	}
	return &Store{js: js, st: st, actions: stream.DurableKV(js, actions), events: events, now: time.Now}, nil
}

// headerRoom bounds what a kept delivery's message needs besides its record and body:
// the protocol's header framing, Nats-Msg-Id and Nats-Expected-Stream.
const headerRoom = 512

// Put keeps rec with body, once per id: it reports whether the delivery was already
// kept (a provider's retry), and returns only once the stream has acknowledged it.
func (s *Store) Put(ctx context.Context, rec Record, body []byte) (already bool, err error) {
	subject := stream.QuarantineSubject(rec.Tenant, rec.Endpoint, rec.ID)
	// The stream's duplicate window catches concurrent retries only; a provider
	// retries for hours.
	if _, err := s.st.GetLastMsgForSubject(ctx, subject); err == nil {
		// Kept already, perhaps by a request still waiting for its sync (or answered 503
		// when that failed): this answer says it is on disk.
		return true, stream.Durable(ctx, s.js, stream.Quarantine)
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, err
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return false, err
	}
	room := s.js.Conn().MaxPayload() - int64(len(data)) - headerRoom
	if room < 0 {
		return false, fmt.Errorf("quarantine %s: its record alone (%d bytes) is over the server's max_payload", rec.ID, len(data))
	}
	if int64(len(body)) > room {
		rec.Cut, body = true, body[:room]
		if data, err = json.Marshal(rec); err != nil { // shorter than before: "cut":true
			return false, err
		}
	}
	msg := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, rec.ID)
	msg.Header.Set(RecordHeader, string(data))
	ack, err := s.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(stream.Quarantine))
	if err != nil {
		return false, err
	}
	return ack.Duplicate, stream.Durable(ctx, s.js, stream.Quarantine)
}

// Filter selects kept deliveries; empty fields match everything.
type Filter struct {
	Tenant, Endpoint, Reason string
	// All includes the deliveries already replayed.
	All bool
}

var tokenPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// subject is f's filter subject; a tenant or endpoint that is not an id is an error,
// never a wider filter.
func (f Filter) subject() (string, error) {
	tok := func(name, v string) (string, error) {
		switch {
		case v == "":
			return "*", nil
		case !tokenPattern.MatchString(v):
			return "", fmt.Errorf("%s %q is not an id (a-z, 0-9 and -)", name, v)
		}
		return v, nil
	}
	tenant, err := tok("tenant", f.Tenant)
	if err != nil {
		return "", err
	}
	endpoint, err := tok("endpoint", f.Endpoint)
	if err != nil {
		return "", err
	}
	return stream.QuarantineSubject(tenant, endpoint, "*"), nil
}

// List returns the kept deliveries f selects, oldest first, without their bodies.
func (s *Store) List(ctx context.Context, f Filter) ([]Entry, error) {
	subject, err := f.subject()
	if err != nil {
		return nil, err
	}
	acts, err := s.history(ctx, ">")
	if err != nil {
		return nil, err
	}
	var out []Entry
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, HeadersOnly: true}
	err = stream.Scan(ctx, s.st, cfg, func(msg jetstream.Msg) error {
		e, err := entry(msg.Headers(), nil)
		if err != nil {
			return err
		}
		e.Kept, _ = strconv.Atoi(msg.Headers().Get("Nats-Msg-Size")) // the server says, headers only
		e.withActions(acts[e.ID])
		if (f.Reason == "" || e.Reason == f.Reason) && (f.All || e.Status == Open) {
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

// Get returns kept delivery id with its body.
func (s *Store) Get(ctx context.Context, id string) (Entry, error) {
	if !idPattern.MatchString(id) {
		return Entry{}, fmt.Errorf("%q is not a quarantine id (qr_ and 32 hex digits, as `exacto quarantine list` shows)", id)
	}
	m, err := s.st.GetLastMsgForSubject(ctx, stream.QuarantineSubject("*", "*", id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Entry{}, fmt.Errorf("no quarantined delivery %s", id)
	}
	if err != nil {
		return Entry{}, err
	}
	e, err := entry(m.Header, m.Data)
	if err != nil {
		return e, err
	}
	acts, err := s.history(ctx, id+".*")
	e.withActions(acts[id])
	return e, err
}

// entry decodes a kept delivery's message.
func entry(h nats.Header, body []byte) (Entry, error) {
	e := Entry{Body: body, Kept: len(body), Status: Open}
	if err := json.Unmarshal([]byte(h.Get(RecordHeader)), &e.Record); err != nil || e.ID == "" {
		return e, fmt.Errorf("a message of %s has no record: %v", stream.Quarantine, err)
	}
	return e, nil
}

func (e *Entry) withActions(acts []Action) {
	e.Actions = acts
	if len(acts) > 0 {
		e.Status = Replayed
	}
}

// history reads the actions whose keys match filter, by quarantine id, oldest first.
func (s *Store) history(ctx context.Context, filter string) (map[string][]Action, error) {
	w, err := s.actions.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	out := map[string][]Action{}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e := <-w.Updates():
			if e == nil { // every action stored so far is read
				return out, nil
			}
			var a Action
			if err := json.Unmarshal(e.Value(), &a); err != nil {
				return nil, fmt.Errorf("%s %s: %w", stream.QuarantineActions, e.Key(), err)
			}
			id, _, _ := strings.Cut(e.Key(), ".")
			out[id] = append(out[id], a)
		}
	}
}

// envelopes are what replaying e under cfg now would store, or why it is refused.
func (s *Store) envelopes(cfg *config.Config, e Entry) ([]envelope.Envelope, error) {
	if e.Cut {
		return nil, fmt.Errorf("its body was cut when it was kept (%d of %d bytes): it cannot be replayed", e.Kept, e.Size)
	}
	ep, err := ingest.FindEndpoint(cfg, e.Tenant, e.Endpoint)
	if err != nil {
		return nil, err
	}
	if ep.Spec.Name != e.Provider {
		return nil, fmt.Errorf("endpoint %s is a %s endpoint now; the delivery came from %s", e.Endpoint, ep.Spec.Name, e.Provider)
	}
	req := &providers.Request{Method: e.Method, Header: e.Header, Body: e.Body, Now: e.ReceivedAt}
	envs, refused := ingest.Delivery{Endpoint: ep, Request: req, Size: e.Size, SHA256: e.SHA256}.Envelopes(cfg.Gateway)
	if refused != nil {
		return nil, fmt.Errorf("still refused: %w", refused)
	}
	return envs, nil
}

// Planned is one event a replay would store.
type Planned struct {
	ID, Type string
	Stored   bool // already stored: a replay stores it no second time
}

// Preview is what replaying e under cfg now would do; computing it changes nothing.
// Refused says why the replay would be refused (nil: it would go ahead, given a who
// and a why).
func (s *Store) Preview(ctx context.Context, cfg *config.Config, e Entry) (events []Planned, refused error, err error) {
	envs, refused := s.envelopes(cfg, e)
	if refused != nil {
		return nil, refused, nil
	}
	replayed := e.replayedIDs()
	for _, env := range envs {
		stored := replayed[env.ID]
		if !stored {
			if stored, err = s.events.Stored(ctx, env.ID); err != nil {
				return nil, nil, err
			}
		}
		events = append(events, Planned{ID: env.ID, Type: env.Type, Stored: stored})
	}
	return events, nil, nil
}

// replayedIDs are the events earlier replays of e stored or found stored.
func (e Entry) replayedIDs() map[string]bool {
	ids := map[string]bool{}
	for _, a := range e.Actions {
		for _, id := range a.IDs {
			ids[id] = true
		}
	}
	return ids
}

// Replay stores the events of e (as Get returns it) under cfg now; by and why are
// required and recorded with what it stored. A replay that is refused changes nothing.
func (s *Store) Replay(ctx context.Context, cfg *config.Config, e Entry, by, why string) (Action, error) {
	if err := dlq.NeedWhoWhy(by, why); err != nil {
		return Action{}, err
	}
	envs, err := s.envelopes(cfg, e)
	if err != nil {
		return Action{}, err
	}
	// An event an earlier replay stored is not published again, however long ago: the
	// index of stored ids forgets after dedup_ttl.
	replayed := e.replayedIDs()
	var fresh []envelope.Envelope
	for _, env := range envs {
		if !replayed[env.ID] {
			fresh = append(fresh, env)
		}
	}
	res, err := s.events.Store(ctx, fresh)
	if err != nil {
		return Action{}, err
	}
	a := Action{By: by, Why: why, At: s.now().UTC(), Stored: res.Stored, Duplicates: len(envs) - res.Stored}
	for _, env := range envs {
		a.IDs = append(a.IDs, env.ID)
	}
	data, err := json.Marshal(a)
	if err != nil {
		return a, err
	}
	// One key per action: two operators replaying at once are both recorded.
	_, err = s.actions.Create(ctx, e.ID+"."+strconv.FormatInt(a.At.UnixNano(), 10), data)
	return a, err
}
