// Package handler is the crmwriter: every reply becomes exactly one CRM activity in
// HubSpot (a note on the contact's timeline, carrying our event id in the unique note
// property exacto_event_id, which the crmwriter makes at start-up and refuses to start
// without), and so does every booked meeting and created opportunity.
//
// Per event type:
//
//   - reply.received: the contact is read by the HubSpot id the contact directory
//     (pkg/contacts) has recorded for it, else read by e-mail (the unique email
//     property: no search), else created (email, first and last name, phone, owner);
//     on a contact that exists only properties it lacks are filled, so nothing a
//     salesperson typed is overwritten. Then the note: read by the event id (batch
//     read by idProperty), upserted by it only when absent (batch upsert by idProperty:
//     a repeat is the same note), associated with the contact (v4 default association),
//     timestamped at the reply's time, owned by the first routing rule that matches
//     (label "" before classification). A reply written without an owner counts in
//     exacto_replies_without_owner.
//   - reply.classified: the reply's own note (exacto_event_id = Data.Cause) is read by
//     its key — or, when this process wrote it in the last 30 s, taken as it wrote it
//     (recent.go) — and updated in place with the label, confidence, action and
//     evidence, and gets the owner of a routing rule that matches the label. Still one activity
//     per reply. If that note is not there yet (the classification overtook its
//     reply), the attempt fails transiently and is retried. The
//     classification of a reply that names no e-mail (a WhatsApp, Instagram or
//     Messenger message, whose contact is a phone or a page-scoped id) completes
//     without effect: that reply gets no note.
//   - meeting.booked, opportunity.created: one note each, keyed by the event id, on
//     the contact named by e-mail (the meeting's invitee, else the event's contact).
//     An event that names no e-mail completes without effect and is logged: there is
//     no contact to put it on, and retrying cannot make one appear.
//
// Exactly once: a write whose answer was lost (a timeout after HubSpot committed it) is
// retried as a transient error; the retry reads the note by its key, and writes only
// by upsert on that key, so HubSpot itself keeps one note per event whatever the
// timing — search, which lags behind writes, is never asked. Contacts are read by
// e-mail the same way (a create that meets a 409 reads the contact by e-mail again).
// Every attempt looks before it writes, so Event.Resumed (an attempt that died
// mid-effect) needs no path of its own. The consumer framework's guard makes a
// completed event a no-op.
//
// Every HubSpot request goes through Event.Call, one request per call, so a 429's
// Retry-After holds every event's next request and the breaker stops calls while
// HubSpot is down. Concurrent events' calls of one kind (contact reads and creates,
// note reads, creates, upserts and updates) may share one batch request
// (pkg/platform/hubspot/batch.go); each event still gets its own answer. Errors keep
// pkg/platform's class: 400/401/403/404 are dead-lettered at once, timeouts, 429 and
// 5xx retried. A reply that names no e-mail is
// dead-lettered: HubSpot contacts are matched by e-mail, and a person must look.
//
// What was written (contact id, note id) is logged and handed to Options.OnWritten.
package handler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"html"
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"exacto.dev/pkg/confirm"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform"
	"exacto.dev/pkg/platform/hubspot"
	"exacto.dev/pkg/retry"
	"exacto.dev/pkg/service"
	"exacto.dev/pkg/stream"
)

// Dependency is the name HubSpot calls are paced and broken under.
const Dependency = "hubspot"

// repliesWithoutOwner counts replies written to the CRM with no owner: no routing rule
// matched, so nobody is notified of them.
var repliesWithoutOwner, _ = otel.Meter("exacto/crmwriter").Int64Counter("exacto_replies_without_owner",
	metric.WithDescription("replies written to the CRM without an owner (no routing rule matched), by tenant and provider"))

