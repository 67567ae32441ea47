// Package handler is the suppressor's effect: on an unsubscribe, a spam complaint, a
// hard bounce or a reply classified as "do not contact", the contact goes on the
// tenant-wide suppression list at once — all campaigns, all providers — and then every
// sending platform of the tenant is told: the address goes on Instantly's block list
// and the lead is unsubscribed from every Smartlead campaign.
//
// The list comes first and is never held back by a platform: the handler declares no
// dependency gate, so a platform that is down delays only the telling. Its call fails
// transiently (or the open breaker refuses it, which never dead-letters the event: the
// platform is down, the event is not at fault), the event is retried with backoff
// (adding to the list again is harmless: the first entry stays) and the platform is
// told once it answers. Both platform calls are idempotent (a second block-list entry
// is a conflict we count as done; an unsubscribed Smartlead lead is left alone).
// Nothing here ever resubscribes. An unsigned event (or a classification of one) is
// confirmed at its source before anything (pkg/confirm): a forged unsubscribe blocks
// nobody.
package handler

import (
	"context"
	"errors"
	"fmt"

	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform/accounts"
	"exacto.dev/pkg/retry"
	"exacto.dev/pkg/service"
	"exacto.dev/pkg/stream"
	"exacto.dev/pkg/suppression"
)

// Reasons a contact is suppressed.
const (
	Unsubscribed = "unsubscribed"
	Bounced      = "bounced"
	DoNotContact = "do_not_contact"
	Complaint    = "complaint"
)

// Reason says why env suppresses its contact; "" when it does not. A soft bounce does
// not: the mailbox exists and may accept mail tomorrow.
func Reason(env envelope.Envelope) string {
	switch env.Type {
	case envelope.TypeLeadUnsubscribed:
		return Unsubscribed
	case envelope.TypeEmailComplained:
		return Complaint
	case envelope.TypeEmailBounced:
		if env.Data.Bounce != nil && env.Data.Bounce.Kind == "soft" {
			return ""
		}
		return Bounced
	case envelope.TypeReplyClassified:
		// The person asked to be left alone, or the "reply" was a bounce notice.
		switch c := env.Data.Classification; {
		case c == nil:
		case c.Label == "unsubscribe_request":
			return DoNotContact
		case c.Label == "bounce_notice":
			return Bounced
		}
	}
	return ""
}

// Clients returns a tenant's platform clients (accounts.Set.For).
type Clients func(tenant string) (accounts.Clients, bool)

// New returns the suppressor's handler over list; clients tell the platforms; dir (may
// be nil) names the e-mail of a contact HubSpot names by its id alone.
func New(list *suppression.List, clients Clients, dir *contacts.Directory) consumer.Handler {
	return func(ctx context.Context, ev consumer.Event) error {
		env := ev.Envelope
		reason := Reason(env)
		if reason == "" {
			return nil
		}
		if c := env.Data.Contact; env.Provider == "hubspot" && c != nil && c.Email == "" && c.ExternalID != "" {
			// A HubSpot opt-out names the contact by its id: listed by its e-mail, which
			// is what the reconciler and the platforms know it by.
			email, err := dir.EmailOf(ctx, env.Tenant, "hubspot:"+c.ExternalID, askHubSpot(ev, clients, env.Tenant, c.ExternalID))
			if err != nil {
				return fmt.Errorf("the e-mail of HubSpot contact %s: %w", c.ExternalID, err)
			}
			if email != "" {
				named := *c
				named.Email = email
				env.Data.Contact = &named
			}
		}
		contact := env.ContactKey()
		if contact == "" {
			return retry.Permanently("suppressor", errors.New("the event names no contact to suppress"))
		}
		if _, err := list.Add(ctx, env.Tenant, suppression.Entry{Contact: contact, Reason: reason, EventID: env.ID, Since: env.Time}); err != nil {
			return err
		}
		email := ""
		if env.Data.Contact != nil {
			email = contacts.NormalizeEmail(env.Data.Contact.Email)
		}
		if email == "" {
			// A phone-only contact, or one named by an id no one knows an e-mail of: it
			// is listed by that key, and no e-mail platform can be told.
			return nil
		}
		c, ok := clients(env.Tenant)
		if !ok {
			return retry.Permanently("suppressor", fmt.Errorf("tenant %q has no platform accounts", env.Tenant))
		}
		return tellPlatforms(ctx, ev, c, email)
	}
}

// askHubSpot asks HubSpot for the e-mail of tenant's contact id (nil when the tenant has
// no HubSpot account: only the directory can tell).
func askHubSpot(ev consumer.Event, clients Clients, tenant, id string) func(context.Context) (string, error) {
	c, ok := clients(tenant)
	if !ok || c.HubSpot == nil {
		return nil
	}
	return func(ctx context.Context) (email string, err error) {
		err = ev.Call(ctx, "hubspot", func(ctx context.Context) (err error) {
			email, err = c.HubSpot.EmailOf(ctx, id)
			return err
		})
		return email, err
	}
}

// tellPlatforms makes every sending platform stop mailing email, in all campaigns.
func tellPlatforms(ctx context.Context, ev consumer.Event, c accounts.Clients, email string) error {
	if err := ev.Call(ctx, "instantly", func(ctx context.Context) error { return c.Instantly.Unsubscribe(ctx, email) }); err != nil {
		return err
	}
	return ev.Call(ctx, "smartlead", func(ctx context.Context) error {
		lead, found, err := c.Smartlead.LeadByEmail(ctx, email)
		if err != nil || !found || lead.Unsubscribed {
			return err // not a Smartlead lead, or already unsubscribed from all
		}
		return c.Smartlead.Unsubscribe(ctx, lead.ID)
	})
}

// Run runs the suppressor's consumer until ctx ends.
func Run(ctx context.Context, env *service.Env, up func()) error {
	kv, err := env.Conn.JS.KeyValue(ctx, stream.Suppression)
	if err != nil {
		return err
	}
	gate, err := env.Gate(ctx)
	if err != nil {
		return err
	}
	dir, err := contacts.Open(ctx, env.Conn.JS)
	if err != nil {
		return err
	}
	h := gate.Wrap(Acts, New(suppression.New(stream.DurableKV(env.Conn.JS, kv)), env.Platforms.For, dir))
	return env.Consume(ctx, stream.Suppressor, up, consumer.Options{Handle: h, Acts: Acts})
}

// Acts says which events the suppressor acts on (what an unsigned one must first be
// confirmed for, and what its consumer keeps a guard record of): those with a Reason.
// The handler does nothing with any other.
func Acts(env envelope.Envelope) bool { return Reason(env) != "" }

// The console and `exacto events show` tell an event Acts leaves alone by it: it has
// no guard record (consumer.Statuses.OfEvent).
func init() { consumer.DeclareActs(stream.Suppressor, Acts) }
