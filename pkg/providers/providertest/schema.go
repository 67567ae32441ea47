package providertest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"exacto.dev/pkg/envelope"
)

// SchemaDir is the repository's schemas/ directory, found from this source file so it
// works from any package's test.
func SchemaDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "schemas")
}

var (
	compileOnce sync.Once
	envSchema   *jsonschema.Schema
	dataSchemas map[string]*jsonschema.Schema
	compileErr  error
)

func compile() {
	dir := SchemaDir()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	// Schemas name themselves by https $id; serve those ids from the files here.
	entries, err := filepath.Glob(filepath.Join(dir, "*.schema.json"))
	if err != nil {
		compileErr = err
		return
	}
	data, _ := filepath.Glob(filepath.Join(dir, "data", "*.schema.json"))
	for _, path := range append(entries, data...) {
		b, err := os.ReadFile(path)
		if err != nil {
			compileErr = err
			return
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			compileErr = fmt.Errorf("%s: %w", path, err)
			return
		}
		rel, _ := filepath.Rel(dir, path)
		if err := c.AddResource("https://exacto.dev/schemas/"+filepath.ToSlash(rel), doc); err != nil {
			compileErr = err
			return
		}
	}
	if envSchema, compileErr = c.Compile("https://exacto.dev/schemas/envelope.schema.json"); compileErr != nil {
		return
	}
	dataSchemas = map[string]*jsonschema.Schema{}
	for _, typ := range envelope.AllTypes {
		s, err := c.Compile("https://exacto.dev/schemas/data/" + typ + ".schema.json")
		if err != nil {
			compileErr = fmt.Errorf("data schema of %s: %w", typ, err)
			return
		}
		dataSchemas[typ] = s
	}
}

// Validate checks one envelope, as JSON, against schemas/envelope.schema.json and its
// data against data/<type>.schema.json.
func Validate(envJSON []byte) error {
	compileOnce.Do(compile)
	if compileErr != nil {
		return fmt.Errorf("compiling schemas: %w", compileErr)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(envJSON))
	if err != nil {
		return err
	}
	if err := envSchema.Validate(doc); err != nil {
		return err
	}
	var head struct {
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(envJSON, &head); err != nil {
		return err
	}
	s := dataSchemas[head.Type]
	if s == nil { // in the envelope schema's enum but not in envelope.Types
		return fmt.Errorf("type %q has no data schema", head.Type)
	}
	data, err := jsonschema.UnmarshalJSON(bytes.NewReader(head.Data))
	if err != nil {
		return err
	}
	return s.Validate(data)
}

// ValidateEnvelope fails the test unless env is valid against the schemas.
func ValidateEnvelope(t testing.TB, env envelope.Envelope) {
	t.Helper()
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(b); err != nil {
		t.Fatalf("envelope of %s does not match schemas/: %v\n%s", env.Type, err, b)
	}
}
