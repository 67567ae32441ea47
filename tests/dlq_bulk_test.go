package tests

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/dlq/dlqtest"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/stream"
	crmwriter "exacto.dev/services/crmwriter/handler"
)

// runDLQ runs `exacto dlq ARGS --nats-url url` and returns its output (stdout and
// stderr).
func runDLQ(url string, args ...string) (string, error) {
	out, err := exec.Command(exactoBin, append(append([]string{"dlq"}, args...), "--nats-url", url)...).CombinedOutput()
	return string(out), err
}

var progressRE = regexp.MustCompile(`(?m)^\[(\d+)/(\d+)\] (.*)$`)

// progress returns the "[i/n] ..." lines of out, checking they count 1..len in order
// out of n.
func progress(t *testing.T, out string, n int) []string {
	t.Helper()
	var lines []string
	for i, m := range progressRE.FindAllStringSubmatch(out, -1) {
		if m[1] != strconv.Itoa(i+1) || m[2] != strconv.Itoa(n) {
			t.Fatalf("progress line %d is %q, want [%d/%d]\n%s", i+1, m[0], i+1, n, out)
		}
		lines = append(lines, m[3])
	}
	return lines
}

// A real bulk replay: four dead letters of the crmwriter, one of them stale. Each gets
// a progress line; the stale one is refused with its reason and the others go on; the
// counts are right; each fresh reply makes one note, the stale one none. The same
// command again finds only the stale letter open and sends nothing.
func TestDeadLetterBulkReplay(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	p.sb.SetNoteWriteFault(sandbox.Fault{Status: 400})
	p.start(stream.CRMWriter, crmwriter.Run)
	var fresh []string
	for i, lead := range []string{"ana", "ben", "cy"} {
		fresh = append(fresh, p.post(instantlyEvent("reply_received", lead+"@bulk.example", campaign, fmt.Sprint("em-bulk-", i), "Can you send pricing?", time.Now()))[0])
	}
	stale := p.post(instantlyEvent("reply_received", "dee@bulk.example", campaign, "em-bulk-old", "Pricing?", time.Now().Add(-100*time.Hour)))[0]
	for _, id := range append(slices.Clone(fresh), stale) {
		eventually(t, 30*time.Second, id+" dead-lettered", func() bool { return p.status(stream.CRMWriter, id).Status == guard.DeadLetter })
	}
	url := p.conn.Embedded.ClientURL()
	p.sb.ClearFaults()

	out, err := runDLQ(url, "replay", "--matching", "--consumer", "crmwriter", "--by", "ana", "--why", "HubSpot property fixed")
	if err != nil {
		t.Fatalf("bulk replay: %v\n%s", err, out)
	}
	lines := progress(t, out, 4)
	if len(lines) != 4 || !strings.HasSuffix(out, "3 replayed, 1 refused, of 4 matching\n") {
		t.Fatalf("bulk replay:\n%s", out)
	}
	for _, id := range fresh {
		if !slices.ContainsFunc(lines, func(l string) bool {
			return strings.Contains(l, "(event "+id+"): sent back to crmwriter")
		}) {
			t.Errorf("no progress line sends %s back:\n%s", id, out)
		}
	}
	refusal := regexp.MustCompile(`^dead letter \d+ \(event ` + stale + `\) refused: stale: the reply.received event is 10\dh\d+m0s old; its freshness limit is 72h0m0s`)
	if !slices.ContainsFunc(lines, refusal.MatchString) {
		t.Errorf("the stale letter is not refused with its reason:\n%s", out)
	}
	p.completedIn(30*time.Second, fresh[0], stream.CRMWriter)
	p.completedIn(30*time.Second, fresh[1], stream.CRMWriter)
	p.completedIn(30*time.Second, fresh[2], stream.CRMWriter)
	for _, id := range fresh {
		if n := len(p.notesFor(id)); n != 1 {
			t.Errorf("%s: %d notes after the bulk replay", id, n)
		}
	}
	if len(p.notesFor(stale)) != 0 || p.status(stream.CRMWriter, stale).Status != guard.DeadLetter {
		t.Error("the refused stale letter made its effect")
	}
	// Again: only the stale letter is open; nothing is sent.
	sent := brokertest.Count(t, p.conn, stream.Replays)
	if out, err := runDLQ(url, "replay", "--matching", "--consumer", "crmwriter", "--by", "ana", "--why", "again"); err != nil ||
		len(progress(t, out, 1)) != 1 || !strings.HasSuffix(out, "0 replayed, 1 refused, of 1 matching\n") {
		t.Fatalf("second bulk replay: %v\n%s", err, out)
	}
	if n := brokertest.Count(t, p.conn, stream.Replays); n != sent || sent != 3 {
		t.Errorf("replays sent: %d, then %d; want 3 both times", sent, n)
	}
	// A bulk replay needs a why too.
	if out, err := runDLQ(url, "replay", "--matching", "--by", "ana"); err == nil || !strings.Contains(out, "--why is required") {
		t.Errorf("bulk replay without a why: %v\n%s", err, out)
	}
}

