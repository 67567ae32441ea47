package providertest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"exacto.dev/pkg/envelope"
)

// Every example in schemas/examples is valid, and there is one per canonical type.
func TestExamplesValidate(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(SchemaDir(), "examples", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := Validate(b); err != nil {
			t.Errorf("%s: %v", filepath.Base(f), err)
		}
		var head struct{ Type string }
		json.Unmarshal(b, &head)
		seen[head.Type] = true
	}
	for _, typ := range envelope.Types {
		if !seen[typ] {
			t.Errorf("no example of %s in schemas/examples", typ)
		}
	}
}

// Each mutation of a valid envelope is refused by the schemas.
func TestSchemasRefuse(t *testing.T) {
	base, err := os.ReadFile(filepath.Join(SchemaDir(), "examples", "reply.received.json"))
	if err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile(filepath.Join(SchemaDir(), "examples", "message.status.json"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		doc  []byte
		edit func(m map[string]any)
	}{
		{"missing id", base, func(m map[string]any) { delete(m, "id") }},
		{"id not derived", base, func(m map[string]any) { m["id"] = "evt_123" }},
		{"unknown type", base, func(m map[string]any) { m["type"] = "reply.maybe" }},
		{"wrong specversion", base, func(m map[string]any) { m["specversion"] = "0.3" }},
		{"extra attribute", base, func(m map[string]any) { m["surprise"] = "x" }},
		{"signed as a string", base, func(m map[string]any) { m["signed"] = "true" }},
		{"bad time", base, func(m map[string]any) { m["time"] = "yesterday" }},
		{"bad payload hash", base, func(m map[string]any) { m["payloadsha256"] = "abc" }},
		{"unknown auth method", base, func(m map[string]any) { m["authmethod"] = "trust" }},
		{"reply without contact", base, func(m map[string]any) { delete(m["data"].(map[string]any), "contact") }},
		{"contact without any id", base, func(m map[string]any) {
			m["data"].(map[string]any)["contact"] = map[string]any{"name": "Someone"}
		}},
		{"data without raw", base, func(m map[string]any) { delete(m["data"].(map[string]any), "raw") }},
		{"unknown data field", base, func(m map[string]any) { m["data"].(map[string]any)["mood"] = "happy" }},
		{"status without status", status, func(m map[string]any) { delete(m["data"].(map[string]any), "status") }},
		{"status not a status", status, func(m map[string]any) { m["data"].(map[string]any)["status"] = "thinking" }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal(c.doc, &m); err != nil {
				t.Fatal(err)
			}
			c.edit(m)
			b, _ := json.Marshal(m)
			if err := Validate(b); err == nil {
				t.Fatalf("accepted: %s", strings.TrimSpace(string(b)))
			}
		})
	}
}
