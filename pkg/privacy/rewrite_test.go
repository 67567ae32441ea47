package privacy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker/brokertest"
)

// An erasure writes a bucket anew; in one whose entries expire (the confirmations: a
// day) each entry keeps what was left of its age, so that erasures a day apart do not
// keep every entry for ever. A bucket of 8 s here: an entry written 4 s before the
// rewrite is gone 3 to 4 s after it (its TTL in whole seconds), not 8; one the rewrite
// changed keeps its age too; one written just before it lasts about 7 s more.
func TestRewriteKeepsWhatIsLeftOfAnEntrysAge(t *testing.T) {
	conn := brokertest.Start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const bucket, age = "EXACTO_CONFIRMATIONS", 8 * time.Second
	// The bucket as stream.Ensure made it on one node (TestConfirmationsAreOnDiskOnOneNode),
	// its day cut to 8 s.
	st, err := conn.JS.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxAge, cfg.Duplicates = age, time.Second
	if st, err = conn.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	kv, err := conn.JS.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"acme.ev_old", "acme.ev_changed"} {
		if _, err := kv.Create(ctx, k, []byte(`{"confirmed":true}`)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(age / 2)
	if _, err := kv.Create(ctx, "acme.ev_new", []byte(`{"confirmed":true}`)); err != nil {
		t.Fatal(err)
	}
	h, err := current(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	h.entries["acme.ev_changed"] = []byte(`{"confirmed":true,"said":"[erased]"}`)
	if err := rewrite(ctx, conn.JS, kv, st, h.entries, h.written); err != nil {
		t.Fatal(err)
	}
	rewritten := time.Now()
	has := func(k string) bool {
		_, err := kv.Get(ctx, k)
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	for _, k := range []string{"acme.ev_old", "acme.ev_changed", "acme.ev_new"} {
		if !has(k) {
			t.Fatalf("%s is gone right after the rewrite", k)
		}
	}
	// Both older entries are gone by 5.5 s after the rewrite (2.5 s of margin for the
	// server's expiry timer); written again with a fresh age they would last 8 s.
	deadline := rewritten.Add(age * 11 / 16)
	for (has("acme.ev_old") || has("acme.ev_changed")) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	for _, k := range []string{"acme.ev_old", "acme.ev_changed"} {
		if has(k) {
			t.Errorf("%s, written %v before the rewrite, lasted %v after it: its age started again", k, age/2, time.Since(rewritten).Round(time.Millisecond))
		}
	}
	if !has("acme.ev_new") {
		t.Error("the entry written just before the rewrite expired with the older ones")
	}
}
