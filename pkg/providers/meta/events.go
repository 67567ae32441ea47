package meta

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/providers"
)

// One post carries entries; an entry carries changes (WhatsApp, Page and Instagram
// fields) or messaging items (Messenger and Instagram messaging). Every message and
// every status becomes its own event; anything else becomes one unmapped event, so
// nothing Meta posts is dropped.
type entry struct {
	ID        providers.Scalar  `json:"id"`
	Time      providers.Scalar  `json:"time"` // when Meta sent the notification, not when the change happened
	Changes   []json.RawMessage `json:"changes"`
	Messaging []json.RawMessage `json:"messaging"`
	Standby   []json.RawMessage `json:"standby"` // messaging items for a secondary receiver (handover)
}

type change struct {
	Field string          `json:"field"`
	Value json.RawMessage `json:"value"`
}

// waValue is the value of a WhatsApp "messages" change.
type waValue struct {
	MessagingProduct string `json:"messaging_product"`
	Metadata         struct {
		DisplayPhoneNumber string `json:"display_phone_number"`
		PhoneNumberID      string `json:"phone_number_id"`
	} `json:"metadata"`
	Contacts []struct {
		Profile struct {
			Name string `json:"name"`
		} `json:"profile"`
		WaID   string `json:"wa_id"`
		UserID string `json:"user_id"` // business-scoped user id, for users known by username only
	} `json:"contacts"`
	Messages []json.RawMessage `json:"messages"`
	Statuses []json.RawMessage `json:"statuses"`
}

type waMessage struct {
	ID         string           `json:"id"`
	From       string           `json:"from"`
	FromUserID string           `json:"from_user_id"`
	Timestamp  providers.Scalar `json:"timestamp"`
	Type       string           `json:"type"`
	Text       struct {
		Body string `json:"body"`
	} `json:"text"`
	Context struct {
		ID string `json:"id"`
	} `json:"context"`
	Button struct {
		Text string `json:"text"`
	} `json:"button"`
	Interactive struct {
		ButtonReply struct {
			Title string `json:"title"`
		} `json:"button_reply"`
		ListReply struct {
			Title string `json:"title"`
		} `json:"list_reply"`
	} `json:"interactive"`
	Image    caption `json:"image"`
	Video    caption `json:"video"`
	Document caption `json:"document"`
}

type caption struct {
	Caption string `json:"caption"`
}

type waStatus struct {
	ID              string           `json:"id"`
	Status          string           `json:"status"`
	Timestamp       providers.Scalar `json:"timestamp"`
	RecipientID     string           `json:"recipient_id"`
	RecipientUserID string           `json:"recipient_user_id"`
}

type messaging struct {
	Sender    party            `json:"sender"`
	Recipient party            `json:"recipient"`
	Timestamp providers.Scalar `json:"timestamp"` // milliseconds
	Message   *struct {
		Mid         string `json:"mid"`
		Text        string `json:"text"`
		IsEcho      bool   `json:"is_echo"`
		IsDeleted   bool   `json:"is_deleted"`
		Attachments []struct {
			Type string `json:"type"`
		} `json:"attachments"`
		ReplyTo struct {
			Mid string `json:"mid"`
		} `json:"reply_to"`
	} `json:"message"`
	Delivery *struct {
		Mids      []string         `json:"mids"`
		Watermark providers.Scalar `json:"watermark"`
	} `json:"delivery"`
	Read *struct {
		Mid       string           `json:"mid"` // Instagram names the message read; Messenger gives a watermark
		Watermark providers.Scalar `json:"watermark"`
	} `json:"read"`
}

type party struct {
	ID providers.Scalar `json:"id"`
}