// Written is what one event left in HubSpot.
type Written struct {
	EventID string
	// ExternalID is the note's exacto_event_id: the event's own id, or for
	// reply.classified the reply's (the note it updated).
	ExternalID string
	// ContactID is the note's contact; empty for reply.classified, whose note was
	// found by its key (the reply's own Written named the contact).
	ContactID string
	NoteID    string
	Phone     string // the contact's phone as HubSpot holds it, "" for none
	Owner     string // the note's hubspot_owner_id, "" for none
	Created   bool   // this attempt created the note (false: it was there, or was updated)
}

// Options configure the handler.
type Options struct {
	// HubSpot gives a tenant's HubSpot client; false for a tenant not configured
	// (its events are dead-lettered).
	HubSpot func(tenant string) (*hubspot.Client, bool)
	// Route is the routing rules: the owner of tenant's activity from provider in
	// campaign with label ("" before classification), "" when no rule matches.
	Route func(tenant, provider, campaign, label string) string
	// OnWritten, if set, hears each written activity after HubSpot has it. Its error
	// fails the attempt (classified like any handler error): on retry the note is
	// found again and OnWritten called again, so it must be idempotent.
	OnWritten func(ctx context.Context, env envelope.Envelope, w Written) error
	// Known, if set, gives the HubSpot contact id already recorded for tenant's contact
	// with email ("" if none): the contact is then read by its id, and by e-mail only
	// when it has none (or HubSpot no longer has it).
	Known func(ctx context.Context, tenant, email string) (string, error)
	// Linked, if set, gives the contact tenant's directory links to HubSpot contact id
	// (ok false: none); Publish stores a derived event. With both, the crmwriter puts
	// on the stream what HubSpot told it of who a contact is (contact.identified,
	// identify.go), once: the projector resolves contacts from the stream alone.
	Linked  func(ctx context.Context, tenant, hubspotID string) (rec contacts.Record, ok bool, err error)
	Publish func(ctx context.Context, env envelope.Envelope) error
	Log     *slog.Logger
}

type writer struct {
	o     Options
	notes *recentNotes // the notes just written for replies (recent.go)
}

// New returns the crmwriter's handler.
func New(o Options) consumer.Handler {
	if o.Route == nil {
		o.Route = func(string, string, string, string) string { return "" }
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return (&writer{o: o, notes: newRecentNotes()}).handle
}

// Run runs the crmwriter's consumer until ctx ends, once every tenant's HubSpot portal
// holds the note property (EnsureProperty).
func Run(ctx context.Context, env *service.Env, up func()) error {
	dir, err := contacts.Open(ctx, env.Conn.JS)
	if err != nil {
		return err
	}
	d, err := env.Deriver(ctx)
	if err != nil {
		return err
	}
	if err := EnsureProperty(ctx, env.Config.TenantIDs(), func(tenant string) *hubspot.Client {
		c, _ := env.Platforms.For(tenant)
		return c.HubSpot
	}, env.Log); err != nil {
		return err
	}
	gate, err := env.Gate(ctx)
	if err != nil {
		return err
	}
	h := New(Options{
		HubSpot: func(tenant string) (*hubspot.Client, bool) {
			c, ok := env.Platforms.For(tenant)
			return c.HubSpot, ok && c.HubSpot != nil
		},
		Route:   env.Config.CRMOwner,
		Known:   Known(dir),
		Linked:  Linked(dir),
		Publish: d.Publish,
		Log:     env.Log,
	})
	// Every event it takes is written: an unsigned one is confirmed at its source first.
	// Its workers (stream.go: 8) are what batches HubSpot's requests: the more events
	// under way while a request waits for the portal's rate, the more share the next.
	acts := func(envelope.Envelope) bool { return true }
	return env.Consume(ctx, stream.CRMWriter, up, consumer.Options{Handle: gate.Wrap(acts, h), Dependencies: consumer.On(Dependency)})
}

// propertyRetry is how long EnsureProperty waits between tries of a portal that does
// not answer.
var propertyRetry = 5 * time.Second

// EnsureProperty makes sure every tenant's portal has the note property exacto_event_id
// with unique values before a note is written (hubspot.EnsureNoteProperty). A portal
// that refuses it, or holds one without unique values, stops the start with the
// problem named: without it one note per reply cannot be kept. A portal that does not
// answer (down, 429, a network error) is asked again until ctx ends: events wait in the
// stream meanwhile.
func EnsureProperty(ctx context.Context, tenants []string, client func(tenant string) *hubspot.Client, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, t := range tenants {
		hs := client(t)
		if hs == nil {
			continue
		}
		for {
			err := hs.EnsureNoteProperty(ctx)
			if err == nil {
				break
			}
			if errors.Is(err, hubspot.ErrNoUniqueProperty) || !platform.IsTransient(err) {
				return fmt.Errorf("crmwriter: tenant %s: HubSpot: %w", t, err)
			}
			log.Warn("crmwriter: HubSpot did not answer about the note property; asking again", "tenant", t, "err", err, "in", propertyRetry)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(propertyRetry):
			}
		}
	}
	return nil
}

