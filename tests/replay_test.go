package tests

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/kvstore"
	"exacto.dev/pkg/projection"
	"exacto.dev/pkg/projection/sqlite"
	"exacto.dev/pkg/stream"
	projector "exacto.dev/services/projector/handler"
)

// bursts is a stream holding two bursts of events on different leads, both projected
// live: the first on leads 0-9, the second, stored strictly after since, on 10-15.
type bursts struct {
	p            *pipeline
	url          string
	firstN, n    int    // events of the first burst, of both
	lastOfFirst  uint64 // the sequence of the first burst's last event
	since        string // between the bursts (RFC 3339 with nanoseconds)
	contacts, in int    // contacts in all, in the second burst
}

func twoBursts(t *testing.T) bursts {
	t.Helper()
	p := startPipeline(t)
	p.start(stream.Projector, projector.Run)
	b := bursts{p: p, url: p.conn.Embedded.ClientURL(), contacts: 16, in: 6}
	b.firstN = publishLeads(t, p.conn, 0, 10)
	st, err := p.conn.JS.Stream(context.Background(), stream.Events)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b.lastOfFirst = info.State.LastSeq
	msg, err := st.GetMsg(context.Background(), b.lastOfFirst)
	if err != nil {
		t.Fatal(err)
	}
	since := msg.Time.Add(time.Nanosecond)
	b.since = since.UTC().Format(time.RFC3339Nano)
	// The second burst is stored after since on this clock.
	eventually(t, 10*time.Second, "the clock past the first burst", func() bool { return time.Now().After(since) })
	b.n = b.firstN + publishLeads(t, p.conn, 10, 16)
	settled(t, p.conn.JS, stream.Projector)
	return b
}

// replay runs `exacto replay` against b's NATS and returns stdout and stderr apart.
func (b bursts) replay(t *testing.T, args ...string) (string, string) {
	t.Helper()
	cmd := exec.Command(exactoBin, append(append([]string{"replay"}, args...), "--nats-url", b.url)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("exacto replay %s: %v\n%s\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String()
}

// --since T between two bursts rebuilds the later burst only, its progress counts that
// burst; --from-seq N does the same from a sequence; a start after the last event ends
// at once, saying so, and writes nothing.
func TestReplayFromASequenceOrATime(t *testing.T) {
	t.Parallel()
	b := twoBursts(t)
	second := b.n - b.firstN
	for _, start := range [][]string{{"--since", b.since}, {"--from-seq", fmt.Sprint(b.lastOfFirst + 1)}} {
		out, progress := b.replay(t, append([]string{"--projection", "contacts", "--progress"}, start...)...)
		want := []string{
			fmt.Sprintf("replayed %d events up to sequence %d", second, b.n),
			// The later burst's contacts, equal to live; the earlier ones only live.
			fmt.Sprintf("contacts: rebuilt %d keys, live %d keys: 0 only in the rebuild, %d only live, 0 differ", b.in, b.contacts, b.contacts-b.in),
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Fatalf("replay %v: want %q in:\n%s", start, w, out)
			}
		}
		// The total is the later burst, not the stream.
		if w := fmt.Sprintf("%d/%d events (100.0%%)", second, second); !strings.Contains(progress, w) {
			t.Fatalf("replay %v: want progress %q in:\n%s", start, w, progress)
		}
	}
	// From the very start, and from a time before it, everything.
	for _, start := range [][]string{{"--from-seq", "1"}, {"--since", "2000-01-01T00:00:00Z"}} {
		out, _ := b.replay(t, append([]string{"--projection", "contacts"}, start...)...)
		if !strings.Contains(out, fmt.Sprintf("replayed %d events", b.n)) || !strings.Contains(out, "equal to the live projection") {
			t.Fatalf("replay %v:\n%s", start, out)
		}
	}
	// Nothing at or after the start: at once, said, nothing written.
	for _, tc := range []struct{ start, want string }{
		{"--since=2100-01-01T00:00:00Z", fmt.Sprintf("nothing to replay: no event stored at or after 2100-01-01T00:00:00Z (the last is sequence %d); nothing written", b.n)},
		{fmt.Sprintf("--from-seq=%d", b.n+1), fmt.Sprintf("nothing to replay: no event stored at or after sequence %d (the last is sequence %d)", b.n+1, b.n)},
	} {
		out, _ := b.replay(t, "--projection", "contacts", tc.start, "--into", "future", "--progress")
		if !strings.Contains(out, tc.want) || strings.Contains(out, "replayed") {
			t.Fatalf("replay %s: want %q in:\n%s", tc.start, tc.want, out)
		}
	}
	if _, err := b.p.conn.JS.KeyValue(context.Background(), "EXACTO_PROJ_CONTACTS_FUTURE"); err == nil {
		t.Fatal("a replay with nothing to replay created its buckets")
	}
}

// A live projection changed on purpose: the replay counts the difference and names the
// keys that differ.
func TestReplayShowsWhereLiveDiffers(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	p.start(stream.Projector, projector.Run)
	publishLeads(t, p.conn, 0, 8)
	settled(t, p.conn.JS, stream.Projector)
	ctx := context.Background()
	kv, err := p.conn.JS.KeyValue(ctx, "EXACTO_PROJ_CONTACTS")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(ctx)
	// The projector's checkpoint (docs/durability.md) is no contact.
	keys = slices.DeleteFunc(keys, func(k string) bool { return k == kvstore.CheckpointKey })
	if err != nil || len(keys) != 8 {
		t.Fatalf("%d live contacts (%v), want 8", len(keys), err)
	}
	// One record edited (a key the stream never named), one deleted.
	edited, deleted := keys[2], keys[5]
	e, err := kv.Get(ctx, edited)
	if err != nil {
		t.Fatal(err)
	}
	var c projection.Contact
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		t.Fatal(err)
	}
	c.Keys = append(c.Keys, "email:forged@example.com")
	data, _ := json.Marshal(c)
	if _, err := kv.Put(ctx, edited, data); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, deleted); err != nil {
		t.Fatal(err)
	}
	out := runExacto(t, "replay", "--projection", "contacts", "--nats-url", p.conn.Embedded.ClientURL())
	if !strings.Contains(out, "contacts: rebuilt 8 keys, live 7 keys: 1 only in the rebuild, 0 only live, 1 differ") {
		t.Fatalf("counts:\n%s", out)
	}
	i := strings.Index(out, "first differing keys: ")
	if i < 0 {
		t.Fatalf("no first differing keys:\n%s", out)
	}
	named := strings.Fields(strings.TrimPrefix(strings.SplitN(out[i:], "\n", 2)[0], "first differing keys: "))
	if len(named) != 2 || !slices.Contains(named, edited) || !slices.Contains(named, deleted) {
		t.Fatalf("first differing keys %v, want %s and %s", named, edited, deleted)
	}
}

