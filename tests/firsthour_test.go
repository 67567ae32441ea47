package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// `make run` prints commands to try; run from where make ran, exactly as printed, each
// works: the webhook is stored, the nats CLI (when bin/nats is there) shows the stream.
func TestMakeRunPrintsCommandsThatRun(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("make is needed: the README's first command is make run")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	n := newNode(t, "")
	out := &syncBuffer{}
	run := exec.Command("make", "run")
	run.Dir, run.Env = root, n.env()
	run.Stdout, run.Stderr = out, out
	run.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // make and the exacto it starts
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = run.Wait(); close(exited) }()
	stop := func(sig syscall.Signal) error {
		syscall.Kill(-run.Process.Pid, sig)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			syscall.Kill(-run.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		return waitErr
	}
	t.Cleanup(func() { stop(syscall.SIGKILL) })
	var commands []string
	for deadline := time.Now().Add(3 * time.Minute); commands == nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("make run printed no commands to try:\n%s", out.String())
		}
		if resp, err := http.Get("http://" + n.admin + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				commands = tryCommands(out.String())
			}
		}
	}
	if len(commands) == 0 || !strings.Contains(commands[0], " send --endpoint ") {
		t.Fatalf("no send command among %q:\n%s", commands, out.String())
	}
	t.Logf("make run printed:\n%s", out.String())
	var sent struct {
		Stored int      `json:"stored"`
		IDs    []string `json:"ids"`
	}
	// Another terminal: none of this one's EXACTO_ variables (the ports make run got).
	var terminal []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "EXACTO_") {
			terminal = append(terminal, kv)
		}
	}
	for i, line := range commands {
		sh := exec.Command("sh", "-c", line)
		sh.Dir, sh.Env = root, terminal
		got, err := sh.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, got)
		}
		switch {
		case i == 0:
			body, ok := strings.CutPrefix(strings.TrimSpace(string(got)), "200 ")
			if !ok || json.Unmarshal([]byte(body), &sent) != nil || sent.Stored != 1 {
				t.Fatalf("%s: %s", line, got)
			}
		case strings.Contains(line, " stream info EXACTO_EVENTS") && (!strings.Contains(string(got), "Messages: ") || strings.Contains(string(got), "Messages: 0\n")):
			t.Fatalf("%s: the stream should hold the event sent:\n%s", line, got)
		}
	}
	if ids := storedIDs(t, n.js()); ids[sent.IDs[0]] != 1 {
		t.Fatalf("the event sent, %s, is stored %d times", sent.IDs[0], ids[sent.IDs[0]])
	}
	if err := stop(syscall.SIGTERM); err != nil {
		t.Logf("make run after SIGTERM: %v", err) // make reports its child's signal
	}
}

// tryCommands are the command lines under the banner's "try it" (not its notes).
func tryCommands(banner string) []string {
	var lines []string
	in := false
	for _, l := range strings.Split(banner, "\n") {
		switch {
		case strings.HasPrefix(l, "  try it"):
			in = true
		case in && strings.HasPrefix(l, "    "):
			if c := strings.TrimSpace(l); !strings.HasPrefix(c, "(") {
				lines = append(lines, c)
			}
		case in:
			return lines
		}
	}
	return lines
}