// Events splits a verified post into its events.
func (p *provider) Events(r *providers.Request) ([]providers.Event, error) {
	var b struct {
		Object string            `json:"object"`
		Entry  []json.RawMessage `json:"entry"`
	}
	if err := providers.Decode(r.Body, &b); err != nil {
		return nil, err
	}
	if b.Object == "" {
		return nil, fmt.Errorf("%w: no object", providers.ErrMalformed)
	}
	if len(b.Entry) == 0 {
		return nil, fmt.Errorf("%w: no entry", providers.ErrMalformed)
	}
	now := r.Now
	if now.IsZero() {
		now = time.Now()
	}
	s := &splitter{object: b.Object, now: now.UTC()}
	for i, raw := range b.Entry {
		if err := s.entry(raw); err != nil {
			return nil, fmt.Errorf("%w: entry %d: %v", providers.ErrMalformed, i, err)
		}
	}
	return unique(s.evs), nil
}

// unique drops repeats of an event within one post (the same status listed twice):
// they are one event, and one post must not publish an id twice.
func unique(evs []providers.Event) []providers.Event {
	seen := make(map[string]bool, len(evs))
	out := evs[:0]
	for _, ev := range evs {
		if !seen[ev.Key] {
			seen[ev.Key] = true
			out = append(out, ev)
		}
	}
	return out
}

type splitter struct {
	object string
	now    time.Time
	e      entry
	evs    []providers.Event
}

func (s *splitter) entry(raw json.RawMessage) error {
	s.e = entry{}
	if err := json.Unmarshal(raw, &s.e); err != nil {
		return err
	}
	before := len(s.evs)
	for i, c := range s.e.Changes {
		if err := s.change(c); err != nil {
			return fmt.Errorf("change %d: %v", i, err)
		}
	}
	for i, m := range append(s.e.Messaging, s.e.Standby...) {
		if err := s.messaging(m); err != nil {
			return fmt.Errorf("messaging %d: %v", i, err)
		}
	}
	if len(s.evs) == before { // an entry of a shape not known here
		s.unmapped("entry", envelope.Key("entry", string(s.e.ID), string(s.e.Time), digest(raw)), raw, "", s.time())
	}
	return nil
}

func (s *splitter) change(raw json.RawMessage) error {
	var c change
	if err := json.Unmarshal(raw, &c); err != nil {
		return err
	}
	if c.Field == "messages" && s.object == "whatsapp_business_account" {
		var v waValue
		if err := json.Unmarshal(c.Value, &v); err != nil {
			return err
		}
		if len(v.Messages)+len(v.Statuses) > 0 {
			return s.whatsapp(v)
		}
	}
	// Any other field (account_update, message_template_status_update, comments,
	// feed…) is kept whole. The key holds entry.time, when Meta sent the notification:
	// should Meta re-stamp a retry, the cost is a duplicate unmapped event, not a lost one.
	field := c.Field
	if field == "" {
		field = "change"
	}
	s.unmapped(field, envelope.Key("change", string(s.e.ID), c.Field, string(s.e.Time), digest(raw)), raw, "", s.time())
	return nil
}

