// Package projection builds the current state of every contact and campaign from the
// stream, and reads it back. Three projections, each a key-value store:
//
//   - contacts: one record per contact (by its internal contact id), holding every
//     contact key and external id the stream named, the contact-level lifecycle and
//     the lifecycle in each campaign (pkg/lifecycle). An event is merged into its
//     contact's record with optimistic concurrency (read, merge, write at the revision
//     read), so two projectors never interleave into a wrong state, and because the
//     lifecycle merge is a semilattice, any order and any duplicates give one state.
//   - campaigns: each campaign's members, sharded 4,096 ways by contact id (a member's
//     write rewrites its shard: four members of a campaign of 15,000, 250 of a
//     million; shardDigits), each member with its effective view
//     (status and flags), the revision of the contact record it was computed from and
//     the record's count of that view's changes. A member is only ever replaced by a
//     newer view (Member.replaces), so a slow projector cannot put an old view back,
//     and a change of the record that leaves the view as it was writes no shard.
//   - suppression: the contacts whose contact-level lifecycle is terminal (unsubscribed,
//     bounced, suppressed), with the event that made it so.
//
// Campaign and suppression entries are derived from the contact record after every
// event, also when the merge changed nothing: a projector that died between the two
// writes repairs them on the redelivery.
package projection

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/lifecycle"
)

// Names of the projections (`exacto replay --projection NAME`).
const (
	Contacts    = "contacts"
	Campaigns   = "campaigns"
	Suppression = "suppression"
)

// Names lists the projections.
var Names = []string{Contacts, Campaigns, Suppression}

// maxIDs bounds each list of external ids on a record (the least are kept: a bound that
// depends only on the set, so the merge stays order-independent).
const maxIDs = 100

// Contact is one contact's record.
type Contact struct {
	Tenant    string `json:"tenant"`
	ContactID string `json:"contact_id"`
	AccountID string `json:"account_id,omitempty"`
	// Keys are the contact keys events named it by (email:…, phone:…, id:…), sorted.
	Keys []string `json:"keys"`
	// External are the ids the stream named, by kind (pkg/contacts kinds), sorted.
	External map[string][]string `json:"external,omitempty"`
	// Lifecycle is the contact-level lifecycle; Campaigns each campaign's.
	Lifecycle lifecycle.State            `json:"lifecycle"`
	Campaigns map[string]lifecycle.State `json:"campaigns,omitempty"`
	// Views counts, by campaign, the live projector's changes of the contact's member
	// view there (a Member without its revision): a member is rewritten only when its
	// view changed, not on every change of the record (Member.replaces).
	Views map[string]uint64 `json:"views,omitempty"`
}

// clone is c with lists and maps of its own (recently keeps records decoded).
func (c Contact) clone() Contact {
	c.Keys = slices.Clone(c.Keys)
	if c.External != nil {
		ext := make(map[string][]string, len(c.External))
		for kind, ids := range c.External {
			ext[kind] = slices.Clone(ids)
		}
		c.External = ext
	}
	c.Lifecycle.Facts = slices.Clone(c.Lifecycle.Facts)
	if c.Campaigns != nil {
		cs := make(map[string]lifecycle.State, len(c.Campaigns))
		for id, st := range c.Campaigns {
			st.Facts = slices.Clone(st.Facts)
			cs[id] = st
		}
		c.Campaigns = cs
	}
	c.Views = maps.Clone(c.Views)
	return c
}

// View is the contact's own status; InCampaign its effective status in a campaign.
func (c Contact) View() lifecycle.View { return c.Lifecycle.View() }

// Replied reports whether the contact replied anywhere: a reply is a fact of the
// campaign it answers, so the contact-level view alone does not show it.
func (c Contact) Replied() bool {
	if c.View().Replied {
		return true
	}
	for campaign := range c.Campaigns {
		if c.InCampaign(campaign).Replied {
			return true
		}
	}
	return false
}

// InCampaign is the contact's effective lifecycle view in campaign: what happened in it,
// and what happened to the contact everywhere (an opt-out, a bounce).
func (c Contact) InCampaign(campaign string) lifecycle.View {
	return lifecycle.Effective(c.Campaigns[campaign], c.Lifecycle).View()
}

