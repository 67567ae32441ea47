package handler

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform"
	"exacto.dev/pkg/platform/hubspot"
	"exacto.dev/pkg/retry"
	"exacto.dev/pkg/stream"
)

// Who a contact is, as HubSpot knows it. HubSpot's webhooks name a contact by its
// HubSpot id alone, and a reply names its lead by e-mail alone; the link between the
// two is HubSpot's, learned by the crmwriter when it writes a note (the contact it read
// or made for the e-mail) or asks HubSpot for an id-only contact (its e-mail and phone).
// The crmwriter puts each link on the stream as a contact.identified (derived from the
// event that taught it, so repeating it is one event), and only when the contact
// directory does not link them already; the projector links the ids from there
// (pkg/contacts), so one person is one contact whatever the arrival order, and a replay
// resolves the same.

// identify asks HubSpot who the contact of an id-only HubSpot event is and links it.
func (w *writer) identify(ctx context.Context, ev consumer.Event, hs *hubspot.Client) error {
	env := ev.Envelope
	c := env.Data.Contact
	if env.Provider != "hubspot" || c == nil || c.ExternalID == "" {
		return nil
	}
	if c.Email != "" { // the event links them itself
		return nil
	}
	if rec, ok, err := w.linked(ctx, env.Tenant, c.ExternalID); err != nil || (ok && len(rec.Emails) > 0) {
		return err
	}
	var contact hubspot.Contact
	err := ev.Call(ctx, Dependency, func(ctx context.Context) (err error) {
		contact, err = hs.GetContact(ctx, c.ExternalID)
		return err
	})
	if platform.StatusOf(err) == http.StatusNotFound {
		w.o.Log.InfoContext(ctx, "crmwriter: HubSpot no longer has the contact; nothing to link", "id", env.ID, "hubspot_contact_id", c.ExternalID)
		return nil
	}
	if err != nil {
		return fmt.Errorf("read contact %s: %w", c.ExternalID, err)
	}
	return w.link(ctx, env, c.ExternalID, contact.Properties["email"], contact.Properties["phone"])
}

// link publishes that HubSpot contact id is the contact of env with email and phone
// (each, when empty, env's own), unless the directory links them all already.
func (w *writer) link(ctx context.Context, env envelope.Envelope, id, email, phone string) error {
	if w.o.Publish == nil || id == "" {
		return nil
	}
	if c := env.Data.Contact; c != nil {
		email, phone = cmp.Or(email, c.Email), cmp.Or(phone, c.Phone)
	}
	if m := env.Data.Meeting; m != nil && email == "" && strings.Contains(m.Invitee, "@") {
		email = m.Invitee
	}
	email, normPhone := contacts.NormalizeEmail(email), contacts.NormalizePhone(phone)
	if email == "" && normPhone == "" {
		return nil
	}
	rec, _, err := w.linked(ctx, env.Tenant, id)
	if err != nil {
		return err
	}
	if (email == "" || slices.Contains(rec.Emails, email)) && (normPhone == "" || slices.Contains(rec.Phones, normPhone)) {
		return nil
	}
	if err := w.o.Publish(ctx, Identified(env, id, email, phone, time.Now())); err != nil {
		return retry.Transiently(stream.CRMWriter, fmt.Errorf("contact.identified: %w", err))
	}
	return nil
}

func (w *writer) linked(ctx context.Context, tenant, id string) (contacts.Record, bool, error) {
	if w.o.Linked == nil {
		return contacts.Record{}, false, nil
	}
	rec, ok, err := w.o.Linked(ctx, tenant, id)
	if err != nil {
		return rec, false, retry.Transiently("contacts", err)
	}
	return rec, ok, nil
}

// Identified is the contact.identified derived from cause: HubSpot contact id is the
// contact with email and phone.
func Identified(cause envelope.Envelope, id, email, phone string, now time.Time) envelope.Envelope {
	e := envelope.Derive(cause, stream.CRMWriter, envelope.TypeContactIdentified, envelope.Data{
		ProviderType: envelope.TypeContactIdentified,
		Contact:      &envelope.Contact{Email: email, Phone: phone, ExternalID: id},
	}, now)
	e.Data.Campaign = nil // a link of ids, no campaign's
	e.Provider, e.Channel, e.ObjectID, e.Subject = "hubspot", "crm", id, "contact/"+id
	return e
}

// Linked gives the contact dir links to a HubSpot contact id.
func Linked(dir *contacts.Directory) func(ctx context.Context, tenant, hubspotID string) (contacts.Record, bool, error) {
	return func(ctx context.Context, tenant, hubspotID string) (contacts.Record, bool, error) {
		return dir.Find(ctx, tenant, contacts.CRMContactID, "hubspot:"+hubspotID)
	}
}