// Known finds the HubSpot contact id dir has for a contact's e-mail (the greatest, when
// one person has two HubSpot contacts: the reconciler reports those).
func Known(dir *contacts.Directory) func(ctx context.Context, tenant, email string) (string, error) {
	return func(ctx context.Context, tenant, email string) (string, error) {
		rec, ok, err := dir.Find(ctx, tenant, "email", email)
		if err != nil || !ok {
			return "", err
		}
		ids := rec.External[contacts.CRMContactID]
		for i := len(ids) - 1; i >= 0; i-- {
			if id, ok := strings.CutPrefix(ids[i], "hubspot:"); ok {
				return id, nil
			}
		}
		return "", nil
	}
}

func (w *writer) handle(ctx context.Context, ev consumer.Event) error {
	env := ev.Envelope
	hs, ok := w.o.HubSpot(env.Tenant)
	if !ok {
		return retry.Permanently(stream.CRMWriter, fmt.Errorf("tenant %q has no HubSpot account configured", env.Tenant))
	}
	var (
		res Written
		err error
	)
	switch env.Type {
	case envelope.TypeReplyReceived:
		res, err = w.reply(ctx, ev, hs)
	case envelope.TypeReplyClassified:
		res, err = w.classified(ctx, ev, hs)
	case envelope.TypeMeetingBooked, envelope.TypeOpportunityCreated:
		res, err = w.activity(ctx, ev, hs)
	case envelope.TypeContactUpdated, envelope.TypeLeadStatusChanged, envelope.TypeLeadUnsubscribed:
		return w.identify(ctx, ev, hs) // HubSpot's own events of a contact named by its id
	default:
		w.o.Log.Warn("crmwriter: event type not written to the CRM", "id", env.ID, "type", env.Type)
		return nil
	}
	if err != nil || res.NoteID == "" {
		return err
	}
	w.o.Log.InfoContext(ctx, "crm activity written", "id", env.ID, "type", env.Type, "tenant", env.Tenant,
		"hubspot_contact_id", res.ContactID, "hubspot_note_id", res.NoteID, "external_id", res.ExternalID,
		"owner", res.Owner, "created", res.Created, "resumed", ev.Resumed, "attempt", ev.Attempt)
	if err := w.link(ctx, env, res.ContactID, "", res.Phone); err != nil {
		return fmt.Errorf("after writing note %s: %w", res.NoteID, err)
	}
	if w.o.OnWritten != nil {
		if err := w.o.OnWritten(ctx, env, res); err != nil {
			return fmt.Errorf("after writing note %s: %w", res.NoteID, err)
		}
	}
	// Counted once the reply is completed: once however many attempts it took (one
	// whose completion failed is done again, and finds its note written).
	if env.Type == envelope.TypeReplyReceived && res.Owner == "" {
		ev.Completed(ctx, func(ctx context.Context) { repliesWithoutOwner.Add(ctx, 1, ev.MetricAttrs()) })
	}
	return nil
}

