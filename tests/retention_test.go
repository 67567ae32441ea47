package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/privacy"
	"exacto.dev/pkg/projection"
	"exacto.dev/pkg/stream"
	projector "exacto.dev/services/projector/handler"
)

// retainedLead is lead i's history, stored age ago: sent, opened, a reply whose text
// names the lead, and an event no provider type maps (the projections do not need it).
func retainedLead(i int, age time.Duration) []envelope.Envelope {
	stored := time.Now().Add(-age).UTC()
	email := fmt.Sprintf("kept%d@northwind.example", i)
	var out []envelope.Envelope
	for j, typ := range []string{envelope.TypeEmailSent, envelope.TypeEmailOpened, envelope.TypeReplyReceived, envelope.TypeUnmapped} {
		text := fmt.Sprintf("pricing for lead %d please", i)
		raw, _ := json.Marshal(map[string]string{"lead_email": email, "reply_text": text})
		out = append(out, envelope.Envelope{SpecVersion: "1.0", ID: envelope.ID("acme", "instantly", fmt.Sprint("retained", i, typ)), Type: typ,
			Tenant: "acme", Provider: "instantly", Endpoint: "instantly", Time: stored.Add(time.Duration(j) * time.Minute), ReceivedAt: stored,
			Data: envelope.Data{ProviderType: typ, Contact: &envelope.Contact{Email: email, Name: fmt.Sprint("Lead ", i)}, Campaign: &envelope.Campaign{ID: campaign},
				Message: &envelope.Message{ID: fmt.Sprint("rm", i, j), Text: text}, Raw: raw}})
	}
	return out
}

