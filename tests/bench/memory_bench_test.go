package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/stream"
)

// exactoBinary is EXACTO_BENCH_BIN, or `exacto` built into a temporary directory.
func exactoBinary(b *testing.B) string {
	if bin := os.Getenv("EXACTO_BENCH_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(b.TempDir(), "exacto")
	build := exec.Command("go", "build", "-o", bin, "exacto.dev/services/exacto")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building exacto: %v\n%s", err, out)
	}
	return bin
}

// resetPeakRSS makes this process's VmHWM its resident set now (proc(5), clear_refs), so
// that a later VmHWM is the peak of what ran in between.
func resetPeakRSS(b *testing.B) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Skipf("cannot reset the peak resident set: %v", err)
	}
}

// vmKiB is field (VmHWM: peak resident set; VmRSS: now) of process pid's status, in
// KiB.
func vmKiB(b *testing.B, pid int, field string) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Skipf("no /proc here: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kib, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err != nil {
				b.Fatalf("%s: %q", field, rest)
			}
			return kib
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// cpuSeconds is the CPU time (user and system, every thread) process pid has used.
func cpuSeconds(b *testing.B, pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Skipf("no /proc here: %v", err)
	}
	// pid (comm) state ppid …: utime and stime are the 14th and 15th fields, the comm
	// (which may hold spaces) ends at the last ')'.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(f) < 13 {
		b.Fatalf("/proc/%d/stat: %q", pid, data)
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, data)
	}
	return (utime + stime) / 100 // USER_HZ, 100 on Linux
}

func mib(kib int) string { return fmt.Sprintf("%.0f MiB", float64(kib)/1024) }

// tail keeps the last 64 KiB written to it, and counts the reconciler's passes (its
// log line, written whole by one Write).
type tail struct {
	mu     sync.Mutex
	buf    []byte
	passes int
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if bytes.Contains(p, []byte(`"msg":"reconciliation pass"`)) {
		t.passes++
	}
	t.buf = append(t.buf, p...)
	if len(t.buf) > 64<<10 {
		t.buf = t.buf[len(t.buf)-64<<10:]
	}
	return len(p), nil
}

func (t *tail) String() string { t.mu.Lock(); defer t.mu.Unlock(); return string(t.buf) }

// reconciled is how many reconciliation passes the process has logged.
func (t *tail) reconciled() int { t.mu.Lock(); defer t.mu.Unlock(); return t.passes }

// upProcess is `exacto up` started as a process (the built-in demo config: every
// consumer, the platform sandbox in-process, an embedded server with sync always) on
// free loopback ports and a temporary data dir, ready (/readyz answered 200).
type upProcess struct {
	addr    func(i int) string // 0 HTTP, 1 admin, 2 NATS, 3 sandbox
	pid     int                // exacto's own pid (not its wrapper's)
	out     *tail
	exited  chan struct{}
	stopped bool
	cmd     *exec.Cmd
}

// startUp starts `exacto up` with env added to its environment (EXACTO_NATS_SYNC=2m…);
// wrap, when given, is a command line it runs under (strace …).
func startUp(b *testing.B, env []string, wrap ...string) *upProcess {
	bin := exactoBinary(b)
	dir := b.TempDir()
	ports := brokertest.FreePorts(b, 4)
	u := &upProcess{addr: func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }, out: &tail{}, exited: make(chan struct{})}
	args := append(append([]string{}, wrap...), bin, "up")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir // no exacto.yaml there: the built-in demo
	cmd.Env = append(os.Environ(),
		"EXACTO_HTTP_ADDR="+u.addr(0), "EXACTO_ADMIN_ADDR="+u.addr(1), "EXACTO_NATS_LISTEN="+u.addr(2), "EXACTO_SANDBOX_ADDR="+u.addr(3),
		"EXACTO_SANDBOX_URL=", "EXACTO_NATS_URL=", "EXACTO_CONFIG=", "EXACTO_LOG_FORMAT=json", "EXACTO_DATA_DIR="+filepath.Join(dir, "data"))
	if cfg := os.Getenv("EXACTO_BENCH_UP_CONFIG"); cfg != "" { // an experiment's config instead of the demo
		cmd.Env = append(cmd.Env, "EXACTO_CONFIG="+cfg)
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = u.out, u.out
	if path := os.Getenv("EXACTO_BENCH_UP_LOG"); path != "" { // the whole log, for an investigation
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
		cmd.Stdout = io.MultiWriter(u.out, f)
		cmd.Stderr = cmd.Stdout
	}
	// Wait also waits for whatever still holds the output pipe: under strace a stopped
	// run was seen holding it for minutes after both were killed (make bench hung in
	// BenchmarkUpFsyncs' stop). Bound that wait.
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	u.cmd, u.pid = cmd, cmd.Process.Pid
	go func() { cmd.Wait(); close(u.exited) }()
	b.Cleanup(u.stop)
	for deadline := time.Now().Add(10 * time.Second); len(wrap) > 0; time.Sleep(10 * time.Millisecond) {
		// exacto is the wrapper's child: signals go to it, and the wrapper ends with it.
		if d := descendants(cmd.Process.Pid); len(d) > 0 {
			u.pid = d[0]
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s started no process", wrap[0])
		}
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + u.addr(1) + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return u
			}
		}
		select {
		case <-u.exited:
			b.Fatalf("exacto up exited before it was ready:\n%s", u.out)
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("exacto up not ready after 60s:\n%s", u.out)
		}
	}
}