func (w *writer) reply(ctx context.Context, ev consumer.Event, hs *hubspot.Client) (Written, error) {
	env := ev.Envelope
	c := env.Data.Contact
	if c == nil || c.Email == "" {
		return Written{}, retry.Permanently(stream.CRMWriter, errors.New("the reply names no e-mail: HubSpot contacts are matched by e-mail"))
	}
	owner := w.o.Route(env.Tenant, env.Provider, campaignID(env), "")
	contact, err := w.upsertContact(ctx, ev, hs, c.Email, contactProps(c, owner))
	if err != nil {
		return Written{}, err
	}
	if text, ok := confirm.Text(ctx); ok && env.Data.Message != nil {
		m := *env.Data.Message
		m.Text = text // the reply as its source holds it, not as the webhook claims
		env.Data.Message = &m
	}
	res, err := w.ensureNote(ctx, ev, hs, hubspot.Note{ContactID: contact.ID, Body: replyBody(env),
		Timestamp: eventTime(env), OwnerID: owner, ExternalID: env.ID})
	res.Phone = contact.Properties["phone"]
	return res, err
}

func (w *writer) classified(ctx context.Context, ev consumer.Event, hs *hubspot.Client) (Written, error) {
	env := ev.Envelope
	cl, key := env.Data.Classification, env.Data.Cause
	if cl == nil || cl.Label == "" || key == "" {
		return Written{}, retry.Permanently(stream.CRMWriter, errors.New("reply.classified without a label or the reply's id (cause)"))
	}
	if c := env.Data.Contact; c == nil || c.Email == "" {
		// A chat message (a phone, no e-mail) or a reply without an e-mail: its reply
		// has no note (see reply), so waiting for one would only end in a dead letter.
		w.o.Log.InfoContext(ctx, "crmwriter: classification of a reply without an e-mail, no note to update", "id", env.ID, "cause", key, "channel", env.Channel)
		return Written{}, nil
	}
	// The note this process just wrote for the reply, if it did (recent.go), else
	// HubSpot's.
	note, remembered := w.notes.take(env.Tenant, key, time.Now())
	found := remembered
	if !remembered {
		err := ev.Call(ctx, Dependency, func(ctx context.Context) (err error) {
			note, found, err = hs.NoteByExternalID(ctx, key)
			return err
		})
		if err != nil {
			return Written{}, fmt.Errorf("read the reply's note: %w", err)
		}
	}
	if !found {
		// Outside Event.Call on purpose: HubSpot answered, so the breaker must not
		// count this against it.
		return Written{}, retry.Transiently(stream.CRMWriter, fmt.Errorf("the note of reply %s is not in HubSpot yet", key))
	}
	props := map[string]string{}
	if body := withClassification(note.Body, cl); body != note.Body {
		props["hs_note_body"] = body
	}
	owner := note.OwnerID
	// A label rule may name an owner; no match keeps the owner the reply got.
	if routed := w.o.Route(env.Tenant, env.Provider, campaignID(env), cl.Label); routed != "" && routed != owner {
		props["hubspot_owner_id"] = routed
		owner = routed
	}
	res := Written{EventID: env.ID, ExternalID: key, NoteID: note.ID, Owner: owner}
	if len(props) == 0 {
		return res, nil // already written: a repeat changes nothing
	}
	err := ev.Call(ctx, Dependency, func(ctx context.Context) error {
		_, err := hs.UpdateNote(ctx, note.ID, props)
		return err
	})
	if remembered && platform.StatusOf(err) == http.StatusNotFound {
		// Gone since it was written (archived, merged): what HubSpot holds now decides,
		// read by the note's key (the memory was taken).
		return w.classified(ctx, ev, hs)
	}
	if err != nil {
		return Written{}, fmt.Errorf("update note %s: %w", note.ID, err)
	}
	return res, nil
}

