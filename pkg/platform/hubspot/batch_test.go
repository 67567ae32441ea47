package hubspot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"exacto.dev/pkg/platform"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/ratelimit"
)

// holdFirst holds the first request hold matches until release is closed (entered
// says it came), so that callers coming meanwhile must wait for it.
type holdFirst struct {
	hold             func(*http.Request) bool
	once             sync.Once
	entered, release chan struct{}
	beforeRelease    func() // if set, burst calls it once its callers wait
}

func (h *holdFirst) RoundTrip(r *http.Request) (*http.Response, error) {
	if h.hold(r) {
		first := false
		h.once.Do(func() { first = true })
		if first {
			close(h.entered)
			<-h.release
		}
	}
	return http.DefaultTransport.RoundTrip(r)
}

// portal is a sandbox with the note property made and contacts, and a client whose
// first request matching hold is held.
func portal(t *testing.T, hold func(*http.Request) bool, contacts ...string) (*sandbox.Server, *Client, *holdFirst, []string) {
	return pacedPortal(t, nil, hold, contacts...)
}

// pacedPortal is portal with the client paced by limit.
func pacedPortal(t *testing.T, limit ratelimit.Limiter, hold func(*http.Request) bool, contacts ...string) (*sandbox.Server, *Client, *holdFirst, []string) {
	t.Helper()
	sb := sandbox.Start(t)
	h := &holdFirst{hold: func(*http.Request) bool { return false }, entered: make(chan struct{}), release: make(chan struct{})}
	c := New(Config{BaseURL: sb.URL, Token: sandbox.HubSpotToken, Timeout: 5 * time.Second, HTTPClient: &http.Client{Transport: h}, Limit: limit})
	if err := c.EnsureNoteProperty(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.hold = hold // from now: the setup's requests are not held
	var ids []string
	for _, e := range contacts {
		ids = append(ids, sb.AddContact(e, map[string]string{"firstname": strings.Split(e, "@")[0]}))
	}
	return sb, c, h, ids
}

// burst makes call(0) alone, held at HubSpot, then calls 1..n-1 while it is held,
// releases it once they all wait in b, and returns each call's error.
func burst[I, O any](t *testing.T, h *holdFirst, b *batcher[I, O], n int, call func(i int) error) []error {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Go(func() { errs[0] = call(0) })
	<-h.entered
	for i := 1; i < n; i++ {
		wg.Go(func() { errs[i] = call(i) })
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		waiting := len(b.waiting)
		b.mu.Unlock()
		if waiting == n-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d callers waiting", waiting, n-1)
		}
		time.Sleep(time.Millisecond)
	}
	if h.beforeRelease != nil {
		h.beforeRelease()
	}
	close(h.release)
	wg.Wait()
	return errs
}

func isPost(path string) func(*http.Request) bool {
	return func(r *http.Request) bool { return r.Method == http.MethodPost && r.URL.Path == path }
}

