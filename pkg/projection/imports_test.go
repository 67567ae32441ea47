package projection

import (
	"os/exec"
	"strings"
	"testing"
)

// The lifecycle (the state machine the projection merges with) stays free of NATS: no
// package it depends on, directly or not, is a NATS client or server, so it can be
// used and tested without a broker.
func TestLifecycleImportsNoNATS(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "exacto.dev/pkg/lifecycle").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 2 || deps[len(deps)-1] != "exacto.dev/pkg/lifecycle" {
		t.Fatalf("go list -deps gave no dependencies of pkg/lifecycle:\n%s", out)
	}
	for _, d := range deps {
		if strings.Contains(d, "nats") || d == "exacto.dev/pkg/stream" || d == "exacto.dev/pkg/broker" {
			t.Errorf("pkg/lifecycle depends on %s", d)
		}
	}
}
