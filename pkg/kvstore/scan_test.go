package kvstore_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/kvstore"
)

// Scan gives every key under the prefix with its last value, once: over a bucket (a
// consumer of its own, or Keys and Gets) as over a store in memory; a deleted key, another prefix's
// and the checkpoint key are not given, and fn's error ends it.
func TestScanGivesEveryValueUnderThePrefix(t *testing.T) {
	ctx := context.Background()
	conn, kv := bucket(t, "SCAN_TEST")
	// The bucket read by a consumer (JS set), and key by key.
	stores := map[string]kvstore.Store{"bucket": kvstore.KV{KV: kv, JS: conn.JS}, "bucket by keys": kvstore.KV{KV: kv}, "memory": kvstore.NewMemory()}
	for _, name := range []string{"bucket", "bucket by keys", "memory"} {
		s := stores[name]
		put := func(key, value string) {
			t.Helper()
			_, rev, err := s.Get(ctx, key)
			if err == nil {
				_, err = s.Put(ctx, key, []byte(value), rev)
			}
			if err != nil {
				t.Fatalf("%s: put %s: %v", name, key, err)
			}
		}
		put("acme.1", "first")
		put("acme.2", "gone")
		put("globex.1", "other tenant")
		put("acme.1", "second")
		put("acme.3", "third")
		put(kvstore.CheckpointKey, "42")
		_, rev, _ := s.Get(ctx, "acme.2")
		if err := s.Delete(ctx, "acme.2", rev); err != nil {
			t.Fatal(err)
		}
		scan := func(prefix string) map[string]string {
			t.Helper()
			got := map[string]string{}
			err := kvstore.Scan(ctx, s, prefix, func(key string, value []byte, rev uint64) error {
				if _, twice := got[key]; twice {
					t.Errorf("%s: %s given twice", name, key)
				}
				if _, want, _ := s.Get(ctx, key); rev != want {
					t.Errorf("%s: %s given at revision %d, stored at %d", name, key, rev, want)
				}
				got[key] = string(value)
				return nil
			})
			if err != nil {
				t.Fatalf("%s: scan %q: %v", name, prefix, err)
			}
			return got
		}
		if got, want := scan("acme."), map[string]string{"acme.1": "second", "acme.3": "third"}; !maps.Equal(got, want) {
			t.Errorf("%s: acme's values %v, want %v", name, got, want)
		}
		if got, want := scan(""), map[string]string{"acme.1": "second", "acme.3": "third", "globex.1": "other tenant"}; !maps.Equal(got, want) {
			t.Errorf("%s: every value %v, want %v", name, got, want)
		}
		if got := scan("initech."); len(got) != 0 {
			t.Errorf("%s: a prefix with no key gave %v", name, got)
		}
		stop := errors.New("enough")
		n := 0
		err := kvstore.Scan(ctx, s, "", func(string, []byte, uint64) error { n++; return stop })
		if !errors.Is(err, stop) || n != 1 {
			t.Errorf("%s: fn failing at once: %v after %d values, want its error after 1", name, err, n)
		}
	}
	st, err := conn.JS.Stream(ctx, "KV_SCAN_TEST")
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Consumers; n != 0 {
		t.Errorf("%d consumers left on the bucket after the scans", n)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := kvstore.Scan(cancelled, stores["bucket"], "", func(string, []byte, uint64) error { return nil }); err == nil {
		t.Error("a scan of a bucket with its context cancelled succeeded")
	}
}

// Another writer during a scan: a key rewritten before it was given is given (its old
// value was removed, the new one appended), though keys given already were rewritten
// first. Counting the values pending when the scan began left it out (a review's
// reproduction).
func TestScanGivesAKeyRewrittenDuringIt(t *testing.T) {
	ctx := context.Background()
	conn, kv := bucket(t, "SCAN_REWRITTEN")
	const n = 3000
	for i := range n {
		if _, err := kv.Put(ctx, fmt.Sprintf("acme.%04d", i), []byte("v1")); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]string{}
	err := kvstore.Scan(ctx, kvstore.KV{KV: kv, JS: conn.JS}, "acme.", func(key string, v []byte, _ uint64) error {
		if len(got) == 0 { // the key just given, then the last one, not given yet
			for _, k := range []string{key, fmt.Sprintf("acme.%04d", n-1)} {
				if _, err := kv.Put(ctx, k, []byte("v2")); err != nil {
					return err
				}
			}
		}
		got[key] = string(v)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if last := got[fmt.Sprintf("acme.%04d", n-1)]; len(got) != n || last != "v2" {
		t.Errorf("%d keys given of %d, the last one rewritten during the scan as %q (want v2)", len(got), n, last)
	}
}

// Values purged after the last message the server sent (an operator's purge of part of
// a bucket) leave no message saying nothing is pending: the scan ends on the
// consumer's info instead of waiting for them.
func TestScanEndsWhenWhatWasPendingIsPurged(t *testing.T) {
	ctx := context.Background()
	conn, kv := bucket(t, "SCAN_PURGED")
	// As many a's as one pull asks for (scanBatch), so that every message sent before
	// the purge says b's are pending.
	for i := range 2024 {
		key := fmt.Sprintf("a.%04d", i)
		if i >= 1024 {
			key = fmt.Sprintf("b.%04d", i)
		}
		if _, err := kv.Put(ctx, key, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	st, err := conn.JS.Stream(ctx, "KV_SCAN_PURGED")
	if err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	n := 0
	err = kvstore.Scan(tctx, kvstore.KV{KV: kv, JS: conn.JS}, "", func(string, []byte, uint64) error {
		if n++; n == 1 {
			time.Sleep(200 * time.Millisecond) // the first pull's values are in the client
			return st.Purge(ctx, jetstream.WithPurgeSubject("$KV.SCAN_PURGED.b.>"))
		}
		return nil
	})
	if err != nil || n != 1024 {
		t.Errorf("scan of a bucket half purged during it: %v after %d values, want it done with the 1,024 a's", err, n)
	}
}

// ScanAtMost answers ErrTooMany, before any value, when the keys under the prefix are
// more than it allows; as many as it allows are given.
func TestScanAtMostRefusesMoreKeys(t *testing.T) {
	ctx := context.Background()
	conn, kv := bucket(t, "SCAN_AT_MOST")
	for _, name := range []string{"bucket", "bucket by keys", "memory"} {
		s := map[string]kvstore.Store{"bucket": kvstore.KV{KV: kv, JS: conn.JS}, "bucket by keys": kvstore.KV{KV: kv}, "memory": kvstore.NewMemory()}[name]
		for _, k := range []string{"acme.1", "acme.2", "globex.1", "globex.2", "globex.3"} {
			_, rev, _ := s.Get(ctx, k)
			if _, err := s.Put(ctx, k, []byte("v"), rev); err != nil {
				t.Fatal(err)
			}
		}
		n := 0
		count := func(string, []byte, uint64) error { n++; return nil }
		if err := kvstore.ScanAtMost(ctx, s, "acme.", 2, count); err != nil || n != 2 {
			t.Errorf("%s: acme's 2 keys with a bound of 2: %v, %d given", name, err, n)
		}
		n = 0
		if err := kvstore.ScanAtMost(ctx, s, "globex.", 2, count); !errors.Is(err, kvstore.ErrTooMany) || n != 0 {
			t.Errorf("%s: globex's 3 keys with a bound of 2: %v, %d given, want ErrTooMany and none", name, err, n)
		}
	}
}

// bucket is a key-value bucket of its own on an embedded server.
func bucket(t *testing.T, name string) (*broker.Conn, jetstream.KeyValue) {
	t.Helper()
	conn := brokertest.Start(t, "")
	kv, err := conn.JS.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: name})
	if err != nil {
		t.Fatal(err)
	}
	return conn, kv
}

// A scan whose context ends midway answers the context's error, and fn is not called
// once it has returned.
func TestScanStopsWhenItsContextEnds(t *testing.T) {
	conn, kv := bucket(t, "SCAN_CANCELLED")
	ctx := context.Background()
	for i := range 3000 {
		if _, err := kv.Put(ctx, fmt.Sprintf("acme.%04d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	sctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	calls, returned, late := 0, false, 0
	err := kvstore.Scan(sctx, kvstore.KV{KV: kv, JS: conn.JS}, "acme.", func(string, []byte, uint64) error {
		mu.Lock()
		defer mu.Unlock()
		if returned {
			late++
		}
		if calls++; calls == 1 {
			cancel()
			time.Sleep(50 * time.Millisecond) // the scan sees its context end meanwhile
		}
		return nil
	})
	mu.Lock()
	returned = true
	mu.Unlock()
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if !errors.Is(err, context.Canceled) || calls >= 3000 || late != 0 {
		t.Errorf("scan cancelled at its first value: %v after %d values, %d after it returned; want context.Canceled, fewer than all, none after", err, calls, late)
	}
}
