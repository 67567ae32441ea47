// Package contacts resolves who an event is about: the directory of every contact's
// ids — an internal contact id and account id, and the external ids each outside
// system knows the person by (Clay record, sending-platform lead, campaigns, messages,
// CRM contact, CRM activities).
//
// Identity. Every identity key an event names is linked to the others it names: an
// e-mail address (trimmed and lower-cased; a plus-alias is kept as written, so
// "ana+news@x.com" and "ana@x.com" are two keys never merged on a guess), a phone number
// (digits only), and an external id that names one person at one system (Clay record,
// sending-platform lead, CRM contact). A contact is a group of linked keys. Campaign,
// message and activity ids are kept on the contact but link nobody: many people share
// a campaign. So the e-mail is never the only key: a contact first seen by its CRM id
// alone and later by its e-mail is one contact as soon as any event names both.
//
// Order. The contact id of a group is derived from its least key (an e-mail before a
// phone before an external id, then by value), so the same links give the same ids in
// whatever order they arrive — a replay gives the ids live gave — and a later event
// that links two groups merges them: the group with the greater least key is merged
// into the other (its record says MergedInto; its keys resolve to the other's id), and
// the winner lists the ids merged into it (Merged), so that whoever keeps state per
// contact (the projection) folds theirs. Links come only from events on the stream
// (the projector records them), never from a worker's guess.
//
// The account id is derived from the least e-mail's domain (one company, one account),
// except for free-mail domains, where each contact is its own account.
package contacts

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/mail"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/kvstore"
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

// ProviderKind is the identifying kind of the contact ids provider's events carry, as
// "<provider>:<id>"; "" for a provider whose ids the directory links to no one (a chat
// user, a payment customer).
func ProviderKind(provider string) string {
	switch provider {
	case "instantly", "smartlead":
		return SendingPlatformContactID
	case "hubspot":
		return CRMContactID
	case "clay":
		return ClayRecordID
	}
	return ""
}

// identifying kinds name one person; the others are only kept.
var identifying = [...]string{CRMContactID, SendingPlatformContactID, ClayRecordID}

// Kinds lists every kind, in the order records show them.
var Kinds = []string{ClayRecordID, SendingPlatformContactID, CampaignID, MessageID, CRMContactID, CRMActivityID}

// maxPerKind bounds each list of ids on one contact (the least are kept: a bound that
// depends on the set alone, so the record does not depend on arrival order).
const maxPerKind = 100

// maxHops bounds how many merges a lookup follows to the contact a key belongs to now.
const maxHops = 32

// Record is one contact's ids.
type Record struct {
	ContactID string `json:"contact_id"`
	AccountID string `json:"account_id"`
	// Keys are the identity keys of the contact (kind:value), sorted.
	Keys     []string            `json:"keys,omitempty"`
	Emails   []string            `json:"emails,omitempty"` // as normalised, plus-aliases kept
	Phones   []string            `json:"phones,omitempty"`
	External map[string][]string `json:"external,omitempty"` // kind -> ids, sorted
	// Merged are the contact ids merged into this one; MergedInto, on a contact merged
	// into another, names that one (and nothing else of it is current).
	Merged     []string  `json:"merged,omitempty"`
	MergedInto string    `json:"merged_into,omitempty"`
	Updated    time.Time `json:"updated"`
}

// Seen is what one event tells about a contact: how to find it and which ids to add.
type Seen struct {
	Email    string
	Phone    string
	External map[string]string // kind -> id
}

// Directory is the contact directory of one deployment, over its bucket
// (stream.ContactIDs), or in memory for a replay.
type Directory struct {
	store kvstore.Store
	now   func() time.Time
	build bool         // tests: always build the record anew, to compare with the shortcut
	index *indexMemory // live: the index entries found and written (remember.go)
}

// New binds the directory over store.
func New(store kvstore.Store) *Directory { return &Directory{store: store, now: time.Now} }