func TestConcurrentNoteCreatesGoAsOneBatch(t *testing.T) {
	sb, c, h, contacts := portal(t, isPost("/crm/v3/objects/notes"), "a@example.com", "b@example.com")
	const n = 6
	got := make([]Note, n)
	errs := burst(t, h, c.creates, n, func(i int) (err error) {
		got[i], err = c.CreateNote(context.Background(), Note{ContactID: contacts[i%2], Body: fmt.Sprint("reply ", i),
			ExternalID: fmt.Sprint("evt-", i), Timestamp: time.Date(2026, 12, 7, 9, 0, i, 0, time.UTC)})
		return err
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	if one, batches, inputs := sb.Requests(sandbox.RouteHubSpotNoteCreate), sb.Requests(sandbox.RouteHubSpotNoteBatchCreate),
		sb.Inputs(sandbox.RouteHubSpotNoteBatchCreate); one != 1 || batches != 1 || inputs != n-1 {
		t.Fatalf("single creates %d, batch creates %d carrying %d notes; want 1, 1, %d", one, batches, inputs, n-1)
	}
	if w := sb.NoteWrites(); w != n {
		t.Errorf("NoteWrites = %d, want %d (a batch's notes each counted)", w, n)
	}
	byID := map[string]sandbox.Object{}
	for _, o := range sb.Notes() {
		byID[o.ID] = o
	}
	for i, nt := range got {
		o, ok := byID[nt.ID]
		if !ok || o.Properties[ExternalIDProperty] != fmt.Sprint("evt-", i) || o.Properties["hs_note_body"] != fmt.Sprint("reply ", i) {
			t.Errorf("create %d answered note %q, which HubSpot holds as %+v", i, nt.ID, o.Properties)
			continue
		}
		if len(o.Associations) != 1 || o.Associations[0].ToID != contacts[i%2] || o.Associations[0].TypeID != NoteToContact {
			t.Errorf("note %d associations %+v, want one to %s", i, o.Associations, contacts[i%2])
		}
	}
}

func TestConcurrentContactReadsGoAsOneBatch(t *testing.T) {
	t.Run("by e-mail", func(t *testing.T) {
		sb, c, h, ids := portal(t, func(r *http.Request) bool { return r.Method == http.MethodGet }, "a@example.com", "b@example.com")
		emails := []string{"a@example.com", "B@Example.com", "nobody@example.com", "b@example.com"}
		want := []string{ids[0], ids[1], "", ids[1]}
		got := make([]string, len(emails))
		errs := burst(t, h, c.byEmail, len(emails), func(i int) error {
			contact, found, err := c.ContactByEmail(context.Background(), emails[i])
			if found != (contact.ID != "") {
				return fmt.Errorf("found %v with contact %q", found, contact.ID)
			}
			got[i] = contact.ID
			return err
		})
		for i, err := range errs {
			if err != nil || got[i] != want[i] {
				t.Errorf("%s: contact %q, %v; want %q", emails[i], got[i], err, want[i])
			}
		}
		if one, batches := sb.Requests(sandbox.RouteHubSpotContactGet), sb.Requests(sandbox.RouteHubSpotContactBatchRead); one != 1 || batches != 1 {
			t.Errorf("single reads %d, batch reads %d; want 1 and 1 (the one not found is answered by the batch)", one, batches)
		}
	})
	t.Run("by id", func(t *testing.T) {
		sb, c, h, ids := portal(t, func(r *http.Request) bool { return r.Method == http.MethodGet }, "a@example.com", "b@example.com", "c@example.com")
		asked := []string{ids[0], ids[1], "999999", ids[2]}
		got := make([]string, len(asked))
		errs := burst(t, h, c.byID, len(asked), func(i int) error {
			contact, err := c.GetContact(context.Background(), asked[i])
			got[i] = contact.Properties["email"]
			return err
		})
		for i, want := range []string{"a@example.com", "b@example.com", "", "c@example.com"} {
			if got[i] != want {
				t.Errorf("contact %s: e-mail %q, want %q", asked[i], got[i], want)
			}
		}
		// The one HubSpot does not have is asked alone, and gets the single read's 404.
		if platform.StatusOf(errs[2]) != http.StatusNotFound || errs[0] != nil || errs[1] != nil || errs[3] != nil {
			t.Errorf("errors %v; want a 404 for the missing contact alone", errs)
		}
		if one, batches := sb.Requests(sandbox.RouteHubSpotContactGet), sb.Requests(sandbox.RouteHubSpotContactBatchRead); one != 2 || batches != 1 {
			t.Errorf("single reads %d, batch reads %d; want 2 (the first and the missing one) and 1", one, batches)
		}
	})
}

func TestConcurrentNoteUpdatesGoAsOneBatch(t *testing.T) {
	sb, c, h, contacts := portal(t, func(r *http.Request) bool { return r.Method == http.MethodPatch }, "a@example.com")
	ctx := context.Background()
	var notes []Note
	for i := range 4 {
		n, err := c.CreateNote(ctx, Note{ContactID: contacts[0], Body: "reply", ExternalID: fmt.Sprint("evt-", i)})
		if err != nil {
			t.Fatal(err)
		}
		notes = append(notes, n)
	}
	errs := burst(t, h, c.updates, len(notes), func(i int) error {
		n, err := c.UpdateNote(ctx, notes[i].ID, map[string]string{"hs_note_body": fmt.Sprint("reply, classified ", i)})
		if err == nil && (n.ID != notes[i].ID || n.ExternalID != notes[i].ExternalID) {
			return fmt.Errorf("answered note %s (%s)", n.ID, n.ExternalID)
		}
		return err
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("update %d: %v", i, err)
		}
	}
	for _, o := range sb.Notes() {
		var i int
		fmt.Sscanf(o.Properties[ExternalIDProperty], "evt-%d", &i)
		if want := fmt.Sprint("reply, classified ", i); o.Properties["hs_note_body"] != want {
			t.Errorf("note %s body %q, want %q", o.ID, o.Properties["hs_note_body"], want)
		}
	}
	if one, batches := sb.Requests(sandbox.RouteHubSpotNoteUpdate), sb.Requests(sandbox.RouteHubSpotNoteBatchUpdate); one != 1 || batches != 1 {
		t.Errorf("single updates %d, batch updates %d; want 1 and 1", one, batches)
	}
}

// Concurrent contact creates go as one batch create; one e-mail HubSpot has refuses
// the batch (409), so each is created alone: that one gets its own 409 naming the
// contact, the others are created once.
func TestConcurrentContactCreatesGoAsOneBatch(t *testing.T) {
	sb, c, h, ids := portal(t, isPost("/crm/v3/objects/contacts"), "taken@example.com")
	emails := []string{"a@example.com", "b@example.com", "c@example.com"}
	errs := burst(t, h, c.contactCreates, len(emails), func(i int) error {
		contact, err := c.CreateContact(context.Background(), map[string]string{"email": emails[i], "firstname": "X"})
		if err == nil && contact.Properties["email"] != emails[i] {
			return fmt.Errorf("answered contact %s (%s)", contact.ID, contact.Properties["email"])
		}
		return err
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("%s: %v", emails[i], err)
		}
	}
	if one, batches, inputs := sb.Requests(sandbox.RouteHubSpotContactCreate), sb.Requests(sandbox.RouteHubSpotContactBatchNew),
		sb.ContactCreates(); one != 1 || batches != 1 || inputs != 3 {
		t.Errorf("single creates %d, batch creates %d, contacts asked %d; want 1, 1, 3", one, batches, inputs)
	}

	// A batch holding an e-mail HubSpot has.
	h2 := &holdFirst{hold: isPost("/crm/v3/objects/contacts"), entered: make(chan struct{}), release: make(chan struct{})}
	c.h.Client = &http.Client{Transport: h2}
	more := []string{"d@example.com", "e@example.com", "taken@example.com", "f@example.com"}
	errs = burst(t, h2, c.contactCreates, len(more), func(i int) error {
		_, err := c.CreateContact(context.Background(), map[string]string{"email": more[i]})
		return err
	})
	if id, ok := ExistingID(errs[2]); !ok || id != ids[0] {
		t.Errorf("the e-mail HubSpot has: %v; want its own 409 naming contact %s", errs[2], ids[0])
	}
	for _, i := range []int{0, 1, 3} {
		if errs[i] != nil {
			t.Errorf("%s: %v", more[i], errs[i])
		}
	}
	if made := len(sb.Contacts()); made != 1+3+3 {
		t.Errorf("%d contacts in the portal, want 7 (one each)", made)
	}
}

// Concurrent upserts, and then concurrent reads by key, go as one request each past the
// first: each caller gets its own note (and whether it was made now, or found).
func TestConcurrentUpsertsAndReadsByKeyGoAsOneBatch(t *testing.T) {
	sb, c, h, contacts := portal(t, isPost("/crm/v3/objects/notes/batch/upsert"), "a@example.com")
	ctx := context.Background()
	old, err := c.createNote(ctx, Note{ContactID: contacts[0], Body: "written before", ExternalID: "evt-old"})
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"evt-0", "evt-1", "evt-old", "evt-3"}
	up := make([]upserted, len(keys))
	errs := burst(t, h, c.upserts, len(keys), func(i int) (err error) {
		up[i].note, up[i].created, err = c.UpsertNote(ctx, Note{Body: "reply " + keys[i], ExternalID: keys[i]})
		return err
	})
	for i, k := range keys {
		if errs[i] != nil || up[i].note.ID == "" || up[i].created != (k != "evt-old") || sb.NotesWithExternalID(k) != 1 {
			t.Errorf("%s: %+v, %v; want one note, created unless it was there", k, up[i], errs[i])
		}
	}
	if up[2].note.ID != old.ID {
		t.Errorf("the note already there answered as %s, want %s", up[2].note.ID, old.ID)
	}
	if reqs, inputs := sb.Requests(sandbox.RouteHubSpotNoteUpsert), sb.Inputs(sandbox.RouteHubSpotNoteUpsert); reqs != 2 || inputs != 4 {
		t.Errorf("%d upsert requests carrying %d notes; want 2 and 4", reqs, inputs)
	}

	h2 := &holdFirst{hold: isPost("/crm/v3/objects/notes/batch/read"), entered: make(chan struct{}), release: make(chan struct{})}
	c.h.Client = &http.Client{Transport: h2}
	read := []string{"evt-0", "evt-missing", "evt-old", "evt-3"}
	got := make([]foundNote, len(read))
	errs = burst(t, h2, c.noteReads, len(read), func(i int) (err error) {
		got[i].note, got[i].ok, err = c.NoteByExternalID(ctx, read[i])
		return err
	})
	for i, k := range read {
		if errs[i] != nil || got[i].ok != (k != "evt-missing") || got[i].ok && got[i].note.ExternalID != k {
			t.Errorf("read %s: %+v, %v", k, got[i], errs[i])
		}
	}
	if reqs := sb.Requests(sandbox.RouteHubSpotNoteRead); reqs != 2 {
		t.Errorf("%d read requests, want 2 (the held one and one batch; the missing key answered by it)", reqs)
	}
}

// Callers waiting for a batch whose turn at the rate comes after every one's deadline
// (the account held by a 429) get what a caller alone gets: never sent, with the wait
// for the consumers' pacer; nothing goes out behind them.
func TestBatchPastTheCallersDeadlinesIsNeverSent(t *testing.T) {
	limit := ratelimit.NewLocal(ratelimit.Rate{N: 1000, Per: time.Second})
	sb, c, h, contacts := pacedPortal(t, limit, isPost("/crm/v3/objects/notes"), "a@example.com")
	h.beforeRelease = func() { limit.Hold(context.Background(), 4*time.Second) }
	errs := burst(t, h, c.creates, 4, func(i int) error {
		ctx := context.Background()
		if i > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
		}
		_, err := c.CreateNote(ctx, Note{ContactID: contacts[0], Body: "reply", ExternalID: fmt.Sprint("evt-", i)})
		return err
	})
	if errs[0] != nil {
		t.Errorf("the held create: %v", errs[0])
	}
	for i := 1; i < 4; i++ {
		var e *platform.Error
		if !errors.As(errs[i], &e) || !e.Transient || !e.Unsent || e.RetryAfter < 3*time.Second {
			t.Errorf("create %d: %#v; want never sent, transient, with the hold's wait", i, errs[i])
		}
	}
	if n := sb.Requests(sandbox.RouteHubSpotNoteBatchCreate) + sb.Requests(sandbox.RouteHubSpotNoteCreate); n != 1 {
		t.Errorf("%d note creates sent, want the held one alone", n)
	}
}