// Member is a contact's effective view in a campaign, as the campaign keeps it.
type Member struct {
	Rev           uint64           `json:"rev"` // the contact record's revision it was computed from
	Status        lifecycle.Status `json:"status"`
	Replied       bool             `json:"replied,omitempty"`
	Bounced       bool             `json:"bounced,omitempty"`
	Unsubscribed  bool             `json:"unsubscribed,omitempty"`
	MeetingBooked bool             `json:"meeting_booked,omitempty"`
	Opportunity   bool             `json:"opportunity,omitempty"`
	Discrepancies int              `json:"discrepancies,omitempty"`
	Undecided     int              `json:"undecided,omitempty"`
	// Views is the record's count of changes of this view (Contact.Views) it was
	// computed at; 0 where the record counts none (a replay's, or one written before).
	Views uint64 `json:"views,omitempty"`
}

// memberOf is c's member in campaign, computed from c at revision rev.
func memberOf(c Contact, campaign string, rev uint64) Member {
	v := c.InCampaign(campaign)
	return Member{Rev: rev, Status: v.Status, Replied: v.Replied, Bounced: v.Bounced, Unsubscribed: v.Unsubscribed,
		MeetingBooked: v.MeetingBooked, Opportunity: v.Opportunity, Discrepancies: len(v.Discrepancies), Undecided: len(v.Undecided),
		Views: c.Views[campaign]}
}

// same is m without its revision and count, for comparing projections built apart.
func (m Member) same(o Member) bool { m.Rev, o.Rev, m.Views, o.Views = 0, 0, 0, 0; return m == o }

// replaces reports whether m is to replace cur: only one computed from a newer record,
// so that a slow projector never puts an older view back, and not when both come from
// records that count their views' changes and show the same view at the same count
// (nothing changed: no write). The count is what makes the skip safe: a view that went
// away and came back has a higher count, so a member of the view in between, computed
// from an older record, finds its place taken by a newer one. Records without counts (a
// replay's, or one an older build wrote) are written on every newer revision, as before.
func (m Member) replaces(cur Member) bool {
	return m.Rev > cur.Rev && (m.Views == 0 || m.Views != cur.Views || !m.same(cur))
}

// memberViews are c's member views by campaign, revision aside.
func memberViews(c Contact) map[string]Member {
	out := make(map[string]Member, len(c.Campaigns))
	for campaign := range c.Campaigns {
		out[campaign] = memberOf(c, campaign, 0)
	}
	return out
}

// countViews raises c.Views in each campaign whose member view differs from was's
// (memberViews of the record before it changed).
func countViews(c *Contact, was map[string]Member) {
	for campaign := range c.Campaigns {
		if memberOf(*c, campaign, 0).same(was[campaign]) {
			continue
		}
		if c.Views == nil {
			c.Views = map[string]uint64{}
		}
		c.Views[campaign]++
	}
}

// Shard is one of a campaign's 4,096 parts: the members whose contact id hashes to it.
type Shard struct {
	Tenant   string            `json:"tenant"`
	Campaign string            `json:"campaign"`
	Members  map[string]Member `json:"members"` // by contact id
}

// clone is sh with a members map of its own (recently keeps shards decoded).
func (sh Shard) clone() Shard { sh.Members = maps.Clone(sh.Members); return sh }

// Suppressed is a contact whose contact-level lifecycle is terminal.
type Suppressed struct {
	Tenant    string           `json:"tenant"`
	ContactID string           `json:"contact_id"`
	Keys      []string         `json:"keys"`
	Status    lifecycle.Status `json:"status"` // unsubscribed, bounced or suppressed
	Event     string           `json:"event"`  // the event that made it so
	Since     string           `json:"since"`
	Rev       uint64           `json:"rev"`
}

func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:12])
}

// ContactKey is the store key of a contact record.
func ContactKey(tenant, contactID string) string { return tenant + "." + contactID }

// campaignPrefix is the store prefix of a campaign's shards.
func campaignPrefix(tenant, campaign string) string { return tenant + "." + hash(campaign) + "." }

// shardDigits is how many hex digits of a contact id's hash name its shard: 3, 4,096
// shards a campaign. Every change of a member's view rewrites its whole shard, so a
// shard's size is paid on every reply: with 256 (2 digits, until 2026-12-07) a
// campaign of 15,000 put 4.4 KB a reply into the bucket and cloned and encoded some 60
// members (BenchmarkReplyInACampaign). More digits would make a campaign's keys about
// as many as its members, which the reconciler lists to name the tenant's campaigns.
const shardDigits = 3

