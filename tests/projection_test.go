package tests

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	_ "modernc.org/sqlite"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/projection"
	"exacto.dev/pkg/stream"
	projector "exacto.dev/services/projector/handler"
)

// campaignHistory is the webhooks of a campaign over n leads, each with its own story
// (sent, delivered, opened; some reply, one unsubscribes and is then sent a follow-up,
// one bounces), timed in event order.
func campaignHistory(n int, at time.Time) [][]byte {
	var out [][]byte
	for i := range n {
		lead := fmt.Sprintf("lead%d@northwind.example", i)
		t := at.Add(time.Duration(i) * time.Minute)
		story := []string{"email_sent", "email_opened"}
		switch i % 5 {
		case 1:
			story = append(story, "reply_received")
		case 2:
			story = append(story, "lead_unsubscribed", "email_sent")
		case 3:
			story = append(story, "email_bounced")
		}
		for j, typ := range story {
			out = append(out, instantlyEvent(typ, lead, campaign, fmt.Sprintf("em-%d-%d", i, j), "Can you send pricing?", t.Add(time.Duration(j)*time.Hour)))
		}
	}
	return out
}

// settled waits until consumer has handled every event stored.
func settled(t *testing.T, js jetstream.JetStream, consumer string) {
	t.Helper()
	// Full-size chaos runs (make chaos) drain tens of thousands of events.
	settledWithin(t, js, consumer, time.Duration(size(60, 900))*time.Second)
}

// settledWithin waits up to d until consumer has handled every event stored. The
// consumer's count of pending events follows the stream a moment late (the server
// signals its consumers on another goroutine), so it must also have delivered the last
// event its filter takes as stored when the wait began.
func settledWithin(t *testing.T, js jetstream.JetStream, consumer string, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	last := uint64(0)
	eventually(t, d, consumer+" caught up", func() bool {
		c, err := js.Consumer(ctx, stream.Events, consumer)
		if err != nil {
			return false
		}
		if last == 0 {
			if last, err = lastTaken(ctx, js, c.CachedInfo().Config); err != nil {
				return false
			}
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Stream >= last
	})
}

// lastTaken is the sequence of the last event stored that a consumer of cfg takes.
func lastTaken(ctx context.Context, js jetstream.JetStream, cfg jetstream.ConsumerConfig) (uint64, error) {
	s, err := js.Stream(ctx, stream.Events)
	if err != nil {
		return 0, err
	}
	filters := append([]string{cfg.FilterSubject}, cfg.FilterSubjects...)
	if cfg.FilterSubject == "" && len(cfg.FilterSubjects) == 0 {
		filters = []string{">"}
	}
	last := uint64(0)
	for _, f := range filters {
		if f == "" {
			continue
		}
		m, err := s.GetLastMsgForSubject(ctx, f)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, err
		}
		last = max(last, m.Sequence)
	}
	return last, nil
}