// Open binds the directory over its bucket in js.
func Open(ctx context.Context, js jetstream.JetStream) (*Directory, error) {
	kv, err := js.KeyValue(ctx, stream.ContactIDs)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", stream.ContactIDs, err)
	}
	d := New(kvstore.KV{KV: kv, JS: js})
	d.index = newIndexMemory()
	return d, nil
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

// NormalizePhone keeps the digits: "+1 (555) 010-0000" and "15550100000" are one phone.
// Fewer than minPhoneDigits is no phone (an extension, a placeholder "0"): it would
// join strangers.
func NormalizePhone(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	if b.Len() < minPhoneDigits {
		return ""
	}
	return b.String()
}

// minPhoneDigits: the shortest national numbers have seven digits.
const minPhoneDigits = 7

// Key is the identity key kind:value, value normalised for "email" and "phone".
func Key(kind, value string) string {
	switch kind {
	case "email":
		value = NormalizeEmail(value)
	case "phone":
		value = NormalizePhone(value)
	}
	if value == "" {
		return ""
	}
	return kind + ":" + value
}

// Keys are the identity keys of what was seen.
func (s Seen) Keys() []string {
	var out []string
	if k := Key("email", s.Email); k != "" {
		out = append(out, k)
	}
	if k := Key("phone", s.Phone); k != "" {
		out = append(out, k)
	}
	for _, kind := range identifying {
		if v := s.External[kind]; v != "" {
			out = append(out, kind+":"+v)
		}
	}
	return out
}

// First is s with only its first identity key (e-mail, else phone, else the first
// identifying id) and the ids that identify no one (campaigns, messages): what an
// event whose sender is not known may say of a contact, which links nothing.
func (s Seen) First() Seen {
	var out Seen
	kept := "" // the identifying kind kept, if that is the first key
	switch {
	case Key("email", s.Email) != "":
		out.Email = s.Email
	case Key("phone", s.Phone) != "":
		out.Phone = s.Phone
	default:
		for _, kind := range identifying {
			if s.External[kind] != "" {
				kept = kind
				break
			}
		}
	}
	drop := func(kind string) bool { return kind != kept && slices.Contains(identifying[:], kind) }
	// Most events name no other identifying id: their ids are then shared, not copied
	// (a replay does this for every unsigned event).
	out.External = s.External
	for kind := range s.External {
		if drop(kind) {
			out.External = maps.Clone(s.External)
			maps.DeleteFunc(out.External, func(kind, _ string) bool { return drop(kind) })
			break
		}
	}
	return out
}

// Identity is what of s its identity keys come from, as given (Keys normalises it):
// comparable, so that who s names can key a map without building its keys.
type Identity struct {
	Email, Phone string
	IDs          [len(identifying)]string // by identifying kind
}

// Identity is s's Identity: two Seen with the same one have the same Keys.
func (s Seen) Identity() Identity {
	id := Identity{Email: s.Email, Phone: s.Phone}
	for i, kind := range identifying {
		id.IDs[i] = s.External[kind]
	}
	return id
}

// rank orders identity keys by kind: the least key names the group.
func rank(key string) int {
	kind, _, _ := strings.Cut(key, ":")
	switch kind {
	case "email":
		return 0
	case "phone":
		return 1
	}
	return 2 + slices.Index(identifying[:], kind)
}

