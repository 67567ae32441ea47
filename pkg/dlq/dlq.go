// Package dlq is the dead-letter workflow: list and show what the consumers gave up on,
// send a dead letter back to its consumer, or discard it, each decision recorded with
// who and why.
//
// A dead letter is one message of EXACTO_DLQ, named by its stream sequence. Nothing is
// ever deleted from the DLQ: a letter is open until an operator replays or discards it
// (EXACTO_DLQ_ACTIONS keeps every action per consumer and event).
//
// Replay is judged, not blind:
//   - Who and why: every replay and discard needs both, and both are recorded.
//   - Freshness: an event older than its type's limit (config dlq.freshness, 72 h by
//     default) is refused with its reason: a follow-up sent days late does harm. An
//     operator may force it.
//   - A discarded letter is not replayed.
//   - The replay goes through the consumer's own effect-once guard: the guard's dead
//     letter record is reset (only a dead letter: a record a previous replay completed
//     stays), and the event is sent on EXACTO_REPLAYS to that one consumer, whose
//     effect still looks its external key up. Replaying twice makes the effect once.
package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/stream"
)

// Statuses of a dead letter.
const (
	Open      = "open"
	Replayed  = "replayed"
	Discarded = "discarded"
)

// Letter is one dead letter and what operators did with it.
type Letter struct {
	Seq uint64 `json:"id"` // its EXACTO_DLQ sequence
	consumer.DeadLetter
	Status  string   `json:"status"`
	Actions []Action `json:"actions,omitempty"`
}

// EventTime is when the dead letter's event happened (zero if the event is unreadable).
func (l Letter) EventTime() time.Time {
	var env envelope.Envelope
	if json.Unmarshal(l.Event, &env) != nil {
		return time.Time{}
	}
	return env.Time
}

// Action is one operator's decision on a dead letter.
type Action struct {
	Kind   string    `json:"kind"` // replay or discard
	Seq    uint64    `json:"dead_letter"`
	By     string    `json:"by"`
	Why    string    `json:"why,omitempty"`
	At     time.Time `json:"at"`
	Forced bool      `json:"forced,omitempty"` // a replay past the freshness limit
	// Result says what a replay did: SentBack, or why nothing was sent (the consumer's
	// status of the event then: AlreadyCompleted, or a worker holding it). Records
	// made before 2026-12-06 say "dead_letter" for SentBack (ResultText reads both).
	Result string `json:"result,omitempty"`
}

// What a replay did.
const (
	SentBack         = "sent_back"         // the event went back to its consumer
	AlreadyCompleted = "already_completed" // the consumer had made its effect: nothing sent
)

// sentBack says whether a replay sent the event back (older records say dead_letter).
func (a Action) sentBack() bool { return a.Result == SentBack || a.Result == guard.DeadLetter }

// ResultText says what an action did in words ("" for a discard of a letter whose
// event was not completed, and for replays recorded before results were).
func (a Action) ResultText() string {
	switch a.Result {
	case SentBack, guard.DeadLetter:
		return "sent back"
	case AlreadyCompleted, guard.Completed:
		if a.Kind == "discard" {
			return "the consumer had completed the event"
		}
		return "nothing sent: the consumer had completed the event"
	case "":
		return ""
	}
	return "nothing sent: the consumer's status of the event was " + a.Result
}

// Filter selects dead letters; empty fields match everything.
type Filter struct {
	Consumer, Tenant, Provider, Type, Class string
	// OlderThan and NewerThan bound the age of the last attempt.
	OlderThan, NewerThan time.Duration
	// All includes the letters already replayed or discarded.
	All bool
}

func (f Filter) subject() string {
	tok := func(s string) string {
		if s == "" {
			return "*"
		}
		return s
	}
	typ := f.Type
	if typ == "" {
		typ = ">" // types keep their dots: reply.received is two tokens
	}
	return "dlq." + tok(f.Consumer) + "." + tok(f.Tenant) + "." + tok(f.Provider) + "." + typ
}

