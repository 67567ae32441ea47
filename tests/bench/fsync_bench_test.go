package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/stream"
)

// BenchmarkUpFsyncs counts the fsyncs `exacto up` makes per webhook (strace: every
// fsync and fdatasync of the process and its threads, each with its file), with the
// built-in demo config as a user runs it: every consumer, sync always. Each webhook is
// an Instantly reply_received of a lead of its own, which the sandbox holds first (the
// lead enrolled, the reply in its unibox), so each is confirmed at the source,
// classified, stopped, written to HubSpot and projected. Three runs in one process:
//
//   - baseline: the gateway alone — every consumer service paused — takes
//     EXACTO_BENCH_FSYNC_N (default 2,000) webhooks from 32 senders: what storing and
//     indexing them costs;
//   - load: the consumers resumed, they drain that backlog, then the same number of
//     new webhooks from 32 senders, until every consumer has acked every event;
//   - one sender: 200 webhooks one after the other, the same.
//
// Each count is less the fsyncs an idle window of the same length makes (measured
// first), divided by the webhooks answered 200. The notes name the stores that fsync
// most (by the files' directories).
func BenchmarkUpFsyncs(b *testing.B) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		b.Skip("strace is not installed (.ci/run installs it): fsyncs cannot be counted")
	}
	n := envInt("EXACTO_BENCH_FSYNC_N", 2000)
	log := filepath.Join(b.TempDir(), "strace.log")
	u := startUp(b, nil, strace, "-f", "-y", "-ttt", "-qq", "-e", "trace=fsync,fdatasync", "-o", log)
	js := u.js(b)
	ctx := context.Background()
	url := "http://" + u.addr(0) + "/hooks/instantly/demo-instantly-token"
	header := http.Header{"Content-Type": {"application/json"}, "X-Exacto-Secret": {"demo-instantly-secret"}}

	window := func(run func()) [2]time.Time {
		from := time.Now()
		run()
		return [2]time.Time{from, time.Now()}
	}
	idle := window(func() { time.Sleep(3 * time.Second) })

	services := consumerServices()
	pause := func(until time.Time) { pauseConsumers(b, ctx, js, services, until) }
	next := 0
	batch := func(count int) [][]byte {
		bodies := fsyncBodies(b, u.addr(3), next, count)
		next += count
		return bodies
	}

	// Baseline: the consumers paused, the gateway (and its index writer) alone.
	bodies := batch(n)
	pause(time.Now().Add(time.Hour))
	var okBase int64
	base := window(func() {
		okBase = sendAll(url, header, bodies, 32)
		waitIndexed(b, ctx, js)
	})
	b.Logf("baseline: %d answered 200 in %v", okBase, base[1].Sub(base[0]))
	pause(time.Time{}) // resumed
	waitDrained(b, ctx, js, services, next)
	b.Logf("the baseline's replies drained")

	bodies = batch(n)
	var okLoad int64
	load := window(func() {
		okLoad = sendAll(url, header, bodies, 32)
		waitDrained(b, ctx, js, services, next)
	})
	b.Logf("load: %d answered 200 in %v", okLoad, load[1].Sub(load[0]))
	const single = 200
	bodies = batch(single)
	var okOne int64
	one := window(func() {
		okOne = sendAll(url, header, bodies, 1)
		waitDrained(b, ctx, js, services, next)
	})
	if okBase+okLoad+okOne != int64(next) {
		b.Errorf("%d of %d webhooks answered 200", okBase+okLoad+okOne, next)
	}
	u.stop() // strace writes its last lines as the process ends

	counts := countFsyncs(b, log, idle, base, load, one)
	perSec := float64(counts[0].total) / idle[1].Sub(idle[0]).Seconds()
	per := func(c fsyncCount, w [2]time.Time, ok int64) float64 {
		extra := float64(c.total) - perSec*w[1].Sub(w[0]).Seconds()
		return max(extra, 0) / float64(max(ok, 1))
	}
	fBase, fLoad, fOne := per(counts[1], base, okBase), per(counts[2], load, okLoad), per(counts[3], one, okOne)
	secs := func(w [2]time.Time) string { return w[1].Sub(w[0]).Round(100 * time.Millisecond).String() }
	row("fsync", "fsyncs per webhook at load (32 senders, every consumer)", fmt.Sprintf("%.2f", fLoad), fmt.Sprintf("%.2f", fBase), fLoad/fBase,
		fmt.Sprintf("%d replies in %s until every consumer acked all; baseline: the gateway alone (consumers paused), %d replies in %s; idle %.1f fsyncs/s subtracted; most: %s; baseline's: %s",
			okLoad, secs(load), okBase, secs(base), perSec, counts[2].top(8), counts[1].top(3)))
	row("fsync", "fsyncs per webhook at one sender (every consumer)", fmt.Sprintf("%.2f", fOne), fmt.Sprintf("%.2f", fBase), fOne/fBase,
		fmt.Sprintf("%d replies one after the other in %s until every consumer acked all; most: %s", okOne, secs(one), counts[3].top(8)))
	b.ReportMetric(fLoad, "fsyncs/webhook_load")
	b.ReportMetric(fOne, "fsyncs/webhook_one")
}