func cmpKeys(a, b string) int {
	if c := cmp.Compare(rank(a), rank(b)); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

func hash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// ContactID is the id of tenant's contact whose least identity key is key.
func ContactID(tenant, key string) string { return "ct_" + hash(tenant, key) }

func indexKey(tenant, key string) string        { return tenant + ".k." + hash(key) }
func recordKey(tenant, contactID string) string { return tenant + ".c." + contactID }

// freeMail domains are personal mailboxes: no company account to group by.
var freeMail = []string{"gmail.com", "googlemail.com", "outlook.com", "hotmail.com", "live.com", "yahoo.com",
	"icloud.com", "me.com", "aol.com", "proton.me", "protonmail.com", "gmx.com", "gmx.de", "web.de", "yandex.ru",
	"mail.ru", "qq.com", "163.com", "uol.com.br", "bol.com.br", "terra.com.br", "hotmail.es", "yahoo.es"}

func accountID(tenant, contactID string, emails []string) string {
	domain := ""
	if len(emails) > 0 {
		domain = emails[0][strings.LastIndexByte(emails[0], '@')+1:]
	}
	if domain == "" || slices.Contains(freeMail, domain) {
		return "ac_" + hash(tenant, "contact", contactID)
	}
	return "ac_" + hash(tenant, "domain", domain)
}

// maxTries bounds compare-and-set retries of one Record.
const maxTries = 50

// Record finds the contact of tenant that s names — linking every key s names, and
// merging the contacts they belonged to into one — and adds s's ids to it. It returns
// the contact's record; its Merged lists every contact id ever merged into it.
// Recording the same thing twice changes nothing.
func (d *Directory) Record(ctx context.Context, tenant string, s Seen) (Record, error) {
	keys := s.Keys()
	if tenant == "" || len(keys) == 0 {
		return Record{}, errors.New("contacts: a tenant and an e-mail, phone or identifying id are required")
	}
	for try := range maxTries {
		rec, err := d.record(ctx, tenant, s, keys, try == 0)
		if !errors.Is(err, kvstore.ErrConflict) {
			return rec, err
		}
		d.forget(tenant, keys) // someone wrote first: what was remembered may be what changed
	}
	return Record{}, errors.New("contacts: too much contention on one contact")
}

// sharedLine reports whether s's phone key belongs to a contact with an e-mail that
// none of s's other keys reaches, while s or those keys' contacts have an e-mail too.
func sharedLine(s Seen, phone string, of map[string]string, groups map[string]loaded) bool {
	owner, ok := of[phone]
	if phone == "" || !ok || len(groups[owner].rec.Emails) == 0 {
		return false
	}
	emailed := Key("email", s.Email) != ""
	for k, id := range of {
		if k == phone {
			continue
		}
		if id == owner {
			return false // the other keys reach the phone's contact: no join by phone alone
		}
		emailed = emailed || len(groups[id].rec.Emails) > 0
	}
	return emailed
}

// loaded is a stored record and its revision.
type loaded struct {
	rec Record
	rev uint64
}

// record is one try of Record: read what the keys belong to, write the group they make
// (the winner first, then each merged contact, then the keys' index), or ErrConflict
// when someone wrote first. A first try whose keys are linked to nobody creates the
// contact without reading its record first: it exists only when another Record wrote
// it and not yet its index entries, and then the create is refused (ErrConflict) and
// the next try reads it.
func (d *Directory) record(ctx context.Context, tenant string, s Seen, keys []string, first bool) (Record, error) {
	groups := map[string]loaded{}
	pointed := map[string]loaded{} // key -> its index entry (rec.ContactID = the id it names)
	of := map[string]string{}      // key -> the contact it belongs to
	roots := map[string]loaded{}   // contact id an index entry names -> the record it belongs to now
	for _, k := range keys {
		id, rev, g, err := d.resolve(ctx, tenant, k, roots)
		if err != nil {
			return Record{}, err
		}
		if rev == 0 {
			continue
		}
		pointed[k] = loaded{Record{ContactID: id}, rev}
		if g.rev != 0 {
			groups[g.rec.ContactID] = g
			of[k] = g.rec.ContactID
		}
	}
	if g, ok := onlyGroup(groups, pointed, len(keys)); ok && !d.build && holds(tenant, g.rec, s, keys) {
		return g.rec, nil // nothing new, told without building the record to compare (below)
	}
	if phone := Key("phone", s.Phone); sharedLine(s, phone, of, groups) {
		// A phone alone never joins two contacts that each have an e-mail: a line two
		// people share (a company's switchboard in a CRM) is no proof of one person. It
		// stays with the contact that had it; this one is recorded without it.
		keys = slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return k == phone })
		delete(groups, of[phone])
		delete(pointed, phone)
		s.Phone = ""
	}
	all := slices.Clone(keys)
	for _, g := range groups {
		all = append(all, g.rec.Keys...)
	}
	slices.SortFunc(all, cmpKeys)
	all = slices.Compact(all)
	winner := ContactID(tenant, all[0])

	next := Record{ContactID: winner}
	for _, id := range sortedIDs(groups) {
		g := groups[id].rec
		mergeInto(&next, g)
		if id != winner {
			next.Merged = append(next.Merged, id)
		}
	}
	add(&next, s, keys)
	next.AccountID = accountID(tenant, winner, next.Emails)

	cur, isCurrent := groups[winner]
	if !isCurrent && !(first && len(pointed) == 0) {
		l, err := d.read(ctx, tenant, winner)
		if err != nil {
			return Record{}, err
		}
		if l.rev != 0 {
			if l.rec.MergedInto != "" { // merged meanwhile: read the keys again
				return Record{}, kvstore.ErrConflict
			}
			cur = l
			mergeInto(&next, l.rec) // written by a Record whose index writes are still to come
			next.AccountID = accountID(tenant, winner, next.Emails)
		}
	}
	next.Updated = cur.rec.Updated
	allIndexed := true
	for _, k := range keys {
		allIndexed = allIndexed && pointed[k].rec.ContactID == winner
	}
	if isCurrent && len(groups) == 1 && allIndexed && same(cur.rec, next) {
		return cur.rec, nil // nothing new: the common case, reads only
	}
	next.Updated = d.now().UTC()
	if err := d.put(ctx, recordKey(tenant, winner), next, cur.rev); err != nil {
		return Record{}, err
	}
	for _, id := range sortedIDs(groups) { // in one order: a write refused midway leaves the same
		g := groups[id]
		if id == winner {
			continue
		}
		g.rec.MergedInto = winner
		if err := d.put(ctx, recordKey(tenant, id), g.rec, g.rev); err != nil {
			return Record{}, err
		}
	}
	for _, k := range keys {
		if p := pointed[k]; p.rec.ContactID != winner {
			rev, err := d.store.Put(ctx, indexKey(tenant, k), []byte(winner), p.rev)
			if err != nil {
				return Record{}, err
			}
			d.index.put(indexKey(tenant, k), indexEntry{winner, rev})
		}
	}
	return next, nil
}

