package hubspot

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"exacto.dev/pkg/platform"
)

// Requests of concurrent callers go to HubSpot together (natural batching, as a group
// commit does): a caller alone is sent at once, by the single-object endpoint, as
// before; callers that come while a request of the same kind is in flight wait for it
// and then go as one batch request, up to MaxBatch. HubSpot counts a batch request
// once against the app's 100 (or 190) requests per 10 seconds, so under a burst a
// portal takes several times the replies it would one request each; at a trickle
// nothing waits.
//
// The kinds, each with its batch endpoint (CRM v3 objects API, batch section;
// docs/platforms.md):
//
//	contacts by e-mail  POST /crm/v3/objects/contacts/batch/read, idProperty email
//	contacts by id      POST /crm/v3/objects/contacts/batch/read
//	contact create      POST /crm/v3/objects/contacts/batch/create
//	note create         POST /crm/v3/objects/notes/batch/create, each with its association
//	note update         POST /crm/v3/objects/notes/batch/update
//	notes by key        POST /crm/v3/objects/notes/batch/read, idProperty exacto_event_id
//	note upsert         POST /crm/v3/objects/notes/batch/upsert, by exacto_event_id
//
// (The last two are batch endpoints alone too: a caller alone sends one input.)
//
// A batch answers for each input it names; an input it does not name (a note it did
// not create, a contact id it did not find) is sent again alone, so its caller gets
// the single endpoint's answer (its 409 naming what exists, its 404). A batch refused
// whole with a 4xx other than 401, 403 and 429 (one input HubSpot will not take: a
// duplicate key, a bad value) is sent again one input at a time, so one caller's bad
// input fails no other. A batch that fails otherwise (429, 5xx, timeout) fails each of
// its callers, whose retries read before they write, as after any lost answer.

// MaxBatch is how many inputs one batch request carries: HubSpot's batch endpoints
// take up to 100.
const MaxBatch = 100

// batcher sends one kind of request for concurrent callers.
type batcher[I, O any] struct {
	// one sends a single input by the single-object endpoint.
	one func(ctx context.Context, in I) (O, error)
	// many sends two or more inputs in one batch request. answered[i] says whether
	// outs[i] is input i's answer; the others are sent alone.
	many func(ctx context.Context, ins []I) (outs []O, answered []bool, err error)

	mu      sync.Mutex
	waiting []*batchCall[I, O]
	busy    bool // a sender is running: new callers wait for it
}

type batchCall[I, O any] struct {
	ctx  context.Context
	in   I
	out  O
	err  error
	sent atomic.Bool // a request carrying in has written its headers
	done chan struct{}
}

// do sends in, alone or with the inputs of callers waiting beside it.
func (b *batcher[I, O]) do(ctx context.Context, in I) (O, error) {
	b.mu.Lock()
	if !b.busy && len(b.waiting) == 0 {
		// Alone: sent at once on the caller's own goroutine and context. Callers that
		// come meanwhile wait, and go together once this one is answered.
		b.busy = true
		b.mu.Unlock()
		defer b.next()
		return b.one(ctx, in)
	}
	call := &batchCall[I, O]{ctx: ctx, in: in, done: make(chan struct{})}
	b.waiting = append(b.waiting, call)
	b.mu.Unlock()
	select {
	case <-call.done:
		return call.out, call.err
	case <-ctx.Done():
		var zero O
		return zero, b.leave(call, ctx.Err())
	}
}

// leave takes call, whose caller's context ended with cause, out of the waiting list
// and says what became of its input so far: never sent (waiting, or in a batch still
// waiting for its turn at the rate: the breaker does not count it), or sent and
// perhaps landed, as after a timeout. Either way the caller's retry reads before it
// writes: an input taken and not yet sent may still go out with its batch.
func (b *batcher[I, O]) leave(call *batchCall[I, O], cause error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i := slices.Index(b.waiting, call); i >= 0 {
		b.waiting = slices.Delete(b.waiting, i, i+1)
	}
	if !call.sent.Load() {
		return &platform.Error{Dependency: "hubspot", Transient: true, Unsent: true, Msg: "left before its batch request was sent: " + cause.Error()}
	}
	return &platform.Error{Dependency: "hubspot", Transient: true, Msg: "left while its batch request was under way: " + cause.Error()}
}

// next hands the waiting callers to a sender of their own, or marks the batcher idle.
// Deferred by the caller alone, so that a panic of its request leaves the batcher
// working.
func (b *batcher[I, O]) next() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.waiting) == 0 {
		b.busy = false
		return
	}
	go b.send()
}