// stop ends the process with SIGTERM (SIGKILL after 30 s) and waits for it.
func (u *upProcess) stop() {
	if u.stopped {
		return
	}
	u.stopped = true
	syscall.Kill(u.pid, syscall.SIGTERM)
	select {
	case <-u.exited:
	case <-time.After(30 * time.Second):
		// Every process under the one started, not only u.pid: under strace a run was
		// seen living on, orphaned and busy, after u.pid and strace were killed.
		for _, pid := range descendants(u.cmd.Process.Pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		u.cmd.Process.Kill()
		<-u.exited
	}
}

// descendants are the processes under pid, children first.
func descendants(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		children, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(children)) {
			if child, err := strconv.Atoi(f); err == nil {
				out = append(append(out, child), descendants(child)...)
			}
		}
	}
	return out
}

// js connects to the process's NATS port.
func (u *upProcess) js(b *testing.B) jetstream.JetStream {
	nc, err := nats.Connect("nats://" + u.addr(2))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	return js
}

// drainedWithin waits, at most d, until every one of durables has acked every event,
// and says whether they did.
func drainedWithin(ctx context.Context, js jetstream.JetStream, durables []string, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		busy := false
		for _, name := range durables {
			busy = busy || backlog(ctx, js, name) > 0
		}
		if !busy {
			return true
		}
	}
	return false
}

// BenchmarkUpMemory measures the peak RSS (VmHWM) of `exacto up` (the built-in demo
// config: every consumer, an embedded server with sync always; the platforms' sandbox
// in this process, not in exacto's, as the providers would be), each load on a fresh
// process on free loopback ports and a temporary data dir: its VmHWM right after
// /readyz is the baseline. Two loads of signed Instantly replies, each reply a lead the
// sandbox holds first: issue 15's load, EXACTO_BENCH_UP_RATE replies a second (default
// 500) offered open-loop for EXACTO_BENCH_UP_STEADY_SECONDS (default 30), the same load
// as the end-to-end rows; and a burst, 64 senders as fast as the process answers for
// EXACTO_BENCH_UP_SECONDS (default 10; the pool of EXACTO_BENCH_UP_LEADS, default
// 1,000 a second, may end it sooner), which leaves the consumers a backlog of
// thousands. After each, the consumers work on for as long again, until the
// reconciler's first pass has ended and until every consumer has acked every event (at
// most EXACTO_BENCH_UP_DRAIN_WAIT seconds, default 300), and the row is the VmHWM then,
// with the CPU the process used from the first webhook on and in 10 s of idle after.
func BenchmarkUpMemory(b *testing.B) {
	rate, steady := envInt("EXACTO_BENCH_UP_RATE", 500), envInt("EXACTO_BENCH_UP_STEADY_SECONDS", 30)
	upMemory(b, fmt.Sprintf("at %d replies/s offered", rate), rate*steady,
		func(url string, bodies [][]byte, header http.Header) upLoad {
			l := openLoop(url, bodies, header, rate)
			return upLoad{ok: int64(l.sent) - l.failed, failed: l.failed, took: l.took,
				note: fmt.Sprintf("open loop for %v (at most %v late)", l.took.Round(100*time.Millisecond), l.late.Round(time.Millisecond))}
		})
	seconds := envInt("EXACTO_BENCH_UP_SECONDS", 10)
	upMemory(b, "at a burst", envInt("EXACTO_BENCH_UP_LEADS", 1000*seconds),
		func(url string, bodies [][]byte, header http.Header) upLoad {
			return burst(url, bodies, header, time.Duration(seconds)*time.Second)
		})
}