// A caller that leaves while its batch still waits for its turn at the rate is told its
// input was never sent (the breaker does not count it); the others are answered when
// the turn comes.
func TestCallerLeavingABatchNotYetSentIsUnsent(t *testing.T) {
	limit := ratelimit.NewLocal(ratelimit.Rate{N: 1000, Per: time.Second})
	sb, c, h, contacts := pacedPortal(t, limit, isPost("/crm/v3/objects/notes"), "a@example.com")
	h.beforeRelease = func() { limit.Hold(context.Background(), 2*time.Second) }
	errs := burst(t, h, c.creates, 4, func(i int) error {
		wait := map[int]time.Duration{0: time.Minute, 1: 500 * time.Millisecond}[i]
		ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(wait, 10*time.Second))
		defer cancel()
		_, err := c.CreateNote(ctx, Note{ContactID: contacts[0], Body: "reply", ExternalID: fmt.Sprint("evt-", i)})
		return err
	})
	var e *platform.Error
	if !errors.As(errs[1], &e) || !e.Unsent || !e.Transient {
		t.Errorf("the caller gone before the batch's turn: %#v; want transient and never sent", errs[1])
	}
	for _, i := range []int{0, 2, 3} {
		if errs[i] != nil || sb.NotesWithExternalID(fmt.Sprint("evt-", i)) != 1 {
			t.Errorf("evt-%d: %v", i, errs[i])
		}
	}
}

