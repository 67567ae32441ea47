package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A misspelt field is named with the nearest field of its block, at its file:line,
// without Go's type names.
func TestUnknownFieldSuggestsTheNearest(t *testing.T) {
	_, err := Parse([]byte("tenants:\n  - id: acme\n    endponts:\n      - id: x\n"), "exacto.yaml", func(string) string { return "" })
	want := `exacto.yaml:3: unknown field "endponts" (did you mean "endpoints"?); here the fields are id, endpoints,`
	if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "config.Tenant") {
		t.Fatalf("got %v, want it to begin %q", err, want)
	}
	_, err = Parse([]byte("gateway:\n  zzzzzz: 1\n"), "exacto.yaml", func(string) string { return "" })
	if err == nil || !strings.HasPrefix(err.Error(), `exacto.yaml:2: unknown field "zzzzzz"; here the fields are `) {
		t.Fatalf("nothing near: %v", err)
	}
}

// A mis-indented line is reported at its own line, wherever the parser noticed.
func TestMisindentedLineIsReportedAtItself(t *testing.T) {
	const head = "tenants:\n  - id: acme\n    endpoints:\n      - id: x\n        provider: stripe\n"
	for name, tc := range map[string]struct {
		doc  string
		line string
	}{
		"one space short":     {head + "       path_token: abcdefabcdefabcdef\n        secrets: [whsec_x]\n", "exacto.yaml:6: this line's indentation (7 spaces)"},
		"a key at the list's": {head + "        path_token: abcdefabcdefabcdef\n      secrets: [whsec_x]\n", "exacto.yaml:7: this line's indentation (6 spaces)"},
		"too deep":            {head + "        path_token: abcdefabcdefabcdef\n          secrets: [whsec_x]\n", "exacto.yaml:7: this line's indentation (10 spaces)"},
	} {
		_, err := Parse([]byte(tc.doc), "exacto.yaml", func(string) string { return "" })
		if err == nil || !strings.HasPrefix(err.Error(), tc.line) || !strings.Contains(err.Error(), "mis-indented?") {
			t.Errorf("%s: got %v, want it to begin %q", name, err, tc.line)
		}
	}
}

// Every well-formed YAML file of the repository, the demo and a config with block
// scalars and flow lists over several lines: nothing mis-indented.
func TestWellIndentedDocumentsPass(t *testing.T) {
	docs := map[string]string{"demo": Demo, "scalars and flows": "a:\n  b: |\n    text\n      deeper text\n  c: [1,\n   2]\n  d:\n  - x\n  - y: 1\n    z: 2\n"}
	files, _ := filepath.Glob("../../deployments/*/*.yaml")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs[f] = string(b)
	}
	if len(files) < 10 {
		t.Fatalf("only %d YAML files found in deployments/", len(files))
	}
	for name, doc := range docs {
		if line, why := misindented([]byte(doc)); line != 0 {
			t.Errorf("%s:%d: %s", name, line, why)
		}
	}
}