// pauseConsumers pauses each of durables until then (the zero time: resumes them).
func pauseConsumers(b *testing.B, ctx context.Context, js jetstream.JetStream, durables []string, until time.Time) {
	for _, d := range durables {
		if _, err := js.PauseConsumer(ctx, stream.Events, d, until); err != nil {
			b.Fatalf("pause %s: %v", d, err)
		}
	}
}

// consumerServices are the durable consumers of EXACTO_EVENTS `exacto up` runs.
func consumerServices() []string {
	var out []string
	for _, s := range stream.Subscriptions {
		if s.StreamName() == stream.Events {
			out = append(out, s.Durable)
		}
	}
	return out
}

// fsyncBodies are count Instantly replies, leads from the from-th on, that the sandbox
// at addr holds first: the lead enrolled in the campaign, the reply in its unibox.
func fsyncBodies(b *testing.B, addr string, from, count int) [][]byte {
	at := time.Now()
	emails := make([]string, count)
	bodies := make([][]byte, count)
	for i := range count {
		emails[i] = e2eLead(from + i)
		bodies[i] = replyBody(from+i, at)
	}
	for len(emails) > 0 { // ten thousand a request: the sandbox reads bodies of up to 1 MiB
		n := min(len(emails), 10000)
		sandboxControl(b, addr, sandbox.ControlLeads, sandbox.ControlLeadsRequest{Campaign: e2eCampaign, Emails: emails[:n]})
		emails = emails[n:]
	}
	if b.Failed() {
		b.FailNow()
	}
	// Eight at a time: a pool of thousands is told in a second or two.
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(bodies); i = int(next.Add(1)) - 1 {
				sandboxControl(b, addr, sandbox.ControlHappened, sandbox.ControlHappenedRequest{Provider: "instantly", Body: bodies[i]})
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	return bodies
}

// sandboxControl posts v to the control path of the sandbox at addr; it reports whether
// the sandbox took it (each failure an error of b's).
func sandboxControl(b testing.TB, addr, path string, v any) bool {
	data, _ := json.Marshal(v)
	resp, err := http.Post("http://"+addr+path, "application/json", bytes.NewReader(data))
	if err != nil {
		b.Error(err)
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Errorf("sandbox %s: %s", path, resp.Status)
		return false
	}
	return true
}

// sendAll posts every body once from senders concurrent senders; it returns how many
// were answered 200.
func sendAll(url string, header http.Header, bodies [][]byte, senders int) int64 {
	ok, _ := sendUntil(url, header, bodies, senders, time.Time{})
	return ok
}

// sendUntil is sendAll that takes no body after end (zero: no end); it also returns how
// many bodies it sent.
func sendUntil(url string, header http.Header, bodies [][]byte, senders int, end time.Time) (ok int64, sent int) {
	tr := &http.Transport{MaxIdleConnsPerHost: senders, MaxConnsPerHost: senders}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var next, answered atomic.Int64 // next: bodies taken, and one more per sender that found none
	var wg sync.WaitGroup
	for range senders {
		wg.Go(func() {
			for end.IsZero() || time.Now().Before(end) {
				i := int(next.Add(1)) - 1
				if i >= len(bodies) {
					return
				}
				if status, _, err := send(client, url, bodies[i], header); err == nil && status == http.StatusOK {
					answered.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return answered.Load(), min(int(next.Load()), len(bodies))
}

// waitIndexed waits until the index writer has acked every stored event.
func waitIndexed(b *testing.B, ctx context.Context, js jetstream.JetStream) {
	waitDrained(b, ctx, js, []string{stream.IndexConsumer}, -1)
}

// waitDrained waits (at most 5 minutes) until every one of durables has acked every
// event, and, when replies is not negative, that many sequence.stopped are stored.
func waitDrained(b *testing.B, ctx context.Context, js jetstream.JetStream, durables []string, replies int) {
	stopped := stream.EventSubject("demo", "instantly", envelope.TypeSequenceStopped)
	deadline := time.Now().Add(5 * time.Minute)
	report := time.Now().Add(10 * time.Second)
	for ; time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(report) { // where a slow drain waits
			report = time.Now().Add(10 * time.Second)
			var behind []string
			for _, d := range durables {
				if n := backlog(ctx, js, d); n > 0 {
					behind = append(behind, fmt.Sprintf("%s %d", d, n))
				}
			}
			b.Logf("draining: %d sequence.stopped; backlogs: %s", countSubject(ctx, js, stopped), strings.Join(behind, ", "))
		}
		if replies >= 0 && countSubject(ctx, js, stopped) < uint64(replies) {
			continue
		}
		busy := false
		for _, d := range durables {
			busy = busy || backlog(ctx, js, d) > 0
		}
		if !busy {
			return
		}
	}
	b.Fatalf("not drained after 5 minutes: %d sequence.stopped of %d", countSubject(ctx, js, stopped), replies)
}

// fsyncCount is the fsyncs of one window, in all and by store.
type fsyncCount struct {
	total   int
	byStore map[string]int
}

// top names the k stores with the most fsyncs.
func (c fsyncCount) top(k int) string { return top(c.byStore, k, "%s %d") }

// An strace -f -y -ttt line of an fsync: pid, time, call, fd<path>.
var fsyncLine = regexp.MustCompile(`^\d+\s+(\d+\.\d+)\s+(?:fsync|fdatasync)\(\d+<([^>]*)>`)

// storeOf names the JetStream store a synced path belongs to: the stream's directory
// name, and what in it (msgs, obs: consumer state, batches: atomic batch staging).
var storeOf = regexp.MustCompile(`/streams/([^/]+)(?:/(msgs|obs/[^/]+|batches))?`)

// countFsyncs counts the fsyncs of strace log inside each window.
func countFsyncs(b *testing.B, log string, windows ...[2]time.Time) []fsyncCount {
	f, err := os.Open(log)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	out := make([]fsyncCount, len(windows))
	for i := range out {
		out[i].byStore = map[string]int{}
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := fsyncLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		sec, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			continue
		}
		at := time.Unix(0, int64(sec*1e9))
		store := "other"
		if s := storeOf.FindStringSubmatch(m[2]); s != nil {
			store = s[1]
			if s[2] != "" && s[2] != "msgs" {
				store += "/" + s[2]
			}
		}
		for i, w := range windows {
			if !at.Before(w[0]) && !at.After(w[1]) {
				out[i].total++
				out[i].byStore[store]++
			}
		}
	}
	return out
}