// Every caller's own HTTP trace sees its batch's request go out, and stays its own: a
// later request on one caller's context does not run another's hooks.
func TestEachCallersTraceSeesItsBatch(t *testing.T) {
	sb, c, h, contacts := portal(t, isPost("/crm/v3/objects/notes"), "a@example.com")
	const n = 4
	var wrote [n]atomic.Int32
	ctxs := make([]context.Context, n)
	for i := range n {
		ctxs[i] = httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{WroteHeaders: func() { wrote[i].Add(1) }})
	}
	burst(t, h, c.creates, n, func(i int) error {
		_, err := c.CreateNote(ctxs[i], Note{ContactID: contacts[0], Body: "reply", ExternalID: fmt.Sprint("evt-", i)})
		return err
	})
	for i := range n {
		if got := wrote[i].Load(); got != 1 {
			t.Errorf("caller %d's trace saw %d requests, want 1 (its own, or its batch)", i, got)
		}
	}
	if _, err := c.createNote(ctxs[3], Note{ContactID: contacts[0], Body: "later", ExternalID: "evt-later"}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if want := map[bool]int32{true: 2, false: 1}[i == 3]; wrote[i].Load() != want {
			t.Errorf("after a request of caller 3 alone, caller %d's trace saw %d, want %d", i, wrote[i].Load(), want)
		}
	}
	if sb.Requests(sandbox.RouteHubSpotNoteBatchCreate) != 1 {
		t.Fatal("no batch")
	}
}