// `make test` installs what its tests need beyond Go (scripts/test-deps): chromium
// and strace through apt-get when missing, nothing when they are there.
func TestMakeTestInstallsWhatItNeeds(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := exec.Command("make", "-C", root, "-n", "test").CombinedOutput()
	if err != nil || !strings.Contains(string(plan), "./scripts/test-deps") {
		t.Fatalf("make test does not run scripts/test-deps: %v\n%s", err, plan)
	}
	// apt-get and id stand-ins record what the script asks for, as root.
	stubs := t.TempDir()
	calls := filepath.Join(stubs, "calls")
	for name, body := range map[string]string{
		"apt-get": "#!/bin/sh\necho \"apt-get $*\" >> " + calls + "\n",
		"id":      "#!/bin/sh\necho 0\n",
		"strace":  "#!/bin/sh\n",
	} {
		if err := os.WriteFile(filepath.Join(stubs, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		chromium, want string
	}{
		{"/nonexistent/chromium", "apt-get update\napt-get install -y --no-install-recommends chromium\n"},
		{filepath.Join(stubs, "id"), ""}, // an executable where chromium is looked for: nothing to install
	} {
		os.Remove(calls)
		script := exec.Command(filepath.Join(root, "scripts", "test-deps"))
		script.Env = append(os.Environ(), "PATH="+stubs+":/usr/bin:/bin", "EXACTO_TEST_CHROMIUM="+tc.chromium)
		if out, err := script.CombinedOutput(); err != nil {
			t.Fatalf("chromium at %s: %v\n%s", tc.chromium, err, out)
		}
		got, _ := os.ReadFile(calls)
		if string(got) != tc.want {
			t.Errorf("chromium at %s: apt-get was asked %q, want %q", tc.chromium, got, tc.want)
		}
	}
}

// A second `exacto up` beside a running one says at once which data dir or port is
// taken and by which process; Ctrl-C says what it drains and when it is done.
func TestSecondUpSaysWhatIsTakenAndCtrlCSaysWhatItDrains(t *testing.T) {
	n := newNode(t, "")
	n.start()
	holder := "pid " + strconv.Itoa(n.cmd.Process.Pid) + " (exacto up)"
	second := func(extra ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a second that starts is killed
		defer cancel()
		cmd := exec.CommandContext(ctx, exactoBin, "up")
		cmd.Dir, cmd.Env = n.dir, append(n.env(), extra...)
		began := time.Now()
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("a second exacto up started:\n%s", out)
		}
		if took := time.Since(began); took > 10*time.Second {
			t.Errorf("the second exacto up took %v to give up", took)
		}
		return string(out)
	}
	if out := second(); !strings.Contains(out, "data dir "+filepath.Join(n.dir, "data")+" is in use by "+holder) {
		t.Errorf("same data dir: %s", out)
	}
	if out := second("EXACTO_DATA_DIR=" + t.TempDir()); !strings.Contains(out, "nats.listen "+n.natsAddr+" is in use by "+holder+": stop it, or set nats.listen (EXACTO_NATS_LISTEN) to another address") {
		t.Errorf("same NATS port: %s", out)
	}
	if out := second("EXACTO_DATA_DIR="+t.TempDir(), "EXACTO_NATS_LISTEN="+freePort(t)); !strings.Contains(out, "in use by "+holder) {
		t.Errorf("same sandbox, admin and gateway ports: %s", out)
	}
	n.cmd.Process.Signal(syscall.SIGINT)
	if err := n.cmd.Wait(); err != nil {
		t.Fatalf("after Ctrl-C: %v\n%s", err, n.out.String())
	}
	out := n.out.String()
	for _, want := range []string{"exacto: stopping: the gateway answers the requests in hand", "the workers (classifier, crmwriter", "exacto: stopped in "} {
		if !strings.Contains(out, want) {
			t.Errorf("after Ctrl-C the output lacks %q:\n%s", want, out)
		}
	}
}

// `exacto tail` prints events as they are stored, one line each, filtered by tenant,
// provider and type: the ones of the last minutes with --since, then new ones.
func TestTailPrintsEventsAsStored(t *testing.T) {
	n := newNode(t, "")
	n.start()
	url := "nats://" + n.natsAddr
	send := func(args ...string) {
		t.Helper()
		if out, err := n.run(append([]string{"send"}, args...)...); err != nil || !strings.HasPrefix(out, "200 ") {
			t.Fatalf("send %v: %v\n%s", args, err, out)
		}
	}
	// A new event while tail waits: it is printed as it is stored.
	live := exec.Command(exactoBin, "tail", "--provider", "stripe", "--count", "1", "--nats-url", url)
	live.Dir, live.Env = n.dir, n.env()
	liveOut := &syncBuffer{}
	live.Stdout = liveOut
	said, _ := live.StderrPipe()
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.Process.Kill() }) // gone already when the test passes
	// Its consumer is made once it says so: events from then on.
	if line, err := bufio.NewReader(said).ReadString('\n'); err != nil || !strings.HasPrefix(line, "tail: the events of events.*.stripe.> from now on") {
		t.Fatalf("tail said %q (%v)", line, err)
	}
	send("--endpoint", "instantly", "--event", "email_opened", "--email", "ana@example.com")
	send("--endpoint", "instantly", "--event", "reply_received", "--email", "bo@example.com", "--campaign", "q4-founders")
	send("--endpoint", "stripe")
	if err := live.Wait(); err != nil || !regexp.MustCompile(`^\S+Z  demo  stripe  contact\.updated  ev_\S+  jenny\.rosen@example\.com\n$`).MatchString(liveOut.String()) {
		t.Fatalf("live tail: %v\n%q", err, liveOut.String())
	}
	out, err := n.run("tail", "--provider", "instantly", "--type", "email.opened", "--since", "5m", "--count", "1", "--nats-url", url)
	if err != nil || !strings.Contains(out, "  demo  instantly  email.opened  ev_") || !strings.Contains(out, "ana@example.com") || !strings.Contains(out, "unsigned") {
		t.Fatalf("tail --since: %v\n%s", err, out)
	}
	// A derived event says what it says and where it came from.
	out, err = n.run("tail", "--type", "reply.classified", "--since", "5m", "--count", "1", "--nats-url", url)
	if err != nil || !regexp.MustCompile(`  demo  instantly  reply\.classified  ev_\S+  bo@example\.com  campaign q4-founders  \w+ \d\.\d\d  from ev_\S+\n$`).MatchString(out) {
		t.Fatalf("tail of a derived event: %v\n%s", err, out)
	}
	for _, bad := range [][]string{{"--type", "reply.*"}, {"--type", "reply"}, {"--tenant", "a b"}, {"--count", "-1"}} {
		if out, err := n.run(append([]string{"tail", "--nats-url", url}, bad...)...); err == nil {
			t.Errorf("tail %v was taken:\n%s", bad, out)
		}
	}
}

