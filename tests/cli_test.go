package tests

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// `exacto classify` reads stdin and prints the contract's JSON.
func TestClassifyCommand(t *testing.T) {
	cmd := exec.Command(exactoBin, "classify", "--lang", "en")
	cmd.Stdin = strings.NewReader("Please remove me from your list.\n\nOn Mon, Dec 1, 2026 at 9:00 AM Sam <sam@acme.com> wrote:\n> Hi, quick question\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Label      string   `json:"label"`
		Confidence float64  `json:"confidence"`
		Evidence   []string `json:"evidence"`
		Language   string   `json:"language"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if res.Label != "unsubscribe_request" || res.Language != "en" || len(res.Evidence) == 0 || res.Confidence <= 0 || res.Confidence > 1 {
		t.Fatalf("classify: %s", out)
	}
	empty := exec.Command(exactoBin, "classify")
	empty.Stdin = strings.NewReader("  \n")
	if out, err := empty.CombinedOutput(); err == nil || !strings.Contains(string(out), "no text on stdin") {
		t.Fatalf("empty stdin: %v %s", err, out)
	}
}
