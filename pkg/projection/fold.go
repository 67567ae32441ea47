package projection

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"exacto.dev/pkg/lifecycle"
)

// fold moves the records of the contacts merged into who's contact (pkg/contacts) into
// its record: facts joined (the lifecycle is a semilattice, so folding is order-free and
// idempotent), keys and ids united; then the merged contact's record, campaign members
// and suppression entry are removed. A merged contact with no record left is skipped,
// so a fold that died half-way is finished by the next event of the contact.
func fold(ctx context.Context, s Stores, tenant string, who identity) error {
	for _, loser := range who.merged {
		if loser == who.contactID {
			continue
		}
		for range 50 {
			err := foldOne(ctx, s, tenant, who, loser)
			if !errors.Is(err, ErrConflict) {
				if err != nil {
					return fmt.Errorf("fold %s into %s: %w", loser, who.contactID, err)
				}
				break
			}
		}
	}
	return nil
}

// foldOne folds loser's record into who's, or answers ErrConflict when loser's record
// changed meanwhile (a projector that had not yet seen the merge): fold again.
func foldOne(ctx context.Context, s Stores, tenant string, who identity, loser string) error {
	key := ContactKey(tenant, loser)
	data, rev, err := s.Contacts.Get(ctx, key)
	if err != nil || rev == 0 {
		return err
	}
	var lc Contact
	if err := json.Unmarshal(data, &lc); err != nil {
		return fmt.Errorf("contact record: %w", err)
	}
	_, wrev, err := update(ctx, s.Contacts, ContactKey(tenant, who.contactID), func(old []byte, _ uint64) ([]byte, bool, error) {
		var c Contact
		if old != nil {
			if err := json.Unmarshal(old, &c); err != nil {
				return nil, false, fmt.Errorf("contact record: %w", err)
			}
		}
		before, _ := encode(c)
		c.Tenant, c.ContactID = tenant, who.contactID
		if who.accountID != "" {
			c.AccountID = who.accountID
		}
		was := memberViews(c)
		joinContact(&c, lc)
		countViews(&c, was)
		after, _ := encode(c)
		return after, string(before) != string(after), nil
	})
	if err != nil {
		return err
	}
	// The merged contact's derived entries go; the winner's are brought up to its
	// record. Removing a member or an entry twice is harmless. The member goes from an
	// earlier build's shard too, where it may still be (SplitShards would put it back),
	// unless that shard is unreadable (SplitShards names it).
	var shards []string
	for _, campaign := range slices.Sorted(maps.Keys(lc.Campaigns)) {
		shards = append(shards, shardKey(tenant, campaign, loser), oldShardKey(tenant, campaign, loser))
	}
	for _, shard := range shards {
		_, _, err := update(ctx, s.Campaigns, shard, func(old []byte, _ uint64) ([]byte, bool, error) {
			if old == nil {
				return nil, false, nil
			}
			var sh Shard
			if err := json.Unmarshal(old, &sh); err != nil {
				if oldShard(shard) {
					return old, false, nil
				}
				return nil, false, fmt.Errorf("campaign shard: %w", err)
			}
			if _, ok := sh.Members[loser]; !ok {
				return old, false, nil
			}
			delete(sh.Members, loser)
			b, err := encode(sh)
			return b, true, err
		})
		if err != nil {
			return err
		}
	}
	if _, srev, err := s.Suppression.Get(ctx, SuppressionKey(tenant, loser)); err != nil {
		return err
	} else if srev != 0 {
		if err := s.Suppression.Delete(ctx, SuppressionKey(tenant, loser), srev); err != nil && !errors.Is(err, ErrConflict) {
			return err
		}
	}
	if err := s.Contacts.Delete(ctx, key, rev); err != nil {
		return err // ErrConflict: the loser's record grew meanwhile; fold it again
	}
	data, _, err = s.Contacts.Get(ctx, ContactKey(tenant, who.contactID))
	if err != nil {
		return err
	}
	var c Contact
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("contact record: %w", err)
	}
	return derive(ctx, s, c, wrev)
}

// joinContact adds what from holds to c: its keys and ids, and its facts.
func joinContact(c *Contact, from Contact) {
	for _, k := range from.Keys {
		if !slices.Contains(c.Keys, k) {
			c.Keys = append(c.Keys, k)
		}
	}
	slices.Sort(c.Keys)
	for kind, ids := range from.External {
		if c.External == nil {
			c.External = map[string][]string{}
		}
		l := slices.Clone(c.External[kind])
		for _, id := range ids {
			if !slices.Contains(l, id) {
				l = append(l, id)
			}
		}
		slices.Sort(l)
		c.External[kind] = l[:min(len(l), maxIDs)]
	}
	c.Lifecycle = lifecycle.Merge(c.Lifecycle, from.Lifecycle)
	for campaign, st := range from.Campaigns {
		if c.Campaigns == nil {
			c.Campaigns = map[string]lifecycle.State{}
		}
		c.Campaigns[campaign] = lifecycle.Merge(c.Campaigns[campaign], st)
	}
}
