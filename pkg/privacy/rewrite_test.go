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
// keep every entry for ever. A bucket of 4 s here: an entry written 2 s before the
// rewrite is gone about 2 s after it, not 4; one the rewrite changed keeps its age too.
func TestRewriteKeepsWhatIsLeftOfAnEntrysAge(t *testing.T) {
	conn := brokertest.Start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const bucket, age = "EXACTO_CONFIRMATIONS", 4 * time.Second
	if err := conn.JS.DeleteKeyValue(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	// As stream.Ensure makes it on one node (TestConfirmationsAreOnDiskOnOneNode), but
	// for 4 s.
	if _, err := conn.JS.CreateStream(ctx, jetstream.StreamConfig{
		Name: "KV_" + bucket, Subjects: []string{"$KV." + bucket + ".>"}, MaxMsgsPerSubject: 1, MaxBytes: -1, MaxAge: age, MaxMsgSize: -1,
		Storage: jetstream.FileStorage, Replicas: 1, AllowRollup: true, DenyDelete: true, Duplicates: time.Second, MaxMsgs: -1, MaxConsumers: -1,
		AllowDirect: true, Discard: jetstream.DiscardNew, PersistMode: jetstream.AsyncPersistMode, AllowMsgTTL: true,
	}); err != nil {
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
	st, err := conn.JS.Stream(ctx, "KV_"+bucket)
	if err != nil {
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
	for has("acme.ev_old") && time.Since(rewritten) < age {
		time.Sleep(100 * time.Millisecond)
	}
	if gone := time.Since(rewritten); gone > age*3/4 {
		t.Fatalf("an entry written %v before the rewrite lasted %v after it: its age started again", age/2, gone)
	}
	if has("acme.ev_changed") {
		t.Error("the entry the rewrite changed outlived its age")
	}
	if !has("acme.ev_new") {
		t.Error("the entry written just before the rewrite expired with the older ones")
	}
}