func (w *writer) activity(ctx context.Context, ev consumer.Event, hs *hubspot.Client) (Written, error) {
	env := ev.Envelope
	email, c := "", env.Data.Contact
	if c != nil {
		email = c.Email
	}
	if m := env.Data.Meeting; m != nil && strings.Contains(m.Invitee, "@") {
		email = m.Invitee
	}
	if email == "" {
		w.o.Log.Warn("crmwriter: event names no e-mail; nothing written", "id", env.ID, "type", env.Type, "tenant", env.Tenant)
		return Written{}, nil
	}
	if c == nil {
		c = &envelope.Contact{}
	}
	owner := w.o.Route(env.Tenant, env.Provider, campaignID(env), "")
	contact, err := w.upsertContact(ctx, ev, hs, email, contactProps(c, owner))
	if err != nil {
		return Written{}, err
	}
	res, err := w.ensureNote(ctx, ev, hs, hubspot.Note{ContactID: contact.ID, Body: activityBody(env),
		Timestamp: eventTime(env), OwnerID: owner, ExternalID: env.ID})
	res.Phone = contact.Properties["phone"]
	return res, err
}

// ensureNote is hubspot.EnsureNote with each request made through ev.Call: read the
// note by the external id, upsert it by that id only if absent, associate it with the
// contact either way. A New event's note cannot exist (only an attempt of this event
// writes it, and none came before): it is created with its association in one request,
// without the read; should HubSpot hold one with its key all the same (409), the
// attempt goes on as a retry would.
func (w *writer) ensureNote(ctx context.Context, ev consumer.Event, hs *hubspot.Client, n hubspot.Note) (Written, error) {
	res := Written{EventID: ev.Envelope.ID, ExternalID: n.ExternalID, ContactID: n.ContactID, Owner: n.OwnerID}
	var (
		note  hubspot.Note
		found bool
		err   error
	)
	if ev.New {
		err = ev.Call(ctx, Dependency, func(ctx context.Context) (err error) {
			note, err = hs.CreateNote(ctx, n)
			return err
		})
		switch {
		case err == nil:
			res.NoteID, res.Created = note.ID, true
			w.remember(ev, note.ID, n)
			return res, nil
		case platform.StatusOf(err) != http.StatusConflict:
			return Written{}, fmt.Errorf("create note: %w", err)
		}
	}
	// Not New, or New and refused with a 409: read the note by its key.
	err = ev.Call(ctx, Dependency, func(ctx context.Context) (err error) {
		note, found, err = hs.NoteByExternalID(ctx, n.ExternalID)
		return err
	})
	if err != nil {
		return Written{}, fmt.Errorf("read note: %w", err)
	}
	inHubSpot := n // the note as it now is in HubSpot: found as it is, or upserted as n
	if found {
		// An earlier attempt wrote it (its answer lost, or it died before recording).
		ev.EffectFound(ctx)
		res.Owner = note.OwnerID
		inHubSpot.Body, inHubSpot.OwnerID = note.Body, note.OwnerID
	} else {
		err = ev.Call(ctx, Dependency, func(ctx context.Context) (err error) {
			note, res.Created, err = hs.UpsertNote(ctx, n)
			return err
		})
		if err != nil {
			return Written{}, fmt.Errorf("upsert note: %w", err)
		}
		if !res.Created {
			ev.EffectFound(ctx) // committed by an earlier attempt, not yet readable then
		}
	}
	res.NoteID = note.ID
	err = ev.Call(ctx, Dependency, func(ctx context.Context) error { return hs.Associate(ctx, note.ID, n.ContactID) })
	if err != nil {
		return Written{}, fmt.Errorf("associate note %s with contact %s: %w", note.ID, n.ContactID, err)
	}
	w.remember(ev, note.ID, inHubSpot)
	return res, nil
}

