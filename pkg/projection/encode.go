package projection

import (
	"encoding/json"
	"slices"
	"strconv"

	"exacto.dev/pkg/internal/jsonenc"
)

// encode is json.Marshal(v), by hand for the records written on every event (a contact
// record, a campaign shard): the same bytes without the reflection, which for their
// maps was most of a rebuild's encoding (TestEncodeIsMarshal).
func encode(v any) ([]byte, error) {
	var (
		b  []byte
		ok bool
	)
	switch r := v.(type) {
	case Contact:
		b, ok = r.appendJSON(make([]byte, 0, 1024))
	case Shard:
		b, ok = r.appendJSON(make([]byte, 0, 64+64*len(r.Members))), true
	}
	if !ok {
		return json.Marshal(v)
	}
	return b, nil
}

func (c Contact) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"tenant":`...)
	b = jsonenc.String(b, c.Tenant)
	b = append(b, `,"contact_id":`...)
	b = jsonenc.String(b, c.ContactID)
	if c.AccountID != "" {
		b = append(b, `,"account_id":`...)
		b = jsonenc.String(b, c.AccountID)
	}
	b = append(b, `,"keys":`...)
	b = jsonenc.Strings(b, c.Keys)
	if len(c.External) > 0 {
		b = append(b, `,"external":{`...)
		for i, kind := range sortedKeys(c.External) {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonenc.Strings(append(jsonenc.String(b, kind), ':'), c.External[kind])
		}
		b = append(b, '}')
	}
	b = append(b, `,"lifecycle":`...)
	b, ok := c.Lifecycle.AppendJSON(b)
	if !ok {
		return nil, false
	}
	if len(c.Campaigns) > 0 {
		b = append(b, `,"campaigns":{`...)
		for i, id := range sortedKeys(c.Campaigns) {
			if i > 0 {
				b = append(b, ',')
			}
			if b, ok = c.Campaigns[id].AppendJSON(append(jsonenc.String(b, id), ':')); !ok {
				return nil, false
			}
		}
		b = append(b, '}')
	}
	if len(c.Views) > 0 {
		b = append(b, `,"views":{`...)
		for i, id := range sortedKeys(c.Views) {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(append(jsonenc.String(b, id), ':'), c.Views[id], 10)
		}
		b = append(b, '}')
	}
	return append(b, '}'), true
}

func (sh Shard) appendJSON(b []byte) []byte {
	b = append(b, `{"tenant":`...)
	b = jsonenc.String(b, sh.Tenant)
	b = append(b, `,"campaign":`...)
	b = jsonenc.String(b, sh.Campaign)
	b = append(b, `,"members":`...)
	if sh.Members == nil {
		return append(b, "null}"...)
	}
	b = append(b, '{')
	for i, id := range sortedKeys(sh.Members) {
		if i > 0 {
			b = append(b, ',')
		}
		b = sh.Members[id].appendJSON(append(jsonenc.String(b, id), ':'))
	}
	return append(b, "}}"...)
}

func (m Member) appendJSON(b []byte) []byte {
	b = strconv.AppendUint(append(b, `{"rev":`...), m.Rev, 10)
	b = jsonenc.String(append(b, `,"status":`...), string(m.Status))
	for _, f := range [...]struct {
		name string
		on   bool
	}{{`,"replied":true`, m.Replied}, {`,"bounced":true`, m.Bounced}, {`,"unsubscribed":true`, m.Unsubscribed},
		{`,"meeting_booked":true`, m.MeetingBooked}, {`,"opportunity":true`, m.Opportunity}} {
		if f.on {
			b = append(b, f.name...)
		}
	}
	if m.Discrepancies != 0 {
		b = strconv.AppendInt(append(b, `,"discrepancies":`...), int64(m.Discrepancies), 10)
	}
	if m.Undecided != 0 {
		b = strconv.AppendInt(append(b, `,"undecided":`...), int64(m.Undecided), 10)
	}
	if m.Views != 0 {
		b = strconv.AppendUint(append(b, `,"views":`...), m.Views, 10)
	}
	return append(b, '}')
}

// sortedKeys are m's keys in the order encoding/json writes them (one allocation, where
// slices.Sorted(maps.Keys(m)) makes several).
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