// upLoad is what a load sent: answered 200, not, for how long, and how it was sent.
type upLoad struct {
	ok, failed int64
	took       time.Duration
	note       string
}

// burst sends bodies from 64 senders, keep-alive, each body once, until d is up or the
// bodies are.
func burst(url string, bodies [][]byte, header http.Header, d time.Duration) upLoad {
	at := time.Now()
	ok, sent := sendUntil(url, header, bodies, senders, at.Add(d))
	took := time.Since(at)
	note := fmt.Sprintf("%d senders for %v", senders, took.Round(100*time.Millisecond))
	if sent == len(bodies) {
		note += fmt.Sprintf(" (the pool of %d leads used up: raise EXACTO_BENCH_UP_LEADS)", len(bodies))
	}
	return upLoad{ok: ok, failed: int64(sent) - ok, took: took, note: note}
}

// upMemory is one row of BenchmarkUpMemory: a fresh `exacto up`, n replies told to the
// sandbox and sent by load, the drain, the peak.
func upMemory(b *testing.B, what string, n int, load func(url string, bodies [][]byte, header http.Header) upLoad) {
	sb, err := sandbox.Listen(sandbox.Options{AutoEnroll: true})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Close()
	u := startUp(b, []string{"EXACTO_SANDBOX_URL=" + sb.URL})
	defer u.stop()
	pid, addr := u.pid, u.addr
	idle := vmKiB(b, pid, "VmHWM")

	// Each reply a lead of its own that the sandbox holds first (enrolled, the reply in
	// its unibox), so every consumer does its real work: confirmed at the source,
	// classified, stopped, written to HubSpot, projected. The pool is told before the
	// timed sending.
	bodies := fsyncBodies(b, strings.TrimPrefix(sb.URL, "http://"), 0, n)
	url := "http://" + addr(0) + "/hooks/instantly/demo-instantly-token"
	header := http.Header{"Content-Type": {"application/json"}, "X-Exacto-Secret": {"demo-instantly-secret"}}
	cpu0 := cpuSeconds(b, pid)
	at := time.Now()
	sent := load(url, bodies, header)
	atLoad := vmKiB(b, pid, "VmHWM")
	time.Sleep(sent.took) // the consumers go on with the backlog
	// The reconciler's first pass (30 s after start) compares every lead of the campaign
	// at the sandbox with the projections: its memory is part of the pipeline's, so the
	// row waits for it to end (at most EXACTO_BENCH_UP_RECONCILE_WAIT seconds, default
	// 180) rather than catching it or not by the clock.
	wait := time.Duration(envInt("EXACTO_BENCH_UP_RECONCILE_WAIT", 180)) * time.Second
	for deadline := time.Now().Add(wait); u.out.reconciled() == 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
	}
	waited := time.Since(at) - sent.took
	pass := "the reconciler's first pass done"
	if u.out.reconciled() == 0 {
		pass = "the reconciler's first pass still running"
	}
	atPass := vmKiB(b, pid, "VmHWM")
	// And until every consumer has acked every event (the projector is the last, 70 to 85 s
	// after sending ended at this load): the load's memory is the memory of all its work.
	js := u.js(b)
	defer js.Conn().Close() // before the next load's process, which may take the same port
	drainWait := time.Duration(envInt("EXACTO_BENCH_UP_DRAIN_WAIT", 300)) * time.Second
	drainedAll := drainedWithin(context.Background(), js, consumerServices(), drainWait)
	drained := time.Since(at) - sent.took
	drainNote := fmt.Sprintf("every consumer drained %v after sending ended", drained.Round(100*time.Millisecond))
	if !drainedAll {
		drainNote = fmt.Sprintf("consumers still draining %v after sending ended (EXACTO_BENCH_UP_DRAIN_WAIT)", drained.Round(100*time.Millisecond))
	}
	peak := vmKiB(b, pid, "VmHWM")
	rss := vmKiB(b, pid, "VmRSS")
	cpu := cpuSeconds(b, pid) - cpu0
	// Then 10 s with nothing to do: a process whose collector runs without pause at idle
	// (a memory limit that leaves the heap no room) shows here.
	time.Sleep(10 * time.Second)
	idleCPU := cpuSeconds(b, pid) - cpu0 - cpu
	after := "idle"
	if !drainedAll || u.out.reconciled() == 0 {
		after = "not idle: still working"
	}

	// How far the consumers got, read from the process's own NATS port.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	count := func(typ string) uint64 { return countSubject(ctx, js, stream.EventSubject("demo", "instantly", typ)) }
	if sent.failed > 0 {
		b.Errorf("%s: %d webhooks not answered 200", what, sent.failed)
	}
	row("memory", "peak RSS of exacto up "+what+" (VmHWM)", mib(peak), mib(idle), float64(peak)/float64(idle),
		fmt.Sprintf("%s: %d signed Instantly replies (%.0f/s) of leads the sandbox holds; VmHWM %s when sending ended, %s %v later (%s); %s, VmRSS then %s, %d replies classified and %d stopped; %.1f s of CPU from the first webhook on, %.2f s in the 10 s after (%s); baseline: VmHWM right after /readyz",
			sent.note, sent.ok, float64(sent.ok)/sent.took.Seconds(), mib(atLoad),
			mib(atPass), waited.Round(100*time.Millisecond), pass, drainNote, mib(rss), count("reply.classified"), count("sequence.stopped"), cpu, idleCPU, after))
}