// remember keeps a reply's note n, written with id, for its classification
// (recent.go).
func (w *writer) remember(ev consumer.Event, id string, n hubspot.Note) {
	if ev.Envelope.Type == envelope.TypeReplyReceived {
		n.ID = id
		w.notes.put(ev.Envelope.Tenant, ev.Envelope.ID, n, time.Now())
	}
}

// upsertContact finds the contact by e-mail or creates it with want; on a contact that
// exists it fills only the properties it lacks.
func (w *writer) upsertContact(ctx context.Context, ev consumer.Event, hs *hubspot.Client, email string, want map[string]string) (hubspot.Contact, error) {
	email = strings.ToLower(strings.TrimSpace(email))
	c, found, err := w.known(ctx, ev, hs, email)
	if err != nil {
		return c, err
	}
	byEmail := func() error {
		err := ev.Call(ctx, Dependency, func(ctx context.Context) (err error) {
			c, found, err = hs.ContactByEmail(ctx, email)
			return err
		})
		if err != nil {
			return fmt.Errorf("read contact by e-mail: %w", err)
		}
		return nil
	}
	if !found {
		if err := byEmail(); err != nil {
			return c, err
		}
	}
	if !found {
		props := maps.Clone(want)
		props["email"] = email
		err = ev.Call(ctx, Dependency, func(ctx context.Context) (err error) {
			c, err = hs.CreateContact(ctx, props)
			return err
		})
		if platform.StatusOf(err) != http.StatusConflict {
			if err != nil {
				return c, fmt.Errorf("create contact: %w", err)
			}
			return c, nil
		}
		// Created meanwhile (by another event, or our own timed-out attempt): read it,
		// so that only what it lacks is filled.
		if err := byEmail(); err != nil {
			return c, err
		}
		if !found {
			return c, retry.Transiently(Dependency, fmt.Errorf("HubSpot says a contact with %s exists (409) and reading it by e-mail finds none", email))
		}
	}
	patch := map[string]string{}
	for k, v := range want {
		if strings.TrimSpace(c.Properties[k]) == "" {
			patch[k] = v
		}
	}
	if len(patch) == 0 {
		return c, nil
	}
	err = ev.Call(ctx, Dependency, func(ctx context.Context) error {
		_, err := hs.UpdateContact(ctx, c.ID, patch)
		return err
	})
	if err != nil {
		return c, fmt.Errorf("update contact %s: %w", c.ID, err)
	}
	return c, nil
}

// known reads the contact by the HubSpot id already recorded for email, if any: no
// search (HubSpot's scarcest rate), and the same contact even if HubSpot's e-mail for it
// changed. A recorded id HubSpot no longer has counts as unknown.
func (w *writer) known(ctx context.Context, ev consumer.Event, hs *hubspot.Client, email string) (hubspot.Contact, bool, error) {
	if w.o.Known == nil {
		return hubspot.Contact{}, false, nil
	}
	id, err := w.o.Known(ctx, ev.Envelope.Tenant, email)
	if err != nil {
		return hubspot.Contact{}, false, retry.Transiently("contacts", err)
	}
	if id == "" {
		return hubspot.Contact{}, false, nil
	}
	var c hubspot.Contact
	err = ev.Call(ctx, Dependency, func(ctx context.Context) (err error) {
		c, err = hs.GetContact(ctx, id)
		return err
	})
	if platform.StatusOf(err) == http.StatusNotFound {
		w.o.Log.Warn("recorded HubSpot contact is gone; searching by e-mail", "id", ev.Envelope.ID, "hubspot_contact_id", id)
		return hubspot.Contact{}, false, nil
	}
	if err != nil {
		return c, false, fmt.Errorf("read contact %s: %w", id, err)
	}
	return c, true, nil
}

