package projection

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/kvstore"
	"exacto.dev/pkg/lifecycle"
)

// Reader is the one read API of the projections, for the services and the CLI.
type Reader struct {
	Stores
	Dir *contacts.Directory // finds a contact by e-mail; nil: by derived id only
}

// Contact returns the record of tenant's contact id, with every external id: those the
// stream named, and those the workers recorded in the contact directory (the CRM's
// contact and activities, which are not events).
func (r Reader) Contact(ctx context.Context, tenant, contactID string) (Contact, bool, error) {
	data, rev, err := r.Contacts.Get(ctx, ContactKey(tenant, contactID))
	if err != nil || rev == 0 {
		return Contact{}, false, err
	}
	c, err := r.decodeContact(ctx, data)
	return c, true, err
}

// EachContact calls fn with every contact record of tenant, as Contact returns it, in
// no order to rely on: one streamed read of the bucket (kvstore.Scan), for a reader of
// them all.
func (r Reader) EachContact(ctx context.Context, tenant string, fn func(Contact) error) error {
	return kvstore.Scan(ctx, r.Contacts, tenant+".", func(key string, data []byte, _ uint64) error {
		c, err := r.decodeContact(ctx, data)
		if err != nil {
			return fmt.Errorf("contact %s: %w", key, err)
		}
		return fn(c)
	})
}

func (r Reader) decodeContact(ctx context.Context, data []byte) (Contact, error) {
	var c Contact
	if err := json.Unmarshal(data, &c); err != nil {
		return c, err
	}
	return c, r.addRecorded(ctx, &c)
}

// addRecorded adds the directory's ids of c to its external ids.
func (r Reader) addRecorded(ctx context.Context, c *Contact) error {
	if r.Dir == nil {
		return nil
	}
	for _, k := range c.Keys {
		kind, value, _ := strings.Cut(k, ":")
		if kind != "email" && kind != "phone" {
			continue
		}
		rec, ok, err := r.Dir.Find(ctx, c.Tenant, kind, value)
		if err != nil || !ok {
			return err
		}
		for kind, ids := range rec.External {
			if c.External == nil {
				c.External = map[string][]string{}
			}
			for _, id := range ids {
				if !slices.Contains(c.External[kind], id) {
					c.External[kind] = append(c.External[kind], id)
				}
			}
			slices.Sort(c.External[kind])
		}
		return nil
	}
	return nil
}

// ContactByEmail returns the record of tenant's contact with email.
func (r Reader) ContactByEmail(ctx context.Context, tenant, email string) (Contact, bool, error) {
	return r.ContactByKey(ctx, tenant, "email", email)
}

// ContactByKey returns the record of tenant's contact with identity key kind:value —
// "email", "phone", or an identifying external kind (contacts.CRMContactID with
// "hubspot:<id>", …) — whatever key it was first met by.
func (r Reader) ContactByKey(ctx context.Context, tenant, kind, value string) (Contact, bool, error) {
	if r.Dir != nil {
		rec, ok, err := r.Dir.Find(ctx, tenant, kind, value)
		if err != nil || ok {
			if err != nil {
				return Contact{}, false, err
			}
			return r.Contact(ctx, tenant, rec.ContactID)
		}
	}
	var c *envelope.Contact
	switch kind {
	case "email":
		c = &envelope.Contact{Email: value}
	case "phone":
		c = &envelope.Contact{Phone: value}
	case "anonymous": // a forgotten person (pkg/privacy)
		c = &envelope.Contact{Anonymous: value}
	default:
		return Contact{}, false, nil
	}
	who, err := identify(ctx, nil, envelope.Envelope{Tenant: tenant, Data: envelope.Data{Contact: c}})
	if err != nil {
		return Contact{}, false, err
	}
	return r.Contact(ctx, tenant, who.contactID)
}

// Campaign counts tenant's campaign: its contacts by effective status, replies,
// bounces, unsubscribes, meetings and opportunities.
func (r Reader) Campaign(ctx context.Context, tenant, campaign string) (lifecycle.Counts, error) {
	var counts lifecycle.Counts
	prefix := campaignPrefix(tenant, campaign)
	// One streamed read of the campaign's shards (up to 4,096), not a Get each.
	err := kvstore.Scan(ctx, r.Campaigns, prefix, func(k string, data []byte, _ uint64) error {
		if oldShard(k) {
			return errOldShard
		}
		sh, err := decodeShard(k, data)
		for _, m := range sh.Members {
			countMember(&counts, m)
		}
		return err
	})
	if !errors.Is(err, errOldShard) {
		return counts, err
	}
	// An earlier build's shards beside this one's: written by its projectors while
	// they still run, moved by SplitShards at a projector's start. A member may be in
	// both: each is counted once, at its newest revision. An old shard that cannot be
	// read is left out (SplitShards leaves it, and logs it).
	members := map[string]Member{}
	err = kvstore.Scan(ctx, r.Campaigns, prefix, func(k string, data []byte, _ uint64) error {
		sh, err := decodeShard(k, data)
		if err != nil && oldShard(k) {
			return nil
		}
		for id, m := range sh.Members {
			if cur, ok := members[id]; !ok || m.Rev > cur.Rev {
				members[id] = m
			}
		}
		return err
	})
	counts = lifecycle.Counts{}
	for _, m := range members {
		countMember(&counts, m)
	}
	return counts, err
}