func shardKey(tenant, campaign, contactID string) string {
	return campaignPrefix(tenant, campaign) + hash(contactID)[:shardDigits]
}

// oldShardKey is the key an earlier build gave contactID's shard: 256 a campaign.
func oldShardKey(tenant, campaign, contactID string) string {
	return campaignPrefix(tenant, campaign) + hash(contactID)[:2]
}

// oldShard reports whether key is an earlier build's shard (SplitShards).
func oldShard(key string) bool {
	i := strings.LastIndexByte(key, '.')
	return i >= 0 && len(key)-i-1 == 2
}

// SuppressionKey is the store key of a suppressed contact.
func SuppressionKey(tenant, contactID string) string { return tenant + "." + contactID }

// Stores are the three projections' stores.
type Stores struct {
	Contacts, Campaigns, Suppression Store
	held                             *held // a replay's decoded records; nil live
}

// identity is who an event is about: the contact id, account id and the contact key,
// and the contact ids merged into it (whose records are folded into its own).
type identity struct {
	contactID, accountID, key string
	merged                    []string
}

// Identities name contacts: the contact directory, or a replay's memo of it.
type Identities interface {
	Record(ctx context.Context, tenant string, s contacts.Seen) (contacts.Record, error)
}

// identify resolves env's contact to its internal ids through the contact directory,
// which links every key the event names (pkg/contacts), else, for a contact the
// directory cannot name (a chat user id, a payment customer), to an id derived from its
// contact key.
func identify(ctx context.Context, dir Identities, env envelope.Envelope) (identity, error) {
	seen, named := directorySeen(env, external(env))
	return identifySeen(ctx, dir, env, seen, named)
}

// identifySeen is identify with directorySeen(env) given.
func identifySeen(ctx context.Context, dir Identities, env envelope.Envelope, seen contacts.Seen, named bool) (identity, error) {
	key := env.ContactKey()
	id := identity{key: key}
	if dir != nil {
		if named {
			rec, err := dir.Record(ctx, env.Tenant, seen)
			if err != nil {
				return id, err
			}
			id.contactID, id.accountID, id.merged = rec.ContactID, rec.AccountID, rec.Merged
			return id, nil
		}
	}
	id.contactID = "ct_" + hash(env.Tenant+"\x00"+key)
	return id, nil
}

// directorySeen is what the directory can know env's contact by (ext: external(env)).
// Only an event whose sender is known links keys (signed, derived by a worker after its
// source confirmed it, or read from a platform's own API): an unsigned webhook names its
// contact by its first key alone, so a forgery naming one person's e-mail with another's
// phone or lead id cannot merge the two.
func directorySeen(env envelope.Envelope, ext []extID) (contacts.Seen, bool) {
	c := env.Data.Contact
	if c == nil {
		return contacts.Seen{}, false
	}
	s := contacts.Seen{Email: c.Email, Phone: c.Phone, External: make(map[string]string, len(ext))}
	for _, e := range ext {
		s.External[e.kind] = e.id
	}
	if !linksKeys(env) {
		s = s.First()
	}
	return s, len(s.Keys()) > 0
}

// linksKeys reports whether env may link its contact's keys to one another.
func linksKeys(env envelope.Envelope) bool {
	if env.Type == envelope.TypeEventUnconfirmed {
		return false // derived, but of what no one confirmed
	}
	return env.Signed || env.AuthMethod == envelope.AuthDerived || env.AuthMethod == envelope.AuthSourceAPI
}

// extID is one id an event names, with its contacts kind.
type extID struct{ kind, id string }

// external are the ids env names, one of each kind at most. A list, not a map: it is
// made once per event, named ahead of applying (named.ext).
func external(env envelope.Envelope) []extID {
	out := make([]extID, 0, 3)
	p := env.Provider
	if c := env.Data.Contact; c != nil && c.ExternalID != "" {
		if kind := contacts.ProviderKind(p); kind != "" {
			out = append(out, extID{kind, p + ":" + c.ExternalID})
		}
	}
	if c := env.Data.Campaign; c != nil && c.ID != "" {
		out = append(out, extID{contacts.CampaignID, p + ":" + c.ID})
	}
	if m := env.Data.Message; m != nil && m.ID != "" {
		out = append(out, extID{contacts.MessageID, m.ID})
	}
	return out
}