// send sends the waiting callers, MaxBatch at a time, until none waits.
func (b *batcher[I, O]) send() {
	for {
		b.mu.Lock()
		var calls []*batchCall[I, O]
		for len(b.waiting) > 0 && len(calls) < MaxBatch {
			c := b.waiting[0]
			b.waiting[0] = nil
			b.waiting = b.waiting[1:]
			if c.ctx.Err() == nil { // a caller gone (leave answers it) is not sent
				calls = append(calls, c)
			}
		}
		if len(calls) == 0 {
			b.busy = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		b.sendBatch(calls)
	}
}

// sendBatch sends calls as one request (by the single endpoint when one), each caller
// answered on its own (batchContext), once all are.
func (b *batcher[I, O]) sendBatch(calls []*batchCall[I, O]) {
	defer func() {
		if r := recover(); r != nil {
			// On this goroutine no consumer's recover sees it: each caller's attempt
			// fails permanently instead, with the stack (its event dead-lettered).
			err := &platform.Error{Dependency: "hubspot", Msg: fmt.Sprintf("panic sending a batch request: %v\n%s", r, debug.Stack())}
			for _, c := range calls {
				c.err = err
			}
		}
		for _, c := range calls {
			close(c.done)
		}
	}()
	ctx, cancel := batchContext(calls)
	defer cancel()
	if len(calls) == 1 {
		calls[0].out, calls[0].err = b.one(ctx, calls[0].in)
		return
	}
	ins := make([]I, len(calls))
	for i, c := range calls {
		ins[i] = c.in
	}
	outs, answered, err := b.many(ctx, ins)
	if err != nil && !refusedWhole(err) {
		for _, c := range calls {
			c.err = err
		}
		return
	}
	for i, c := range calls {
		switch {
		case err == nil && answered[i]:
			c.out = outs[i]
		case c.ctx.Err() != nil: // gone before its turn alone: not sent
			c.err = &platform.Error{Dependency: "hubspot", Transient: true, Unsent: true, Msg: "left before its input was sent alone"}
		default: // alone, as its caller would have sent it
			c.out, c.err = b.one(markSent(c.ctx, c), c.in)
		}
	}
}

// markSent is ctx with a trace that marks calls sent once a request has written its
// headers.
func markSent[I, O any](ctx context.Context, calls ...*batchCall[I, O]) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() {
		for _, c := range calls {
			c.sent.Store(true)
		}
	}})
}

