// Package suppression is the tenant-wide do-not-contact list: once a contact is on it
// (an unsubscribe, a bounce, a complaint, a "do not contact" reply), every campaign of
// every provider of the tenant leaves it alone, whatever arrives later. Entries are
// never overwritten: the first reason stays, later ones only confirm it.
package suppression

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Entry says why a contact is suppressed.
type Entry struct {
	Contact string    `json:"contact"` // the contact key (envelope.ContactKey)
	Reason  string    `json:"reason"`  // unsubscribed, bounced, complaint, do_not_contact
	EventID string    `json:"event_id"`
	Since   time.Time `json:"since"`
}

// List is one deployment's suppression list.
type List struct{ kv jetstream.KeyValue }

// New binds the list over its bucket (stream.Suppression).
func New(kv jetstream.KeyValue) *List { return &List{kv: kv} }

func key(tenant, contact string) string {
	sum := sha256.Sum256([]byte(contact))
	return tenant + "." + hex.EncodeToString(sum[:16])
}

// Add suppresses contact in tenant. It reports whether this call added it (false: it
// was already suppressed, and the first entry is kept). Adding twice is harmless.
func (l *List) Add(ctx context.Context, tenant string, e Entry) (added bool, err error) {
	if tenant == "" || e.Contact == "" {
		return false, errors.New("suppression: a tenant and a contact are required")
	}
	data, err := json.Marshal(e)
	if err != nil {
		return false, err
	}
	_, err = l.kv.Create(ctx, key(tenant, e.Contact), data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("suppression: %w", err)
	}
	return true, nil
}

// Lookup says whether contact is suppressed in tenant, and why.
func (l *List) Lookup(ctx context.Context, tenant, contact string) (Entry, bool, error) {
	kv, err := l.kv.Get(ctx, key(tenant, contact))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, fmt.Errorf("suppression: %w", err)
	}
	var e Entry
	return e, true, json.Unmarshal(kv.Value(), &e)
}