// A panic sending a batch fails each of its callers permanently, with the stack; the
// process lives and the batcher goes on.
func TestPanicInABatchFailsItsCallers(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{})
	var first sync.Once
	b := &batcher[int, int]{
		one: func(_ context.Context, in int) (int, error) {
			first.Do(func() { close(entered); <-release })
			return in, nil
		},
		many: func(context.Context, []int) ([]int, []bool, error) { panic("boom") },
	}
	h := &holdFirst{entered: entered, release: release}
	errs := burst(t, h, b, 3, func(i int) error { _, err := b.do(context.Background(), i); return err })
	if errs[0] != nil {
		t.Errorf("the first, alone: %v", errs[0])
	}
	for _, err := range errs[1:] {
		var e *platform.Error
		if !errors.As(err, &e) || e.Transient || !strings.Contains(e.Msg, "panic sending a batch request: boom") || !strings.Contains(e.Msg, "goroutine") {
			t.Errorf("a caller of the batch that panicked: %v; want a permanent error with the stack", err)
		}
	}
	if out, err := b.do(context.Background(), 7); out != 7 || err != nil {
		t.Errorf("after the panic: %d, %v", out, err)
	}
}

// A batch's answer holds every note it read or wrote: 20 notes of 60,000 characters
// (more than a single answer's 1 MiB) are read as one batch.
func TestLargeBatchAnswers(t *testing.T) {
	sb, c, h, contacts := portal(t, func(*http.Request) bool { return false }, "a@example.com")
	ctx := context.Background()
	body := strings.Repeat("é", 60000)
	const n = 20
	for i := range n {
		if _, err := c.createNote(ctx, Note{ContactID: contacts[0], Body: body, ExternalID: fmt.Sprint("evt-", i)}); err != nil {
			t.Fatal(err)
		}
	}
	h.hold = isPost("/crm/v3/objects/notes/batch/read")
	got := make([]foundNote, n)
	errs := burst(t, h, c.noteReads, n, func(i int) (err error) {
		got[i].note, got[i].ok, err = c.NoteByExternalID(ctx, fmt.Sprint("evt-", i))
		return err
	})
	for i := range n {
		if errs[i] != nil || !got[i].ok || got[i].note.Body != body {
			t.Fatalf("read %d: found %v, %d characters, %v", i, got[i].ok, len([]rune(got[i].note.Body)), errs[i])
		}
	}
	if reqs := sb.Requests(sandbox.RouteHubSpotNoteRead); reqs != 2 {
		t.Errorf("%d reads, want 2 (the held one and one batch)", reqs)
	}
}