// runExacto runs the exacto binary with args and returns what it printed.
func runExacto(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(exactoBin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("exacto %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// After a run with duplicates and reordering, a rebuild from sequence 1 equals the live
// projection, in every projection; the SQLite export answers plain SQL with the same.
func TestReplayEqualsLive(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	p.start(stream.Projector, projector.Run)
	bodies := campaignHistory(20, time.Now().UTC().Truncate(time.Hour).Add(-48*time.Hour))
	// Every webhook once or twice, in shuffled order.
	deliveries := append(append([][]byte{}, bodies...), bodies[:len(bodies)/2]...)
	rand.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	for _, b := range deliveries {
		p.post(b)
	}
	settled(t, p.conn.JS, stream.Projector)
	url := p.conn.Embedded.ClientURL()
	for _, name := range []string{"contacts", "campaigns", "suppression"} {
		out := runExacto(t, "replay", "--projection", name, "--nats-url", url)
		if !strings.Contains(out, "equal to the live projection") || !strings.Contains(out, fmt.Sprintf("replayed %d events", len(bodies))) {
			t.Fatalf("replay of %s:\n%s", name, out)
		}
	}
	// Into buckets, then into SQLite for the analysts.
	if out := runExacto(t, "replay", "--projection", "contacts", "--into", "check", "--nats-url", url); !strings.Contains(out, "equal to the live") {
		t.Fatalf("replay into buckets:\n%s", out)
	}
	kv, err := p.conn.JS.KeyValue(context.Background(), "EXACTO_PROJ_CONTACTS_CHECK")
	if err != nil {
		t.Fatal(err)
	}
	if keys, _ := kv.Keys(context.Background()); len(keys) != 20 {
		t.Fatalf("%d contacts in the rebuilt bucket, want 20", len(keys))
	}
	file := filepath.Join(t.TempDir(), "projections.db")
	runExacto(t, "replay", "--projection", "campaigns", "--into", "sqlite:"+file, "--nats-url", url)
	db, err := sql.Open("sqlite", file)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var contactsN, replies, unsubscribes, bounces int
	if err := db.QueryRow(`SELECT contacts, replies, unsubscribes, bounces FROM campaigns WHERE campaign = ?`, campaign).Scan(&contactsN, &replies, &unsubscribes, &bounces); err != nil {
		t.Fatal(err)
	}
	if contactsN != 20 || replies != 4 || unsubscribes != 4 || bounces != 4 {
		t.Fatalf("campaigns row: %d contacts, %d replies, %d unsubscribes, %d bounces", contactsN, replies, unsubscribes, bounces)
	}
	var followUps int
	if err := db.QueryRow(`SELECT count(*) FROM discrepancies WHERE type = 'email.sent'`).Scan(&followUps); err != nil {
		t.Fatal(err)
	}
	if followUps != 4 {
		t.Fatalf("%d follow-ups after an unsubscribe found by SQL, want 4", followUps)
	}
	// Operators read the same through the read API.
	shown := runExacto(t, "contact", "show", "Lead2@Northwind.example", "--tenant", "acme", "--nats-url", url)
	if !strings.Contains(shown, `"status": "unsubscribed"`) || !strings.Contains(shown, `"suppression"`) {
		t.Fatalf("contact show:\n%s", shown)
	}
	if shown := runExacto(t, "campaign", "show", campaign, "--tenant", "acme", "--nats-url", url); !strings.Contains(shown, `"contacts": 20`) {
		t.Fatalf("campaign show:\n%s", shown)
	}
	if out, err := exec.Command(exactoBin, "contact", "show", "nobody@example.com", "--tenant", "acme", "--nats-url", url).CombinedOutput(); err == nil ||
		!strings.Contains(string(out), `no contact "nobody@example.com"`) {
		t.Fatalf("an unknown contact: %v %s", err, out)
	}
}

// kill -9 of the projector mid-stream, then a restart: the projection equals a fresh
// rebuild.
func TestProjectorKilledMidStream(t *testing.T) {
	t.Parallel()
	conn := brokertest.Start(t, "")
	url := conn.Embedded.ClientURL()
	n := publishHistory(t, conn, 400)
	start := func() *exec.Cmd {
		cmd := exec.Command(exactoBin, "projector", "--log-text")
		cmd.Env = append(cmd.Environ(), "EXACTO_NATS_URL="+url, "EXACTO_ADMIN_ADDR="+freePort(t), "EXACTO_CONFIG=", "EXACTO_SANDBOX_URL=")
		cmd.Dir = t.TempDir()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	first := start()
	// Mid-stream: some events handled, many not.
	eventually(t, 60*time.Second, "the projector under way", func() bool {
		c, err := conn.JS.Consumer(context.Background(), stream.Events, stream.Projector)
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.AckFloor.Stream > 20
	})
	first.Process.Signal(syscall.SIGKILL)
	first.Wait()
	c, _ := conn.JS.Consumer(context.Background(), stream.Events, stream.Projector)
	info, _ := c.Info(context.Background())
	if info.NumPending == 0 && info.NumAckPending == 0 {
		t.Fatalf("the projector finished all %d events before the kill: not mid-stream", n)
	}
	t.Logf("killed with %d events pending, %d unacknowledged", info.NumPending, info.NumAckPending)
	start()
	settled(t, conn.JS, stream.Projector)
	for _, name := range []string{"contacts", "campaigns", "suppression"} {
		if out := runExacto(t, "replay", "--projection", name, "--nats-url", url); !strings.Contains(out, "equal to the live projection") {
			t.Fatalf("after a kill -9, %s:\n%s", name, out)
		}
	}
}

// publishHistory stores a campaign's events as the gateway would, and returns how many.
func publishHistory(t *testing.T, conn *broker.Conn, leads int) int {
	t.Helper()
	return publishLeads(t, conn, 0, leads)
}

// publishLeads stores the events of leads from to to-1 (sent, delivered, opened, and a
// reply from every third), as the gateway would, and returns how many.
func publishLeads(t *testing.T, conn *broker.Conn, from, to int) int {
	t.Helper()
	nc, err := nats.Connect(conn.Embedded.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	n := 0
	for i := from; i < to; i++ {
		for _, env := range leadEvents(i) {
			msg, err := stream.EventMessage(context.Background(), env)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := js.PublishMsgAsync(msg); err != nil {
				t.Fatal(err)
			}
			if n++; n%2000 == 0 {
				<-js.PublishAsyncComplete()
			}
		}
	}
	<-js.PublishAsyncComplete()
	return n
}

// leadEvents are lead i's events: sent, delivered, opened, and a reply from every third.
func leadEvents(i int) []envelope.Envelope {
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	email := fmt.Sprintf("lead%d@northwind.example", i)
	var out []envelope.Envelope
	for j, typ := range []string{envelope.TypeEmailSent, envelope.TypeEmailDelivered, envelope.TypeEmailOpened, envelope.TypeReplyReceived} {
		if typ == envelope.TypeReplyReceived && i%3 != 0 {
			continue
		}
		out = append(out, envelope.Envelope{SpecVersion: "1.0", ID: envelope.ID("demo", "instantly", fmt.Sprint(i, typ)), Type: typ,
			Tenant: "demo", Provider: "instantly", Endpoint: "instantly", Time: at.Add(time.Duration(i*10+j) * time.Minute),
			Data: envelope.Data{ProviderType: typ, Contact: &envelope.Contact{Email: email}, Campaign: &envelope.Campaign{ID: campaign},
				Message: &envelope.Message{ID: fmt.Sprint("m", i, j), Text: "Can you send pricing?"}}})
	}
	return out
}

// A replay stopped with Ctrl-C writes what it has; the same command resumes after the
// last sequence it applied, and ends equal to a replay that never stopped.
func TestReplayStopsAndResumes(t *testing.T) {
	t.Parallel()
	conn := brokertest.Start(t, "")
	url := conn.Embedded.ClientURL()
	total := publishHistory(t, conn, 4000)
	args := []string{"replay", "--projection", "contacts", "--into", "resumed", "--progress", "--nats-url", url}
	cmd := exec.Command(exactoBin, args...)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "progress on the terminal", func() bool { return strings.Contains(stderr.String(), "events/s") })
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err == nil {
		t.Fatalf("an interrupted replay exited 0:\n%s", stdout.String())
	}
	if !strings.Contains(stdout.String(), "run the same command again to resume") || !strings.Contains(stderr.String(), "left") {
		t.Fatalf("stopped replay said:\n%s\n%s", stdout.String(), stderr.String())
	}
	out := runExacto(t, args...)
	var after uint64
	var done int
	if _, err := fmt.Sscanf(out[strings.Index(out, "after sequence"):], "after sequence %d", &after); err != nil || after == 0 || after >= uint64(total) {
		t.Fatalf("resume did not say where it started (%v):\n%s", err, out)
	}
	if _, err := fmt.Sscanf(out[strings.Index(out, "replayed"):], "replayed %d events", &done); err != nil || done != total-int(after) {
		t.Fatalf("resumed after %d of %d but replayed %d:\n%s", after, total, done, out)
	}
	runExacto(t, "replay", "--projection", "contacts", "--into", "whole", "--nats-url", url)
	ctx := context.Background()
	resumed, err := projection.Open(ctx, conn.JS, "resumed", 1)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := projection.Open(ctx, conn.JS, "whole", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range projection.Names {
		a, _ := resumed.Of(name)
		b, _ := whole.Of(name)
		if d, err := projection.Diff(ctx, name, a, b); err != nil || !d.Equal() || (d.KeysA == 0 && name != projection.Suppression) {
			t.Fatalf("%s: resumed vs whole: %+v %v", name, d, err)
		}
	}
	t.Logf("stopped after %d of %d events, resumed for %d", after, total, done)
}

// Bad flags are refused with a clear error before anything is read or written.
func TestReplayRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--projection", "leads"}, `no projection "leads"`},
		{[]string{}, `required flag(s) "projection" not set`},
		{[]string{"--projection", "contacts", "--from-seq", "3", "--since", "2026-12-01T00:00:00Z"}, "exclusive"},
		{[]string{"--projection", "contacts", "--since", "yesterday"}, "RFC 3339"},
		{[]string{"--projection", "contacts", "--into", "Bad Name"}, "want NAME"},
		{[]string{"--projection", "contacts", "--into", "sqlite:"}, "the file is missing"},
	} {
		cmd := exec.Command(exactoBin, append([]string{"replay", "--nats-url", "nats://127.0.0.1:1"}, tc.args...)...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("replay %v: %v\n%s", tc.args, err, out)
		}
	}
}
