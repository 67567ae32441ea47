package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/confirm"
	"exacto.dev/pkg/platform/sandbox"
	stopper "exacto.dev/services/stopper/handler"
)

// exactoBin is the binary built once for the tests that run it as a child process.
var exactoBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "exacto-bin")
	if err != nil {
		panic(err)
	}
	exactoBin = filepath.Join(dir, "exacto")
	build := exec.Command("go", "build", "-o", exactoBin, "../services/exacto")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building exacto:", err)
		os.Exit(1)
	}
	// The consumers this process runs wait less on the platforms than in production:
	// an unsigned event the source does not show is concluded 2 s after its receipt
	// (not a minute), and a lead given a value that starts a subsequence is watched
	// for 2 s (not 30). `exacto up` children keep the production values.
	confirm.Window, stopper.SubsequenceSettle = 2*time.Second, 2*time.Second
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freePort returns a loopback address with a port free right now (brokertest.FreePorts).
func freePort(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", brokertest.FreePorts(t, 1)[0])
}

// node is one `exacto up` child process with its addresses.
type node struct {
	t                     *testing.T
	dir                   string // working dir and data dir
	http, admin, natsAddr string
	sandbox               string // the sandbox `exacto up` serves for platforms without accounts
	cmd                   *exec.Cmd
	out                   *syncBuffer
	extraEnv              []string
	natsURL               string // set: use that NATS instead of embedding one
}

func newNode(t *testing.T, configYAML string) *node {
	t.Helper()
	n := &node{t: t, dir: t.TempDir(), http: freePort(t), admin: freePort(t), natsAddr: freePort(t), sandbox: freePort(t)}
	if configYAML != "" {
		if err := os.WriteFile(filepath.Join(n.dir, "exacto.yaml"), []byte(configYAML), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func (n *node) env() []string {
	return append(append(os.Environ(),
		"EXACTO_HTTP_ADDR="+n.http,
		"EXACTO_ADMIN_ADDR="+n.admin,
		"EXACTO_NATS_LISTEN="+n.natsAddr,
		"EXACTO_SANDBOX_ADDR="+n.sandbox,
		"EXACTO_SANDBOX_URL=",
		"EXACTO_DATA_DIR="+filepath.Join(n.dir, "data"),
		"EXACTO_CONFIG=",
		"EXACTO_NATS_URL="+n.natsURL,
	), n.extraEnv...)
}

// happened tells the sandbox `exacto up` serves what a webhook body of provider says
// happened at the platform, as the platform holds it before its webhook fires.
func (n *node) happened(provider, body string) {
	n.t.Helper()
	req, _ := json.Marshal(sandbox.ControlHappenedRequest{Provider: provider, Body: json.RawMessage(body)})
	resp, err := http.Post("http://"+n.sandbox+sandbox.ControlHappened, "application/json", bytes.NewReader(req))
	if err != nil {
		n.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		n.t.Fatalf("sandbox: %s happened: %d", provider, resp.StatusCode)
	}
}

// start runs `exacto up` and waits until /readyz answers 200.
func (n *node) start() { n.t.Helper(); n.startCmd("up") }

// startCmd runs `exacto ARGS…` and waits until /readyz answers 200.
func (n *node) startCmd(args ...string) {
	n.t.Helper()
	n.out = &syncBuffer{}
	n.cmd = exec.Command(exactoBin, args...)
	n.cmd.Dir = n.dir
	n.cmd.Env = n.env()
	n.cmd.Stdout, n.cmd.Stderr = n.out, n.out
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { n.kill() })
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + n.admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if n.cmd.ProcessState != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	n.t.Fatalf("exacto %v did not become ready; output:\n%s", args, n.out.String())
}

// kill sends SIGKILL: no shutdown code runs.
func (n *node) kill() {
	if n.cmd != nil && n.cmd.Process != nil && n.cmd.ProcessState == nil {
		n.cmd.Process.Signal(syscall.SIGKILL)
		n.cmd.Wait()
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (n *node) stop() error {
	n.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- n.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		n.kill()
		return fmt.Errorf("did not exit within 30s of SIGTERM")
	}
}

func (n *node) run(args ...string) (string, error) {
	cmd := exec.Command(exactoBin, args...)
	cmd.Dir = n.dir
	cmd.Env = n.env()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// js connects to the node's NATS port like any outside client would.
func (n *node) js() jetstream.JetStream {
	n.t.Helper()
	nc, err := nats.Connect("nats://" + n.natsAddr)
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		n.t.Fatal(err)
	}
	return js
}

// storedIDs reads every envelope id in EXACTO_EVENTS, with its count.
func storedIDs(t *testing.T, js jetstream.JetStream) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, "EXACTO_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("seq %d: %v", seq, err)
		}
		ids[m.Header.Get("Nats-Msg-Id")]++
	}
	return ids
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