// A batch refused whole for one input's sake (a key HubSpot already holds: 409) is
// sent again one input at a time: that input gets its own 409, the others are created.
func TestBatchRefusedWholeIsSentOneByOne(t *testing.T) {
	sb, c, h, contacts := portal(t, func(*http.Request) bool { return false }, "a@example.com")
	ctx := context.Background()
	held, err := c.createNote(ctx, Note{ContactID: contacts[0], Body: "already there", ExternalID: "evt-taken"})
	if err != nil {
		t.Fatal(err)
	}
	h.hold = isPost("/crm/v3/objects/notes")
	keys := []string{"evt-first", "evt-1", "evt-taken", "evt-2"}
	errs := burst(t, h, c.creates, len(keys), func(i int) error {
		_, err := c.CreateNote(ctx, Note{ContactID: contacts[0], Body: "reply", ExternalID: keys[i]})
		return err
	})
	if id, ok := ExistingID(errs[2]); !ok || id != held.ID {
		t.Errorf("the taken key: %v; want its own 409 naming note %s", errs[2], held.ID)
	}
	for _, i := range []int{0, 1, 3} {
		if errs[i] != nil || sb.NotesWithExternalID(keys[i]) != 1 {
			t.Errorf("%s: %v, %d notes; want created once", keys[i], errs[i], sb.NotesWithExternalID(keys[i]))
		}
	}
	if sb.NotesWithExternalID("evt-taken") != 1 {
		t.Errorf("%d notes with the taken key", sb.NotesWithExternalID("evt-taken"))
	}
	// The setup's create, the held one, the three the refused batch held, one at a time.
	if one, batches := sb.Requests(sandbox.RouteHubSpotNoteCreate), sb.Requests(sandbox.RouteHubSpotNoteBatchCreate); one != 5 || batches != 1 {
		t.Errorf("single creates %d, batch creates %d; want 5 and 1", one, batches)
	}
}

// A batch that fails as a whole (a 503, a 429) fails each caller with its error, and
// writes nothing; nothing is sent again behind the callers' backs.
func TestBatchFailureFailsEachCaller(t *testing.T) {
	sb, c, h, contacts := portal(t, isPost("/crm/v3/objects/notes"), "a@example.com")
	sb.SetFault(sandbox.RouteHubSpotNoteBatchCreate, sandbox.Fault{Status: http.StatusServiceUnavailable, Count: 1})
	errs := burst(t, h, c.creates, 4, func(i int) error {
		_, err := c.CreateNote(context.Background(), Note{ContactID: contacts[0], Body: "reply", ExternalID: fmt.Sprint("evt-", i)})
		return err
	})
	if errs[0] != nil {
		t.Errorf("the held create: %v", errs[0])
	}
	for i := 1; i < 4; i++ {
		var e *platform.Error
		if pe, ok := errs[i].(*platform.Error); ok {
			e = pe
		}
		if e == nil || e.Status != http.StatusServiceUnavailable || !e.Transient {
			t.Errorf("create %d: %v; want the batch's transient 503", i, errs[i])
		}
		if n := sb.NotesWithExternalID(fmt.Sprint("evt-", i)); n != 0 {
			t.Errorf("evt-%d: %d notes after the batch failed", i, n)
		}
	}
	if one, batches := sb.Requests(sandbox.RouteHubSpotNoteCreate), sb.Requests(sandbox.RouteHubSpotNoteBatchCreate); one != 1 || batches != 1 {
		t.Errorf("single creates %d, batch creates %d; want 1 and 1", one, batches)
	}
}

// A caller whose context ends while it waits returns, and its input is not sent.
func TestCallerGoneWhileWaitingIsNotSent(t *testing.T) {
	sb, c, h, contacts := portal(t, isPost("/crm/v3/objects/notes"), "a@example.com")
	gone, leave := context.WithCancel(context.Background())
	h.beforeRelease = leave
	errs := burst(t, h, c.creates, 4, func(i int) error {
		ctx := context.Background()
		if i == 2 {
			ctx = gone
		}
		_, err := c.CreateNote(ctx, Note{ContactID: contacts[0], Body: "reply", ExternalID: fmt.Sprint("evt-", i)})
		return err
	})
	if errs[2] == nil || !errors.Is(errs[2], context.Canceled) && !strings.Contains(errs[2].Error(), "canceled") {
		t.Errorf("the caller gone: %v; want its context's end", errs[2])
	}
	if sb.NotesWithExternalID("evt-2") != 0 {
		t.Error("the input of a caller gone before the batch was sent was written")
	}
	for _, i := range []int{0, 1, 3} {
		if errs[i] != nil || sb.NotesWithExternalID(fmt.Sprint("evt-", i)) != 1 {
			t.Errorf("evt-%d: %v", i, errs[i])
		}
	}
	if inputs := sb.Inputs(sandbox.RouteHubSpotNoteBatchCreate); inputs != 2 {
		t.Errorf("the batch carried %d notes, want 2", inputs)
	}
}