// Ctrl-C stops a bulk replay between two dead letters: SIGINT once the first progress
// line is out (and before the last: the child's stdout is a one-page pipe the test
// stops reading, so the child cannot get far ahead). It prints that it stops, then
// "stopped after i of n" and the counts; it exits with status 1; exactly the letters
// it reported were replayed, and the same command again does the rest.
func TestDeadLetterBulkReplayCancel(t *testing.T) {
	t.Parallel()
	conn := brokertest.Start(t, "")
	url := conn.Embedded.ClientURL()
	const n = 150
	storeReplyLetters(t, conn, "bulk", n)
	first, out := interruptAfterFirstLine(t, "dlq", "replay", "--matching", "--consumer", "crmwriter", "--by", "ana", "--why", "bulk", "--nats-url", url)
	if !strings.HasPrefix(first, fmt.Sprintf("[1/%d] dead letter ", n)) {
		t.Fatalf("first line %q", first)
	}
	done := len(progress(t, out, n))
	if done == 0 || done >= n || !strings.Contains(out, fmt.Sprintf("\nstopped after %d of %d\n%d replayed, 0 refused, of %d matching\n", done, n, done, n)) {
		t.Fatalf("after the interrupt (%d progress lines):\n%s", done, out)
	}
	if sent := brokertest.Count(t, conn, stream.Replays); sent != uint64(done) {
		t.Fatalf("%d replays sent, %d reported", sent, done)
	}
	// The same command again goes on with the letters still open.
	again, err := runDLQ(url, "replay", "--matching", "--consumer", "crmwriter", "--by", "ana", "--why", "bulk")
	if err != nil || !strings.HasSuffix(again, fmt.Sprintf("%d replayed, 0 refused, of %d matching\n", n-done, n-done)) {
		t.Fatalf("the rest: %v\n%s", err, again)
	}
	if sent := brokertest.Count(t, conn, stream.Replays); sent != n {
		t.Fatalf("%d replays sent in all, want %d", sent, n)
	}
}

// The `exacto dlq list` filter flags select exactly each subset of a sample queue
// (two consumers, tenants, providers, classes, three types, different ages).
func TestDeadLetterFilterFlags(t *testing.T) {
	t.Parallel()
	conn := brokertest.Start(t, "")
	url := conn.Embedded.ClientURL()
	ids := dlqtest.Publish(t, conn.JS, time.Now())
	idRE := regexp.MustCompile(`(?m)^(\d+)\s`)
	for _, c := range dlqtest.Cases {
		args := []string{"list"}
		for _, f := range []struct{ flag, v string }{{"--consumer", c.Consumer}, {"--tenant", c.Tenant}, {"--provider", c.Provider}, {"--type", c.Type}, {"--class", c.Class}} {
			if f.v != "" {
				args = append(args, f.flag, f.v)
			}
		}
		if c.OlderThan > 0 {
			args = append(args, "--older-than", c.OlderThan.String())
		}
		if c.NewerThan > 0 {
			args = append(args, "--newer-than", c.NewerThan.String())
		}
		out, err := runDLQ(url, args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		var seqs []uint64
		for _, m := range idRE.FindAllStringSubmatch(out, -1) {
			s, _ := strconv.ParseUint(m[1], 10, 64)
			seqs = append(seqs, s)
		}
		if got := dlqtest.Names(ids, seqs); !slices.Equal(got, c.Want) && len(got)+len(c.Want) > 0 {
			t.Errorf("%v lists %v, want %v\n%s", args, got, c.Want, out)
		}
		if len(c.Want) == 0 && !strings.Contains(out, "no dead letters") {
			t.Errorf("%v: %s", args, out)
		}
	}
}

// interruptAfterFirstLine runs exacto with args, its stdout a one-page pipe the test
// stops reading after the first line (so the child cannot get far ahead), sends it
// SIGINT, and checks that it says it stops after the dead letter in hand and exits with
// status 1. It returns the first line and the whole stdout.
func interruptAfterFirstLine(t *testing.T, args ...string) (first, out string) {
	t.Helper()
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdoutR.Close()
	const fSetPipeSize = 1031 // F_SETPIPE_SZ: a page, the least a pipe holds
	if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, stdoutW.Fd(), fSetPipeSize, 4096); errno != 0 {
		t.Fatalf("F_SETPIPE_SZ: %v", errno)
	}
	cmd := exec.Command(exactoBin, args...)
	cmd.Stdout = stdoutW
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdoutW.Close()
	// The first line, byte by byte: the pipe keeps the rest, and fills.
	var line []byte
	for b := make([]byte, 1); len(line) == 0 || line[len(line)-1] != '\n'; {
		if _, err := stdoutR.Read(b); err != nil {
			t.Fatalf("before the first line: %v (%q)", err, line)
		}
		line = append(line, b[0])
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	// One reader for all of stderr: it may already hold what follows the note.
	errs := bufio.NewReader(stderr)
	note, err := errs.ReadString('\n')
	if err != nil || note != "interrupted: stopping after the dead letter in hand\n" {
		t.Fatalf("after SIGINT, stderr: %q %v", note, err)
	}
	rest, err := io.ReadAll(stdoutR)
	if err != nil {
		t.Fatal(err)
	}
	tail, _ := io.ReadAll(errs)
	werr := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(werr, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(tail), "interrupted:") {
		t.Fatalf("exit: %v, stderr %q, want status 1 saying it was interrupted", werr, tail)
	}
	return string(line), string(line) + string(rest)
}

// storeReplyLetters stores n fresh permanent dead letters of the crmwriter, named
// prefix-0…prefix-(n-1).
func storeReplyLetters(t *testing.T, conn *broker.Conn, prefix string, n int) {
	t.Helper()
	now := time.Now()
	for i := range n {
		dlqtest.Store(t, conn.JS, now, dlqtest.Letter{Name: fmt.Sprint(prefix+"-", i), Consumer: stream.CRMWriter, Tenant: "demo",
			Provider: "instantly", Type: envelope.TypeReplyReceived, Class: "permanent", Age: time.Minute})
	}
}
