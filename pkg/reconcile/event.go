package reconcile

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"exacto.dev/pkg/envelope"
)

// event builds the envelope of a fact the reconciler established from provider's
// API: source /tenants/<t>/workers/reconciler, endpoint "reconciler", AuthMethod
// source_api (read from the platform over Exacto's own credentials: nothing to confirm
// at the source, it is the source), a
// deterministic id over kind, provider and object (so every pass builds the same
// event), the time the platform gives for it (else now), and the platform's record as
// it was read as the raw payload.
func event(p *Pass, kind, provider, typ, object string, data envelope.Data, raw any, at time.Time) envelope.Envelope {
	now := p.now()
	if at.IsZero() {
		at = now
	}
	b, err := json.Marshal(raw)
	if err != nil || raw == nil {
		b = []byte("null")
	}
	data.Raw = b
	if data.ProviderType == "" {
		data.ProviderType = "reconciler." + kind
	}
	sum := sha256.Sum256(b)
	return envelope.Envelope{
		SpecVersion: "1.0", ID: envelope.ID(p.Tenant, "exacto", envelope.Key(Worker, kind, provider, object)),
		Source: envelope.WorkerSource(p.Tenant, Worker), Type: typ, Time: at.UTC(),
		DataContentType: "application/json", Data: data,
		Tenant: p.Tenant, Provider: provider, Endpoint: Worker, ObjectID: object, Channel: channel(provider),
		ReceivedAt: now, PayloadSHA256: hex.EncodeToString(sum[:]), Signed: false, AuthMethod: envelope.AuthSourceAPI,
	}
}

func channel(provider string) string {
	switch provider {
	case "instantly", "smartlead":
		return "email"
	case "hubspot":
		return "crm"
	}
	return ""
}