func (f Filter) match(l Letter, now time.Time) bool {
	age := now.Sub(l.LastAttempt)
	switch {
	case f.Class != "" && l.Class != f.Class,
		f.OlderThan > 0 && age < f.OlderThan,
		f.NewerThan > 0 && age > f.NewerThan,
		!f.All && l.Status != Open:
		return false
	}
	return true
}

// Queue is the DLQ of one deployment.
type Queue struct {
	js      jetstream.JetStream
	dlq     jetstream.Stream
	actions jetstream.KeyValue
	guards  jetstream.KeyValue
	cfg     config.DLQ
	now     func() time.Time
}

// New binds the queue; cfg gives the freshness limits and the SLO.
func New(ctx context.Context, js jetstream.JetStream, cfg config.DLQ) (*Queue, error) {
	st, err := js.Stream(ctx, stream.DLQ)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream.DLQ, err)
	}
	actions, err := js.KeyValue(ctx, stream.DLQActions)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", stream.DLQActions, err)
	}
	guards, err := js.KeyValue(ctx, stream.Guards)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", stream.Guards, err)
	}
	return &Queue{js: js, dlq: st, actions: stream.DurableKV(js, actions), guards: guards, cfg: cfg, now: time.Now}, nil
}

func actionKey(consumerName, eventID string) string { return consumerName + "." + eventID }

// List returns the dead letters f selects, oldest first.
func (q *Queue) List(ctx context.Context, f Filter) ([]Letter, error) {
	var out []Letter
	now := q.now()
	err := stream.Scan(ctx, q.dlq, jetstream.OrderedConsumerConfig{FilterSubjects: []string{f.subject()}}, func(msg jetstream.Msg) error {
		md, err := msg.Metadata()
		if err != nil {
			return err
		}
		l, err := q.letter(ctx, md.Sequence.Stream, msg.Data())
		if err != nil {
			return err
		}
		if f.match(l, now) {
			out = append(out, l)
		}
		return nil
	})
	return out, err
}

// Get returns the dead letter with sequence seq.
func (q *Queue) Get(ctx context.Context, seq uint64) (Letter, error) {
	m, err := q.dlq.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Letter{}, fmt.Errorf("no dead letter %d", seq)
	}
	if err != nil {
		return Letter{}, err
	}
	return q.letter(ctx, seq, m.Data)
}

// letter decodes a DLQ message and adds what operators did with it.
func (q *Queue) letter(ctx context.Context, seq uint64, data []byte) (Letter, error) {
	l := Letter{Seq: seq, Status: Open}
	if err := json.Unmarshal(data, &l.DeadLetter); err != nil {
		return l, fmt.Errorf("dead letter %d: %w", seq, err)
	}
	acts, _, err := q.history(ctx, l.Consumer, l.EventID)
	if err != nil {
		return l, err
	}
	for _, a := range acts {
		if a.Seq != seq {
			continue // an action on an earlier dead letter of the same event
		}
		l.Actions = append(l.Actions, a)
		switch a.Kind {
		case "discard":
			l.Status = Discarded
		case "replay":
			if l.Status != Discarded {
				l.Status = Replayed
			}
		}
	}
	return l, nil
}