// merge adds env, naming ext (external(env)), to c; it reports whether c changed, as
// its JSON would show (compared field by field: encoding the record twice per event was
// most of a replay's time).
func merge(c *Contact, who identity, env envelope.Envelope, ext []extID, keys []lifecycle.Key) bool {
	changed := false
	set := func(field *string, v string) {
		changed = changed || *field != v
		*field = v
	}
	set(&c.Tenant, env.Tenant)
	if c.ContactID == "" {
		set(&c.ContactID, who.contactID)
	}
	if who.accountID != "" {
		set(&c.AccountID, who.accountID) // the contact's account as its keys now say
	}
	if who.key != "" && !slices.Contains(c.Keys, who.key) {
		c.Keys = append(c.Keys, who.key)
		slices.Sort(c.Keys)
		changed = true
	}
	for _, e := range ext {
		if c.External == nil {
			c.External = map[string][]string{}
		}
		if old := c.External[e.kind]; !slices.Contains(old, e.id) {
			l := append(slices.Clone(old), e.id)
			slices.Sort(l)
			l = l[:min(len(l), maxIDs)]
			changed = changed || !slices.Equal(l, old) // a new id above the bound changes nothing
			c.External[e.kind] = l
		}
	}
	for _, k := range keys {
		if k.Campaign == "" {
			next := lifecycle.Apply(c.Lifecycle, env)
			changed = changed || !sameState(c.Lifecycle, next)
			c.Lifecycle = next
			continue
		}
		if c.Campaigns == nil {
			c.Campaigns = map[string]lifecycle.State{}
		}
		cur, had := c.Campaigns[k.Campaign]
		next := lifecycle.Apply(cur, env)
		changed = changed || !had || !sameState(cur, next)
		c.Campaigns[k.Campaign] = next
	}
	return changed
}

// sameState reports whether a and b encode alike: facts are strings and normalised
// times (UTC, no monotonic reading), so equal facts are equal JSON; a nil list encodes
// as null, an empty one as [].
func sameState(a, b lifecycle.State) bool {
	return (a.Facts == nil) == (b.Facts == nil) && slices.Equal(a.Facts, b.Facts)
}

// Result is what one event did to its contact's projection.
type Result struct {
	Contact       Contact
	Rev           uint64
	Changed       bool
	Discrepancies []lifecycle.Discrepancy // revealed by this event
	Undecided     []lifecycle.Undecided   // revealed by this event
}

// Apply merges env into the projections, naming its contact through dir (nil: by
// derived ids). The ids env names are linked in dir, and the records of contacts that
// link merged are folded into the one they became (fold). An event the lifecycle does
// not follow changes nothing more; one that names no contact, nothing at all.
func Apply(ctx context.Context, s Stores, dir *contacts.Directory, env envelope.Envelope) (Result, error) {
	if dir == nil {
		return apply(ctx, s, nil, env)
	}
	return apply(ctx, s, dir, env)
}

func apply(ctx context.Context, s Stores, dir Identities, env envelope.Envelope) (Result, error) {
	return applyNamed(ctx, s, dir, env, name(ctx, dir, env))
}

// Needs reports whether the projections need env: whether it changes a contact's
// lifecycle, or links keys of a contact in the directory (an event that names one key
// only adds nothing a record needs: a contact's id derives from its keys). A replay
// without an event it does not need gives what a replay with it gives (the retention
// removes such events past its age, pkg/privacy).
func Needs(env envelope.Envelope) bool {
	if len(lifecycle.Keys(env)) > 0 || env.Type == envelope.TypeContactIdentified {
		return true
	}
	seen, named := directorySeen(env, external(env))
	return named && len(seen.Keys()) > 1
}

// named is who an event is about, as apply needs it: what the lifecycle follows of it,
// what the directory knows its contact by, and the contact that is (skip: nothing to
// apply). A replay names each event ahead of applying it, in order, beside the applying.
type named struct {
	keys  []lifecycle.Key
	ext   []extID // external(env)
	seen  contacts.Seen
	named bool
	who   identity
	skip  bool
	err   error
}

func name(ctx context.Context, dir Identities, env envelope.Envelope) named {
	n := named{keys: lifecycle.Keys(env), ext: external(env)}
	n.seen, n.named = directorySeen(env, n.ext)
	if len(n.keys) == 0 && (!n.named || dir == nil) {
		n.skip = true
		return n
	}
	n.who, n.err = identifySeen(ctx, dir, env, n.seen, n.named)
	return n
}

