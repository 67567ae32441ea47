package providertest

import (
	"testing"

	"exacto.dev/pkg/envelope"
)

// ValidateEnvelope validates env against schemas/envelope.json and the schema of its
// type's data. (Placeholder until the schemas land: checks the required attributes.)
func ValidateEnvelope(t testing.TB, env envelope.Envelope) {
	t.Helper()
	if env.SpecVersion != "1.0" || env.ID == "" || env.Source == "" || env.Type == "" {
		t.Fatalf("envelope lacks a required attribute: %+v", env)
	}
}