// The same provider events stored a second time straight into the stream (as a retry
// after the duplicate window would be: another Nats-Msg-Id, another receive time): live
// still equals the rebuild, and nothing is counted twice.
func TestReplayEqualsLiveWithDuplicatesInTheStream(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	p.start(stream.Projector, projector.Run)
	const leads = 12
	n := publishLeads(t, p.conn, 0, leads)
	settled(t, p.conn.JS, stream.Projector)
	ctx := context.Background()
	nc, err := nats.Connect(p.conn.Embedded.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	k := 0
	for i := range leads {
		for _, env := range leadEvents(i) {
			if k++; k%2 == 0 || env.Type == envelope.TypeReplyReceived { // every other event, and every reply
				env.ReceivedAt = time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
				msg, err := stream.EventMessage(ctx, env)
				if err != nil {
					t.Fatal(err)
				}
				msg.Header.Set(jetstream.MsgIDHeader, env.ID+"-after-the-window")
				if _, err := p.conn.JS.PublishMsg(ctx, msg); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	st, _ := p.conn.JS.Stream(ctx, stream.Events)
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dups := int(info.State.Msgs) - n
	if dups < leads {
		t.Fatalf("%d duplicates stored, want at least %d", dups, leads)
	}
	settled(t, p.conn.JS, stream.Projector)
	url := p.conn.Embedded.ClientURL()
	for _, name := range projection.Names {
		out := runExacto(t, "replay", "--projection", name, "--nats-url", url)
		if !strings.Contains(out, "equal to the live projection") || !strings.Contains(out, fmt.Sprintf("replayed %d events", n+dups)) {
			t.Fatalf("replay of %s with %d duplicates:\n%s", name, dups, out)
		}
	}
	live, err := projection.Open(ctx, p.conn.JS, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	counts, err := projection.Reader{Stores: live}.Campaign(ctx, "demo", campaign)
	if err != nil {
		t.Fatal(err)
	}
	if counts.Contacts != leads || counts.Replies != (leads+2)/3 {
		t.Fatalf("campaign counts with duplicates in the stream: %+v, want %d contacts, %d replies", counts, leads, (leads+2)/3)
	}
}

// A replay from a sequence or a time resumes as one from the first event does, when
// asked again the same way; asked another way (projection, start) it is refused unless
// --restart starts it over.
func TestReplayResumesItsOwnStartOnly(t *testing.T) {
	t.Parallel()
	b := twoBursts(t)
	ctx := context.Background()
	from := fmt.Sprint(b.lastOfFirst + 1)
	args := []string{"--projection", "contacts", "--from-seq", from, "--into", "part"}
	b.replay(t, args...)
	// As if stopped after four events of the second burst.
	stoppedAt := b.lastOfFirst + 4
	checkpoints, err := b.p.conn.JS.KeyValue(ctx, "EXACTO_PROJ_REPLAYS")
	if err != nil {
		t.Fatal(err)
	}
	unfinish := func(start string) {
		t.Helper()
		data, _ := json.Marshal(sqlite.Checkpoint{LastSeq: stoppedAt, Projection: "contacts", Start: start})
		if _, err := checkpoints.Put(ctx, "part", data); err != nil {
			t.Fatal(err)
		}
	}
	unfinish("seq:" + from)
	out, _ := b.replay(t, args...)
	if !strings.Contains(out, fmt.Sprintf("after sequence %d", stoppedAt)) ||
		!strings.Contains(out, fmt.Sprintf("replayed %d events up to sequence %d", uint64(b.n)-stoppedAt, b.n)) ||
		!strings.Contains(out, fmt.Sprintf("rebuilt %d keys, live %d keys: 0 only in the rebuild, %d only live, 0 differ", b.in, b.contacts, b.contacts-b.in)) {
		t.Fatalf("resumed --from-seq:\n%s", out)
	}
	// Another projection, another start, no start: refused, the target untouched.
	unfinish("seq:" + from)
	for _, other := range [][]string{
		{"--projection", "campaigns", "--from-seq", from},
		{"--projection", "contacts", "--from-seq", "1"},
		{"--projection", "contacts", "--since", b.since},
		{"--projection", "contacts"},
	} {
		cmd := exec.Command(exactoBin, append([]string{"replay", "--nats-url", b.url, "--into", "part"}, other...)...)
		out, err := cmd.CombinedOutput()
		want := fmt.Sprintf("holds an unfinished replay of contacts from sequence %s (stopped after sequence %d)", from, stoppedAt)
		if err == nil || !strings.Contains(string(out), want) || !strings.Contains(string(out), "--restart") {
			t.Fatalf("replay %v over another unfinished one: %v\n%s", other, err, out)
		}
	}
	if e, err := checkpoints.Get(ctx, "part"); err != nil || !strings.Contains(string(e.Value()), `"done":false`) {
		t.Fatalf("a refused replay changed the checkpoint: %v", err)
	}
	// --restart starts the other one over it.
	out, _ = b.replay(t, "--projection", "contacts", "--into", "part", "--restart")
	if strings.Contains(out, "resuming") || !strings.Contains(out, fmt.Sprintf("replayed %d events", b.n)) || !strings.Contains(out, "equal to the live") {
		t.Fatalf("--restart:\n%s", out)
	}

	// --since into SQLite: stopped (the file's checkpoint says so), then resumed.
	file := filepath.Join(t.TempDir(), "since.db")
	sinceArgs := []string{"--projection", "campaigns", "--since", b.since, "--into", "sqlite:" + file}
	b.replay(t, sinceArgs...)
	db, err := sql.Open("sqlite", file)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE replay SET value = CASE key WHEN 'done' THEN 'false' ELSE ? END WHERE key IN ('done', 'last_seq')`, fmt.Sprint(stoppedAt)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	out, _ = b.replay(t, sinceArgs...)
	if !strings.Contains(out, fmt.Sprintf("after sequence %d", stoppedAt)) || !strings.Contains(out, fmt.Sprintf("replayed %d events", uint64(b.n)-stoppedAt)) {
		t.Fatalf("resumed --since into SQLite:\n%s", out)
	}
	db, err = sql.Open("sqlite", file)
	if err != nil {
		t.Fatal(err)
	}
	var members int
	if err := db.QueryRow(`SELECT contacts FROM campaigns WHERE campaign = ?`, campaign).Scan(&members); err != nil || members != b.in {
		t.Fatalf("the resumed --since rebuild counts %d contacts (%v), want the later burst's %d", members, err, b.in)
	}
}

// Right after events the live projector has not handled yet, replay does not call the
// lag a difference: a paused projector is said to be paused, with how far it got (the
// wait for a running one is services/exacto's TestLiveHandledWaits); once it has caught
// up, live equals the rebuild.
func TestReplaySaysWhenLiveIsBehind(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	p.start(stream.Projector, projector.Run)
	url := p.conn.Embedded.ClientURL()
	publishLeads(t, p.conn, 0, 4)
	settled(t, p.conn.JS, stream.Projector)
	runExacto(t, "worker", "pause", stream.Projector, "--nats-url", url)
	publishLeads(t, p.conn, 4, 8) // held from the paused projector
	began := time.Now()
	out := runExacto(t, "replay", "--projection", "contacts", "--nats-url", url)
	if took := time.Since(began); took > 20*time.Second {
		t.Errorf("a paused projector was waited for: %v", took)
	}
	for _, want := range []string{"contacts: rebuilt 8 keys, live 4 keys: 4 only in the rebuild",
		"the live projection is behind: its projector is paused (exacto worker resume projector) and has handled the stream up to sequence "} {
		if !strings.Contains(out, want) {
			t.Errorf("behind: the output lacks %q:\n%s", want, out)
		}
	}
	runExacto(t, "worker", "resume", stream.Projector, "--nats-url", url)
	settled(t, p.conn.JS, stream.Projector)
	out = runExacto(t, "replay", "--projection", "contacts", "--nats-url", url)
	if !strings.Contains(out, "contacts: rebuilt 8 keys, live 8 keys: equal to the live projection") || strings.Contains(out, "behind") {
		t.Errorf("caught up:\n%s", out)
	}
}
