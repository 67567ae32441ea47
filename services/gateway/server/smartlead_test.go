package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/providers/smartlead"
	"exacto.dev/pkg/stream"
)

// A Smartlead endpoint with signing_secrets requires X-Smartlead-Signature and stores
// its events as signed (authmethod hmac); the endpoint without them stores the same
// kind of delivery unsigned. Either way the stored raw payload has its secret_key
// redacted.
func TestSmartleadSignature(t *testing.T) {
	h := newHarness(t)
	at := h.clock()
	for name, c := range map[string]struct {
		mangle func(d *delivery)
		status int
	}{
		"no signature":     {func(d *delivery) { d.header.Del(smartlead.SignatureHeader) }, http.StatusUnauthorized},
		"wrong signature":  {func(d *delivery) { d.header.Set(smartlead.SignatureHeader, "sha256="+strings.Repeat("ab", 32)) }, http.StatusUnauthorized},
		"not sha256=<hex>": {func(d *delivery) { d.header.Set(smartlead.SignatureHeader, "v1,abc") }, http.StatusUnauthorized},
	} {
		d := h.delivery("smartlead-signed", "EMAIL_OPEN", at)
		c.mangle(&d)
		if r := h.post(d); r.status != c.status || !strings.Contains(r.body, "invalid_signature") {
			t.Fatalf("%s: %d %s", name, r.status, r.body)
		}
	}
	if n := h.stored(); n != 0 {
		t.Fatalf("refused deliveries stored %d events", n)
	}
	// The previous signing secret still verifies (rotation).
	old := h.delivery("smartlead-signed", "EMAIL_REPLY", at)
	maps.Copy(old.header, smartlead.SignOptional(old.body, "smartlead-signing-old"))
	if r := h.post(old); r.status != http.StatusOK {
		t.Fatalf("signed with the old signing secret: %d %s", r.status, r.body)
	}
	// Two opens a minute apart: the endpoint is no part of an event's identity.
	for _, c := range []struct {
		ep     string
		at     time.Time
		auth   string
		signed bool
	}{{"smartlead-signed", at, "hmac", true}, {"smartlead", at.Add(time.Minute), "secret_key", false}} {
		d := h.delivery(c.ep, "EMAIL_OPEN", c.at)
		r := h.post(d)
		if r.status != http.StatusOK || r.answer.Stored != 1 {
			t.Fatalf("%s: %d %s", c.ep, r.status, r.body)
		}
		env := h.storedEnvelope(r.answer.IDs[0])
		if env.AuthMethod != c.auth || env.Signed != c.signed {
			t.Errorf("%s: authmethod %q signed %v, want %q %v", c.ep, env.AuthMethod, env.Signed, c.auth, c.signed)
		}
		if !strings.Contains(string(env.Data.Raw), `"secret_key":"REDACTED"`) || strings.Contains(string(env.Data.Raw), "smartlead-new") {
			t.Errorf("%s: raw keeps the secret_key: %s", c.ep, env.Data.Raw)
		}
		// The payload hash is of the body as stored, its secret redacted: a hash of the
		// body with the secret would let anyone who reads the event guess it offline.
		if sum := sha256.Sum256(smartlead.Redact(d.body)); env.PayloadSHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: payloadsha256 %s is not the redacted body's %x", c.ep, env.PayloadSHA256, sum)
		}
	}
}

// storedEnvelope reads the stored envelope of id from the stream.
func (h *harness) storedEnvelope(id string) envelope.Envelope {
	h.t.Helper()
	h.waitIndexed()
	ctx := context.Background()
	seq, err := Lookup(ctx, h.conn.JS, id)
	if err != nil {
		h.t.Fatal(err)
	}
	st, _ := h.conn.JS.Stream(ctx, stream.Events)
	msg, err := st.GetMsg(ctx, seq)
	if err != nil {
		h.t.Fatal(err)
	}
	var env envelope.Envelope
	if err := json.Unmarshal(msg.Data, &env); err != nil {
		h.t.Fatal(err)
	}
	return env
}