// Retention compacts every event stored longer ago than retention.payloads (its raw
// payload and texts gone from disk) and erases those past retention.events that the
// projections do not need; an event a consumer has not handled waits; the projections
// rebuilt after it equal the live ones; a second run changes nothing; quarantined
// deliveries past retention.payloads are erased.
func TestRetentionKeepsWhatTheProjectionsNeed(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	p.start(stream.Projector, projector.Run)
	ctx := context.Background()
	ages := map[int]time.Duration{}
	for i := range 12 {
		ages[i] = []time.Duration{400 * 24 * time.Hour, 100 * 24 * time.Hour, time.Hour}[i/4]
		for _, env := range retainedLead(i, ages[i]) {
			msg, err := stream.EventMessage(ctx, env)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.conn.JS.PublishMsg(ctx, msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A consumer that has not handled lead 1's reply yet.
	lagging, err := p.conn.JS.CreateConsumer(ctx, stream.Events, jetstream.ConsumerConfig{Durable: "lagging", AckPolicy: jetstream.AckExplicitPolicy,
		FilterSubject: stream.EventSubject("acme", "instantly", envelope.TypeReplyReceived)})
	if err != nil {
		t.Fatal(err)
	}
	_ = lagging
	settled(t, p.conn.JS, stream.Projector)
	url := p.conn.Embedded.ClientURL()
	dir := p.conn.Embedded.StoreDir()
	cfg := filepath.Join(t.TempDir(), "exacto.yaml")
	if err := os.WriteFile(cfg, []byte(strings.Replace(pipelineConfig, "  - id: acme\n", "  - id: acme\n    retention: {payloads: 90d, events: 365d}\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", cfg, "--tenant", "nobody"}, `no tenant "nobody" in the config`},
		{[]string{"--config", filepath.Join(t.TempDir(), "missing.yaml")}, "missing.yaml"},
	} {
		out, err := exec.Command(exactoBin, append(append([]string{"retention"}, c.args...), "--nats-url", url)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("retention %v: %v, %s; want an error saying %q", c.args, err, out, c.want)
		}
	}
	// 8 leads past 90 days: 3 events each compacted, the unmapped one compacted (100
	// days) or erased (400 days), their replies waiting for the lagging consumer.
	out := runExacto(t, "retention", "--config", cfg, "--nats-url", url)
	if want := "acme: 20 events compacted, 4 removed, 8 left until every consumer has handled them"; !strings.Contains(out, want) {
		t.Fatalf("retention:\n%s\nwant %q", out, want)
	}
	// The compacted copies handled by every consumer that takes them, as the first
	// run's originals were.
	settled(t, p.conn.JS, stream.Projector)
	settled(t, p.conn.JS, stream.IndexConsumer)
	if err := p.conn.JS.DeleteConsumer(ctx, stream.Events, "lagging"); err != nil {
		t.Fatal(err)
	}
	// The stopper ran on this node and is not bound again since a restart: its
	// checkpoint is all it has handled.
	checkpoints, err := p.conn.JS.KeyValue(ctx, stream.ConsumerCheckpoints)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := checkpoints.Put(ctx, stream.Stopper, []byte("1")); err != nil {
		t.Fatal(err)
	}
	if out := runExacto(t, "retention", "--config", cfg, "--nats-url", url); !strings.Contains(out, "acme: 0 events compacted, 0 removed, 8 left") {
		t.Fatalf("retention while the stopper is unbound:\n%s", out)
	}
	if err := checkpoints.Purge(ctx, stream.Stopper); err != nil {
		t.Fatal(err)
	}
	if out := runExacto(t, "retention", "--config", cfg, "--nats-url", url); !strings.Contains(out, "acme: 8 events compacted, 0 removed, 0 left") {
		t.Fatalf("retention once the consumer is gone:\n%s", out)
	}
	settled(t, p.conn.JS, stream.Projector)
	for i := range 12 {
		text := fmt.Sprintf("pricing for lead %d please", i)
		onDiskNow := len(onDisk(t, dir, text)) > 0
		if old := ages[i] > 90*24*time.Hour; onDiskNow == old {
			t.Errorf("lead %d, stored %s ago: its texts on disk %v", i, ages[i], onDiskNow)
		}
		for _, env := range retainedLead(i, ages[i]) {
			got, found, err := stream.Load(ctx, p.conn.JS, env.ID)
			switch {
			case err != nil:
				t.Fatal(err)
			case ages[i] > 365*24*time.Hour && env.Type == envelope.TypeUnmapped:
				if found {
					t.Errorf("lead %d's unmapped event, past retention.events, is still stored", i)
				}
				index, _ := p.conn.JS.KeyValue(ctx, stream.EventIndex)
				if stored, err := stream.Stored(ctx, index, env.ID); err != nil || !stored {
					t.Errorf("lead %d's removed event left the index: a provider's retry would be stored again (%v)", i, err)
				}
			case !found:
				t.Errorf("lead %d's %s is gone", i, env.Type)
			case ages[i] > 90*24*time.Hour:
				if !got.Compacted || got.Data.Message.Text != "" || string(got.Data.Raw) != string(privacy.Erased) || got.Data.Contact.Email != env.Data.Contact.Email || got.Data.Contact.Name != "" {
					t.Errorf("lead %d's %s past retention.payloads: %+v", i, env.Type, got.Data)
				}
			default:
				if got.Compacted || got.Data.Message.Text == "" {
					t.Errorf("lead %d's recent %s was compacted", i, env.Type)
				}
			}
		}
	}
	for _, name := range projection.Names {
		if out := runExacto(t, "replay", "--projection", name, "--nats-url", url); !strings.Contains(out, "equal to the live projection") {
			t.Errorf("replay of %s after the retention:\n%s", name, out)
		}
	}
	if out := runExacto(t, "retention", "--config", cfg, "--nats-url", url); !strings.Contains(out, "acme: 0 events compacted, 0 removed, 0 left") {
		t.Errorf("a second run:\n%s", out)
	}

	// A year on: the quarantined delivery goes, and the recent leads are compacted.
	p.mu.Lock()
	hook := p.gwURL + "/hooks/instantly/tok-instantly-0123456789"
	p.mu.Unlock()
	if ids := postQuarantined(t, hook, `{"event_type":"reply_received","EVENT_TYPE":"x","lead_email":"q@northwind.example","reply_text":"kept in the quarantine"}`); ids == "" {
		t.Fatal("not quarantined")
	}
	got, err := privacy.Retain(ctx, p.conn.JS, "acme", 90*24*time.Hour, 365*24*time.Hour, time.Now().Add(366*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if got.Deleted[stream.Quarantine] != 1 || got.Compacted != 12 || len(onDisk(t, dir, "kept in the quarantine")) > 0 {
		t.Errorf("a year on: %+v", got)
	}
	settled(t, p.conn.JS, stream.Projector)
	if out := runExacto(t, "replay", "--projection", "contacts", "--nats-url", url); !strings.Contains(out, "equal to the live projection") {
		t.Errorf("replay a year on:\n%s", out)
	}
}
