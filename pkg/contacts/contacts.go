// Package contacts is the directory of every contact's ids: an internal contact id and
// account id that never change once given, and the external ids each outside system
// knows the person by (Clay record, sending-platform lead, campaigns, messages, CRM
// contact, CRM activities).
//
// Identity. A contact is found by any of its identity keys: an e-mail address (trimmed
// and lower-cased; a plus-alias is kept as written, so "ana+news@x.com" and
// "ana@x.com" are two keys and never merged on a guess), a phone number (digits only),
// or an external id that names one person (Clay record, sending-platform lead, CRM
// contact). Campaign, message and activity ids are kept on the contact but find nobody:
// many people share a campaign. So the e-mail is never the only key: a contact first
// seen by its CRM id is the same contact when its e-mail arrives with that id.
//
// The contact id is derived from the tenant and the first identity key the contact was
// recorded by, so replaying the same history assigns the same ids. The account id is
// derived from the e-mail's domain (one company, one account), except for free-mail
// domains, where each contact is its own account. When two keys already name two
// different contacts, the first is used and nothing is merged: two contacts for one
// person is for the reconciler to report, not for a worker to guess.
package contacts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/mail"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/stream"
)

// Kinds of external id.
const (
	ClayRecordID             = "clay_record_id"
	SendingPlatformContactID = "sending_platform_contact_id" // "<platform>:<lead id>"
	CampaignID               = "campaign_id"                 // "<platform>:<campaign id>"
	MessageID                = "message_id"
	CRMContactID             = "crm_contact_id" // "<crm>:<contact id>"
	CRMActivityID            = "crm_activity_id"
)

// identifying kinds name one person; the others are only kept.
var identifying = []string{ClayRecordID, SendingPlatformContactID, CRMContactID}

// Kinds lists every kind, in the order records show them.
var Kinds = []string{ClayRecordID, SendingPlatformContactID, CampaignID, MessageID, CRMContactID, CRMActivityID}

// maxPerKind bounds each list of ids on one contact (the newest are kept): a contact in
// a thousand campaigns must not make its record unbounded.
const maxPerKind = 100

// Record is one contact's ids.
type Record struct {
	ContactID string              `json:"contact_id"`
	AccountID string              `json:"account_id"`
	Emails    []string            `json:"emails,omitempty"` // as normalised, plus-aliases kept
	Phones    []string            `json:"phones,omitempty"`
	External  map[string][]string `json:"external,omitempty"` // kind -> ids, oldest first
	Updated   time.Time           `json:"updated"`
}

// Seen is what one event tells about a contact: how to find it and which ids to add.
type Seen struct {
	Email    string
	Phone    string
	External map[string]string // kind -> id
}

// Directory is the contact directory of one deployment, over its bucket
// (stream.ContactIDs).
type Directory struct{ kv jetstream.KeyValue }

// New binds the directory over kv.
func New(kv jetstream.KeyValue) *Directory { return &Directory{kv: kv} }

// Open binds the directory over its bucket in js.
func Open(ctx context.Context, js jetstream.JetStream) (*Directory, error) {
	kv, err := js.KeyValue(ctx, stream.ContactIDs)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", stream.ContactIDs, err)
	}
	return New(kv), nil
}

// NormalizeEmail is the form e-mails are matched in: the bare address, trimmed and
// lower-cased, plus-alias kept. "" when s holds no address.
func NormalizeEmail(s string) string {
	s = strings.TrimSpace(s)
	if strings.ContainsAny(s, "<>") {
		if a, err := mail.ParseAddress(s); err == nil {
			s = a.Address
		}
	}
	s = strings.ToLower(s)
	if at := strings.LastIndexByte(s, '@'); at <= 0 || at == len(s)-1 || strings.ContainsAny(s, " \t<>") {
		return ""
	}
	return s
}