// onlyGroup is the one contact that every one of n keys' index entries names directly
// (no merge to follow), if there is one.
func onlyGroup(groups, pointed map[string]loaded, n int) (loaded, bool) {
	if len(groups) != 1 || len(pointed) != n {
		return loaded{}, false
	}
	for _, g := range groups {
		for _, p := range pointed {
			if p.rec.ContactID != g.rec.ContactID {
				return loaded{}, false
			}
		}
		return g, true
	}
	return loaded{}, false
}

// holds reports whether recording s (its identity keys keys) would leave r as it is:
// r is as record writes one (every list sorted without repeats and within maxPerKind,
// its id its least key's, its account its e-mails', not merged into itself) and it
// holds every key and id s tells. The common case of an event about a known contact;
// record would otherwise build the record anew to find it unchanged.
func holds(tenant string, r Record, s Seen, keys []string) bool {
	if r.MergedInto != "" || len(r.Keys) == 0 || !normal(r.Keys, cmpKeys) || !normal(r.Emails, strings.Compare) ||
		!normal(r.Phones, strings.Compare) || !normal(r.Merged, strings.Compare) || slices.Contains(r.Merged, r.ContactID) ||
		r.ContactID != ContactID(tenant, r.Keys[0]) || r.AccountID != accountID(tenant, r.ContactID, r.Emails) {
		return false
	}
	for _, ids := range r.External {
		if len(ids) == 0 || !normal(ids, strings.Compare) { // an empty list is written as none
			return false
		}
	}
	has := func(list []string, v string, cmp func(a, b string) int) bool {
		_, ok := slices.BinarySearchFunc(list, v, cmp)
		return ok
	}
	for _, k := range keys {
		if !has(r.Keys, k, cmpKeys) {
			return false
		}
	}
	if e := NormalizeEmail(s.Email); e != "" && !has(r.Emails, e, strings.Compare) {
		return false
	}
	if p := NormalizePhone(s.Phone); p != "" && !has(r.Phones, p, strings.Compare) {
		return false
	}
	for _, kind := range Kinds {
		if v := s.External[kind]; v != "" && !has(r.External[kind], v, strings.Compare) {
			return false
		}
	}
	return true
}

