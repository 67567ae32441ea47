package privacy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/stream"
)

// Run is one run of an erasure, as the privacy bucket keeps it: who asked, why, and
// what it changed. Nothing in it names the person.
type Run struct {
	Tenant    string    `json:"tenant"`
	Anonymous string    `json:"anonymous"`
	By        string    `json:"by"`
	Why       string    `json:"why"`
	At        time.Time `json:"at"`
	// Again: the person had been forgotten before; this run looked for what was left.
	Again bool `json:"again,omitempty"`
	// Keys: how many identity keys of theirs are forgotten (and kept suppressed).
	Keys int `json:"keys"`
	Report
}

var tenantName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// Identify is the identity key of an address given to forget: an e-mail address, else a
// phone number, else an error that says what it is not.
func Identify(address string) (string, error) {
	if strings.Contains(address, "@") {
		if k := contacts.Key("email", address); k != "" {
			return k, nil
		}
		return "", fmt.Errorf("%q is not an e-mail address", address)
	}
	if strings.ContainsFunc(address, func(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' }) {
		return "", fmt.Errorf("%q is neither an e-mail address nor a phone number", address)
	}
	if k := contacts.Key("phone", address); k != "" {
		return k, nil
	}
	return "", fmt.Errorf("%q is neither an e-mail address nor a phone number (a phone has at least 7 digits)", address)
}

// Find is whom an erasure of tenant's address forgets: every identity key and contact
// id the contact directory links to it, under the anonymous id it had if it was
// forgotten before (again), else under a new one.
func Find(ctx context.Context, js jetstream.JetStream, tenant, address string) (p *Person, again bool, err error) {
	if !tenantName.MatchString(tenant) {
		return nil, false, fmt.Errorf("%q is not a tenant id (lower-case letters, digits and dashes)", tenant)
	}
	key, err := Identify(address)
	if err != nil {
		return nil, false, err
	}
	kv, err := privacyBucket(ctx, js)
	if err != nil {
		return nil, false, err
	}
	h, err := OpenHasher(ctx, kv)
	if err != nil {
		return nil, false, err
	}
	dir, err := contacts.Open(ctx, js)
	if err != nil {
		return nil, false, err
	}
	kind, value, _ := strings.Cut(key, ":")
	rec, found, err := dir.Find(ctx, tenant, kind, value)
	if err != nil {
		return nil, false, err
	}
	keys := []string{key}
	var ids []string
	if found {
		// Keys are sorted least first: the least names the person (contacts.ContactID).
		keys = append(rec.Keys, key)
		ids = append([]string{rec.ContactID}, rec.Merged...)
	}
	anon := h.Anonymous(tenant, keys[0])
	e, err := kv.Get(ctx, h.forgottenKey(tenant, key))
	switch {
	case err == nil:
		anon, again = string(e.Value()), true
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, false, fmt.Errorf("bucket %s: %w", stream.Privacy, err)
	}
	return NewPerson(tenant, anon, keys, ids), again, nil
}

// privacyBucket is the privacy bucket, each write on disk before it returns (the
// embedded server syncs it only when asked, stream.DurableKV).
func privacyBucket(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, stream.Privacy)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", stream.Privacy, err)
	}
	return stream.DurableKV(js, kv), nil
}

// Remember adds p to the forgotten set, each key by its keyed hash: from now on a
// gateway stores an event about them anonymized, and no consumer acts on it.
func Remember(ctx context.Context, js jetstream.JetStream, p *Person) error {
	kv, err := privacyBucket(ctx, js)
	if err != nil {
		return err
	}
	h, err := OpenHasher(ctx, kv)
	if err != nil {
		return err
	}
	for _, k := range p.Keys {
		if _, err := kv.Create(ctx, h.forgottenKey(p.Tenant, k), []byte(p.Anonymous)); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("bucket %s: %w", stream.Privacy, err)
		}
	}
	return nil
}

// Record keeps run in the privacy bucket.
func Record(ctx context.Context, js jetstream.JetStream, run Run) error {
	kv, err := privacyBucket(ctx, js)
	if err != nil {
		return err
	}
	data, err := json.Marshal(run)
	if err != nil {
		return err
	}
	_, err = kv.Create(ctx, erasurePrefix+run.Tenant+"."+run.Anonymous+"."+strconv.FormatInt(run.At.UnixNano(), 10), data)
	return err
}

// Runs are the recorded runs of tenant's erasures ("" every tenant's), oldest first.
func Runs(ctx context.Context, js jetstream.JetStream, tenant string) ([]Run, error) {
	kv, err := js.KeyValue(ctx, stream.Privacy)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", stream.Privacy, err)
	}
	filter := erasurePrefix + ">"
	if tenant != "" {
		filter = erasurePrefix + tenant + ".>"
	}
	w, err := kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	var out []Run
	for e := range w.Updates() {
		if e == nil {
			break
		}
		var r Run
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			return nil, fmt.Errorf("erasure record %s: %w", e.Key(), err)
		}
		out = append(out, r)
	}
	return out, nil
}

// pausedKey keeps the consumers an erasure paused, so that a run after one that failed
// (they stay paused) knows them from an operator's pauses and resumes them.
const pausedKey = "paused"

// Paused are the consumers an erasure paused and has not resumed.
func Paused(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	kv, err := privacyBucket(ctx, js)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, pausedKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	return out, json.Unmarshal(e.Value(), &out)
}

// SetPaused records the consumers an erasure paused (none: it resumed them).
func SetPaused(ctx context.Context, js jetstream.JetStream, durables []string) error {
	kv, err := privacyBucket(ctx, js)
	if err != nil {
		return err
	}
	if len(durables) == 0 {
		if err := kv.Delete(ctx, pausedKey); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return err
		}
		return nil
	}
	data, err := json.Marshal(durables)
	if err != nil {
		return err
	}
	_, err = kv.Put(ctx, pausedKey, data)
	return err
}
