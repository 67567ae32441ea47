package tests

import (
	"errors"
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
	abs, err := filepath.Abs("../deployments/scenarios/clean-campaign.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The stopper, the crmwriter and the suppressor paused: their effects never come.
	n := newNode(t, "")
	n.start()
	for _, w := range []string{"stopper", "crmwriter", "suppressor"} {
		if out, err := n.run("worker", "pause", w, "--nats-url", "nats://"+n.natsAddr); err != nil {
			t.Fatalf("pause %s: %v\n%s", w, err, out)
		}
	}
	out, err := n.run("simulate", "--scenario", abs, "--drain-timeout", "3s",
		"--gateway", "http://"+n.http, "--nats-url", "nats://"+n.natsAddr, "--sandbox", "http://"+n.sandbox, "--admin", "http://"+n.admin)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("simulate: %v, want exit 1", err)
	}
	for _, w := range []string{
		"HELD    every delivery is eventually answered 200\n",
		"BROKEN  every replied or unsubscribed contact is stopped at the platform exactly once\n",
		"@clean-campaign.example: never stopped (blocklisted false, leads active true)\n",
		"BROKEN  every replied contact has exactly one CRM note, of its reply\n",
		"@clean-campaign.example: 0 notes, map[ev_",
		"BROKEN  every unsubscribed or bounced contact is on the suppression list\n",
		"@clean-campaign.example: not suppressed\n",
		"HELD    nothing is stored twice",
		"HELD    the live projections equal a rebuild from the stream\n",
		"3 of 7 invariants broken",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("no %q", w)
		}
	}
	if t.Failed() {
		t.Errorf("simulate printed:\n%s", out)
	}
}

// Against a deployment's own config a shipped scenario (written for the demo) is
// refused before anything is sent, saying which endpoints there are; --endpoint takes
// the tenant, path token and secret from the config, and every invariant holds.
func TestSimulateAgainstOwnConfig(t *testing.T) {
	t.Parallel()
	abs, err := filepath.Abs("../deployments/scenarios/clean-campaign.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := newNode(t, `
tenants:
  - id: acme
    endpoints:
      - id: instantly-main
        provider: instantly
        path_token: acme-instantly-path-token-0123456789
        secrets: [env:ACME_INSTANTLY_SECRET]
      - id: stripe-main
        provider: stripe
        path_token: acme-stripe-path-token-0123456789
        secrets: [whsec_acme]
`)
	n.extraEnv = []string{"ACME_INSTANTLY_SECRET=acme-secret"}
	n.start()
	run := func(extra ...string) (string, error) {
		return n.run(append([]string{"simulate", "--scenario", abs, "--gateway", "http://" + n.http, "--nats-url", "nats://" + n.natsAddr,
			"--sandbox", "http://" + n.sandbox, "--admin", "http://" + n.admin}, extra...)...)
	}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"the demo's endpoint": {nil, `the gateway at http://` + n.http + ` has no endpoint "instantly" with the path token the scenario uses (404): give --endpoint with the deployment's Instantly endpoint (in ./exacto.yaml: instantly-main (tenant acme))`},
		"not instantly":       {[]string{"--endpoint", "stripe-main"}, "endpoint stripe-main is a stripe endpoint: a scenario posts Instantly's webhooks"},
		"another tenant":      {[]string{"--endpoint", "instantly-main", "--tenant", "demo"}, "--tenant demo: endpoint instantly-main is tenant acme's"},
		"no such endpoint":    {[]string{"--endpoint", "nope"}, "--endpoint nope: no such endpoint in ./exacto.yaml (its Instantly endpoints: instantly-main (tenant acme))"},
		"no gateway there":    {[]string{"--endpoint", "instantly-main", "--gateway", "http://" + freePort(t)}, "no gateway answers at http://"},
	} {
		out, err := run(tc.args...)
		if err == nil || !strings.Contains(out, tc.want) || strings.Contains(out, "deliveries") {
			t.Errorf("%s: %v, want a refusal containing %q before any delivery:\n%q", name, err, tc.want, out)
		}
	}
	// The endpoint's variable unset where simulate runs: said, nothing sent.
	unset := exec.Command(exactoBin, "simulate", "--scenario", abs, "--endpoint", "instantly-main", "--gateway", "http://"+n.http,
		"--nats-url", "nats://"+n.natsAddr, "--sandbox", "http://"+n.sandbox, "--admin", "http://"+n.admin)
	unset.Dir = n.dir
	for _, kv := range n.env() {
		if !strings.HasPrefix(kv, "ACME_INSTANTLY_SECRET=") {
			unset.Env = append(unset.Env, kv)
		}
	}
	if out, err := unset.CombinedOutput(); err == nil || !strings.Contains(string(out), "endpoint instantly-main: ./exacto.yaml:8: endpoint instantly-main secrets[0]: environment variable ACME_INSTANTLY_SECRET is not set") {
		t.Errorf("secret unset: %v\n%s", err, out)
	}
	// A secret the endpoint does not take: the first delivery's 401 ends the run.
	data, err := os.ReadFile(abs)
	if err != nil {
		t.Fatal(err)
	}
	wrongSecret := filepath.Join(t.TempDir(), "wrong-secret.yaml")
	if err := os.WriteFile(wrongSecret, append(data, "secret: not-the-secret\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := n.run("simulate", "--scenario", wrongSecret, "--endpoint", "instantly-main", "--gateway", "http://"+n.http,
		"--nats-url", "nats://"+n.natsAddr, "--sandbox", "http://"+n.sandbox, "--admin", "http://"+n.admin)
	if err == nil || !strings.Contains(out, "the gateway refused the first delivery: 401 ") || !strings.Contains(out, "nothing more sent (the scenario's secret is not the endpoint's") {
		t.Errorf("a wrong secret: %v\n%s", err, out)
	}
	if ids := storedIDs(t, n.js()); len(ids) != 0 {
		t.Fatalf("refused runs stored %d events", len(ids))
	}
	out, err = run("--endpoint", "instantly-main")
	if err != nil || !strings.Contains(out, "all 7 invariants held") {
		t.Fatalf("with --endpoint: %v\n%s", err, out)
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
