package consumer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Per-contact ordering. Two events of one contact never run at once in one consumer,
// across all its replicas; different contacts run in parallel. The contract fixes the
// subjects (events.<tenant>.<provider>.<type>), so partitioning by subject cannot group
// a contact's events; instead each attempt holds a lease on its contact in a KV bucket
// (an atomic create, released by a compare-and-delete), and an event whose contact is
// busy is redelivered shortly. The order in which a contact's events take effect is not
// arrival order anyway: the lifecycle orders them by event time and version.
//
// A runner alone on its consumer keeps the leases in memory instead (solo.go).
type contactLocks struct {
	kv    jetstream.KeyValue
	scope string // the consumer
	lease time.Duration
	solo  *solo // nil: always the bucket's
}

// key is the bucket key (and the solo protocol's) of contact's lease.
func (l contactLocks) key(tenant, contact string) string {
	sum := sha256.Sum256([]byte(contact))
	return l.scope + "." + tenant + "." + hex.EncodeToString(sum[:12])
}

// tryAcquire takes the lease on contact at once when that needs no waiting and no
// round trip (alone, the contact free); ok false: acquire it.
func (l contactLocks) tryAcquire(tenant, contact string) (release func(), ok bool) {
	return l.solo.tryAcquire(l.key(tenant, contact))
}

// acquire takes the lease on contact; ok is false while another attempt holds it.
func (l contactLocks) acquire(ctx context.Context, tenant, contact string) (release func(), ok bool, err error) {
	key := l.key(tenant, contact)
	if l.solo == nil {
		return l.take(ctx, key)
	}
	release, handled, ok := l.solo.acquire(ctx, key, soloWait)
	if handled {
		return release, ok, nil
	}
	done := release // a shared attempt: the bucket's lease, and solo told when it ends
	lease, ok, err := l.take(ctx, key)
	if !ok || err != nil {
		done()
		return nil, ok, err
	}
	return func() { lease(); done() }, true, nil
}

// take takes key's lease in the bucket.
func (l contactLocks) take(ctx context.Context, key string) (release func(), ok bool, err error) {
	until := strconv.FormatInt(time.Now().Add(l.lease).UnixNano(), 10)
	rev, err := l.kv.Create(ctx, key, []byte(until))
	if errors.Is(err, jetstream.ErrKeyExists) {
		e, gerr := l.kv.Get(ctx, key)
		if gerr != nil {
			return nil, false, nil // released between our create and get: retry soon
		}
		held, _ := strconv.ParseInt(string(e.Value()), 10, 64)
		if time.Now().UnixNano() < held {
			return nil, false, nil
		}
		// The holder died: take over its expired lease.
		if rev, err = l.kv.Update(ctx, key, []byte(until), e.Revision()); err != nil {
			return nil, false, nil
		}
	} else if err != nil {
		return nil, false, err
	}
	return func() {
		// Only our own lease is deleted: after a takeover the revision moved on.
		l.kv.Delete(context.Background(), key, jetstream.LastRevision(rev))
	}, true, nil
}
