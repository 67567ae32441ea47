// Package handler is the suppressor's effect: on an unsubscribe, a hard bounce or a
// reply classified as "do not contact", the contact goes on the tenant-wide
// suppression list at once — all campaigns, all providers.
package handler

import (
	"context"
	"errors"

	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/envelope"
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
)

// Reason says why env suppresses its contact; "" when it does not. A soft bounce does
// not: the mailbox exists and may accept mail tomorrow.
func Reason(env envelope.Envelope) string {
	switch env.Type {
	case envelope.TypeLeadUnsubscribed:
		return Unsubscribed
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

// New returns the suppressor's handler over list.
func New(list *suppression.List) consumer.Handler {
	return func(ctx context.Context, ev consumer.Event) error {
		env := ev.Envelope
		reason := Reason(env)
		if reason == "" {
			return nil
		}
		contact := env.ContactKey()
		if contact == "" {
			return retry.Permanently("suppressor", errors.New("the event names no contact to suppress"))
		}
		_, err := list.Add(ctx, env.Tenant, suppression.Entry{Contact: contact, Reason: reason, EventID: env.ID, Since: env.Time})
		return err
	}
}

// Run runs the suppressor's consumer until ctx ends.
func Run(ctx context.Context, env *service.Env, up func()) error {
	kv, err := env.Conn.JS.KeyValue(ctx, stream.Suppression)
	if err != nil {
		return err
	}
	nc, err := env.Conn.Dial("exacto-" + stream.Suppressor)
	if err != nil {
		return err
	}
	defer nc.Close()
	sub, _ := stream.SubscriptionOf(stream.Suppressor)
	return consumer.Run(ctx, consumer.Options{NC: nc, Sub: sub, Workers: 2, Handle: New(suppression.New(kv)), Owner: env.Config.Owner, Ready: up, Log: env.Log})
}