func (s *splitter) whatsapp(v waValue) error {
	ch := channel(s.object, v.MessagingProduct)
	business := providers.FirstOf(v.Metadata.DisplayPhoneNumber, v.Metadata.PhoneNumberID)
	for i, raw := range v.Messages {
		var m waMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("message %d: %v", i, err)
		}
		if m.ID == "" {
			return fmt.Errorf("message %d: no id", i)
		}
		from := providers.FirstOf(m.From, m.FromUserID)
		c := &envelope.Contact{Phone: m.From, ExternalID: m.FromUserID}
		for _, k := range v.Contacts {
			if len(v.Contacts) == 1 || (k.WaID != "" && k.WaID == m.From) || (k.UserID != "" && k.UserID == m.FromUserID) {
				c.Name, c.ExternalID = k.Profile.Name, providers.FirstOf(c.ExternalID, k.UserID)
				c.Phone = providers.FirstOf(c.Phone, k.WaID)
				break
			}
		}
		s.evs = append(s.evs, providers.Event{
			Type:            envelope.TypeMessageReceived,
			ProviderType:    "message",
			Key:             m.ID,
			ProviderEventID: m.ID,
			ObjectID:        m.ID,
			Version:         string(m.Timestamp),
			Time:            s.time(m.Timestamp),
			Channel:         ch,
			Subject:         from,
			Data: envelope.Data{
				ProviderType: "message",
				Contact:      c,
				Message: &envelope.Message{ID: m.ID, InReplyTo: m.Context.ID, From: from, To: business,
					Text: m.text(), Kind: m.Type},
				Raw: raw,
			},
		})
	}
	for i, raw := range v.Statuses {
		var st waStatus
		if err := json.Unmarshal(raw, &st); err != nil {
			return fmt.Errorf("status %d: %v", i, err)
		}
		if st.ID == "" || st.Status == "" {
			return fmt.Errorf("status %d: no id or status", i)
		}
		to := providers.FirstOf(st.RecipientID, st.RecipientUserID)
		typ := envelope.TypeMessageStatus
		if !statuses[st.Status] {
			typ = envelope.TypeUnmapped // a status WhatsApp added since: to map, not to guess
		}
		s.evs = append(s.evs, providers.Event{
			Type:         typ,
			ProviderType: "status",
			// sent, delivered and read are three events of one message.
			Key:      st.ID + ":" + st.Status,
			ObjectID: st.ID,
			Version:  st.Status,
			Time:     s.time(st.Timestamp),
			Channel:  ch,
			Subject:  to,
			Data: envelope.Data{
				ProviderType: "status",
				Status:       st.Status,
				Contact:      person(st.RecipientID, st.RecipientUserID),
				Message:      &envelope.Message{ID: st.ID, From: business, To: to},
				Raw:          raw,
			},
		})
	}
	return nil
}

func (s *splitter) messaging(raw json.RawMessage) error {
	var m messaging
	if err := json.Unmarshal(raw, &m); err != nil {
		return err
	}
	ch := channel(s.object, "")
	user, page := string(m.Sender.ID), string(m.Recipient.ID)
	at := s.time(m.Timestamp)
	switch {
	case m.Message != nil && m.Message.Mid != "" && !m.Message.IsEcho && !m.Message.IsDeleted:
		kind := "text"
		if m.Message.Text == "" {
			kind = "unknown"
			if len(m.Message.Attachments) > 0 {
				kind = m.Message.Attachments[0].Type
			}
		}
		s.evs = append(s.evs, providers.Event{
			Type:            envelope.TypeMessageReceived,
			ProviderType:    "message",
			Key:             m.Message.Mid,
			ProviderEventID: m.Message.Mid,
			ObjectID:        m.Message.Mid,
			Version:         string(m.Timestamp),
			Time:            at,
			Channel:         ch,
			Subject:         user,
			Data: envelope.Data{
				ProviderType: "message",
				Contact:      &envelope.Contact{ExternalID: user},
				Message: &envelope.Message{ID: m.Message.Mid, InReplyTo: m.Message.ReplyTo.Mid, From: user, To: page,
					Text: m.Message.Text, Kind: kind},
				Raw: raw,
			},
		})
	case m.Message != nil && m.Message.Mid != "":
		// An echo is the page's own outbound message and a deletion withdraws an
		// earlier one: neither is a message received.
		kind, subject := "message_deleted", user
		if m.Message.IsEcho {
			kind, subject = "message_echo", page
		}
		s.unmapped(kind, m.Message.Mid+":"+kind, raw, subject, at)
	case m.Delivery != nil:
		// Delivery receipts often carry no timestamp: the watermark is the next best clock.
		when := s.time(m.Timestamp, m.Delivery.Watermark)
		if len(m.Delivery.Mids) == 0 {
			s.status(ch, "delivered", "", envelope.Key("delivered", user, page, string(m.Delivery.Watermark)), user, page, when, raw)
		}
		for _, mid := range m.Delivery.Mids {
			s.status(ch, "delivered", mid, mid+":delivered", user, page, when, raw)
		}
	case m.Read != nil:
		key := m.Read.Mid + ":read"
		if m.Read.Mid == "" {
			key = envelope.Key("read", user, page, string(m.Read.Watermark))
		}
		s.status(ch, "read", m.Read.Mid, key, user, page, s.time(m.Timestamp, m.Read.Watermark), raw)
	default: // reactions, postbacks, referrals, edits, optins…
		kind := messagingKind(raw)
		s.unmapped(kind, envelope.Key("messaging", string(s.e.ID), kind, string(m.Timestamp), digest(raw)), raw, user, at)
	}
	return nil
}

