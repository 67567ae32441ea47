package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSimulateCleanCampaign runs the shipped clean campaign against `exacto up` and its
// sandbox: every invariant holds.
func TestSimulateCleanCampaign(t *testing.T) {
	file, err := filepath.Abs("../deployments/scenarios/clean-campaign.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := newNode(t, "")
	n.start()
	out, err := n.run("simulate", "--scenario", file,
		"--gateway", "http://"+n.http, "--nats-url", "nats://"+n.natsAddr, "--sandbox", "http://"+n.sandbox)
	if err != nil {
		t.Fatalf("simulate: %v\n%s", err, out)
	}
	for _, inv := range []string{
		"every delivery is eventually answered 200",
		"every replied or unsubscribed contact is stopped at the platform exactly once",
		"every unsubscribed or bounced contact is on the suppression list",
		"nothing is stored twice",
		"the live projections equal a rebuild from the stream",
	} {
		if !strings.Contains(out, "HELD    "+inv) {
			t.Errorf("invariant %q not HELD:\n%s", inv, out)
		}
	}
	if strings.Contains(out, "BROKEN") {
		t.Errorf("a broken invariant:\n%s", out)
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
