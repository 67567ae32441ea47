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

// The heuristic never takes the place of the parser's own report where it is not about
// indentation, nor mistakes valid YAML (a plain scalar going on below, a quoted string
// over lines, anchors and tags, brackets in a block scalar) for a mis-indented line.
func TestParserErrorsThatAreNotIndentation(t *testing.T) {
	const head = "tenants:\n  - id: acme\n    endpoints:\n      - id: x\n        provider: stripe\n"
	for name, tc := range map[string]struct {
		doc, want string
	}{
		"plain scalar over two lines, then an unclosed flow": {head + "        public_url: https://hooks.example.com/a\n          /b\n        secrets: [whsec_x\n", "exacto.yaml:7: did not find expected ',' or ']'"},
		"a quoted string over lines, then a bad value":       {"admin_hosts:\n  - \"a\n    b\"\ndata_dir: @x\n", "exacto.yaml:4: "},
		"an unclosed quote": {"data_dir: \"x\nadmin_addr: 1\n\n\nhttp_addr: 2\n", "exacto.yaml:"},
	} {
		_, err := Parse([]byte(tc.doc), "exacto.yaml", func(string) string { return "" })
		if err == nil || strings.Contains(err.Error(), "mis-indented?") || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v, want the parser's report at %q", name, err, tc.want)
		}
	}
	for name, doc := range map[string]string{
		"anchors and tags":              "a: &base !!map\n  b: 1\nc: *base\n",
		"a bracket in a block scalar":   "a: |\n  text [ with a bracket\nb:\n  c: 1\n",
		"a plain scalar going on below": "a: one\n  two\nb: 1\n",
		"a list in a list":              "a:\n  - - c\n    - d\n",
	} {
		if line, why := misindented([]byte(doc)); line != 0 {
			t.Errorf("%s: line %d: %s", name, line, why)
		}
	}
	// A real mis-indent after a block scalar with a bracket is still found.
	if line, _ := misindented([]byte("a: |\n  text [ with a bracket\nb:\n  c: 1\n   d: 2\n")); line != 5 {
		t.Errorf("after a block scalar: line %d, want 5", line)
	}
}

// A misspelt field of a block another package declares (an endpoint's generic:) is
// named with that block's fields, not a Go type.
func TestUnknownFieldOfGenericBlock(t *testing.T) {
	doc := "tenants:\n  - id: acme\n    endpoints:\n      - id: g\n        provider: generic\n        path_token: generic-path-token-0123456789\n        secrets: [s]\n        generic: {heder: X-Sig}\n"
	_, err := Parse([]byte(doc), "exacto.yaml", func(string) string { return "" })
	if err == nil || !strings.HasPrefix(err.Error(), `exacto.yaml:8: unknown field "heder" (did you mean "header"?)`) || strings.Contains(err.Error(), "providers.Generic") {
		t.Fatalf("got %v", err)
	}
}