// contactProps are the contact properties an event justifies: the name split at the
// first space (HubSpot keeps first and last name apart), the phone, and the routed
// owner for a contact nobody owns yet.
func contactProps(c *envelope.Contact, owner string) map[string]string {
	p := map[string]string{}
	if first, last, _ := strings.Cut(strings.TrimSpace(c.Name), " "); first != "" && !strings.Contains(first, "@") {
		p["firstname"] = first
		if last = strings.TrimSpace(last); last != "" {
			p["lastname"] = last
		}
	}
	if c.Phone != "" {
		p["phone"] = c.Phone
	}
	if owner != "" {
		p["hubspot_owner_id"] = owner
	}
	return p
}

func campaignID(env envelope.Envelope) string {
	if c := env.Data.Campaign; c != nil {
		return c.ID
	}
	return ""
}

// eventTime places the note on the timeline: when it happened, else when we heard.
func eventTime(env envelope.Envelope) time.Time {
	if !env.Time.IsZero() {
		return env.Time
	}
	return env.ReceivedAt
}

// Note bodies are HTML (HubSpot renders hs_note_body as rich text): everything from
// the event is escaped, since reply text is written by strangers.

// classMarker starts the classification paragraph, always the last of a reply's note,
// so that the classification can replace it in place.
const (
	classLabel  = "Exacto classification:"
	classMarker = "<p><strong>" + classLabel + "</strong>"
)

// Budget of the documented 65,536-character limit: the reply part is cut to
// maxReplyPart, the classification paragraph to the rest, with room to spare.
const (
	maxReplyPart = 60000
	maxClassPart = 5000
)

func replyBody(env envelope.Envelope) string {
	var b strings.Builder
	b.WriteString("<p><strong>Reply received</strong> via " + esc(env.Provider))
	if c := env.Data.Campaign; c != nil && (c.Name != "" || c.ID != "") {
		b.WriteString(" · campaign " + esc(cmp.Or(c.Name, c.ID)))
		if c.Name != "" && c.ID != "" {
			b.WriteString(" (" + esc(c.ID) + ")")
		}
		if c.Step != "" {
			b.WriteString(", step " + esc(c.Step))
		}
	}
	b.WriteString("</p>")
	if m := env.Data.Message; m != nil {
		if m.From != "" {
			b.WriteString("<p><strong>From:</strong> " + esc(m.From) + "</p>")
		}
		if m.Subject != "" {
			b.WriteString("<p><strong>Subject:</strong> " + esc(m.Subject) + "</p>")
		}
		if m.Auto {
			b.WriteString("<p><em>Automatic reply</em></p>")
		}
		if m.Text != "" {
			b.WriteString("<p>" + strings.ReplaceAll(esc(m.Text), "\n", "<br>") + "</p>")
		}
	}
	b.WriteString("<p>Exacto event " + esc(env.ID) + "</p>")
	return cutHTML(b.String(), maxReplyPart) + classMarker + " pending</p>"
}

// withClassification replaces body's classification paragraph with cl's (appends it
// if the paragraph is gone). Same body and classification, same result.
func withClassification(body string, cl *envelope.Classification) string {
	if i := strings.LastIndex(body, classMarker); i >= 0 {
		body = body[:i]
	} else if i := strings.LastIndex(body, classLabel); i >= 0 {
		// HubSpot re-serialised our HTML (attributes, other tags): cut at the
		// paragraph that holds the label.
		if p := strings.LastIndex(body[:i], "<p"); p >= 0 {
			i = p
		}
		body = body[:i]
	}
	s := " " + esc(cl.Label) + " (confidence " + strconv.FormatFloat(cl.Confidence, 'f', 2, 64)
	if cl.Action != "" {
		s += ", suggested action " + esc(cl.Action)
	}
	if cl.Language != "" {
		s += ", language " + esc(cl.Language)
	}
	if cl.Classifier != "" {
		s += ", by " + esc(cl.Classifier)
	}
	s += ")"
	if cl.When != "" {
		s += "<br>When: " + esc(cl.When)
	}
	if len(cl.Also) > 0 {
		also := make([]string, len(cl.Also))
		for i, a := range cl.Also {
			also[i] = esc(a)
		}
		s += "<br>Also: " + strings.Join(also, "; ")
	}
	if len(cl.Evidence) > 0 {
		ev := make([]string, len(cl.Evidence))
		for i, e := range cl.Evidence {
			ev[i] = "“" + esc(e) + "”"
		}
		s += "<br>Evidence: " + strings.Join(ev, "; ")
	}
	return body + classMarker + cutHTML(s, maxClassPart) + "</p>"
}