// normalizePhone keeps the digits: "+1 (555) 010-0000" and "15550100000" are one phone.
func normalizePhone(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// keys are the identity keys of what was seen, in a fixed order.
func (s Seen) keys() []string {
	var out []string
	if e := NormalizeEmail(s.Email); e != "" {
		out = append(out, "email:"+e)
	}
	if p := normalizePhone(s.Phone); p != "" {
		out = append(out, "phone:"+p)
	}
	for _, k := range identifying {
		if v := s.External[k]; v != "" {
			out = append(out, k+":"+v)
		}
	}
	return out
}

func hash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func indexKey(tenant, key string) string        { return tenant + ".k." + hash(key) }
func recordKey(tenant, contactID string) string { return tenant + ".c." + contactID }

// freeMail domains are personal mailboxes: no company account to group by.
var freeMail = []string{"gmail.com", "googlemail.com", "outlook.com", "hotmail.com", "live.com", "yahoo.com",
	"icloud.com", "me.com", "aol.com", "proton.me", "protonmail.com", "gmx.com", "gmx.de", "web.de", "yandex.ru",
	"mail.ru", "qq.com", "163.com", "uol.com.br", "bol.com.br", "terra.com.br", "hotmail.es", "yahoo.es"}

func accountID(tenant, contactID, email string) string {
	domain := ""
	if at := strings.LastIndexByte(email, '@'); at >= 0 {
		domain = email[at+1:]
	}
	if domain == "" || slices.Contains(freeMail, domain) {
		return "ac_" + hash(tenant, "contact", contactID)
	}
	return "ac_" + hash(tenant, "domain", domain)
}

// Record finds the contact of tenant that s names (creating it when none of its keys is
// known) and adds s's ids to it. Recording the same thing twice changes nothing.
func (d *Directory) Record(ctx context.Context, tenant string, s Seen) (Record, error) {
	keys := s.keys()
	if tenant == "" || len(keys) == 0 {
		return Record{}, errors.New("contacts: a tenant and an e-mail, phone or identifying id are required")
	}
	id, err := d.resolve(ctx, tenant, keys)
	if err != nil {
		return Record{}, err
	}
	for range 20 { // compare-and-set; another worker may be adding to the same contact
		rec, rev, err := d.load(ctx, tenant, id)
		if err != nil {
			return Record{}, err
		}
		if !merge(&rec, tenant, s) && rev != 0 {
			return rec, nil
		}
		rec.Updated = time.Now().UTC()
		data, err := json.Marshal(rec)
		if err != nil {
			return Record{}, err
		}
		if rev == 0 {
			_, err = d.kv.Create(ctx, recordKey(tenant, id), data)
		} else {
			_, err = d.kv.Update(ctx, recordKey(tenant, id), data, rev)
		}
		if err == nil {
			return rec, nil
		}
		if !isConflict(err) {
			return Record{}, fmt.Errorf("contacts: %w", err)
		}
	}
	return Record{}, errors.New("contacts: too much contention on one contact")
}

// resolve returns the contact id keys name, giving every key that names nobody yet to
// it. A key already naming another contact is left alone (see the package comment).
func (d *Directory) resolve(ctx context.Context, tenant string, keys []string) (string, error) {
	id := ""
	for _, k := range keys {
		e, err := d.kv.Get(ctx, indexKey(tenant, k))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("contacts: %w", err)
		}
		id = string(e.Value())
		break
	}
	if id == "" {
		id = "ct_" + hash(tenant, keys[0])
	}
	for _, k := range keys {
		_, err := d.kv.Create(ctx, indexKey(tenant, k), []byte(id))
		if err != nil && !isConflict(err) {
			return "", fmt.Errorf("contacts: %w", err)
		}
	}
	return id, nil
}

// isConflict: the key exists, or the revision moved on.
func isConflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || (errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant))
}

func (d *Directory) load(ctx context.Context, tenant, id string) (Record, uint64, error) {
	e, err := d.kv.Get(ctx, recordKey(tenant, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Record{ContactID: id}, 0, nil
	}
	if err != nil {
		return Record{}, 0, fmt.Errorf("contacts: %w", err)
	}
	var rec Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return Record{}, 0, fmt.Errorf("contacts: record %s: %w", id, err)
	}
	return rec, e.Revision(), nil
}

// merge adds s to rec; it reports whether anything changed.
func merge(rec *Record, tenant string, s Seen) bool {
	changed := false
	add := func(list *[]string, v string) {
		if v == "" || slices.Contains(*list, v) {
			return
		}
		*list = append(*list, v)
		if len(*list) > maxPerKind {
			*list = (*list)[len(*list)-maxPerKind:]
		}
		changed = true
	}
	email := NormalizeEmail(s.Email)
	add(&rec.Emails, email)
	add(&rec.Phones, normalizePhone(s.Phone))
	for _, k := range Kinds {
		if v := s.External[k]; v != "" {
			if rec.External == nil {
				rec.External = map[string][]string{}
			}
			list := rec.External[k]
			add(&list, v)
			rec.External[k] = list
		}
	}
	if rec.AccountID == "" {
		first := email
		if len(rec.Emails) > 0 {
			first = rec.Emails[0]
		}
		rec.AccountID = accountID(tenant, rec.ContactID, first)
		changed = true
	}
	return changed
}

// Find returns the contact of tenant with identity key kind:value, where kind is
// "email", "phone" or an identifying external kind.
func (d *Directory) Find(ctx context.Context, tenant, kind, value string) (Record, bool, error) {
	switch kind {
	case "email":
		value = NormalizeEmail(value)
	case "phone":
		value = normalizePhone(value)
	}
	e, err := d.kv.Get(ctx, indexKey(tenant, kind+":"+value))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("contacts: %w", err)
	}
	rec, rev, err := d.load(ctx, tenant, string(e.Value()))
	return rec, err == nil && rev != 0, err
}
