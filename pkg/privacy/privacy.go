// Package privacy forgets people (`exacto forget`, GDPR art. 17): the deployment's key
// for hashing identities, the set of forgotten people by keyed hash, what an event about
// one of them becomes, and the erasure of their personal data from every stream and
// bucket (erase.go). docs/security.md, "Retention and erasure", says why so.
package privacy

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/stream"
)

// Keys of the privacy bucket (stream.Privacy).
const (
	hashKeyName = "hash_key"
	// forgotten.<tenant>.<keyed hash of an identity key> -> the person's anonymous id
	forgottenPrefix = "forgotten."
	// erasure.<tenant>.<anonymous id>.<unix nanoseconds> -> one run of an erasure
	erasurePrefix = "erasure."
)

// Erased is what an erased or compacted event's raw payload becomes; erasedSHA256 its
// SHA-256, the event's payloadsha256 then.
var (
	Erased       = json.RawMessage(`{"erased":true}`)
	erasedSHA256 = func() string { sum := sha256.Sum256(Erased); return hex.EncodeToString(sum[:]) }()
)

// Hasher hashes identity keys with the deployment's key: whoever reads the privacy
// bucket's entries cannot test an address against them without that key.
type Hasher struct{ key []byte }

// OpenHasher reads the deployment's hash key from the privacy bucket, made on first use
// (32 random bytes, never changed: every keyed hash kept depends on it).
func OpenHasher(ctx context.Context, kv jetstream.KeyValue) (Hasher, error) {
	e, err := kv.Get(ctx, hashKeyName)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		key := make([]byte, 32)
		rand.Read(key)
		_, err = kv.Create(ctx, hashKeyName, []byte(hex.EncodeToString(key)))
		if errors.Is(err, jetstream.ErrKeyExists) {
			return OpenHasher(ctx, kv) // another process made it first
		}
		if err != nil {
			return Hasher{}, fmt.Errorf("privacy: make the hash key: %w", err)
		}
		return Hasher{key: key}, nil
	}
	if err != nil {
		return Hasher{}, fmt.Errorf("privacy: read the hash key: %w", err)
	}
	key, err := hex.DecodeString(string(e.Value()))
	if err != nil || len(key) != 32 {
		return Hasher{}, errors.New("privacy: the hash key in " + stream.Privacy + " is damaged: restore it from a backup (every erasure depends on it)")
	}
	return Hasher{key: key}, nil
}

func (h Hasher) sum(parts ...string) []byte {
	m := hmac.New(sha256.New, h.key)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return m.Sum(nil)[:16]
}

// Key is the keyed hash of tenant's identity key (directory form: email:…, phone:…,
// crm_contact_id:hubspot:…, id:meta:…, subject:meta:…).
func (h Hasher) Key(tenant, key string) string { return hex.EncodeToString(h.sum("key", tenant, key)) }

// Anonymous is the anonymous id of tenant's person whose least identity key is key.
func (h Hasher) Anonymous(tenant, key string) string {
	return "an_" + hex.EncodeToString(h.sum("anonymous", tenant, key))
}

// forgottenKey is the bucket key saying that tenant's identity key is forgotten.
func (h Hasher) forgottenKey(tenant, key string) string {
	return forgottenPrefix + tenant + "." + h.Key(tenant, key)
}

// Keys are the identity keys env names its contact by, in the contact directory's form
// (pkg/contacts), and the subject it is about: what a forgotten person is recognised by.
func Keys(env *envelope.Envelope) []string {
	var out []string
	if c := env.Data.Contact; c != nil && c.Anonymous == "" {
		if k := contacts.Key("email", c.Email); k != "" {
			out = append(out, k)
		}
		if k := contacts.Key("phone", c.Phone); k != "" {
			out = append(out, k)
		}
		if c.ExternalID != "" {
			kind := contacts.ProviderKind(env.Provider)
			if kind == "" {
				kind = "id"
			}
			out = append(out, kind+":"+env.Provider+":"+c.ExternalID)
		}
	}
	if env.Subject != "" {
		out = append(out, "subject:"+env.Provider+":"+env.Subject)
	}
	return out
}

