// Package handler is the classifier service: every human reply (e-mail or chat) gets a
// label with evidence, confidence and language, published back onto the stream as
// reply.classified. It never books or sends anything: the label suggests an action,
// and below the confidence threshold the action is human_review. An unsigned reply is
// confirmed at its source first (pkg/confirm), and the source's text is what is
// classified: a forged "remove me" never becomes an unsubscribe request.
package handler

import (
	"context"
	"time"

	"exacto.dev/pkg/classify"
	"exacto.dev/pkg/confirm"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/service"
	"exacto.dev/pkg/stream"
)

// Version names the shipped classifier in every classification it makes.
const Version = "rules/2"

// New returns the classifier's handler.
func New(d *consumer.Deriver, c classify.Classifier) consumer.Handler {
	return func(ctx context.Context, ev consumer.Event) error {
		env := ev.Envelope
		text := ""
		if m := env.Data.Message; m != nil {
			text = m.Text
			if text == "" {
				text = m.Subject // a reply whose body did not come through: the subject is all there is
			}
		}
		if t, ok := confirm.Text(ctx); ok {
			text = t // the reply as its source holds it
		}
		res, err := c.Classify(ctx, text, "")
		if err != nil {
			return err
		}
		derived := envelope.Derive(env, stream.Classifier, envelope.TypeReplyClassified, envelope.Data{
			ProviderType: envelope.TypeReplyClassified,
			Classification: &envelope.Classification{Label: res.Label, Confidence: res.Confidence, Evidence: res.Evidence,
				Language: res.Language, Action: res.Action, Classifier: Version, When: res.When, Also: res.Also},
		}, time.Now())
		return d.Publish(ctx, derived)
	}
}

// Run runs the classifier's consumer until ctx ends.
func Run(ctx context.Context, env *service.Env, up func()) error {
	d, err := env.Deriver(ctx)
	if err != nil {
		return err
	}
	gate, err := env.Gate(ctx)
	if err != nil {
		return err
	}
	// A classification depends on its reply alone and is stored under a fixed id: its
	// subscription is idempotent (no lease, no claim); consumers of reply.classified
	// order a contact's events by their own leases and lifecycle.
	return env.Consume(ctx, stream.Classifier, up, consumer.Options{Handle: gate.Wrap(Acts, New(d, classify.New()))})
}

// Acts says which events the classifier acts on: replies (its subscription's other
// type, message.received, comes from signed providers only).
func Acts(env envelope.Envelope) bool { return env.Type == envelope.TypeReplyReceived }
