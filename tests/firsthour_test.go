package tests

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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
	for i, line := range commands {
		sh := exec.Command("sh", "-c", line)
		sh.Dir, sh.Env = root, n.env()
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