// `exacto send --endpoint` signs as the endpoint takes it: over its public URL
// (HubSpot's v3 signs the URL HubSpot calls), in its own secret header (Instantly), with
// its own generic scheme; each is stored, where signing with the provider's defaults
// was refused 401.
func TestSendSignsAsTheEndpointTakesIt(t *testing.T) {
	n := newNode(t, `
tenants:
  - id: acme
    endpoints:
      - id: hubspot-main
        provider: hubspot
        path_token: acme-hubspot-path-token-0123456789
        secrets: [acme-hubspot-client-secret]
        public_url: https://hooks.acme.example/hooks/hubspot-main/acme-hubspot-path-token-0123456789
      - id: instantly-main
        provider: instantly
        path_token: acme-instantly-path-token-0123456789
        secrets: [acme-instantly-secret]
        secret_header: X-Webhook-Token
      - id: generic-main
        provider: generic
        path_token: acme-generic-path-token-0123456789
        secrets: [acme-generic-secret]
        generic: {header: X-Acme-Signature, prefix: "v1=", encoding: base64, algorithm: sha256, signed: "{timestamp}.{body}", timestamp_header: X-Acme-Time, id_field: id, type_field: type, time_field: created_at, types: {reply.created: reply.received}}
`)
	n.start()
	for _, id := range []string{"hubspot-main", "instantly-main", "generic-main"} {
		args := []string{"send", "--endpoint", id, "--gateway", "http://" + n.http, "--sandbox", "none"}
		if id == "generic-main" {
			args = append(args, "--event", "reply.created")
		}
		if out, err := n.run(args...); err != nil || !strings.HasPrefix(out, "200 ") {
			t.Errorf("send --endpoint %s: %v\n%s", id, err, out)
		}
	}
}
