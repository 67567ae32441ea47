package tests

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// simulateInvariants are the invariants `exacto simulate` reports, each on a HELD or
// BROKEN line.
var simulateInvariants = []string{
	"every delivery is eventually answered 200",
	"every replied or unsubscribed contact is stopped at the platform exactly once",
	"every replied contact has exactly one CRM note, of its reply",
	"every reply's note has an owner, or the reply is counted as without one",
	"every unsubscribed or bounced contact is on the suppression list",
	"nothing is stored twice: each delivered event is in the stream once",
	"the live projections equal a rebuild from the stream",
}

// simulate runs `exacto simulate --scenario file` against a fresh `exacto up` and its
// sandbox; what it printed, and its exit code.
func simulate(t *testing.T, file string) (string, int) {
	t.Helper()
	n := newNode(t, "")
	n.start()
	out, err := n.run("simulate", "--scenario", file,
		"--gateway", "http://"+n.http, "--nats-url", "nats://"+n.natsAddr, "--sandbox", "http://"+n.sandbox, "--admin", "http://"+n.admin)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out, 0
	case errors.As(err, &exit):
		return out, exit.ExitCode()
	}
	t.Fatalf("simulate: %v\n%s", err, out)
	return "", 0
}

// TestSimulateShippedScenarios runs every scenario shipped in deployments/scenarios (a
// clean campaign, a noisy one, an outage day) against `exacto up` and its sandbox:
// every invariant holds.
func TestSimulateShippedScenarios(t *testing.T) {
	files, err := filepath.Glob("../deployments/scenarios/*.yaml")
	if err != nil || len(files) < 3 {
		t.Fatalf("scenarios: %v %v", files, err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			t.Parallel()
			abs, err := filepath.Abs(file)
			if err != nil {
				t.Fatal(err)
			}
			out, code := simulate(t, abs)
			if code != 0 {
				t.Errorf("simulate exited %d", code)
			}
			for _, inv := range simulateInvariants {
				if !strings.Contains(out, "\nHELD    "+inv+"\n") {
					t.Errorf("invariant %q not HELD", inv)
				}
			}
			// The demo config routes no reply to an owner: each is counted without one.
			if !regexp.MustCompile(`note: [1-9]\d* replies without an owner \(no routing rule matched\), each counted`).MatchString(out) {
				t.Errorf("no replies counted without an owner")
			}
			if strings.Contains(out, "BROKEN") || t.Failed() {
				t.Errorf("simulate printed:\n%s", out)
			}
		})
	}
}

// TestSimulateReportsBroken: the clean campaign sent with a wrong path token, so every
// delivery is answered 404 and nothing happens: simulate exits 1 and names each broken
// invariant with its offenders, ten at most and then how many more.
func TestSimulateReportsBroken(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../deployments/scenarios/clean-campaign.yaml")
	if err != nil {
		t.Fatal(err)
	}
	wrong := strings.Replace(string(data), "path_token: demo-instantly-token", "path_token: not-the-token", 1)
	if wrong == string(data) {
		t.Fatal("clean-campaign.yaml names no path_token to change")
	}
	file := filepath.Join(t.TempDir(), "wrong-token.yaml")
	if err := os.WriteFile(file, []byte(wrong), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := simulate(t, file)
	if code != 1 {
		t.Errorf("simulate exited %d, want 1", code)
	}
	var deliveries int
	if m := regexp.MustCompile(`(\d+) deliveries \(`).FindStringSubmatch(out); m != nil {
		fmt.Sscan(m[1], &deliveries)
	}
	// Every delivery is an offender: the first ten by number, then the rest counted.
	want := []string{
		"BROKEN  every delivery is eventually answered 200\n" +
			"          event 1 (email_sent 09:00:00) of sim0@clean-campaign.example: 404 ",
		"          event 10 (email_sent 09:09:00) of sim9@clean-campaign.example: 404 ",
		fmt.Sprintf("          … and %d more\n", deliveries-10),
		"BROKEN  every replied or unsubscribed contact is stopped at the platform exactly once\n",
		": never stopped (blocklisted false, leads active true)\n",
		"BROKEN  every replied contact has exactly one CRM note, of its reply\n",
		": its reply was never stored\n",
		"BROKEN  every unsubscribed or bounced contact is on the suppression list\n",
		": not suppressed\n",
		"HELD    every reply's note has an owner, or the reply is counted as without one\n",
		"HELD    nothing is stored twice",
		"HELD    the live projections equal a rebuild from the stream\n",
		"4 of 7 invariants broken",
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("no %q", w)
		}
	}
	if deliveries <= 10 || t.Failed() {
		t.Errorf("%d deliveries; simulate printed:\n%s", deliveries, out)
	}
}

// TestSimulateRejectsUnknownField: a scenario is decoded strictly, and the error names
// the field.
func TestSimulateRejectsUnknownField(t *testing.T) {
	n := newNode(t, "")
	file := filepath.Join(t.TempDir(), "typo.yaml")
	scenario := "name: typo\ncontacts: 3\nstory:\n  - type: email_sent\n    after: 0s\nfaults:\n  duplicatez: 0.5\n"
	if err := os.WriteFile(file, []byte(scenario), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := n.run("simulate", "--scenario", file, "--nats-url", "nats://"+n.natsAddr)
	if err == nil {
		t.Fatalf("simulate accepted an unknown field:\n%s", out)
	}
	if !strings.Contains(out, "duplicatez") || !strings.Contains(out, "typo.yaml") {
		t.Fatalf("the error does not name the field and the file:\n%s", out)
	}
}
