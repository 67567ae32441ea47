// Package kvstore is a key-value store with a revision per key, written with
// compare-and-set: a JetStream bucket live (KV), a map while a replay rebuilds (Memory).
// The projections and the contact directory keep their records in one.
package kvstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

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

// KV is a Store over a JetStream key-value bucket; JS, when set, is the JetStream it is
// in (Scan's consumer).
type KV struct {
	KV jetstream.KeyValue
	JS jetstream.JetStream
}

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

// Scanner is a Store that reads every key under a prefix in one go (KV), or answers
// ErrTooMany, before any, when they are more than max.
type Scanner interface {
	Scan(ctx context.Context, prefix string, max uint64, fn func(key string, value []byte, rev uint64) error) error
}

// ErrTooMany: a scan found more keys than it was allowed (ScanAtMost).
var ErrTooMany = errors.New("more keys than the scan allows")

// Scan calls fn with every key under prefix (ending in ".", or "" for all) but
// CheckpointKey, once, with its value and revision, in no order to rely on, until fn
// fails: one streamed read of a Scanner, else Keys and a Get each.
func Scan(ctx context.Context, s Store, prefix string, fn func(key string, value []byte, rev uint64) error) error {
	return ScanAtMost(ctx, s, prefix, math.MaxUint64, fn)
}

// ScanAtMost is Scan, or ErrTooMany before fn is called when the keys under prefix
// (deleted ones counted, over a bucket) are more than max.
func ScanAtMost(ctx context.Context, s Store, prefix string, max uint64, fn func(key string, value []byte, rev uint64) error) error {
	if sc, ok := s.(Scanner); ok {
		return sc.Scan(ctx, prefix, max, fn)
	}
	return scanByKeys(ctx, s, prefix, max, fn)
}

func scanByKeys(ctx context.Context, s Store, prefix string, max uint64, fn func(key string, value []byte, rev uint64) error) error {
	keys, err := s.Keys(ctx, prefix)
	if err != nil {
		return err
	}
	if uint64(len(keys)) > max {
		return ErrTooMany
	}
	for _, k := range keys {
		if k == CheckpointKey {
			continue
		}
		v, rev, err := s.Get(ctx, k)
		if err != nil {
			return err
		}
		if rev == 0 {
			continue // deleted since listed
		}
		if err := fn(k, v, rev); err != nil {
			return err
		}
	}
	return nil
}

// scanBatch bounds the values a scan holds in the client at a time.
const scanBatch = 1024

// Scan reads the bucket's last value of every key under prefix through a consumer of
// its own, a scanBatch at a time; without JS, Keys and a Get each. The server answers
// the consumer reading the bucket's blocks front to back, each once; a Get of a key
// whose block is not cached loads that whole block (4 MiB), and Gets of every key held
// most of a bucket's blocks in memory at once (docs/performance.md, Memory: "The
// reconciler's reads"). Every key is given once; one written during the scan with the
// value it had when the scan began or a later one, one made during it maybe.
func (s KV) Scan(ctx context.Context, prefix string, max uint64, fn func(key string, value []byte, rev uint64) error) error {
	if s.JS == nil {
		return scanByKeys(ctx, s, prefix, max, fn)
	}
	bucket := s.KV.Bucket()
	subjectOf := "$KV." + bucket + "." // a key's subject is this and the key
	c, err := s.JS.CreateConsumer(ctx, "KV_"+bucket, jetstream.ConsumerConfig{
		FilterSubject: subjectOf + prefix + ">", DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy, AckPolicy: jetstream.AckNonePolicy,
		MemoryStorage: true, InactiveThreshold: time.Minute, // gone after a crash of the scan's process too
	})
	if err != nil {
		return fmt.Errorf("scanning %s: %w", bucket, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		s.JS.DeleteConsumer(dctx, "KV_"+bucket, c.CachedInfo().Name)
	}()
	switch n := c.CachedInfo().NumPending; {
	case n == 0:
		return nil
	case n > max:
		return ErrTooMany
	}
	// A callback, not an iterator: its Next sets a timer per message.
	var mu sync.Mutex // the callback's state: Scan returns only while no fn runs
	given := map[string]bool{}
	finished, handled := false, uint64(0) // handled: the consumer sequence of the last message seen
	done := make(chan error, 1)
	finish := func(err error) { finished = true; done <- err }
	cc, err := c.Consume(func(m jetstream.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if finished {
			return
		}
		md, err := m.Metadata()
		if err != nil {
			finish(fmt.Errorf("scanning %s: %w", bucket, err))
			return
		}
		handled = md.Sequence.Consumer
		key := strings.TrimPrefix(m.Subject(), subjectOf)
		if op := m.Headers().Get("KV-Operation"); op == "" && key != CheckpointKey && !given[key] { // not deleted, not given already
			given[key] = true
			if err := fn(key, m.Data(), md.Sequence.Stream); err != nil {
				finish(err)
				return
			}
		}
		// Done by the server's count, not by the values pending when the scan began: a
		// value replaced before it was sent is pending no more, its replacement is.
		if md.NumPending == 0 {
			finish(nil)
		}
	}, jetstream.PullMaxMessages(scanBatch), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, jetstream.ErrConsumerLeadershipChanged) {
			return // nats.go pulls again; a consumer really gone shows in its info (below)
		}
		mu.Lock()
		defer mu.Unlock()
		if !finished {
			finish(fmt.Errorf("scanning %s: %w", bucket, err))
		}
	}))
	if err != nil {
		return fmt.Errorf("scanning %s: %w", bucket, err)
	}
	defer cc.Stop()
	// Values purged after the last message sent leave no message saying nothing is
	// pending; the consumer's info says so.
	idle := time.NewTicker(time.Second)
	defer idle.Stop()
	for {
		select {
		case err := <-done: // finished: no fn runs any more
			return err
		case <-ctx.Done():
			err = ctx.Err()
		case <-idle.C:
			info, ierr := c.Info(ctx)
			if errors.Is(ierr, jetstream.ErrConsumerNotFound) {
				err = fmt.Errorf("scanning %s: %w", bucket, ierr)
			} else if ierr == nil && info.NumPending == 0 {
				mu.Lock()
				if !finished && handled >= info.Delivered.Consumer {
					finish(nil)
				}
				mu.Unlock()
			}
		}
		if err != nil {
			mu.Lock()
			if !finished {
				finish(err)
			}
			mu.Unlock()
		}
	}
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
