package meta

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"exacto.dev/pkg/providers"
)

// sampleEvents lists the deliveries Sample builds, a WhatsApp text message first (the
// default of `exacto send`).
var sampleEvents = []string{"message", "status", "batch", "instagram", "messenger"}

const (
	wabaID        = "102290129340398"
	businessPhone = "15550783881"
	phoneNumberID = "106540352242922"
	igAccountID   = "17841405822304914"
	pageID        = "104976425133841"
)

// Sample builds a realistic post of event at now, shaped like the examples of Meta's
// webhook references. Ids are derived from event and now, so the same arguments give
// the same bytes, as Meta's retry of a post would.
func Sample(event string, now time.Time, given ...providers.Lead) ([]byte, error) {
	// Meta's deliveries name a phone number or a page-scoped id, never an e-mail.
	if _, err := providers.SampleLead("meta", given, "", ""); err != nil {
		return nil, err
	}
	secs := now.UTC().Unix()
	ms := now.UTC().UnixMilli()
	id := func(n int) string { return "wamid.HBgLMTY1MDU1NTEyMzQVAgASGBQz" + sampleID(event, now, n) }
	switch event {
	case "message":
		return whatsapp(value{
			Contacts: []any{contact("Dana Kim", "16505551234")},
			Messages: []any{text(id(0), "16505551234", secs-1, "Thursday 3pm works for me. Can you send the invite?")},
		})
	case "status":
		return whatsapp(value{Statuses: []any{status(id(0), "delivered", "16505551234", secs-2)}})
	case "batch":
		return whatsapp(value{
			Contacts: []any{contact("Dana Kim", "16505551234"), contact("Lee Park", "14155550199")},
			Messages: []any{
				text(id(0), "16505551234", secs-5, "Is the Pro plan billed monthly?"),
				text(id(1), "14155550199", secs-3, "Please stop messaging me."),
			},
			Statuses: []any{
				status(id(2), "sent", "16505551234", secs-9),
				status(id(2), "delivered", "16505551234", secs-8),
				status(id(3), "read", "14155550199", secs-4),
			},
		})
	case "instagram":
		return marshal(post{Object: "instagram", Entry: []entry0{{ID: igAccountID, Time: ms, Messaging: []any{
			map[string]any{
				"sender":    map[string]string{"id": "6541238795421367"},
				"recipient": map[string]string{"id": igAccountID},
				"timestamp": ms - 900,
				"message":   map[string]any{"mid": "aWdfZAG1faXRlbToxOklHTWVzc2FnZAUlEOjE3ODQx" + sampleID(event, now, 0), "text": "Do you ship to Canada?"},
			},
		}}}})
	case "messenger":
		return marshal(post{Object: "page", Entry: []entry0{{ID: pageID, Time: ms, Messaging: []any{
			map[string]any{
				"sender":    map[string]string{"id": "7263748593827161"},
				"recipient": map[string]string{"id": pageID},
				"timestamp": ms - 700,
				"message":   map[string]any{"mid": "m_" + sampleID(event, now, 0), "text": "Hi! Are you open on Saturday?"},
			},
		}}}})
	}
	return nil, fmt.Errorf("meta: no sample for event %q (known: %v)", event, sampleEvents)
}

type post struct {
	Object string   `json:"object"`
	Entry  []entry0 `json:"entry"`
}

type entry0 struct {
	ID        string `json:"id"`
	Time      int64  `json:"time,omitempty"`
	Changes   []any  `json:"changes,omitempty"`
	Messaging []any  `json:"messaging,omitempty"`
}

type value struct {
	MessagingProduct string            `json:"messaging_product"`
	Metadata         map[string]string `json:"metadata"`
	Contacts         []any             `json:"contacts,omitempty"`
	Messages         []any             `json:"messages,omitempty"`
	Statuses         []any             `json:"statuses,omitempty"`
}

func whatsapp(v value) ([]byte, error) {
	v.MessagingProduct = "whatsapp"
	v.Metadata = map[string]string{"display_phone_number": businessPhone, "phone_number_id": phoneNumberID}
	return marshal(post{Object: "whatsapp_business_account", Entry: []entry0{{ID: wabaID,
		Changes: []any{map[string]any{"value": v, "field": "messages"}}}}})
}

func contact(name, waID string) map[string]any {
	return map[string]any{"profile": map[string]string{"name": name}, "wa_id": waID}
}

func text(id, from string, at int64, body string) map[string]any {
	return map[string]any{"from": from, "id": id, "timestamp": strconv.FormatInt(at, 10), "type": "text",
		"text": map[string]string{"body": body}}
}

func status(id, st, to string, at int64) map[string]any {
	s := map[string]any{"id": id, "status": st, "timestamp": strconv.FormatInt(at, 10), "recipient_id": to}
	if st != "read" { // pricing rides on sent and on one of delivered or read
		s["pricing"] = map[string]any{"billable": true, "pricing_model": "PMP", "type": "regular", "category": "utility"}
	}
	return s
}

// sampleID is the random-looking part of a message id, unique to event, now and n.
func sampleID(event string, now time.Time, n int) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s|%d|%d", event, now.UnixNano(), n)))
	return base64.RawURLEncoding.EncodeToString(h[:24])
}

// marshal encodes v compactly, as Meta posts it.
func marshal(v any) ([]byte, error) {
	return json.Marshal(v)
}