// applyNamed is apply of env, named by n.
func applyNamed(ctx context.Context, s Stores, dir Identities, env envelope.Envelope, n named) (Result, error) {
	if n.skip || n.err != nil {
		return Result{}, n.err
	}
	keys, seen, named, who := n.keys, n.seen, n.named, n.who
	if err := s.flushBefore(ctx, who); err != nil {
		return Result{}, err
	}
	if err := fold(ctx, s, env.Tenant, who); err != nil {
		return Result{}, err
	}
	if len(keys) == 0 && env.Type != envelope.TypeContactIdentified {
		return Result{}, nil // a link, and nothing the lifecycle follows
	}
	var res Result
	created := false
	var m map[string]heldRec[Contact]
	back := false
	if s.held != nil {
		m, back = s.held.contacts, s.held.back
	}
	key := ContactKey(env.Tenant, who.contactID)
	if _, held := m[key]; back && !held && len(m) >= maxHeld {
		// A record is about to leave to make room: none may leave behind its members.
		if err := s.held.catchUp(ctx, s); err != nil {
			return Result{}, err
		}
	}
	c, rev, err := updateRecord(ctx, s.Contacts, m, back, "contact record", key, func(c *Contact, found bool) (bool, error) {
		created = !found
		if s.held != nil { // a replay keeps no Result: the views cost more than the merge
			var was map[string]Member
			if !back || len(c.Views) > 0 {
				// Counted as live counts, but in a replay's write-back into memory of its
				// own: its members are derived once, from the last record (catchUp).
				was = memberViews(*c)
			}
			res.Changed = merge(c, who, env, n.ext, keys)
			if res.Changed && was != nil {
				countViews(c, was)
			}
			return res.Changed, nil
		}
		before, was := views(*c, keys), memberViews(*c)
		res.Changed = merge(c, who, env, n.ext, keys)
		if res.Changed {
			countViews(c, was)
		}
		after := views(*c, keys)
		res.Discrepancies, res.Undecided = nil, nil
		for i := range before {
			res.Discrepancies = append(res.Discrepancies, lifecycle.NewDiscrepancies(before[i], after[i])...)
			res.Undecided = append(res.Undecided, lifecycle.NewUndecided(before[i], after[i])...)
		}
		return res.Changed, nil
	})
	if err != nil {
		return Result{}, err
	}
	res.Contact, res.Rev = c, rev
	if back && rev != 0 {
		if !s.held.noMembers {
			s.held.behind[key] = struct{}{} // its members are derived once, later (catchUp)
		}
		if !s.held.noSuppression {
			err = deriveSuppression(ctx, s, c, rev)
		}
	} else {
		err = derive(ctx, s, c, rev)
	}
	if err != nil {
		return res, err
	}
	if created && named && dir != nil {
		// Another projector may have merged this contact into another and folded its
		// record away between identify and this write, which then made the record
		// anew: ask again, and fold it where it now belongs.
		rec, err := dir.Record(ctx, env.Tenant, seen)
		if err != nil {
			return res, err
		}
		if rec.ContactID != who.contactID {
			again := identity{contactID: rec.ContactID, accountID: rec.AccountID, merged: []string{who.contactID}}
			if err := s.flushBefore(ctx, again); err != nil {
				return res, err
			}
			err = fold(ctx, s, env.Tenant, again)
		}
		return res, err
	}
	return res, nil
}

// flushBefore stores and forgets what a replay holds before a fold of who's merged
// contacts, which reads and writes the stores themselves (merges are rare).
func (s Stores) flushBefore(ctx context.Context, who identity) error {
	if s.held == nil || len(who.merged) == 0 {
		return nil
	}
	return s.held.flush(ctx, s)
}

// views are the lifecycle views keys touch in c.
func views(c Contact, keys []lifecycle.Key) []lifecycle.View {
	out := make([]lifecycle.View, len(keys))
	for i, k := range keys {
		if k.Campaign == "" {
			out[i] = c.View()
		} else {
			out[i] = c.InCampaign(k.Campaign)
		}
	}
	return out
}