// normal reports whether list is as union leaves one: strictly increasing by cmp, at
// most maxPerKind long.
func normal(list []string, cmp func(a, b string) int) bool {
	if len(list) > maxPerKind {
		return false
	}
	for i := 1; i < len(list); i++ {
		if cmp(list[i-1], list[i]) >= 0 {
			return false
		}
	}
	return true
}

func (d *Directory) put(ctx context.Context, key string, r Record, rev uint64) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = d.store.Put(ctx, key, data, rev)
	return err
}

// resolve is the contact id identity key k is linked to, at revision rev (0: none), and
// the record it belongs to now (g, rev 0 if none), through roots (the records found
// already, by the id linked to). A remembered entry is taken only when it leads straight
// to a current record of its own id; one that leads through a merge, or to no record,
// is read again, so the answer is reading's (a stale entry would lead to the same
// contact, but a write at its old revision would fail after its record was rewritten).
func (d *Directory) resolve(ctx context.Context, tenant, k string, roots map[string]loaded) (id string, rev uint64, g loaded, err error) {
	key := indexKey(tenant, k)
	e, remembered := d.index.get(key)
	for {
		if !remembered {
			data, r, err := d.store.Get(ctx, key)
			if err != nil {
				return "", 0, loaded{}, fmt.Errorf("contacts: %w", err)
			}
			if r == 0 {
				return "", 0, loaded{}, nil
			}
			e = indexEntry{string(data), r}
			d.index.put(key, e)
		}
		g, ok := roots[e.id]
		if !ok { // the keys of one event mostly name one contact: read it once
			if g, err = d.root(ctx, tenant, e.id); err != nil {
				return "", 0, loaded{}, err
			}
			roots[e.id] = g
		}
		if !remembered || (g.rev != 0 && g.rec.ContactID == e.id) {
			return e.id, e.rev, g, nil
		}
		d.index.forget([]string{key})
		remembered = false
	}
}

// forget drops what is remembered of the index entries of tenant's keys.
func (d *Directory) forget(tenant string, keys []string) {
	if d.index == nil {
		return
	}
	idx := make([]string, len(keys))
	for i, k := range keys {
		idx[i] = indexKey(tenant, k)
	}
	d.index.forget(idx)
}

// read is contact id's record as stored (rev 0: none).
func (d *Directory) read(ctx context.Context, tenant, id string) (loaded, error) {
	key := recordKey(tenant, id)
	data, rev, err := d.store.Get(ctx, key)
	if err != nil {
		return loaded{}, fmt.Errorf("contacts: %w", err)
	}
	if rev == 0 {
		return loaded{}, nil
	}
	var r Record
	if err := decodeRecord(data, &r); err != nil {
		return loaded{}, fmt.Errorf("contacts: record %s: %w", id, err)
	}
	return loaded{r, rev}, nil
}

// root is the contact id belongs to now: itself, or the one it was merged into (and so
// on). rev is 0 when there is no such record.
func (d *Directory) root(ctx context.Context, tenant, id string) (loaded, error) {
	for range maxHops {
		l, err := d.read(ctx, tenant, id)
		if err != nil || l.rev == 0 {
			return loaded{}, err
		}
		if l.rec.MergedInto == "" {
			return l, nil
		}
		id = l.rec.MergedInto
	}
	return loaded{}, fmt.Errorf("contacts: %s: more than %d merges to follow", id, maxHops)
}