// status records a Messenger or Instagram receipt of a message the page sent to user.
func (s *splitter) status(ch, status, mid, key, user, page string, at time.Time, raw json.RawMessage) {
	s.evs = append(s.evs, providers.Event{
		Type:         envelope.TypeMessageStatus,
		ProviderType: status,
		Key:          key,
		ObjectID:     mid,
		Version:      status,
		Time:         at,
		Channel:      ch,
		Subject:      user,
		Data: envelope.Data{
			ProviderType: status,
			Status:       status,
			Contact:      &envelope.Contact{ExternalID: user},
			Message:      &envelope.Message{ID: mid, From: page, To: user},
			Raw:          raw,
		},
	})
}

func (s *splitter) unmapped(providerType, key string, raw json.RawMessage, subject string, at time.Time) {
	s.evs = append(s.evs, providers.Event{
		Type:         envelope.TypeUnmapped,
		ProviderType: providerType,
		Key:          key,
		Time:         at,
		Channel:      channel(s.object, ""),
		Subject:      subject,
		Data:         envelope.Data{ProviderType: providerType, Raw: raw},
	})
}

// time reads the first of vs that is a Unix time in seconds (WhatsApp) or milliseconds
// (Messenger, Instagram), falling back to the entry's time and then the receive time:
// an event is kept even when its clock is missing.
func (s *splitter) time(vs ...providers.Scalar) time.Time {
	for _, v := range append(vs, s.e.Time) {
		if t := unixTime(string(v)); !t.IsZero() {
			return t
		}
	}
	return s.now
}

func unixTime(v string) time.Time {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	t := time.Unix(n, 0)
	if n >= 1e11 { // as seconds that is past the year 5000: milliseconds
		t = time.UnixMilli(n)
	}
	if t.Year() > 9999 { // would not encode as RFC 3339
		return time.Time{}
	}
	return t.UTC()
}

func channel(object, product string) string {
	switch {
	case object == "whatsapp_business_account" || product == "whatsapp":
		return "whatsapp"
	case object == "instagram":
		return "instagram"
	case object == "page":
		return "messenger"
	}
	return "" // another object (Meta's other webhooks) is on no messaging channel
}

// messagingKind names a messaging item by its payload field (reaction, postback…).
func messagingKind(raw json.RawMessage) string {
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(raw, &fields)
	keys := make([]string, 0, len(fields))
	for k := range fields {
		if k != "sender" && k != "recipient" && k != "timestamp" {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "messaging"
	}
	sort.Strings(keys)
	return keys[0]
}

func (m waMessage) text() string {
	return providers.FirstOf(m.Text.Body, m.Button.Text, m.Interactive.ButtonReply.Title, m.Interactive.ListReply.Title,
		m.Image.Caption, m.Video.Caption, m.Document.Caption)
}

func digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:16])
}

// statuses are the WhatsApp message statuses schemas/data/message.status knows.
var statuses = map[string]bool{"sent": true, "delivered": true, "read": true, "failed": true, "deleted": true, "played": true, "warning": true}

// person is the contact by phone or user id; nil when Meta gave neither.
func person(phone, userID string) *envelope.Contact {
	if phone == "" && userID == "" {
		return nil
	}
	return &envelope.Contact{Phone: phone, ExternalID: userID}
}