// Anonymize makes env an event about the forgotten person anon: the contact is anon
// alone, and every field that could name or describe them is emptied — what Compact
// empties, and the message's addresses and URL, a property's value, an opportunity's
// name. What the projections count stays: the type, the times, the campaign, the
// statuses and labels.
func Anonymize(env *envelope.Envelope, anon string) {
	dropTexts(env)
	d := &env.Data
	d.Contact = &envelope.Contact{Anonymous: anon}
	env.Subject, env.ObjectID = "", ""
	if m := d.Message; m != nil {
		d.Message = &envelope.Message{ID: m.ID, InReplyTo: m.InReplyTo, Kind: m.Kind, Auto: m.Auto}
	}
	if m := d.Meeting; m != nil {
		m.Invitee = ""
	}
	if p := d.Property; p != nil {
		p.Value = ""
	}
	if o := d.Opportunity; o != nil {
		o.Name = ""
	}
	env.Erasure = anon
}

// dropTexts empties env's raw payload and free texts: a message's subject, text and
// HTML, a classification's evidence, a bounce's and a meeting's reasons, the contact's
// name.
func dropTexts(env *envelope.Envelope) {
	d := &env.Data
	if c := d.Contact; c != nil {
		c.Name = ""
	}
	if m := d.Message; m != nil {
		m.Subject, m.Text, m.HTML = "", "", ""
	}
	if c := d.Classification; c != nil {
		c.Evidence, c.Also, c.When = nil, nil, ""
	}
	if b := d.Bounce; b != nil {
		b.Reason = ""
	}
	if m := d.Meeting; m != nil {
		m.Reason = ""
	}
	d.Raw = Erased
	env.PayloadSHA256 = erasedSHA256
}

// Forgotten is the set of forgotten people, kept current by watching the privacy
// bucket: the gateway stores an event about one of them anonymized.
type Forgotten struct {
	hasher Hasher
	n      atomic.Int64 // entries: none (the usual case) costs an event no hashing
	mu     sync.RWMutex
	set    map[string]string // forgotten key -> anonymous id
}

// WatchForgotten loads the forgotten set and keeps it current until ctx ends. It
// writes nothing: the hash key is read once an erasure has made it.
func WatchForgotten(ctx context.Context, js jetstream.JetStream) (*Forgotten, error) {
	kv, err := js.KeyValue(ctx, stream.Privacy)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", stream.Privacy, err)
	}
	w, err := kv.WatchFiltered(ctx, []string{hashKeyName, forgottenPrefix + ">"})
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", stream.Privacy, err)
	}
	f := &Forgotten{set: map[string]string{}}
	ready := make(chan struct{})
	go func() {
		defer w.Stop()
		initial := true
		for e := range w.Updates() {
			if e == nil {
				if initial {
					initial = false
					close(ready)
				}
				continue
			}
			f.mu.Lock()
			switch {
			case e.Key() == hashKeyName:
				if key, err := hex.DecodeString(string(e.Value())); err == nil && len(key) == 32 {
					f.hasher = Hasher{key: key}
				}
			case e.Operation() == jetstream.KeyValuePut:
				f.set[e.Key()] = string(e.Value())
			default:
				delete(f.set, e.Key())
			}
			f.n.Store(int64(len(f.set)))
			f.mu.Unlock()
		}
		if initial {
			close(ready)
		}
	}()
	select {
	case <-ready:
		return f, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Of is the anonymous id of the forgotten person env is about, if it is about one.
func (f *Forgotten) Of(env *envelope.Envelope) (string, bool) {
	if f == nil || f.n.Load() == 0 {
		return "", false
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, k := range Keys(env) {
		if anon, ok := f.set[f.hasher.forgottenKey(env.Tenant, k)]; ok {
			return anon, true
		}
	}
	return "", false
}

// Anonymize anonymizes env if it is about a forgotten person (Anonymize), and says so.
func (f *Forgotten) Anonymize(env *envelope.Envelope) bool {
	anon, ok := f.Of(env)
	if ok {
		Anonymize(env, anon)
	}
	return ok
}

// Named reports whether tenant's identity key (Keys' form) is forgotten.
func (f *Forgotten) Named(tenant, key string) bool {
	if f == nil || f.n.Load() == 0 || key == "" {
		return false
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	_, ok := f.set[f.hasher.forgottenKey(tenant, key)]
	return ok
}