func sortedIDs(m map[string]loaded) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// mergeInto adds g's keys and ids to r.
func mergeInto(r *Record, g Record) {
	r.Keys = union(r.Keys, g.Keys, cmpKeys)
	r.Emails = union(r.Emails, g.Emails, strings.Compare)
	r.Phones = union(r.Phones, g.Phones, strings.Compare)
	r.Merged = union(r.Merged, g.Merged, strings.Compare)
	for kind, ids := range g.External {
		if r.External == nil {
			r.External = map[string][]string{}
		}
		r.External[kind] = union(r.External[kind], ids, strings.Compare)
	}
}

// add adds what s saw (and its identity keys) to r.
func add(r *Record, s Seen, keys []string) {
	r.Keys = union(r.Keys, keys, cmpKeys)
	if e := NormalizeEmail(s.Email); e != "" {
		r.Emails = union(r.Emails, []string{e}, strings.Compare)
	}
	if p := NormalizePhone(s.Phone); p != "" {
		r.Phones = union(r.Phones, []string{p}, strings.Compare)
	}
	for _, kind := range Kinds {
		if v := s.External[kind]; v != "" {
			if r.External == nil {
				r.External = map[string][]string{}
			}
			r.External[kind] = union(r.External[kind], []string{v}, strings.Compare)
		}
	}
	r.Merged = slices.DeleteFunc(union(r.Merged, nil, strings.Compare), func(id string) bool { return id == r.ContactID })
}

// union is a ∪ b, sorted by cmp, at most maxPerKind (the least).
func union(a, b []string, cmp func(x, y string) int) []string {
	out := append(slices.Clone(a), b...)
	slices.SortFunc(out, cmp)
	out = slices.Compact(out)
	return out[:min(len(out), maxPerKind)]
}

// same reports whether a and b hold the same ids (Updated aside): whether they encode
// alike, compared field by field (encoding both was most of a replay's lookup). Empty
// lists and maps are left out of the encoding, so an empty one is a nil one; a nil id
// list in External encodes as null, an empty one as [].
func same(a, b Record) bool {
	return a.ContactID == b.ContactID && a.AccountID == b.AccountID && a.MergedInto == b.MergedInto &&
		slices.Equal(a.Keys, b.Keys) && slices.Equal(a.Emails, b.Emails) && slices.Equal(a.Phones, b.Phones) &&
		slices.Equal(a.Merged, b.Merged) && maps.EqualFunc(a.External, b.External, func(x, y []string) bool {
		return (x == nil) == (y == nil) && slices.Equal(x, y)
	})
}

// Find returns the contact of tenant with identity key kind:value, where kind is
// "email", "phone" or an identifying external kind.
func (d *Directory) Find(ctx context.Context, tenant, kind, value string) (Record, bool, error) {
	key := Key(kind, value)
	if key == "" {
		return Record{}, false, nil
	}
	_, rev, g, err := d.resolve(ctx, tenant, key, map[string]loaded{})
	if err != nil || rev == 0 {
		return Record{}, false, err
	}
	return g.rec, g.rev != 0, nil
}

// EmailOf is the e-mail of tenant's contact that a CRM names by its id alone (crmID,
// "hubspot:<id>"): the least one the directory links to it, else the one ask gives (the
// CRM's own record of the contact); "" when neither knows one. A CRM's opt-out names
// the contact by id; the sending platforms know it by e-mail.
func (d *Directory) EmailOf(ctx context.Context, tenant, crmID string, ask func(context.Context) (string, error)) (string, error) {
	if d != nil {
		rec, ok, err := d.Find(ctx, tenant, CRMContactID, crmID)
		if err != nil {
			return "", err
		}
		if ok && len(rec.Emails) > 0 {
			return rec.Emails[0], nil
		}
	}
	if ask == nil {
		return "", nil
	}
	email, err := ask(ctx)
	return NormalizeEmail(email), err
}