// guardsPerReply are the guard records a reply leaves (BenchmarkUpRequests: put
// EXACTO_GUARDS): the classifier's none (idempotent), the stopper's and the crmwriter's
// of the reply, the crmwriter's of its classification.
const guardsPerReply = 3

// BenchmarkGuardHeap measures what a guard kept costs the process's memory: the live
// heap (once the blocks written have dropped their caches) grows by this much per key while EXACTO_GUARDS holds it,
// because nats-server keeps every subject of a stream in memory (its per-subject
// index). Guards are kept as long as the stream holds their event, one per consumer
// that acts on it, so the heap grows with the history. EXACTO_BENCH_GUARDS (default
// 100,000) guards are begun and completed through pkg/guard on an embedded server,
// then as many again; the row is the second batch's growth per guard, against the
// length of its key (a subject cannot take less memory than that).
func BenchmarkGuardHeap(b *testing.B) {
	n := envInt("EXACTO_BENCH_GUARDS", 100000)
	conn := startBroker(b, "always")
	ctx := context.Background()
	kv, err := conn.JS.KeyValue(ctx, stream.Guards)
	if err != nil {
		b.Fatal(err)
	}
	g := guard.New(kv, "stopper", time.Minute)
	id := func(i int) string { return envelope.ID("demo", "instantly", strconv.Itoa(i)) }
	add := func(from, to int) {
		for i := from; i < to; i++ {
			a, err := g.Begin(ctx, id(i))
			if err != nil {
				b.Fatal(err)
			}
			if err := g.Complete(ctx, &a); err != nil {
				b.Fatal(err)
			}
		}
	}
	// The live heap once the blocks just written have dropped their caches (nats-server
	// keeps a block's cache 10 s after its last use).
	live := func() uint64 {
		time.Sleep(12 * time.Second)
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	add(0, n)
	before := live()
	add(n, 2*n)
	grown := float64(live()) - float64(before)
	perKey := grown / float64(n)
	keyLen := len(guard.Key("stopper", id(0)))
	row("memory", "live heap per guard kept (nats-server's subject index)", fmt.Sprintf("%.0f B", perKey), fmt.Sprintf("%d B", keyLen), perKey/float64(keyLen),
		fmt.Sprintf("guards %d to %d begun and completed (sync always), the live heap once the blocks dropped their caches; baseline: the key's length; kept as long as the stream holds the event: at %d guards a reply (the requests row: a guard record only where a handler acts), %.0f MB of heap per million replies",
			n, 2*n, guardsPerReply, perKey*guardsPerReply))
}
