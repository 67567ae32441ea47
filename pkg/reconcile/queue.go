package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/stream"
)

// Queue is the diff queue: every finding, keyed <tenant>.<finding id> in KV
// EXACTO_DIFFS, for the console and `exacto reconcile`; and each tenant's HubSpot
// cursor (<tenant>.cursor.hubspot, see crmWindow), which List skips.
type Queue struct {
	kv jetstream.KeyValue
	// Publish stores an approved repair's event; Fresh is how old an event of a type
	// may be and still be published (config.DLQ.Fresh). Both needed by Decide only.
	Publish Publisher
	Fresh   func(typ string) time.Duration
	Now     func() time.Time
}

// NewQueue binds the queue over its bucket.
func NewQueue(kv jetstream.KeyValue) *Queue { return &Queue{kv: kv} }

// OpenQueue binds the queue over stream.Diffs in js.
func OpenQueue(ctx context.Context, js jetstream.JetStream) (*Queue, error) {
	kv, err := js.KeyValue(ctx, stream.Diffs)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", stream.Diffs, err)
	}
	return NewQueue(stream.DurableKV(js, kv)), nil
}

func (q *Queue) now() time.Time {
	if q.Now != nil {
		return q.Now().UTC()
	}
	return time.Now().UTC()
}

func queueKey(tenant, id string) string { return tenant + "." + id }

// crmCursorID is the key, after the tenant's, of the tenant's HubSpot cursor in the
// diff bucket: not a finding (finding ids are fd_…), so List skips it.
const crmCursorID = "cursor.hubspot"

// crmCursor is where the tenant's HubSpot reads resume: the key of the last contact a
// pass read (crmWindow); "" before the first.
func (q *Queue) crmCursor(ctx context.Context, tenant string) (string, error) {
	e, err := q.kv.Get(ctx, queueKey(tenant, crmCursorID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("diff queue: HubSpot cursor: %w", err)
	}
	var c crmCursor
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		return "", fmt.Errorf("diff queue %s: %w", e.Key(), err)
	}
	return c.After, nil
}

// crmCursor is the stored cursor.
type crmCursor struct {
	After string    `json:"after"`
	At    time.Time `json:"at"`
}

// setCRMCursor moves the tenant's HubSpot cursor to after (one writer: a tenant's
// passes do not overlap).
func (q *Queue) setCRMCursor(ctx context.Context, tenant, after string, at time.Time) error {
	data, err := json.Marshal(crmCursor{After: after, At: at})
	if err != nil {
		return err
	}
	if _, err := q.kv.Put(ctx, queueKey(tenant, crmCursorID), data); err != nil {
		return fmt.Errorf("diff queue: HubSpot cursor: %w", err)
	}
	return nil
}

// Report records a finding made outside a reconciliation pass (an unsigned event its
// source did not confirm, pkg/confirm): once, by its deterministic id. isNew reports
// whether it was not there yet.
func (q *Queue) Report(ctx context.Context, f *Finding) (isNew bool, err error) {
	return q.record(ctx, f)
}

// Get returns tenant's finding id; ok is false if the queue has none.
func (q *Queue) Get(ctx context.Context, tenant, id string) (Finding, bool, error) {
	f, _, ok, err := q.get(ctx, tenant, id)
	return f, ok, err
}

