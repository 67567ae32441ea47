package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/ingest"
	"exacto.dev/pkg/providers/hubspot"
	"exacto.dev/pkg/quarantine"
	"exacto.dev/pkg/stream"
)

// A body holding a key twice in two cases (issue 16): encoding/json would act on the
// last ({"event_type":"email_opened","EVENT_TYPE":"lead_unsubscribed"} stored and
// acted on as an unsubscribe) while the stored payload reads as the first to any
// case-sensitive parser. Refused, whatever the provider and whether it is signed:
// nothing stored, the delivery quarantined as malformed (or refused with 400 where the
// verification itself reads the body).
func TestKeysDifferingOnlyInCaseAreRefused(t *testing.T) {
	h := newHarness(t)
	q, err := quarantine.New(context.Background(), h.conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ep, event, key, other string
		status                int
	}{
		{"instantly", "reply_received", `"event_type"`, `"EVENT_TYPE":"lead_unsubscribed",`, http.StatusOK},
		{"stripe", "customer.updated", `"type"`, `"TYPE":"customer.deleted",`, http.StatusOK},
		{"smartlead", "EMAIL_OPEN", `"event_type"`, `"Event_Type":"LEAD_UNSUBSCRIBED",`, http.StatusBadRequest},
	} {
		e := h.endpoint(c.ep)
		d := h.delivery(c.ep, c.event, h.clock())
		if !bytes.Contains(d.body, []byte(c.key)) {
			t.Fatalf("%s: the sample has no %s", c.ep, c.key)
		}
		// The other spelling first, so that the sample's own key is the last one: the
		// one encoding/json would keep is the harmless one, and still it is refused.
		body := bytes.Replace(d.body, []byte("{"), []byte("{"+c.other), 1)
		stored := h.stored()
		r := h.post(h.sign(c.ep, body, e.Secrets[0].Value, h.clock()))
		why := r.body
		if c.status == http.StatusOK {
			if r.answer.Reason != "malformed_body" || r.answer.Quarantined != 1 || r.answer.Stored != 0 {
				t.Fatalf("%s: %s, want it quarantined as malformed_body", c.ep, r.body)
			}
			kept, err := q.Get(context.Background(), r.answer.QuarantineID)
			if err != nil {
				t.Fatal(err)
			}
			why = kept.Error
		}
		if r.status != c.status || !strings.Contains(why, "differ only in case") {
			t.Fatalf("%s: %d %s (%s), want %d saying the keys differ only in case", c.ep, r.status, r.body, why, c.status)
		}
		if got := h.stored(); got != stored {
			t.Fatalf("%s: %d events stored", c.ep, got-stored)
		}
	}
}

// An address with a NUL, a line break or a right-to-left override in it (issue 16: one
// was stored and sent on to a platform's block list) names no one: the event is kept
// whole as unmapped (stored, never acted on: no consumer takes unmapped events), its
// contact dropped, why in its status; the same delivery with a real address is a reply.
func TestIdentityWithControlCharactersIsRefused(t *testing.T) {
	h := newHarness(t)
	d := h.delivery("instantly", "reply_received", h.clock())
	email := regexp.MustCompile(`"lead_email": ?"[^"]*"`).Find(d.body)
	if email == nil {
		t.Fatal("the sample has no lead_email")
	}
	secret := h.endpoint("instantly").Secrets[0].Value
	for i, bad := range []string{`ana\u0000@example.com`, `ana@example.com\r\nBcc: eve@example.com`, `ana\u202e@example.com`} {
		body := bytes.Replace(d.body, email, []byte(`"lead_email":"`+bad+`"`), 1)
		body = bytes.Replace(body, []byte(`"email_id"`), []byte(fmt.Sprintf(`"x":%d,"email_id"`, i)), 1) // one event each
		r := h.post(h.sign("instantly", body, secret, h.clock()))
		if r.status != http.StatusOK || r.answer.Stored != 1 || r.answer.Quarantined != 0 {
			t.Fatalf("%s: %d %s, want it stored", bad, r.status, r.body)
		}
		env := h.storedEnvelope(r.answer.IDs[0])
		if env.Type != "unmapped" || env.Data.Contact != nil || !strings.Contains(env.Data.Status, "identity refused: contact.email:") ||
			env.Data.ProviderType != "reply_received" {
			t.Fatalf("%s: stored as %s, contact %+v, status %q; want unmapped, naming no one, why kept", bad, env.Type, env.Data.Contact, env.Data.Status)
		}
	}
	body := bytes.Replace(d.body, email, []byte(`"lead_email":"ana@example.com"`), 1)
	r := h.post(h.sign("instantly", body, secret, h.clock()))
	if r.status != http.StatusOK || r.answer.Stored != 1 {
		t.Fatalf("a real address: %d %s", r.status, r.body)
	}
	if env := h.storedEnvelope(r.answer.IDs[0]); env.Type != "reply.received" || env.Data.Contact == nil {
		t.Fatalf("a real address: stored as %s", env.Type)
	}
}