func activityBody(env envelope.Envelope) string {
	var b strings.Builder
	d := env.Data
	switch {
	case env.Type == envelope.TypeMeetingBooked && d.Meeting != nil:
		m := d.Meeting
		what := "Meeting booked"
		if m.RescheduledFrom != "" { // a reschedule: the same meeting at a new time, not a second one
			what = "Meeting moved"
		}
		b.WriteString("<p><strong>" + what + "</strong> via " + esc(env.Provider))
		if m.EventType != "" {
			b.WriteString(": " + esc(m.EventType))
		}
		b.WriteString("</p>")
		if m.RescheduledFrom != "" {
			b.WriteString("<p>Rescheduled: this replaces the earlier booking " + esc(m.RescheduledFrom) + "; the time below is the new one.</p>")
		}
		if !m.Start.IsZero() {
			b.WriteString("<p><strong>When:</strong> " + m.Start.UTC().Format("2006-01-02 15:04 MST"))
			if !m.End.IsZero() {
				b.WriteString(" – " + m.End.UTC().Format("15:04 MST"))
			}
			b.WriteString("</p>")
		}
		if m.Invitee != "" {
			b.WriteString("<p><strong>Invitee:</strong> " + esc(m.Invitee) + "</p>")
		}
		if m.Reason != "" {
			b.WriteString("<p>" + strings.ReplaceAll(esc(m.Reason), "\n", "<br>") + "</p>")
		}
	case env.Type == envelope.TypeOpportunityCreated && d.Opportunity != nil:
		o := d.Opportunity
		b.WriteString("<p><strong>Opportunity created</strong> via " + esc(env.Provider))
		if o.Name != "" {
			b.WriteString(": " + esc(o.Name))
		}
		b.WriteString("</p>")
		if o.Stage != "" {
			b.WriteString("<p><strong>Stage:</strong> " + esc(o.Stage) + "</p>")
		}
		if o.Amount != "" {
			b.WriteString("<p><strong>Amount:</strong> " + esc(o.Amount) + "</p>")
		}
	default:
		b.WriteString("<p><strong>" + esc(env.Type) + "</strong> via " + esc(env.Provider) + "</p>")
	}
	if c := d.Campaign; c != nil && (c.Name != "" || c.ID != "") {
		b.WriteString("<p><strong>Campaign:</strong> " + esc(cmp.Or(c.Name, c.ID)) + "</p>")
	}
	b.WriteString("<p>Exacto event " + esc(env.ID) + "</p>")
	return cutHTML(b.String(), maxReplyPart)
}

func esc(s string) string { return html.EscapeString(s) }

// cutHTML cuts s to at most max characters without splitting an entity or a tag,
// marking the cut.
func cutHTML(s string, max int) string {
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	const mark = "… [truncated]"
	n := max - utf8.RuneCountInString(mark)
	i := 0
	for range n {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	s = s[:i]
	if amp := strings.LastIndexByte(s, '&'); amp >= 0 && !strings.Contains(s[amp:], ";") {
		s = s[:amp]
	}
	if lt := strings.LastIndexByte(s, '<'); lt >= 0 && !strings.Contains(s[lt:], ">") {
		s = s[:lt]
	}
	return s + mark
}