func (q *Queue) get(ctx context.Context, tenant, id string) (Finding, uint64, bool, error) {
	e, err := q.kv.Get(ctx, queueKey(tenant, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Finding{}, 0, false, nil
	}
	if err != nil {
		return Finding{}, 0, false, fmt.Errorf("diff queue: %w", err)
	}
	var f Finding
	if err := json.Unmarshal(e.Value(), &f); err != nil {
		return Finding{}, 0, false, fmt.Errorf("diff queue %s: %w", e.Key(), err)
	}
	return f, e.Revision(), true, nil
}

// record writes f; a finding already there keeps its first sighting, status, decision
// and repair event, and gets f's last sighting and description. It reports whether f
// is new.
func (q *Queue) record(ctx context.Context, f *Finding) (bool, error) {
	for range 10 {
		prev, rev, ok, err := q.get(ctx, f.Tenant, f.ID)
		if err != nil {
			return false, err
		}
		if ok {
			f.FirstSeen, f.Passes, f.Decision = prev.FirstSeen, prev.Passes+1, prev.Decision
			if prev.Status != StatusOpen {
				f.Status = prev.Status
			}
			if prev.Applied {
				f.Applied, f.Event = true, prev.Event
			}
		}
		data, err := json.Marshal(f)
		if err != nil {
			return false, err
		}
		if ok {
			_, err = q.kv.Update(ctx, queueKey(f.Tenant, f.ID), data, rev)
		} else {
			_, err = q.kv.Create(ctx, queueKey(f.Tenant, f.ID), data)
		}
		if err == nil {
			return !ok, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongSequence(err) {
			return false, fmt.Errorf("diff queue: %w", err)
		}
	}
	return false, errors.New("diff queue: too many concurrent writers of " + f.ID)
}

func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// Filter selects findings; zero fields select all.
type Filter struct {
	Tenant string
	Kind   string
	Status string
}

// List returns the findings f selects, in key order (tenant, then id).
func (q *Queue) List(ctx context.Context, f Filter) ([]Finding, error) {
	filter := ">"
	if f.Tenant != "" {
		filter = f.Tenant + ".>"
	}
	lister, err := q.kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("diff queue: %w", err)
	}
	var out []Finding
	for key := range lister.Keys() {
		tenant, id, _ := strings.Cut(key, ".")
		if id == crmCursorID {
			continue
		}
		fd, ok, err := q.Get(ctx, tenant, id)
		if err != nil {
			return nil, err
		}
		if !ok || (f.Kind != "" && fd.Kind != f.Kind) || (f.Status != "" && fd.Status != f.Status) {
			continue
		}
		out = append(out, fd)
	}
	return out, nil
}

// ErrStale refuses an approval whose proposed event is older than its freshness limit.
var ErrStale = errors.New("the proposed event is too old to publish")

// Decide records a person's answer to an open finding. Approving a finding with a
// proposed event publishes it first, if it is still fresh (Fresh of its type, measured
// from the event's time); a stale one is refused with ErrStale and the finding stays
// open. Deciding a finding that is not open is an error.
func (q *Queue) Decide(ctx context.Context, tenant, id string, approve bool, who, why string) (Finding, error) {
	f, rev, ok, err := q.get(ctx, tenant, id)
	if err != nil {
		return f, err
	}
	if !ok {
		return f, fmt.Errorf("no finding %s in tenant %s", id, tenant)
	}
	if f.Status != StatusOpen {
		return f, fmt.Errorf("finding %s is %s, not open", id, f.Status)
	}
	if who == "" {
		return f, errors.New("a decision needs who made it")
	}
	now := q.now()
	if approve && f.Proposed != nil {
		if q.Publish == nil || q.Fresh == nil {
			return f, errors.New("diff queue: approving needs Publish and Fresh")
		}
		if limit := q.Fresh(f.Proposed.Type); limit > 0 && now.Sub(f.Proposed.Time) > limit {
			return f, fmt.Errorf("%w: %s of %s is %s old, over its limit of %s", ErrStale, f.Proposed.Type,
				f.Proposed.Time.Format(time.RFC3339), now.Sub(f.Proposed.Time).Round(time.Second), limit)
		}
		if err := q.Publish(ctx, *f.Proposed); err != nil {
			return f, fmt.Errorf("publishing the approved repair: %w", err)
		}
		f.Event = f.Proposed.ID
		f.Applied = true
	}
	f.Status = StatusRejected
	if approve {
		f.Status = StatusApproved
	}
	f.Decision = &Decision{Approve: approve, By: who, Why: why, At: now}
	data, err := json.Marshal(f)
	if err != nil {
		return f, err
	}
	if _, err := q.kv.Update(ctx, queueKey(tenant, id), data, rev); err != nil {
		return f, fmt.Errorf("diff queue: %w", err)
	}
	return f, nil
}