var errOldShard = errors.New("an earlier build's campaign shard")

func decodeShard(key string, data []byte) (Shard, error) {
	var sh Shard
	if err := json.Unmarshal(data, &sh); err != nil {
		return Shard{}, fmt.Errorf("campaign shard %s: %w", key, err)
	}
	return sh, nil
}

func countMember(counts *lifecycle.Counts, m Member) {
	counts.Add(lifecycle.View{Status: m.Status, Replied: m.Replied, Bounced: m.Bounced, Unsubscribed: m.Unsubscribed,
		MeetingBooked: m.MeetingBooked, Opportunity: m.Opportunity,
		Discrepancies: make([]lifecycle.Discrepancy, m.Discrepancies), Undecided: make([]lifecycle.Undecided, m.Undecided)})
}

// Suppressed returns tenant's contact's suppression entry, if it has one.
func (r Reader) Suppressed(ctx context.Context, tenant, contactID string) (Suppressed, bool, error) {
	data, rev, err := r.Suppression.Get(ctx, SuppressionKey(tenant, contactID))
	if err != nil || rev == 0 {
		return Suppressed{}, false, err
	}
	var s Suppressed
	return s, true, json.Unmarshal(data, &s)
}

// Difference is how one projection differs between two stores.
type Difference struct {
	Projection string   `json:"projection"`
	KeysA      int      `json:"keys_a"`
	KeysB      int      `json:"keys_b"`
	OnlyA      int      `json:"only_a"`
	OnlyB      int      `json:"only_b"`
	Differ     int      `json:"differ"`
	First      []string `json:"first_differing_keys,omitempty"` // up to 10
}

// Equal reports whether the two stores hold the same projection.
func (d Difference) Equal() bool { return d.OnlyA == 0 && d.OnlyB == 0 && d.Differ == 0 }

// Diff compares projection name in stores a and b by meaning: the revisions each store
// assigned (which differ between a live projection and a rebuild) are left out.
func Diff(ctx context.Context, name string, a, b Store) (Difference, error) {
	d := Difference{Projection: name}
	ka, err := a.Keys(ctx, "")
	if err != nil {
		return d, err
	}
	kb, err := b.Keys(ctx, "")
	if err != nil {
		return d, err
	}
	d.KeysA, d.KeysB = len(ka), len(kb)
	note := func(k string) {
		if len(d.First) < 10 {
			d.First = append(d.First, k)
		}
	}
	for _, k := range ka {
		if _, found := slices.BinarySearch(kb, k); !found {
			d.OnlyA++
			note(k)
			continue
		}
		va, _, err := a.Get(ctx, k)
		if err != nil {
			return d, err
		}
		vb, _, err := b.Get(ctx, k)
		if err != nil {
			return d, err
		}
		same, err := equal(name, va, vb)
		if err != nil {
			return d, fmt.Errorf("%s %s: %w", name, k, err)
		}
		if !same {
			d.Differ++
			note(k)
		}
	}
	for _, k := range kb {
		if _, found := slices.BinarySearch(ka, k); !found {
			d.OnlyB++
			note(k)
		}
	}
	return d, nil
}

// equal compares two values of projection name by meaning.
func equal(name string, a, b []byte) (bool, error) {
	switch name {
	case Contacts:
		var x, y Contact
		if err := errors.Join(json.Unmarshal(a, &x), json.Unmarshal(b, &y)); err != nil {
			return false, err
		}
		x.Views, y.Views = nil, nil // how often live saw a view change, not what it is
		xa, _ := json.Marshal(x)
		yb, _ := json.Marshal(y)
		return string(xa) == string(yb), nil
	case Campaigns:
		var x, y Shard
		if err := errors.Join(json.Unmarshal(a, &x), json.Unmarshal(b, &y)); err != nil {
			return false, err
		}
		if x.Tenant != y.Tenant || x.Campaign != y.Campaign || len(x.Members) != len(y.Members) {
			return false, nil
		}
		for id, m := range x.Members {
			if o, ok := y.Members[id]; !ok || !m.same(o) {
				return false, nil
			}
		}
		return true, nil
	case Suppression:
		var x, y Suppressed
		if err := errors.Join(json.Unmarshal(a, &x), json.Unmarshal(b, &y)); err != nil {
			return false, err
		}
		x.Rev, y.Rev = 0, 0
		xa, _ := json.Marshal(x)
		yb, _ := json.Marshal(y)
		return string(xa) == string(yb), nil
	}
	return false, fmt.Errorf("no projection %q", name)
}

// Of returns the store of projection name.
func (s Stores) Of(name string) (Store, error) {
	switch name {
	case Contacts:
		return s.Contacts, nil
	case Campaigns:
		return s.Campaigns, nil
	case Suppression:
		return s.Suppression, nil
	}
	return nil, fmt.Errorf("no projection %q (known: contacts, campaigns, suppression)", name)
}