// batchContext is the context of a request that serves calls: the first's values, and
// every caller's HTTP trace (the consumers' Precedence sees each one's request out);
// the latest of their deadlines when each has one (a rate-limit wait past it is never
// sent, and says how long to wait); ended once every caller has gone.
func batchContext[I, O any](calls []*batchCall[I, O]) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(calls[0].ctx)
	var latest time.Time
	for i, c := range calls {
		if t := httptrace.ContextClientTrace(c.ctx); t != nil && i > 0 {
			// A copy: WithClientTrace rewrites the hooks of the trace it is given to
			// call the context's, and the caller's own must stay its own.
			cp := *t
			ctx = httptrace.WithClientTrace(ctx, &cp)
		}
		d, ok := c.ctx.Deadline()
		switch {
		case !ok:
			latest = time.Time{}
		case i == 0 || !latest.IsZero() && d.After(latest):
			latest = d
		}
	}
	cancelDeadline := context.CancelFunc(func() {})
	if !latest.IsZero() {
		ctx, cancelDeadline = context.WithDeadline(ctx, latest)
	}
	ctx, cancel := context.WithCancel(markSent(ctx, calls...))
	var gone atomic.Int32
	stops := make([]func() bool, len(calls))
	for i, c := range calls {
		stops[i] = context.AfterFunc(c.ctx, func() {
			if int(gone.Add(1)) == len(calls) {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
		cancelDeadline()
	}
}

// refusedWhole says a batch was refused for what one of its inputs holds (a 4xx other
// than 429, 401 and 403): each input alone gets its own answer.
func refusedWhole(err error) bool {
	var e *platform.Error
	if !errors.As(err, &e) || e.Transient || e.Status < 400 || e.Status >= 500 {
		return false
	}
	return e.Status != http.StatusUnauthorized && e.Status != http.StatusForbidden
}

// batchAnswer is the answer of a CRM v3 batch endpoint: the records it read or wrote,
// and, with a 207, an error per input it could not.
type batchAnswer struct {
	Results []Object `json:"results"`
	Errors  []struct {
		Category string `json:"category"`
	} `json:"errors"`
}

// onlyNotFound says every error of a batch read is a record not found (then an input
// without a result has none; otherwise it is asked alone).
func (a batchAnswer) onlyNotFound() bool {
	for _, e := range a.Errors {
		if e.Category != "OBJECT_NOT_FOUND" {
			return false
		}
	}
	return true
}

// foundNote is a note read's answer: the note, if there is one.
type foundNote struct {
	note Note
	ok   bool
}

// upserted is an upsert's answer: the note, and whether HubSpot made it now.
type upserted struct {
	note    Note
	created bool
}

// foundContact is a contact read's answer: the contact, if there is one.
type foundContact struct {
	contact Contact
	ok      bool
}

// batchers makes c's batcher of each kind, from its single and batch requests.
func (c *Client) batchers() {
	c.byEmail = &batcher[string, foundContact]{
		one: func(ctx context.Context, email string) (foundContact, error) {
			contact, ok, err := c.contactByEmail(ctx, email)
			return foundContact{contact, ok}, err
		},
		many: c.contactsByEmail,
	}
	c.byID = &batcher[string, Contact]{one: c.getContact, many: c.contactsByID}
	c.contactCreates = &batcher[map[string]string, Contact]{one: c.createContact, many: c.createContacts}
	c.creates = &batcher[Note, Note]{one: c.createNote, many: c.createNotes}
	c.noteReads = &batcher[string, foundNote]{
		one: func(ctx context.Context, key string) (foundNote, error) {
			n, ok, err := c.noteByExternalID(ctx, key)
			return foundNote{n, ok}, err
		},
		many: c.notesByExternalID,
	}
	c.upserts = &batcher[Note, upserted]{
		one: func(ctx context.Context, n Note) (upserted, error) {
			note, created, err := c.upsertNote(ctx, n)
			return upserted{note, created}, err
		},
		many: c.upsertNotes,
	}
	c.updates = &batcher[noteUpdate, Note]{
		one:  func(ctx context.Context, u noteUpdate) (Note, error) { return c.updateNote(ctx, u.id, u.props) },
		many: c.updateNotes,
	}
}

// contactsByEmail reads contacts by e-mail (lower-cased, as ContactByEmail gives them),
// by the unique email property: a contact the answer does not name has none, unless
// the answer names an error other than not found.
func (c *Client) contactsByEmail(ctx context.Context, emails []string) ([]foundContact, []bool, error) {
	var resp batchAnswer
	req := map[string]any{"idProperty": "email", "inputs": idInputs(emails), "properties": ContactProperties, "propertiesWithHistory": []string{}}
	if err := c.h.Do(ctx, http.MethodPost, "/crm/v3/objects/contacts/batch/read", nil, req, &resp); err != nil {
		return nil, nil, err
	}
	outs, answered := matchResults(emails, resp.Results, emailOf, func(_ int, o Object) foundContact { return foundContact{Contact(o), true} })
	return outs, notFoundAnswered(answered, resp), nil
}

// contactsByID reads contacts by id; one the answer does not name is asked alone (a
// missing contact is the single read's 404).
func (c *Client) contactsByID(ctx context.Context, ids []string) ([]Contact, []bool, error) {
	var resp batchAnswer
	req := map[string]any{"inputs": idInputs(ids), "properties": ContactProperties, "propertiesWithHistory": []string{}}
	if err := c.h.Do(ctx, http.MethodPost, "/crm/v3/objects/contacts/batch/read", nil, req, &resp); err != nil {
		return nil, nil, err
	}
	outs, answered := matchResults(ids, resp.Results, recordID, func(_ int, o Object) Contact { return Contact(o) })
	return outs, answered, nil
}

// createNotes creates notes, each with its association to its contact (the batch
// create's inputs take the single create's body). A note the answer does not name (by
// its key) is created alone.
func (c *Client) createNotes(ctx context.Context, notes []Note) ([]Note, []bool, error) {
	inputs := make([]map[string]any, len(notes))
	keys := make([]string, len(notes))
	for i := range notes {
		inputs[i], keys[i] = noteCreate(&notes[i]), notes[i].ExternalID
	}
	var resp batchAnswer
	if err := c.h.Do(ctx, http.MethodPost, "/crm/v3/objects/notes/batch/create", nil, map[string]any{"inputs": inputs}, &resp); err != nil {
		return nil, nil, err
	}
	outs, answered := matchResults(keys, resp.Results, writtenNoteKey, func(i int, o Object) Note {
		n := notes[i]
		n.ID = o.ID
		return n
	})
	return outs, answered, nil
}

// createContacts creates contacts, each with its properties (an e-mail among them,
// lower-cased); a contact the answer does not name by its e-mail is created alone.
// HubSpot refuses a batch holding an e-mail it has (409): each is then created alone,
// and the one that exists gets its own 409 naming it.
func (c *Client) createContacts(ctx context.Context, props []map[string]string) ([]Contact, []bool, error) {
	inputs := make([]map[string]any, len(props))
	emails := make([]string, len(props))
	for i, p := range props {
		inputs[i], emails[i] = map[string]any{"properties": p}, strings.ToLower(p["email"])
	}
	var resp batchAnswer
	if err := c.h.Do(ctx, http.MethodPost, "/crm/v3/objects/contacts/batch/create", nil, map[string]any{"inputs": inputs}, &resp); err != nil {
		return nil, nil, err
	}
	outs, answered := matchResults(emails, resp.Results, emailOf, func(_ int, o Object) Contact { return Contact(o) })
	return outs, answered, nil
}

// notesByExternalID reads notes by their keys: a key the answer does not name has no
// note, unless the answer names an error other than not found (then it is read alone).
func (c *Client) notesByExternalID(ctx context.Context, keys []string) ([]foundNote, []bool, error) {
	var resp batchAnswer
	req := map[string]any{"idProperty": ExternalIDProperty, "inputs": idInputs(keys), "properties": noteProps, "propertiesWithHistory": []string{}}
	if err := c.h.Do(ctx, http.MethodPost, "/crm/v3/objects/notes/batch/read", nil, req, &resp); err != nil {
		return nil, nil, err
	}
	outs, answered := matchResults(keys, resp.Results, func(o Object) string { return o.Properties[ExternalIDProperty] },
		func(_ int, o Object) foundNote { return foundNote{noteFrom(o), true} })
	return outs, notFoundAnswered(answered, resp), nil
}

// upsertNotes creates or updates notes by their keys; a note the answer does not name
// (a 207's error for it) is upserted alone, which gives its error's category.
func (c *Client) upsertNotes(ctx context.Context, notes []Note) ([]upserted, []bool, error) {
	inputs := make([]map[string]any, len(notes))
	keys := make([]string, len(notes))
	for i := range notes {
		inputs[i] = map[string]any{"idProperty": ExternalIDProperty, "id": notes[i].ExternalID, "properties": notes[i].properties()}
		keys[i] = notes[i].ExternalID
	}
	var resp notesBatch
	if err := c.h.Do(ctx, http.MethodPost, "/crm/v3/objects/notes/batch/upsert", nil, map[string]any{"inputs": inputs}, &resp); err != nil {
		return nil, nil, err
	}
	outs, answered := matchResults(keys, resp.Results, func(r noteResult) string { return writtenNoteKey(r.Object) }, func(i int, r noteResult) upserted {
		n := notes[i]
		n.ID = r.ID
		return upserted{n, r.New}
	})
	return outs, answered, nil
}

// noteUpdate is one note's UpdateNote.
type noteUpdate struct {
	id    string
	props map[string]string
}

// updateNotes sets each note's properties; a note the answer does not name is updated
// alone (a missing note is the single update's 404).
func (c *Client) updateNotes(ctx context.Context, us []noteUpdate) ([]Note, []bool, error) {
	inputs := make([]map[string]any, len(us))
	ids := make([]string, len(us))
	for i, u := range us {
		inputs[i], ids[i] = map[string]any{"id": u.id, "properties": u.props}, u.id
	}
	var resp batchAnswer
	if err := c.h.Do(ctx, http.MethodPost, "/crm/v3/objects/notes/batch/update", nil, map[string]any{"inputs": inputs}, &resp); err != nil {
		return nil, nil, err
	}
	outs, answered := matchResults(ids, resp.Results, recordID, func(_ int, o Object) Note { return noteFrom(o) })
	return outs, answered, nil
}

// idInputs are a batch read's inputs: one {"id": key} each.
func idInputs(keys []string) []map[string]string {
	inputs := make([]map[string]string, len(keys))
	for i, k := range keys {
		inputs[i] = map[string]string{"id": k}
	}
	return inputs
}

// matchResults gives input i (its key keys[i]) the result whose keyOf is the same, as
// to makes it from the two; answered[i] says it had one. An empty key matches nothing.
func matchResults[R, O any](keys []string, results []R, keyOf func(R) string, to func(i int, r R) O) (outs []O, answered []bool) {
	byKey := make(map[string]R, len(results))
	for _, r := range results {
		byKey[keyOf(r)] = r
	}
	outs, answered = make([]O, len(keys)), make([]bool, len(keys))
	for i, k := range keys {
		if r, ok := byKey[k]; ok && k != "" {
			outs[i], answered[i] = to(i, r), true
		}
	}
	return outs, answered
}

// notFoundAnswered marks answered, for a batch read, the inputs with no result when
// every error of resp is a record not found: those have none.
func notFoundAnswered(answered []bool, resp batchAnswer) []bool {
	if resp.onlyNotFound() {
		for i := range answered {
			answered[i] = true
		}
	}
	return answered
}

func recordID(o Object) string { return o.ID }

// emailOf is a contact's e-mail as the batch's inputs hold it: lower-cased.
func emailOf(o Object) string { return strings.ToLower(o.Properties["email"]) }

// writtenNoteKey is the key of a note HubSpot answered it wrote: none without an id.
func writtenNoteKey(o Object) string {
	if o.ID == "" {
		return ""
	}
	return o.Properties[ExternalIDProperty]
}
