package contacts

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"exacto.dev/pkg/kvstore"
)

// Preload returns a directory over the same bucket that reads it from a copy of its
// keys under prefix ("" for all, else a tenant's: "<tenant>.") loaded at once and writes
// through to it, when they are at most max (deleted ones counted); else d itself. A
// replay names thousands of contacts a second, a reconciliation pass every contact of
// its tenant: one streamed read of the bucket instead of two round trips per contact.
// The copy is the bucket as it was when loaded, as the replay's memo is: a write that
// finds a key moved on (another projector wrote it) drops that key from the copy and
// Record reads it again from the bucket.
func (d *Directory) Preload(ctx context.Context, prefix string, max uint64) (*Directory, error) {
	kv, ok := d.store.(kvstore.KV)
	if !ok {
		return d, nil // already in memory
	}
	p := &preloaded{under: d.store, vals: map[string]entry{}}
	err := kvstore.ScanAtMost(ctx, kv, prefix, max, func(key string, value []byte, rev uint64) error {
		p.vals[key] = entry{value, rev}
		return nil
	})
	switch {
	case errors.Is(err, kvstore.ErrTooMany):
		return d, nil
	case err != nil:
		return nil, fmt.Errorf("contacts: loading %s: %w", kv.KV.Bucket(), err)
	}
	return &Directory{store: p, now: d.now}, nil
}

type entry struct {
	val []byte
	rev uint64
}

// preloaded is a Store over under that serves reads from a copy (a key it does not
// hold is read from under, then held) and writes through.
type preloaded struct {
	under kvstore.Store
	mu    sync.Mutex
	vals  map[string]entry
}

func (p *preloaded) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	p.mu.Lock()
	e, ok := p.vals[key]
	p.mu.Unlock()
	if ok {
		return e.val, e.rev, nil
	}
	val, rev, err := p.under.Get(ctx, key)
	if err == nil {
		p.hold(key, entry{val, rev})
	}
	return val, rev, err
}

func (p *preloaded) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	rev, err := p.under.Put(ctx, key, value, rev)
	if err != nil {
		p.drop(key) // moved on, or unknown: read it again
		return rev, err
	}
	p.hold(key, entry{slices.Clone(value), rev})
	return rev, nil
}

func (p *preloaded) Delete(ctx context.Context, key string, rev uint64) error {
	p.drop(key)
	return p.under.Delete(ctx, key, rev)
}

func (p *preloaded) Keys(ctx context.Context, prefix string) ([]string, error) {
	return p.under.Keys(ctx, prefix)
}

func (p *preloaded) hold(key string, e entry) {
	p.mu.Lock()
	p.vals[key] = e
	p.mu.Unlock()
}

func (p *preloaded) drop(key string) {
	p.mu.Lock()
	delete(p.vals, key)
	p.mu.Unlock()
}
