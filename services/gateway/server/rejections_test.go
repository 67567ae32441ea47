package server

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/stream"
)

// rejectedLog reads the log of refused deliveries once it holds want records.
func (h *harness) rejectedLog(want int) []stream.Rejection {
	h.t.Helper()
	ctx := context.Background()
	st, err := h.conn.JS.Stream(ctx, stream.Rejected)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []stream.Rejection
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out = out[:0]
		err := stream.Scan(ctx, st, jetstream.OrderedConsumerConfig{}, func(m jetstream.Msg) error {
			var r stream.Rejection
			if err := json.Unmarshal(m.Data(), &r); err != nil {
				return err
			}
			out = append(out, r)
			return nil
		})
		if err != nil {
			h.t.Fatal(err)
		}
		if len(out) >= want || time.Now().After(deadline) {
			return out
		}
	}
}

// Each refused delivery is logged: when, the endpoint as the URL named it, the answer
// and why, never the path token, body or signature; a flood is logged at a bounded
// rate, the next record counting what was left out.
func TestRefusedDeliveriesAreLogged(t *testing.T) {
	h := newHarness(t)
	good := h.delivery("stripe", "customer.updated", h.clock())
	wrongToken := good
	wrongToken.url = h.base + "/hooks/stripe/not-the-token-0123456789"
	if r := h.post(wrongToken); r.status != 404 {
		t.Fatalf("wrong token: %d", r.status)
	}
	// Forged through a proxy on this machine (trusted by default): the client it
	// forwards is the one logged, not the proxy, nor what the client wrote before it.
	forged := h.sign("stripe", good.body, "whsec_forged", h.clock())
	forged.header = forged.header.Clone()
	forged.header.Set("X-Forwarded-For", "192.0.2.1, 198.51.100.7")
	if r := h.post(forged); r.status != 401 {
		t.Fatalf("forged: %d", r.status)
	}
	// The segments swapped: the token is where the id goes, and must not be kept; a URL
	// of no endpoint's shape (the token forgotten) is refused and logged too.
	token := h.endpoint("stripe").PathToken.Value
	swapped, missing := good, good
	swapped.url, missing.url = h.base+"/hooks/"+token+"/stripe", h.base+"/hooks/stripe"
	for _, d := range []delivery{swapped, missing} {
		if r := h.post(d); r.status != 404 {
			t.Fatalf("%s: %d", d.url, r.status)
		}
	}
	log := h.rejectedLog(4)
	if len(log) != 4 {
		t.Fatalf("%d records, want 4: %+v", len(log), log)
	}
	if r := log[2]; r.Endpoint != "(unknown, "+strconv.Itoa(len(token))+" characters)" || r.Status != 404 {
		t.Errorf("the swapped URL: %+v", r)
	}
	if r := log[3]; r.Endpoint != "(none)" || r.Status != 404 || !strings.Contains(r.Message, "POST /hooks/<endpoint>/<path_token>") {
		t.Errorf("the URL without a token: %+v", r)
	}
	if r := log[0]; r.Status != 404 || r.Endpoint != "stripe" || r.Tenant != "" || r.Reason != "not_found" || r.Method != "POST" || r.Remote != "127.0.0.1" {
		t.Errorf("the 404: %+v", r)
	}
	if r := log[1]; r.Status != 401 || r.Tenant != "acme" || r.Provider != "stripe" || r.Reason != "invalid_signature" || r.Message == "" || r.Remote != "198.51.100.7 via 127.0.0.1" {
		t.Errorf("the 401: %+v", r)
	}
	raw, _ := json.Marshal(log)
	for _, secret := range []string{"not-the-token", "whsec_forged", token, "customer.updated"} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("the log holds %q: %s", secret, raw)
		}
	}
	// A flood at one instant: the burst is logged, the rest counted by the next record.
	for range rejectionsBurst + 50 {
		h.post(wrongToken)
	}
	h.advance(time.Second)
	h.post(wrongToken)
	want := 4 + (rejectionsBurst - 4) + 1 // the four above spent four tokens of the burst
	if log = h.rejectedLog(want); len(log) != want {
		t.Fatalf("%d records after the flood, want %d", len(log), want)
	}
	if last := log[len(log)-1]; last.Skipped != 54 {
		t.Errorf("the record after the flood counts %d left out, want 54", last.Skipped)
	}
}
