package projection

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/lifecycle"
)

// asEarlierBuild rewrites s's campaign shards as a build of 256 shards a campaign
// wrote them, and returns how many it wrote.
func asEarlierBuild(t *testing.T, s Stores) int {
	t.Helper()
	ctx := context.Background()
	keys, err := s.Campaigns.Keys(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	old := map[string]*Shard{}
	for _, k := range keys {
		data, rev, err := s.Campaigns.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		var sh Shard
		if err := json.Unmarshal(data, &sh); err != nil {
			t.Fatal(err)
		}
		for id, m := range sh.Members {
			ok := oldShardKey(sh.Tenant, sh.Campaign, id)
			if old[ok] == nil {
				old[ok] = &Shard{Tenant: sh.Tenant, Campaign: sh.Campaign, Members: map[string]Member{}}
			}
			old[ok].Members[id] = m
		}
		if err := s.Campaigns.Delete(ctx, k, rev); err != nil {
			t.Fatal(err)
		}
	}
	for k, sh := range old {
		b, _ := json.Marshal(sh)
		if _, err := s.Campaigns.Put(ctx, k, b, 0); err != nil {
			t.Fatal(err)
		}
	}
	return len(old)
}

// oldShards are the keys of s's campaign shards as an earlier build named them.
func oldShards(t *testing.T, s Stores) []string {
	t.Helper()
	keys, err := s.Campaigns.Keys(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range keys {
		if oldShard(k) {
			out = append(out, k)
		}
	}
	return out
}

// A campaigns projection an earlier build wrote (256 shards a campaign) becomes the
// one this build writes (4,096): every member moved once, a newer member this build
// wrote meanwhile kept over the old shard's, the old shards gone, the counts as they
// were. While both layouts hold a member (before the split, or an earlier build's
// projector writing after it) it is counted once, at its newest view; a contact folded
// into another leaves the old shard too. An unreadable old shard is named and left
// where it is, the others moved, and the campaign is counted without it.
func TestSplitShardsMovesAnEarlierBuildsShards(t *testing.T) {
	ctx := context.Background()
	live, _ := openLive(t)
	for name, s := range map[string]Stores{"kv": live, "memory": Memories()} {
		t.Run(name, func(t *testing.T) {
			later := event(20, envelope.TypeReplyReceived, "lead0@northwind.example", "camp-1", 3*time.Hour)
			want := Memories()
			for _, env := range append(history(), later) {
				if _, err := apply(ctx, want, nil, env); err != nil {
					t.Fatal(err)
				}
				if env.ID == later.ID {
					continue
				}
				if _, err := apply(ctx, s, nil, env); err != nil {
					t.Fatal(err)
				}
			}
			counts := func(s Stores, campaign string) lifecycle.Counts {
				t.Helper()
				c, err := Reader{Stores: s}.Campaign(ctx, "acme", campaign)
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			before := counts(s, "camp-1")
			n := asEarlierBuild(t, s)
			if n == 0 || len(oldShards(t, s)) != n {
				t.Fatalf("%d old shards written, %d found", n, len(oldShards(t, s)))
			}
			if got := counts(s, "camp-1"); !sameCounts(got, before) {
				t.Fatalf("the earlier build's shards count %+v, want %+v", got, before)
			}
			// This build's projector takes lead0's reply before the split: its member
			// goes into the new shard, the old shard still holds the member before it.
			if _, err := apply(ctx, s, nil, later); err != nil {
				t.Fatal(err)
			}
			if got, w := counts(s, "camp-1"), counts(want, "camp-1"); !sameCounts(got, w) || sameCounts(got, before) {
				t.Fatalf("both layouts count %+v, want %+v (each member once, at its newest view)", got, w)
			}

			moved, unreadable, err := SplitShards(ctx, s)
			if err != nil || moved != n || len(unreadable) != 0 {
				t.Fatalf("split moved %d (unreadable %v, %v), want %d", moved, unreadable, err, n)
			}
			if left := oldShards(t, s); len(left) != 0 {
				t.Fatalf("old shards left: %v", left)
			}
			if err := sameProjections(ctx, want, s); err != nil {
				t.Fatalf("after the split: %v", err)
			}
			for _, campaign := range []string{"camp-1", "camp-2"} {
				if got, w := counts(s, campaign), counts(want, campaign); !sameCounts(got, w) {
					t.Fatalf("%s counts %+v, want %+v", campaign, got, w)
				}
			}
			if moved, _, err := SplitShards(ctx, s); err != nil || moved != 0 {
				t.Fatalf("a second split moved %d (%v)", moved, err)
			}

			// An earlier build's projector, still running, writes lead0's member as it
			// was before the reply, and lead3's, into their old shards.
			rec := func(email string) (string, Member) {
				who, err := identify(ctx, nil, event(0, envelope.TypeEmailSent, email, "camp-1", 0))
				if err != nil {
					t.Fatal(err)
				}
				sh := storedShard(t, s.Campaigns, shardKey("acme", "camp-1", who.contactID))
				return who.contactID, sh.Members[who.contactID]
			}
			lead0, m0 := rec("lead0@northwind.example")
			lead3, m3 := rec("lead3@northwind.example")
			stale := m0
			stale.Rev, stale.Status, stale.Replied = 1, "sent", false
			for id, m := range map[string]Member{lead0: stale, lead3: m3} {
				b, _ := json.Marshal(Shard{Tenant: "acme", Campaign: "camp-1", Members: map[string]Member{id: m}})
				if _, err := s.Campaigns.Put(ctx, oldShardKey("acme", "camp-1", id), b, 0); err != nil {
					t.Fatal(err)
				}
			}
			if got, w := counts(s, "camp-1"), counts(want, "camp-1"); !sameCounts(got, w) {
				t.Fatalf("with an earlier build's writes after the split: %+v, want %+v", got, w)
			}
			// lead3 folded into lead0 (as a merge of the two contacts would): it leaves
			// both its shards, and a split after it does not bring it back.
			if err := foldOne(ctx, s, "acme", identity{contactID: lead0}, lead3); err != nil {
				t.Fatal(err)
			}
			if _, _, err := SplitShards(ctx, s); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{shardKey("acme", "camp-1", lead3), oldShardKey("acme", "camp-1", lead3)} {
				if data, rev, _ := s.Campaigns.Get(ctx, k); rev != 0 && strings.Contains(string(data), lead3) {
					t.Fatalf("the folded contact is still a member in %s: %s", k, data)
				}
			}
			if sh := storedShard(t, s.Campaigns, shardKey("acme", "camp-1", lead0)); sh.Members[lead0] != m0 {
				t.Fatalf("lead0's member after the split %+v, want %+v (the newer one)", sh.Members[lead0], m0)
			}

			folded := counts(s, "camp-1")
			bad := campaignPrefix("acme", "camp-1") + "0f"
			if _, err := s.Campaigns.Put(ctx, bad, []byte("{not json"), 0); err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(Shard{Tenant: "acme", Campaign: "camp-1", Members: map[string]Member{lead0: stale}})
			if _, err := s.Campaigns.Put(ctx, oldShardKey("acme", "camp-1", lead0), b, 0); err != nil {
				t.Fatal(err)
			}
			moved, unreadable, err = SplitShards(ctx, s)
			if err != nil || moved != 1 || len(unreadable) != 1 || unreadable[0] != bad {
				t.Fatalf("split beside an unreadable old shard: moved %d, unreadable %v (%v); want 1 and [%s]", moved, unreadable, err, bad)
			}
			if data, rev, _ := s.Campaigns.Get(ctx, bad); rev == 0 || string(data) != "{not json" {
				t.Fatalf("the unreadable old shard changed: %q at %d", data, rev)
			}
			if got := counts(s, "camp-1"); !sameCounts(got, folded) {
				t.Fatalf("beside an unreadable old shard: %+v, want %+v", got, folded)
			}
		})
	}
}

func sameCounts(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
