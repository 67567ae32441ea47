package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/quarantine"
	"exacto.dev/pkg/stream"
)

// Every endpoint's verified delivery over body_limit, and each verifiable one its
// parser refuses, is answered 200 quarantined, stores no event, and is kept: its body
// (a body secret redacted), its size and hash, why it was refused, and none of what
// authenticated it. The same delivery again, signed anew, is kept once.
func TestQuarantineKeepsVerifiedRefusals(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	q, err := quarantine.New(ctx, h.conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	st, err := h.conn.JS.Stream(ctx, stream.Quarantine)
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range allEndpoints {
		for _, c := range []struct {
			name, reason string
			body         []byte
		}{
			{"over the limit", "body_too_large", h.overLimit()},
			{"unparseable", "malformed_body", []byte(`{"event_type": "reply_received", "truncated`)},
		} {
			if ep == "smartlead" && c.reason == "malformed_body" {
				continue // its secret_key cannot be read: not verified, 400 (TestRejections)
			}
			t.Run(ep+"/"+c.name, func(t *testing.T) {
				events, kept := h.stored(), h.quarantined()
				d := h.sign(ep, c.body, h.endpoint(ep).Secrets[0].Value, h.clock())
				d.header.Set("Authorization", "Bearer authz-SECRET-1f2e")
				d.header.Set("Cookie", "session=cookie-SECRET-77c1")
				d.header.Set("X-Forwarded-Uri", strings.TrimPrefix(d.url, h.base)) // a proxy's: the path token
				d.header.Set("X-Note", "secret "+h.endpoint(ep).Secrets[0].Value)
				r := h.post(d)
				sum := sha256.Sum256(spec(h, ep).RedactBody(d.body)) // as kept: a body secret redacted
				id := quarantine.ID("acme", ep, hex.EncodeToString(sum[:]))
				if r.status != http.StatusOK || r.answer.Quarantined != 1 || r.answer.QuarantineID != id || r.answer.Reason != c.reason ||
					r.answer.AlreadyQuarantined || r.answer.Stored != 0 || r.answer.IDs == nil || len(r.answer.IDs) != 0 {
					t.Fatalf("got %d %s, want 200 quarantined %s as %s", r.status, r.body, c.reason, id)
				}
				if h.stored() != events || h.quarantined() != kept+1 {
					t.Fatalf("stored %d events, kept %d deliveries; want 0 and 1", h.stored()-events, h.quarantined()-kept)
				}
				e, err := q.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if e.Tenant != "acme" || e.Endpoint != ep || e.Provider != spec(h, ep).Name || e.Reason != c.reason || e.Error == "" ||
					e.Size != len(d.body) || e.SHA256 != hex.EncodeToString(sum[:]) || e.Cut || e.Status != quarantine.Open ||
					!bytes.Equal(e.Body, spec(h, ep).RedactBody(d.body)) || e.Path != "/hooks/"+ep+"/REDACTED" ||
					!e.ReceivedAt.Equal(h.clock()) || e.AuthMethod == "" || e.Header.Get("Content-Type") != "application/json" {
					t.Fatalf("kept record: %+v (body %d bytes)", e.Record, len(e.Body))
				}
				// Nothing that authenticated the delivery is in the stored message.
				m, err := st.GetLastMsgForSubject(ctx, stream.QuarantineSubject("acme", ep, id))
				if err != nil {
					t.Fatal(err)
				}
				var stored bytes.Buffer
				http.Header(m.Header).Write(&stored)
				stored.Write(m.Data)
				secrets := []string{h.endpoint(ep).PathToken.Value, "authz-SECRET-1f2e", "cookie-SECRET-77c1"}
				for _, s := range h.endpoint(ep).Secrets {
					secrets = append(secrets, s.Value)
				}
				for name, vs := range d.header {
					if name != "Content-Type" && !slices.Contains(e.Header[name], vs[0]) && e.Header.Get(name) == "" {
						secrets = append(secrets, vs...) // what was removed
					}
				}
				if e.Header.Get("X-Forwarded-Uri") != "/hooks/"+ep+"/REDACTED" || e.Header.Get("X-Note") != "secret REDACTED" {
					t.Errorf("credentials in other headers are not redacted: %v", e.Header)
				}
				for _, name := range append([]string{"Authorization", "Cookie"}, spec(h, ep).SignatureHeaders...) {
					if d.header.Get(name) != "" && (e.Header.Get(name) != "" || !slices.Contains(e.Removed, http.CanonicalHeaderKey(name))) {
						t.Errorf("header %s is kept, or not listed as removed (%v)", name, e.Removed)
					}
				}
				for _, s := range secrets {
					if bytes.Contains(stored.Bytes(), []byte(s)) {
						t.Errorf("the kept delivery holds a secret, token or signature: %.20s…", s)
					}
				}
				// The provider's retry, signed anew: kept once, answered so.
				r = h.post(h.sign(ep, c.body, h.endpoint(ep).Secrets[0].Value, h.clock().Add(time.Second)))
				if r.status != http.StatusOK || r.answer.QuarantineID != id || !r.answer.AlreadyQuarantined || h.quarantined() != kept+1 {
					t.Fatalf("retry: %d %s, %d kept", r.status, r.body, h.quarantined()-kept)
				}
			})
		}
	}
}

// A delivery over the quarantine's cap is refused (413) and kept nowhere: at once,
// unread, when its Content-Length says so; as soon as the cap is passed when it is
// streamed. Within the cap and verified, the same size of body is kept; unverified, it
// is 401 and kept nowhere.
func TestQuarantineCap(t *testing.T) {
	h := newHarness(t)
	h.gw.limits.BodyLimit, h.gw.limits.QuarantineCap = 4<<10, 16<<10
	host := strings.TrimPrefix(h.base, "http://")
	path := strings.TrimPrefix(h.url("stripe"), h.base)
	request := func(header string, body func(w io.Writer)) (int, string) {
		t.Helper()
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n%s\r\n", path, host, header)
		if body != nil {
			go body(c)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Announced over the cap, and no body sent: answered without waiting for it.
	if status, body := request(fmt.Sprintf("Content-Length: %d\r\n", 16<<10+1), nil); status != 413 || !strings.Contains(body, `"body_too_large"`) {
		t.Fatalf("Content-Length over the cap: %d %s", status, body)
	}
	// Streamed (chunked) past the cap.
	chunked := func(w io.Writer) {
		chunk := bytes.Repeat([]byte("x"), 4<<10)
		for range 5 {
			fmt.Fprintf(w, "%x\r\n%s\r\n", len(chunk), chunk)
		}
		io.WriteString(w, "0\r\n\r\n")
	}
	if status, body := request("Transfer-Encoding: chunked\r\n", chunked); status != 413 || !strings.Contains(body, `"body_too_large"`) {
		t.Fatalf("chunked over the cap: %d %s", status, body)
	}
	pad := func(n int) []byte { return []byte(`{"pad":"` + strings.Repeat("x", n-10) + `"}`) }
	secret := h.endpoint("stripe").Secrets[0].Value
	if r := h.post(h.sign("stripe", pad(16<<10+1), secret, h.clock())); r.status != 413 {
		t.Fatalf("verified, one byte over the cap: %d %s", r.status, r.body)
	}
	if r := h.post(h.sign("stripe", pad(8<<10), wrongSecret("stripe"), h.clock())); r.status != 401 {
		t.Fatalf("unverified, over the limit: %d %s", r.status, r.body)
	}
	if h.quarantined() != 0 || h.stored() != 0 {
		t.Fatalf("refused deliveries kept %d, stored %d", h.quarantined(), h.stored())
	}
	if r := h.post(h.sign("stripe", pad(16<<10), secret, h.clock())); r.status != 200 || r.answer.Reason != "body_too_large" || h.quarantined() != 1 {
		t.Fatalf("verified, at the cap: %d %s", r.status, r.body)
	}
}

// A delivery to quarantine is answered 200 only once the quarantine has it: without the
// quarantine's stream, 503 (the provider retries), and nothing is stored.
func TestQuarantineUnavailableIs503(t *testing.T) {
	h := newHarness(t)
	if err := h.conn.JS.DeleteStream(context.Background(), stream.Quarantine); err != nil {
		t.Fatal(err)
	}
	r := h.post(h.sign("meta", h.overLimit(), h.endpoint("meta").Secrets[0].Value, h.clock()))
	if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, `"quarantine_unavailable"`) || h.stored() != 0 {
		t.Fatalf("got %d %s, want 503", r.status, r.body)
	}
}
