package tests

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/stream"
	crmwriter "exacto.dev/services/crmwriter/handler"
)

// The DLQ cases through `exacto dlq`: a reply HubSpot rejected is listed with its
// reason and owner, replayed twice once the cause is fixed, and makes one note; a reply
// five days old is refused as stale, with its reason; a discard is recorded.
func TestDeadLetterWorkflow(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	p.sb.SetNoteWriteFault(sandbox.Fault{Status: 400})
	p.start(stream.CRMWriter, crmwriter.Run)
	fresh := p.post(instantlyEvent("reply_received", "ana@northwind.example", campaign, "em-1", "Can you send pricing?", time.Now()))[0]
	old := p.post(instantlyEvent("reply_received", "ben@northwind.example", campaign, "em-2", "Can you send pricing?", time.Now().Add(-120*time.Hour)))[0]
	spare := p.post(instantlyEvent("reply_received", "cy@northwind.example", campaign, "em-3", "Can you send pricing?", time.Now()))[0]
	for _, id := range []string{fresh, old, spare} {
		eventually(t, 30*time.Second, id+" dead-lettered", func() bool { return p.status(stream.CRMWriter, id).Status == guard.DeadLetter })
	}
	url := p.conn.Embedded.ClientURL()
	dlq := func(args ...string) (string, error) { return runDLQ(url, args...) }
	list, err := dlq("list", "--consumer", "crmwriter")
	if err != nil || strings.Count(list, "crmwriter") != 3 || !strings.Contains(list, "sdr-team") || !strings.Contains(list, "permanent") {
		t.Fatalf("dlq list: %v\n%s", err, list)
	}
	ids := map[string]string{} // event id -> dead letter id
	for seq := 1; seq <= 3; seq++ {
		show, err := dlq("show", fmt.Sprint(seq))
		for _, id := range []string{fresh, old, spare} {
			if err == nil && strings.Contains(show, `"event_id": "`+id+`"`) {
				ids[id] = fmt.Sprint(seq)
			}
		}
	}
	if len(ids) != 3 {
		t.Fatalf("dead letter ids: %v", ids)
	}
	show, _ := dlq("show", ids[fresh])
	if !strings.Contains(show, `"owner": "sdr-team"`) || !strings.Contains(show, "400") || !strings.Contains(show, `"attempt_count": 1`) {
		t.Fatalf("dlq show:\n%s", show)
	}
	// The cause is fixed. A dry run says what a replay would do and does nothing.
	p.sb.ClearFaults()
	replays := brokertest.Count(t, p.conn, stream.Replays)
	out, err := dlq("replay", ids[fresh], "--dry-run", "--by", "ana", "--why", "property fixed")
	if err != nil || !strings.Contains(out, "dry run, nothing replayed") ||
		!regexp.MustCompile(`freshness: fresh \(the reply.received event is [0-9hms]+ old; its limit is 72h0m0s\)`).MatchString(out) ||
		!strings.Contains(out, "crmwriter guard: dead_letter") || !strings.Contains(out, "replay: would be sent back to crmwriter") {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	// A dry run records nothing, so it needs no why: its verdict is the letter's own.
	if out, err := dlq("replay", ids[fresh], "--dry-run"); err != nil || !strings.Contains(out, "replay: would be sent back to crmwriter") {
		t.Fatalf("dry run without a why: %v\n%s", err, out)
	}
	if out, err := dlq("replay", ids[old], "--dry-run"); err != nil || !strings.Contains(out, "freshness: stale: the reply.received event is") ||
		!regexp.MustCompile(`replay: would be refused: stale: the reply.received event is 1[12]\dh\d+m0s old; its freshness limit is 72h0m0s`).MatchString(out) {
		t.Fatalf("dry run of the stale one: %v\n%s", err, out)
	}
	// Every replay needs a why: refused before anything is done.
	for _, why := range []string{"", "   "} {
		if out, err := dlq("replay", ids[fresh], "--by", "ana", "--why", why); err == nil || !strings.Contains(out, "--why is required") {
			t.Fatalf("replay with why %q: %v\n%s", why, err, out)
		}
	}
	if show, _ := dlq("show", ids[fresh]); !strings.Contains(show, `"status": "open"`) || strings.Contains(show, `"actions"`) ||
		p.status(stream.CRMWriter, fresh).Status != guard.DeadLetter || brokertest.Count(t, p.conn, stream.Replays) != replays || len(p.notesFor(fresh)) != 0 {
		t.Fatalf("a dry run or a refused replay changed something:\n%s", show)
	}
	// The fresh reply is replayed twice: one note.
	for i := range 2 {
		out, err := dlq("replay", ids[fresh], "--by", "ana", "--why", fmt.Sprint("property fixed, try ", i+1))
		if err != nil {
			t.Fatalf("replay %d: %v\n%s", i+1, err, out)
		}
		if i == 0 {
			p.completedIn(30*time.Second, fresh, stream.CRMWriter)
		} else if !strings.Contains(out, "nothing sent: the consumer had completed the event") {
			t.Fatalf("second replay:\n%s", out)
		}
	}
	// What the replays achieved: the event completed, the first sent back, the second
	// sending nothing; the letter can no longer be discarded.
	show, _ = dlq("show", ids[fresh])
	for _, want := range []string{`"event_now": "completed"`, `"replay: sent back"`, `"replay: nothing sent: the consumer had completed the event"`} {
		if !strings.Contains(show, want) {
			t.Fatalf("show after the replays lacks %s:\n%s", want, show)
		}
	}
	if out, err := dlq("discard", ids[fresh], "--by", "ana", "--why", "done"); err == nil || !strings.Contains(out, "nothing to discard") {
		t.Fatalf("discarding a letter whose effect was made: %v\n%s", err, out)
	}
	// The second replay sent nothing (no delivery to wait for): one note.
	if n, sent := len(p.notesFor(fresh)), brokertest.Count(t, p.conn, stream.Replays); n != 1 || sent != replays+1 {
		t.Fatalf("%d notes and %d replays sent after two replays", n, sent-replays)
	}
	// The five-day-old reply is refused with its reason.
	out, err = dlq("replay", ids[old], "--by", "ana", "--why", "try it")
	if err == nil || !regexp.MustCompile(`stale: the reply.received event is 1[12]\dh\d+m0s old; its freshness limit is 72h0m0s`).MatchString(out) {
		t.Fatalf("stale replay: %v\n%s", err, out)
	}
	if len(p.notesFor(old)) != 0 {
		t.Fatal("a refused replay wrote a note")
	}
	// Bulk: a dry run counts (no why needed); a discard needs a why and is recorded.
	if out, err := dlq("replay", "--matching", "--consumer", "crmwriter", "--dry-run"); err != nil ||
		!strings.Contains(out, "2 dead letters match; 1 fresh enough to replay, 1 stale; 1 would be sent back (dry run: nothing replayed)") {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	if out, err := dlq("discard", ids[spare]); err == nil || !strings.Contains(out, "--why is required") {
		t.Fatalf("discard without a why:\n%s", out)
	}
	if out, err := dlq("discard", ids[spare], "--by", "ana", "--why", "duplicate of a manual note"); err != nil {
		t.Fatalf("discard: %v\n%s", err, out)
	}
	if list, _ := dlq("list"); strings.Count(list, "crmwriter") != 1 {
		t.Fatalf("open after the replay and the discard:\n%s", list)
	}
	if all, _ := dlq("list", "--all"); !strings.Contains(all, "replayed") || !strings.Contains(all, "discarded") {
		t.Fatalf("list --all:\n%s", all)
	}
	if out, err := dlq("show", "nine"); err == nil || !strings.Contains(out, "not a dead letter id") {
		t.Fatalf("a bad id: %v\n%s", err, out)
	}
}

// Ctrl-C stops a bulk dry run between two dead letters, as it stops a bulk replay:
// SIGINT once the first verdict is out (the child's stdout is a one-page pipe the test
// stops reading, so it cannot get far ahead). It prints that it stops, "stopped after
// i of n" and the counts of the letters judged, exits with status 1, and changes
// nothing.
func TestDeadLetterDryRunCancel(t *testing.T) {
	t.Parallel()
	conn := brokertest.Start(t, "")
	url := conn.Embedded.ClientURL()
	const n = 150
	storeReplyLetters(t, conn, "dry", n)
	first, out := interruptAfterFirstLine(t, "dlq", "replay", "--matching", "--consumer", "crmwriter", "--dry-run", "--nats-url", url)
	if !strings.HasPrefix(first, fmt.Sprintf("[1/%d] dead letter ", n)) || !strings.Contains(first, "would be sent back to crmwriter") {
		t.Fatalf("first line %q", first)
	}
	judged := len(progress(t, out, n))
	if judged == 0 || judged >= n || !strings.Contains(out, fmt.Sprintf("\nstopped after %d of %d\n%d dead letters match; of the %d judged, %d fresh enough to replay, 0 stale; %d would be sent back (dry run: nothing replayed)\n",
		judged, n, n, judged, judged, judged)) {
		t.Fatalf("after the interrupt (%d verdicts):\n%s", judged, out)
	}
	if sent := brokertest.Count(t, conn, stream.Replays); sent != 0 {
		t.Fatalf("a dry run sent %d replays", sent)
	}
	if list, err := runDLQ(url, "list", "--consumer", "crmwriter"); err != nil || strings.Count(list, "crmwriter") != n {
		t.Fatalf("open after the dry run: %v\n%s", err, list)
	}
}
