package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker/brokertest"
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

func mib(kib int) string { return fmt.Sprintf("%.0f MiB", float64(kib)/1024) }

// tail keeps the last 64 KiB written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 64<<10 {
		t.buf = t.buf[len(t.buf)-64<<10:]
	}
	return len(p), nil
}

func (t *tail) String() string { t.mu.Lock(); defer t.mu.Unlock(); return string(t.buf) }

// BenchmarkUpMemory starts `exacto up` (the built-in demo config: every consumer, the
// platform sandbox in-process, an embedded server with sync always) as a process on
// free loopback ports and a temporary data dir, takes its peak RSS (VmHWM) right after
// /readyz (baseline), then drives 64 senders of signed Instantly replies at it for
// EXACTO_BENCH_UP_SECONDS (default 10) and lets its consumers work on them for as long
// again, and takes its peak RSS then.
func BenchmarkUpMemory(b *testing.B) {
	seconds := envInt("EXACTO_BENCH_UP_SECONDS", 10)
	bin := exactoBinary(b)
	dir := b.TempDir()
	ports := brokertest.FreePorts(b, 4)
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	cmd := exec.Command(bin, "up")
	cmd.Dir = dir // no exacto.yaml there: the built-in demo
	cmd.Env = append(os.Environ(),
		"EXACTO_HTTP_ADDR="+addr(0), "EXACTO_ADMIN_ADDR="+addr(1), "EXACTO_NATS_LISTEN="+addr(2), "EXACTO_SANDBOX_ADDR="+addr(3),
		"EXACTO_SANDBOX_URL=", "EXACTO_NATS_URL=", "EXACTO_CONFIG=", "EXACTO_DATA_DIR="+filepath.Join(dir, "data"))
	out := &tail{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}()
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + addr(1) + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case <-exited:
			b.Fatalf("exacto up exited before it was ready:\n%s", out)
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("exacto up not ready after 60s:\n%s", out)
		}
	}
	idle := vmKiB(b, pid, "VmHWM")

	// 64 senders, keep-alive, each reply a lead of its own, until the time is up.
	url := "http://" + addr(0) + "/hooks/instantly/demo-instantly-token"
	tr := &http.Transport{MaxIdleConnsPerHost: senders, MaxConnsPerHost: senders}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	header := http.Header{"Content-Type": {"application/json"}, "X-Exacto-Secret": {"demo-instantly-secret"}}
	var next, ok, failed atomic.Int64
	var wg sync.WaitGroup
	at := time.Now()
	end := at.Add(time.Duration(seconds) * time.Second)
	for range senders {
		wg.Go(func() {
			for time.Now().Before(end) {
				i := int(next.Add(1))
				status, _, err := send(client, url, replyBody(i, at.Add(time.Duration(i)*time.Millisecond)), header)
				if err != nil {
					failed.Add(1)
					continue
				}
				if status == 200 {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(at)
	tr.CloseIdleConnections()
	atLoad := vmKiB(b, pid, "VmHWM")
	time.Sleep(took) // the consumers go on with the backlog
	peak := vmKiB(b, pid, "VmHWM")
	rss := vmKiB(b, pid, "VmRSS")

	// How far the consumers got, read from the process's own NATS port.
	nc, err := nats.Connect("nats://" + addr(2))
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	count := func(typ string) uint64 { return countSubject(ctx, js, stream.EventSubject("demo", "instantly", typ)) }
	if failed.Load() > 0 {
		b.Errorf("%d webhooks not answered 200", failed.Load())
	}
	row("memory", "peak RSS of exacto up at load (VmHWM)", mib(peak), mib(idle), float64(peak)/float64(idle),
		fmt.Sprintf("%d senders for %v: %d signed Instantly replies (%.0f/s); VmHWM %s when sending ended; %v later VmRSS %s, %d replies classified and %d stopped; baseline: VmHWM right after /readyz",
			senders, took.Round(100*time.Millisecond), ok.Load(), float64(ok.Load())/took.Seconds(), mib(atLoad),
			took.Round(100*time.Millisecond), mib(rss), count("reply.classified"), count("sequence.stopped")))
	b.ReportMetric(float64(peak)/1024, "peak_MiB")
	b.ReportMetric(float64(idle)/1024, "idle_MiB")
}