func (q *Queue) history(ctx context.Context, consumerName, eventID string) ([]Action, uint64, error) {
	e, err := q.actions.Get(ctx, actionKey(consumerName, eventID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var acts []Action
	return acts, e.Revision(), json.Unmarshal(e.Value(), &acts)
}

// record appends a to the letter's history (compare-and-set: two operators at once
// both get recorded).
func (q *Queue) record(ctx context.Context, l Letter, a Action) error {
	for range 10 {
		acts, rev, err := q.history(ctx, l.Consumer, l.EventID)
		if err != nil {
			return err
		}
		data, _ := json.Marshal(append(acts, a))
		if rev == 0 {
			_, err = q.actions.Create(ctx, actionKey(l.Consumer, l.EventID), data)
		} else {
			_, err = q.actions.Update(ctx, actionKey(l.Consumer, l.EventID), data, rev)
		}
		if err == nil {
			return nil
		}
		var apiErr *jetstream.APIError
		if !errors.Is(err, jetstream.ErrKeyExists) && !(errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence) {
			return err
		}
	}
	return errors.New("dlq: the letter's history keeps changing; try again")
}

// ErrNoWho and ErrNoWhy refuse a replay or a discard (or, in the console, a diff
// decision) that does not say who decides it and why: both are recorded with every
// action. NeedWhoWhy returns them.
var (
	ErrNoWho = errors.New("who decides is required: it is recorded with the action")
	ErrNoWhy = errors.New("a why is required: it is recorded with the action")
)

// ErrStale refuses a replay past the event type's freshness limit.
var ErrStale = errors.New("stale")

// Fresh says whether l's event is young enough to replay now, and why not.
func (q *Queue) Fresh(l Letter) error {
	limit := q.cfg.Fresh(l.Type)
	at := l.EventTime()
	if at.IsZero() {
		return fmt.Errorf("%w: the dead letter's event has no time to judge its freshness by", ErrStale)
	}
	if age := q.now().Sub(at); limit > 0 && age > limit {
		return fmt.Errorf("%w: the %s event is %s old; its freshness limit is %s (config dlq.freshness)", ErrStale, l.Type, age.Round(time.Minute), limit)
	}
	return nil
}

// NeedWhoWhy refuses a decision that does not say who takes it (ErrNoWho) and why
// (ErrNoWhy); blanks count as missing. Every replay and discard, here, in the CLI and
// in the console, is checked by it.
func NeedWhoWhy(by, why string) error {
	switch {
	case strings.TrimSpace(by) == "":
		return ErrNoWho
	case strings.TrimSpace(why) == "":
		return ErrNoWhy
	}
	return nil
}

// judge says why a replay of l would be refused now, whoever asks (nil: it would go
// ahead), and returns its envelope: a discarded letter, a stale event (unless force)
// or no envelope. Who and why are NeedWhoWhy's.
func (q *Queue) judge(l Letter, force bool) (envelope.Envelope, error) {
	var env envelope.Envelope
	if l.Status == Discarded {
		return env, fmt.Errorf("dead letter %d was discarded: not replayed", l.Seq)
	}
	if err := q.Fresh(l); err != nil && !force {
		return env, err
	}
	if err := json.Unmarshal(l.Event, &env); err != nil || env.ID == "" {
		return env, fmt.Errorf("dead letter %d holds no envelope to replay", l.Seq)
	}
	return env, nil
}

// Preview is what a replay of a dead letter would do now; computing it changes nothing.
type Preview struct {
	// Age is the event's age now (zero when it has no time); Limit is its type's
	// freshness limit (config dlq.freshness; 0: none).
	Age, Limit time.Duration
	// Stale is the freshness verdict: nil when the event is young enough.
	Stale error
	// Guard is the consumer's guard status of the event ("" when it has no record).
	Guard string
	// Refused says why the replay would be refused (nil: it would go ahead, given a
	// who and a why: a preview asks for neither).
	Refused error
	// Send: the event would be sent back (its guard holds a dead letter, or nothing);
	// otherwise the consumer already has it and a replay records only the action.
	Send bool
}

// Preview judges a replay of l (force as Replay's) without replaying, resetting a
// guard or recording anything. It changes nothing, so it needs no who or why: its
// verdict is the discarded, freshness and envelope checks a replay makes.
func (q *Queue) Preview(ctx context.Context, l Letter, force bool) (Preview, error) {
	p := Preview{Limit: q.cfg.Fresh(l.Type), Stale: q.Fresh(l)}
	if at := l.EventTime(); !at.IsZero() {
		p.Age = q.now().Sub(at)
	}
	_, p.Refused = q.judge(l, force)
	rec, ok, err := guard.Status(ctx, q.guards, l.Consumer, l.EventID)
	if err != nil {
		return p, err
	}
	if ok {
		p.Guard = rec.Status
	}
	p.Send = p.Refused == nil && (!ok || rec.Resettable(q.now()))
	return p, nil
}

// Replay sends l back to its consumer; by and why are required and recorded. A stale
// event is refused unless force.
func (q *Queue) Replay(ctx context.Context, l Letter, by, why string, force bool) (Action, error) {
	if err := NeedWhoWhy(by, why); err != nil {
		return Action{}, err
	}
	env, err := q.judge(l, force)
	if err != nil {
		return Action{}, err
	}
	was, reset, err := guard.New(q.guards, l.Consumer, 0).Reset(ctx, l.EventID)
	if err != nil {
		return Action{}, err
	}
	a := Action{Kind: "replay", Seq: l.Seq, By: by, Why: why, At: q.now().UTC(), Forced: q.Fresh(l) != nil, Result: was}
	if was == guard.Completed {
		a.Result = AlreadyCompleted
	}
	if was == "" || reset {
		a.Result = SentBack
		msg := &nats.Msg{Subject: stream.ReplaySubject(l.Consumer, env.Tenant, env.Provider, env.Type), Data: l.Event, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, "replay."+l.Consumer+"."+l.EventID+"."+strconv.FormatInt(a.At.UnixNano(), 10))
		msg.Header.Set("Exacto-Replayed-By", by)
		if _, err := q.js.PublishMsg(ctx, msg); err != nil {
			return Action{}, fmt.Errorf("send back: %w", err)
		}
		if err := stream.Durable(ctx, q.js, stream.Replays); err != nil {
			return Action{}, fmt.Errorf("send back: %w", err)
		}
	}
	return a, q.record(ctx, l, a)
}

// Discard closes l without replaying it; by and why are recorded.
func (q *Queue) Discard(ctx context.Context, l Letter, by, why string) (Action, error) {
	if err := NeedWhoWhy(by, why); err != nil {
		return Action{}, err
	}
	if l.Status == Discarded {
		return Action{}, fmt.Errorf("dead letter %d is already discarded", l.Seq)
	}
	// A letter a replay of which made its effect has nothing left to discard: that would
	// record a decision that changed nothing and hide the effect. One whose event was
	// completed otherwise (a later delivery made it) may be closed, saying so.
	rec, ok, err := guard.Status(ctx, q.guards, l.Consumer, l.EventID)
	if err != nil {
		return Action{}, err
	}
	completed := ok && rec.Status == guard.Completed
	if completed && slices.ContainsFunc(l.Actions, func(a Action) bool { return a.Kind == "replay" && a.sentBack() }) {
		return Action{}, fmt.Errorf("dead letter %d: %s has completed its event since it was replayed: nothing to discard", l.Seq, l.Consumer)
	}
	a := Action{Kind: "discard", Seq: l.Seq, By: by, Why: why, At: q.now().UTC()}
	if completed {
		a.Result = AlreadyCompleted
	}
	return a, q.record(ctx, l, a)
}

// Summary is what the alert watches: open letters per consumer and the oldest.
type Summary struct {
	Open       int            `json:"open"`
	ByConsumer map[string]int `json:"by_consumer"`
	Oldest     time.Duration  `json:"oldest"` // since the oldest open letter's last attempt
}

// Summarize counts the open letters.
func (q *Queue) Summarize(ctx context.Context) (Summary, error) {
	letters, err := q.List(ctx, Filter{})
	s := Summary{ByConsumer: map[string]int{}}
	if err != nil {
		return s, err
	}
	now := q.now()
	for _, l := range letters {
		s.Open++
		s.ByConsumer[l.Consumer]++
		s.Oldest = max(s.Oldest, now.Sub(l.LastAttempt))
	}
	return s, nil
}
