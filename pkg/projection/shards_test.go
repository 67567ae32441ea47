package projection

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/envelope"
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
			ok := campaignPrefix(sh.Tenant, sh.Campaign) + hash(id)[:2]
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
		if len(k)-strings.LastIndexByte(k, '.')-1 == 2 {
			out = append(out, k)
		}
	}
	return out
}

// A campaigns projection an earlier build wrote (256 shards a campaign) becomes the
// one this build writes (4,096): every member moved once, a newer member this build
// wrote meanwhile kept over the old shard's, the old shards gone, the counts as they
// were; a second split finds nothing to move. An unreadable old shard is named in the
// error and left where it is.
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
			before, err := Reader{Stores: s}.Campaign(ctx, "acme", "camp-1")
			if err != nil {
				t.Fatal(err)
			}
			n := asEarlierBuild(t, s)
			if n == 0 || len(oldShards(t, s)) != n {
				t.Fatalf("%d old shards written, %d found", n, len(oldShards(t, s)))
			}
			if got, err := (Reader{Stores: s}).Campaign(ctx, "acme", "camp-1"); err != nil || !sameCounts(got, before) {
				t.Fatalf("the earlier build's shards count %+v (%v), want %+v", got, err, before)
			}
			// This build's projector takes lead0's reply before the split: its member
			// goes into the new shard, the old shard still holds the member before it.
			if _, err := apply(ctx, s, nil, later); err != nil {
				t.Fatal(err)
			}

			moved, err := SplitShards(ctx, s)
			if err != nil || moved != n {
				t.Fatalf("split moved %d (%v), want %d", moved, err, n)
			}
			if left := oldShards(t, s); len(left) != 0 {
				t.Fatalf("old shards left: %v", left)
			}
			if err := sameProjections(ctx, want, s); err != nil {
				t.Fatalf("after the split: %v", err)
			}
			for _, campaign := range []string{"camp-1", "camp-2"} {
				w, _ := Reader{Stores: want}.Campaign(ctx, "acme", campaign)
				if got, err := (Reader{Stores: s}).Campaign(ctx, "acme", campaign); err != nil || !sameCounts(got, w) {
					t.Fatalf("%s counts %+v (%v), want %+v", campaign, got, err, w)
				}
			}
			if moved, err := SplitShards(ctx, s); err != nil || moved != 0 {
				t.Fatalf("a second split moved %d (%v)", moved, err)
			}

			bad := campaignPrefix("acme", "camp-3") + "0f"
			if _, err := s.Campaigns.Put(ctx, bad, []byte("{not json"), 0); err != nil {
				t.Fatal(err)
			}
			if _, err := SplitShards(ctx, s); err == nil || !strings.Contains(err.Error(), bad) {
				t.Fatalf("an unreadable old shard: %v, want an error naming %s", err, bad)
			}
			if data, rev, _ := s.Campaigns.Get(ctx, bad); rev == 0 || string(data) != "{not json" {
				t.Fatalf("the unreadable old shard changed: %q at %d", data, rev)
			}
		})
	}
}

func sameCounts(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
