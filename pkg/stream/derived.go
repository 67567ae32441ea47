package stream

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/envelope"
)

// Derivation is a kind of event a worker derives from another (envelope.Derive).
type Derivation struct{ Worker, Type string }

// Derivations are every worker's: an event's derived events are found by the ids they
// must have (envelope.Derive's are deterministic), not by an index of causes. An empty
// Type is the type of the event derived from: an operator's approval of an event held
// for confirmation (pkg/confirm) stores it again as what it is.
var Derivations = []Derivation{
	{Classifier, envelope.TypeReplyClassified},
	{Stopper, envelope.TypeSequenceStopped},
	{CRMWriter, envelope.TypeContactIdentified},
	{"confirm", envelope.TypeEventUnconfirmed},
	{"operator", ""},
}

// DerivedID is the id of the event of type typ that worker derives from tenant's event
// id (envelope.Derive's).
func DerivedID(tenant, worker, typ, id string) string {
	return envelope.ID(tenant, "exacto", envelope.Key(worker, typ, id))
}

// DerivedFrom loads the stored events derived from env, in Derivations' order: with the
// event it was derived from (Data.Cause), the causal chain both ways.
func DerivedFrom(ctx context.Context, js jetstream.JetStream, env envelope.Envelope) ([]envelope.Envelope, error) {
	var out []envelope.Envelope
	for _, d := range Derivations {
		typ := d.Type
		if typ == "" {
			typ = env.Type
		}
		e, found, err := Load(ctx, js, DerivedID(env.Tenant, d.Worker, typ, env.ID))
		if err != nil {
			return out, err
		}
		if found {
			out = append(out, e)
		}
	}
	return out, nil
}