// derive brings c's campaign memberships and suppression entry up to revision rev (in
// a replay read for one projection, the one it reads).
func derive(ctx context.Context, s Stores, c Contact, rev uint64) error {
	if s.held == nil || !s.held.noMembers {
		if err := deriveMembers(ctx, s, c, rev); err != nil {
			return err
		}
	}
	if s.held == nil || !s.held.noSuppression {
		return deriveSuppression(ctx, s, c, rev)
	}
	return nil
}

// deriveMembers brings c's member entries in its campaigns up to revision rev.
func deriveMembers(ctx context.Context, s Stores, c Contact, rev uint64) error {
	var m map[string]heldRec[Shard]
	back := false
	if s.held != nil {
		m, back = s.held.shards, s.held.back
	}
	for _, campaign := range slices.Sorted(maps.Keys(c.Campaigns)) {
		_, _, err := updateRecord(ctx, s.Campaigns, m, back, "campaign shard", shardKey(c.Tenant, campaign, c.ContactID), func(sh *Shard, found bool) (bool, error) {
			if !found {
				sh.Tenant, sh.Campaign = c.Tenant, campaign
			}
			m := memberOf(c, campaign, rev)
			if cur, ok := sh.Members[c.ContactID]; ok && !m.replaces(cur) {
				return false, nil // the same view, or one of a newer record already
			}
			if sh.Members == nil {
				sh.Members = map[string]Member{}
			}
			sh.Members[c.ContactID] = m
			return true, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// deriveSuppression brings c's suppression entry up to revision rev: a suppression,
// once made, is never lifted by later events.
func deriveSuppression(ctx context.Context, s Stores, c Contact, rev uint64) error {
	want, terminal := suppressedOf(c, rev)
	if !terminal {
		return nil // a suppression is never lifted by later events
	}
	_, _, err := update(ctx, s.Suppression, SuppressionKey(c.Tenant, c.ContactID), func(old []byte, _ uint64) ([]byte, bool, error) {
		if old != nil {
			var cur Suppressed
			if err := json.Unmarshal(old, &cur); err != nil {
				return nil, false, fmt.Errorf("suppression entry: %w", err)
			}
			if cur.Rev >= rev {
				return old, false, nil
			}
		}
		b, err := encode(want)
		return b, true, err
	})
	return err
}

// suppressedOf is c's suppression entry at revision rev, if its contact-level
// lifecycle is terminal.
func suppressedOf(c Contact, rev uint64) (Suppressed, bool) {
	v := c.View()
	return Suppressed{Tenant: c.Tenant, ContactID: c.ContactID, Keys: c.Keys, Status: v.Status, Event: v.StatusEvent,
		Since: v.Since.UTC().Format("2006-01-02T15:04:05.999999999Z07:00"), Rev: rev}, lifecycle.Terminal(v.Status)
}

// Rederive rebuilds s's campaign and suppression entries from its contact records,
// in memory: a replay resumed from what it wrote gets derived entries whose revisions
// match its own store again.
func Rederive(ctx context.Context, s Stores) (Stores, error) {
	out := Stores{Contacts: s.Contacts, Campaigns: NewMemory(), Suppression: NewMemory()}
	keys, err := s.Contacts.Keys(ctx, "")
	if err != nil {
		return out, err
	}
	for _, k := range keys {
		data, rev, err := s.Contacts.Get(ctx, k)
		if err != nil {
			return out, err
		}
		var c Contact
		if err := json.Unmarshal(data, &c); err != nil {
			return out, fmt.Errorf("contact record %s: %w", k, err)
		}
		if err := derive(ctx, out, c, rev); err != nil {
			return out, err
		}
	}
	return out, nil
}

// Repair recomputes, from the contact records, every campaign member and suppression
// entry computed from a contact record revision above above. After a power cut took
// the last writes of the contacts bucket (persisted asynchronously), its revisions
// start again lower: an entry computed from a record that is gone would otherwise stay,
// since derive keeps an entry of a higher revision. It reports how many it rewrote.
func Repair(ctx context.Context, s Stores, above uint64) (int, error) {
	record := func(tenant, id string) (Contact, uint64, bool, error) {
		data, rev, err := s.Contacts.Get(ctx, ContactKey(tenant, id))
		if err != nil || rev == 0 {
			return Contact{}, 0, false, err
		}
		var c Contact
		return c, rev, true, json.Unmarshal(data, &c)
	}
	n := 0
	keys, err := s.Campaigns.Keys(ctx, "")
	if err != nil {
		return n, err
	}
	for _, k := range keys {
		rewrote := 0
		_, _, err := update(ctx, s.Campaigns, k, func(old []byte, _ uint64) ([]byte, bool, error) {
			rewrote = 0
			var sh Shard
			if old == nil {
				return old, false, nil
			}
			if err := json.Unmarshal(old, &sh); err != nil {
				return nil, false, fmt.Errorf("campaign shard %s: %w", k, err)
			}
			for id, m := range sh.Members {
				if m.Rev <= above {
					continue
				}
				c, rev, ok, err := record(sh.Tenant, id)
				if err != nil {
					return nil, false, err
				}
				if ok {
					sh.Members[id] = memberOf(c, sh.Campaign, rev)
				} else {
					delete(sh.Members, id)
				}
				rewrote++
			}
			if rewrote == 0 {
				return old, false, nil
			}
			b, err := encode(sh)
			return b, true, err
		})
		if err != nil {
			return n, err
		}
		n += rewrote
	}
	keys, err = s.Suppression.Keys(ctx, "")
	if err != nil {
		return n, err
	}
	for _, k := range keys {
		data, srev, err := s.Suppression.Get(ctx, k)
		if err != nil || srev == 0 {
			return n, err
		}
		var cur Suppressed
		if err := json.Unmarshal(data, &cur); err != nil {
			return n, fmt.Errorf("suppression entry %s: %w", k, err)
		}
		if cur.Rev <= above {
			continue
		}
		c, rev, ok, err := record(cur.Tenant, cur.ContactID)
		if err != nil {
			return n, err
		}
		if want, terminal := suppressedOf(c, rev); ok && terminal {
			b, err := encode(want)
			if err != nil {
				return n, err
			}
			_, err = s.Suppression.Put(ctx, k, b, srev)
			if err != nil {
				return n, err
			}
		} else if err := s.Suppression.Delete(ctx, k, srev); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// SplitShards moves the members of every campaign shard an earlier build wrote (256 a
// campaign) into the shards of this one, and deletes the old shard once its members
// are in theirs. A member goes only where it replaces what is there (a projector of
// this build may have written a newer one), so any number of projectors may split at
// once, and one cut off halfway splits again at its next start; an earlier build's
// projector still running may write old shards again, which readers count each
// member of once (Reader.Campaign) and the next start moves. It reports how many old
// shards it moved, and the keys of those it could not read, which it leaves as they
// are (their members come back as their contacts' next events derive them).
func SplitShards(ctx context.Context, s Stores) (moved int, unreadable []string, err error) {
	keys, err := s.Campaigns.Keys(ctx, "")
	if err != nil {
		return 0, nil, err
	}
	for _, k := range keys {
		if !oldShard(k) {
			continue
		}
		for {
			old, rev, err := s.Campaigns.Get(ctx, k)
			if err != nil {
				return moved, unreadable, err
			}
			if rev == 0 {
				break // another projector moved it
			}
			var sh Shard
			if err := json.Unmarshal(old, &sh); err != nil {
				unreadable = append(unreadable, k)
				break
			}
			// One update of each shard its members go to (16 at most).
			to := map[string][]string{}
			for id := range sh.Members {
				key := shardKey(sh.Tenant, sh.Campaign, id)
				to[key] = append(to[key], id)
			}
			for _, key := range slices.Sorted(maps.Keys(to)) {
				_, _, err := updateRecord(ctx, s.Campaigns, nil, false, "campaign shard", key, func(dst *Shard, found bool) (bool, error) {
					if !found {
						dst.Tenant, dst.Campaign = sh.Tenant, sh.Campaign
					}
					changed := false
					for _, id := range to[key] {
						m := sh.Members[id]
						if cur, ok := dst.Members[id]; ok && !m.replaces(cur) {
							continue
						}
						if dst.Members == nil {
							dst.Members = map[string]Member{}
						}
						dst.Members[id], changed = m, true
					}
					return changed, nil
				})
				if err != nil {
					return moved, unreadable, err
				}
			}
			if err := s.Campaigns.Delete(ctx, k, rev); err == nil {
				moved++
				break
			} else if !errors.Is(err, ErrConflict) {
				return moved, unreadable, err
			} // an earlier build's projector wrote it meanwhile: move it again
		}
	}
	return moved, unreadable, nil
}
