// Package kvstore is a key-value store with a revision per key, written with
// compare-and-set: a JetStream bucket live (KV), a map while a replay rebuilds (Memory).
// The projections and the contact directory keep their records in one.
package kvstore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrConflict: the key's revision moved on since it was read (another writer wrote it):
// read again and merge again.
var ErrConflict = errors.New("revision conflict")

// Store holds keys, each value with a revision.
type Store interface {
	// Get returns the value of key and its revision; revision 0 when it is absent.
	Get(ctx context.Context, key string) ([]byte, uint64, error)
	// Put writes key if its revision is still rev (0: if it is absent) and returns the
	// new revision, or ErrConflict.
	Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error)
	// Delete removes key if its revision is still rev, or answers ErrConflict.
	Delete(ctx context.Context, key string, rev uint64) error
	// Keys lists the keys under prefix (ending in "."), sorted.
	Keys(ctx context.Context, prefix string) ([]string, error)
}

// KV is a Store over a JetStream key-value bucket.
type KV struct{ KV jetstream.KeyValue }

func (s KV) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	e, err := s.KV.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	return e.Value(), e.Revision(), nil
}

func (s KV) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	var err error
	if rev == 0 {
		rev, err = s.KV.Create(ctx, key, value)
	} else {
		rev, err = s.KV.Update(ctx, key, value, rev)
	}
	if conflict(err) {
		return 0, ErrConflict
	}
	return rev, err
}

func (s KV) Delete(ctx context.Context, key string, rev uint64) error {
	err := s.KV.Delete(ctx, key, jetstream.LastRevision(rev))
	if conflict(err) {
		return ErrConflict
	}
	return err
}

// conflict: the key exists, or its revision moved on.
func conflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || (errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant))
}

// CheckpointKey is where a writer of a bucket derived from the stream keeps the stream
// sequence it has applied (services/projector). Keys lists no key under it.
const CheckpointKey = "_exacto.checkpoint"

func (s KV) Keys(ctx context.Context, prefix string) ([]string, error) {
	filter := ">"
	if prefix != "" {
		filter = prefix + ">"
	}
	l, err := s.KV.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, err
	}
	var keys []string
	for k := range l.Keys() { // the channel closes once every key is listed
		if k != CheckpointKey {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

// Memory is a Store in memory: a replay builds here, then copies it out.
type Memory struct {
	mu   sync.Mutex
	vals map[string][]byte
	revs map[string]uint64
	last uint64 // revisions only grow, across deletes, as a bucket's do
}

// NewMemory returns an empty Memory store.
func NewMemory() *Memory { return &Memory{vals: map[string][]byte{}, revs: map[string]uint64{}} }

func (m *Memory) Get(_ context.Context, key string) ([]byte, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.vals[key], m.revs[key], nil
}

func (m *Memory) Put(_ context.Context, key string, value []byte, rev uint64) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.revs[key] != rev {
		return 0, ErrConflict
	}
	m.last++
	m.vals[key] = slices.Clone(value)
	m.revs[key] = m.last
	return m.last, nil
}

// NextRev takes the next revision, for a value Set will store.
func (m *Memory) NextRev() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last++
	return m.last
}

// Set stores value as key's at revision rev, taken by NextRev: a replay that keeps its
// records decoded and stores each once, at the revision its last change was given.
func (m *Memory) Set(key string, value []byte, rev uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.vals[key] = value
	m.revs[key] = rev
	m.last = max(m.last, rev)
}

func (m *Memory) Delete(_ context.Context, key string, rev uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.revs[key] != rev {
		return ErrConflict
	}
	delete(m.vals, key)
	delete(m.revs, key)
	return nil
}

func (m *Memory) Keys(_ context.Context, prefix string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var keys []string
	for k := range m.vals {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys, nil
}
