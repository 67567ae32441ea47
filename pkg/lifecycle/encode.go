package lifecycle

import "exacto.dev/pkg/internal/jsonenc"

// AppendJSON appends f as json.Marshal writes it; false (b as it was) for a time
// json.Marshal refuses.
func (f Fact) AppendJSON(b []byte) ([]byte, bool) {
	start := len(b)
	b = append(b, `{"id":`...)
	b = jsonenc.String(b, f.ID)
	b = append(b, `,"type":`...)
	b = jsonenc.String(b, f.Type)
	b = append(b, `,"kind":`...)
	b = jsonenc.String(b, string(f.Kind))
	b = append(b, `,"time":`...)
	b, ok := jsonenc.Time(b, f.Time)
	if !ok {
		return b[:start], false
	}
	if f.Version != "" {
		b = append(b, `,"version":`...)
		b = jsonenc.String(b, f.Version)
	}
	if !f.Received.IsZero() {
		b = append(b, `,"received":`...)
		if b, ok = jsonenc.Time(b, f.Received); !ok {
			return b[:start], false
		}
	}
	for _, p := range [...]struct{ name, v string }{{`,"provider":`, f.Provider}, {`,"name":`, f.Name}, {`,"value":`, f.Value}, {`,"cause":`, f.Cause}} {
		if p.v != "" {
			b = jsonenc.String(append(b, p.name...), p.v)
		}
	}
	return append(b, '}'), true
}

// AppendJSON appends s as json.Marshal writes it; false (b as it was) for a time
// json.Marshal refuses.
func (s State) AppendJSON(b []byte) ([]byte, bool) {
	if s.Facts == nil {
		return append(b, `{"facts":null}`...), true
	}
	start := len(b)
	b = append(b, `{"facts":[`...)
	for i, f := range s.Facts {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = f.AppendJSON(b); !ok {
			return b[:start], false
		}
	}
	return append(b, "]}"...), true
}