// A captured HubSpot delivery stripped of its v3 headers (issue 16: the gateway then
// checked the v1 signature beside it, which signs no time, and stored a delivery 400 s
// old): an endpoint takes v3 alone unless its signature_versions name older ones.
func TestHubSpotWithoutV3IsRefused(t *testing.T) {
	h := newHarness(t)
	captured := h.delivery("hubspot", "batch", h.clock())
	h.advance(400 * time.Second)
	stripped := captured
	stripped.header = captured.header.Clone()
	stripped.header.Del(hubspot.HeaderV3)
	stripped.header.Del(hubspot.HeaderTimestamp)
	for name, d := range map[string]delivery{"as captured": captured, "v3 stripped": stripped} {
		if r := h.post(d); r.status != http.StatusUnauthorized || !strings.Contains(r.body, "invalid_signature") {
			t.Fatalf("%s, 400 s later: %d %s, want 401", name, r.status, r.body)
		}
	}
	if got := h.stored(); got != 0 {
		t.Fatalf("%d events stored", got)
	}
}

// A captured delivery of a scheme that signs no time (Meta), posted again once the id
// index has forgotten its events (issue 16: stored as a second event, and once the
// guards forgot too, acted on again): an event older than the provider retries a
// delivery is no retry. It is quarantined as stale_event and nothing is stored,
// whatever the index remembers; the same bytes the next day are still a duplicate.
func TestReplayPastTheRetryHorizonIsRefused(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	captured := h.delivery("meta", "message", h.clock())
	first := h.post(captured)
	if first.status != http.StatusOK || first.answer.Stored < 1 {
		t.Fatalf("first delivery: %d %s", first.status, first.body)
	}
	stored := h.stored()
	h.advance(24 * time.Hour)
	if r := h.post(captured); r.status != http.StatusOK || r.answer.Stored != 0 || r.answer.Duplicates != first.answer.Stored {
		t.Fatalf("a day later: %d %s, want every event a duplicate", r.status, r.body)
	}
	// The index forgets (its TTL, dedup_ttl, is 7 days).
	h.waitIndexed()
	idx, err := h.conn.JS.Stream(ctx, "KV_"+stream.EventIndex)
	if err != nil {
		t.Fatal(err)
	}
	if err := idx.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	h.advance(9 * 24 * time.Hour)
	r := h.post(captured)
	if r.status != http.StatusOK || r.answer.Reason != ingest.Stale || r.answer.Quarantined != 1 || r.answer.Stored != 0 {
		t.Fatalf("ten days later: %d %s, want it quarantined as %s", r.status, r.body, ingest.Stale)
	}
	if got := h.stored(); got != stored {
		t.Fatalf("%d events stored again", got-stored)
	}
}

// A request with both Content-Length and Transfer-Encoding (issue 16: the connection
// stayed open; RFC 9112 6.3 says close it after answering): answered, then closed.
func TestContentLengthWithTransferEncodingClosesTheConnection(t *testing.T) {
	h := newHarness(t)
	d := h.delivery("instantly", "reply_received", h.clock())
	c, err := net.Dial("tcp", strings.TrimPrefix(h.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	path := strings.TrimPrefix(d.url, h.base)
	req := "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Exacto-Secret: " + d.header.Get("X-Exacto-Secret") +
		"\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(d.body), d.body)
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK || !resp.Close {
		t.Fatalf("%d, Connection: close %v; want the delivery taken by its chunked body and the connection closed", resp.StatusCode, resp.Close)
	}
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after the answer the connection gave %d bytes, %v; want it closed", n, err)
	}
}

// A provider's manual resend of an old event, signed anew (Stripe's dashboard resends
// an event days after it was created): the signature over a fresh timestamp proves
// the delivery new, so the event's age does not make it a replay.
func TestOldEventSignedAnewIsTaken(t *testing.T) {
	h := newHarness(t)
	created := h.clock().Add(-6 * 24 * time.Hour)
	body := fmt.Sprintf(`{"id":"evt_resent_1","object":"event","type":"customer.updated","created":%d,"data":{"object":{"id":"cus_1","object":"customer","email":"ana@example.com"}}}`, created.Unix())
	if r := h.post(h.sign("stripe", []byte(body), h.endpoint("stripe").Secrets[0].Value, h.clock())); r.status != http.StatusOK || r.answer.Stored != 1 {
		t.Fatalf("an event 6 days old, signed now: %d %s, want it stored", r.status, r.body)
	}
}
