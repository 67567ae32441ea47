package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/projection"
	"exacto.dev/pkg/stream"
	"exacto.dev/pkg/suppression"
)

// The invariants `exacto simulate` checks once the consumers have drained, each
// HELD or BROKEN with what broke it.

type result struct {
	name   string
	broken []string
}

func (s *simulation) checkDelivered(ds []*delivery) result {
	res := result{name: "every delivery is eventually answered 200"}
	for _, d := range ds {
		if d.status != http.StatusOK {
			res.broken = append(res.broken, fmt.Sprintf("%s of %s: %d %s", d, s.sc.email(d.contact), d.status, d.err))
		}
	}
	return res
}

func (s *simulation) checkStopped(ctx context.Context) result {
	res := result{name: "every replied or unsubscribed contact is stopped at the platform exactly once"}
	for i := range s.sc.Contacts {
		if !s.sc.has(i, "reply_received", "lead_unsubscribed") {
			continue
		}
		e := s.sc.email(i)
		st, err := s.state(ctx, e)
		if err != nil {
			res.broken = append(res.broken, fmt.Sprintf("%s: %v", e, err))
			continue
		}
		switch {
		case st.Stops > 1:
			res.broken = append(res.broken, fmt.Sprintf("%s: stopped %d times", e, st.Stops))
		case st.Stops == 0 && s.sc.has(i, "lead_unsubscribed", "email_bounced") && st.Blocklisted && !anyActive(st.Leads):
			// Blocked first (its unsubscribe, or a bounce handled before its reply): the
			// block ended the sequence, no stop was needed.
		case st.Stops == 0 && st.Raises > 0 && !anyActive(st.Leads):
			// The stopper took the reply's classification first: raising the lead to its
			// positive label stopped it, and the reply found it stopped already.
		case st.Stops == 0:
			res.broken = append(res.broken, fmt.Sprintf("%s: never stopped (blocklisted %t, leads active %t)", e, st.Blocklisted, anyActive(st.Leads)))
		}
	}
	return res
}

// checkNotes: a reply reaches the CRM exactly once, whatever was duplicated, reordered,
// timed out after HubSpot committed or held back by an outage; nothing else writes one.
func (s *simulation) checkNotes(ctx context.Context, ds []*delivery) result {
	res := result{name: "every replied contact has exactly one CRM note, of its reply"}
	replies := map[int][]string{} // contact → the envelope ids its reply was answered with
	for _, d := range ds {
		if d.typ == "reply_received" {
			for _, id := range d.ids {
				if !slices.Contains(replies[d.contact], id) {
					replies[d.contact] = append(replies[d.contact], id)
				}
			}
		}
	}
	for i := range s.sc.Contacts {
		e := s.sc.email(i)
		replied := s.sc.has(i, "reply_received")
		if replied && len(replies[i]) == 0 {
			res.broken = append(res.broken, e+": its reply was never stored")
			continue
		}
		st, err := s.state(ctx, e, replies[i]...)
		if err != nil {
			res.broken = append(res.broken, fmt.Sprintf("%s: %v", e, err))
			continue
		}
		switch {
		case !replied && st.Notes > 0:
			res.broken = append(res.broken, fmt.Sprintf("%s: %d notes without a reply", e, st.Notes))
		case replied && (st.Notes != 1 || len(replies[i]) != 1 || st.NoteIDs[replies[i][0]] != 1):
			res.broken = append(res.broken, fmt.Sprintf("%s: %d notes, %v by reply envelope", e, st.Notes, st.NoteIDs))
		case replied && st.NoteOwners[replies[i][0]] == "":
			s.unowned = append(s.unowned, e)
		}
	}
	return res
}

// checkOwners: a reply's note without an owner (no routing rule matched) must be
// counted, so that nobody's reply goes unanswered unseen.
func (s *simulation) checkOwners(ctx context.Context, before float64, beforeErr error) result {
	res := result{name: "every reply's note has an owner, or the reply is counted as without one"}
	if len(s.unowned) == 0 {
		return res
	}
	after, err := s.unownedCount(ctx)
	if err = errors.Join(beforeErr, err); err != nil {
		res.broken = append(res.broken, fmt.Sprintf("%d replies without an owner, and their count could not be read: %v", len(s.unowned), err))
		return res
	}
	if counted := int(after - before); counted < len(s.unowned) {
		res.broken = append(res.broken, fmt.Sprintf("%d replies without an owner, %d counted in exacto_replies_without_owner_total", len(s.unowned), counted))
		res.broken = append(res.broken, s.unowned...)
	} else {
		fmt.Fprintf(s.out, "note: %d replies without an owner (no routing rule matched), each counted\n", len(s.unowned))
	}
	return res
}

// unownedCount sums the tenant's exacto_replies_without_owner_total at the admin address.
func (s *simulation) unownedCount(ctx context.Context) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.admin+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s/metrics: %d", s.admin, resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return 0, err
	}
	sum := 0.0
	tenant := `tenant="` + s.sc.Tenant + `"`
	for line := range strings.Lines(string(data)) {
		if !strings.HasPrefix(line, "exacto_replies_without_owner_total{") || !strings.Contains(line, tenant) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("%s/metrics: %q", s.admin, strings.TrimSpace(line))
		}
		sum += v
	}
	return sum, nil
}

func anyActive(leads []sandbox.InstantlyLead) bool {
	for _, l := range leads {
		if l.Status == sandbox.InstantlyActive {
			return true
		}
	}
	return false
}

func (s *simulation) checkSuppressed(ctx context.Context) result {
	res := result{name: "every unsubscribed or bounced contact is on the suppression list"}
	kv, err := s.js.KeyValue(ctx, stream.Suppression)
	if err != nil {
		res.broken = append(res.broken, "suppression list: "+err.Error())
		return res
	}
	list := suppression.New(kv)
	for i := range s.sc.Contacts {
		if !s.sc.has(i, "lead_unsubscribed", "email_bounced") {
			continue
		}
		e := s.sc.email(i)
		_, ok, err := list.Lookup(ctx, s.sc.Tenant, "email:"+e)
		switch {
		case err != nil:
			res.broken = append(res.broken, fmt.Sprintf("%s: %v", e, err))
		case !ok:
			res.broken = append(res.broken, e+": not suppressed")
		}
	}
	return res
}

func (s *simulation) checkStoredOnce(ctx context.Context, ds []*delivery) result {
	res := result{name: "nothing is stored twice: each delivered event is in the stream once"}
	ours := map[string]*delivery{} // envelope id → a delivery answered with it
	for _, d := range ds {
		for _, id := range d.ids {
			ours[id] = d
		}
	}
	stored, err := scanStream(ctx, s.js)
	if err != nil {
		res.broken = append(res.broken, "reading "+stream.Events+": "+err.Error())
		return res
	}
	byKey := map[string][]string{} // provider event key → envelope ids stored
	for id, st := range stored {
		if ours[id] == nil {
			continue
		}
		if st.count > 1 {
			res.broken = append(res.broken, fmt.Sprintf("%s: envelope %s stored %d times", ours[id], id, st.count))
		}
		k := st.tenant + "/" + st.provider + "/" + st.typ + "/" + st.providerEventID
		if st.providerEventID != "" {
			byKey[k] = append(byKey[k], id)
		}
	}
	for id, d := range ours {
		if _, ok := stored[id]; !ok {
			res.broken = append(res.broken, fmt.Sprintf("%s: answered with %s, which is not in the stream", d, id))
		}
	}
	for k, ids := range byKey {
		if len(ids) > 1 {
			res.broken = append(res.broken, fmt.Sprintf("provider event %s stored as %d envelopes: %s", k, len(ids), strings.Join(ids, " ")))
		}
	}
	slices.Sort(res.broken)
	return res
}

type storedEvent struct {
	count                                  int
	tenant, provider, typ, providerEventID string
}

// scanStream reads every envelope of EXACTO_EVENTS stored so far, by its id.
func scanStream(ctx context.Context, js jetstream.JetStream) (map[string]*storedEvent, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	st, err := js.Stream(ctx, stream.Events)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]*storedEvent{}
	if info.State.Msgs == 0 {
		return out, nil
	}
	last := info.State.LastSeq
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	for {
		batch, err := c.Fetch(500, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			var env envelope.Envelope
			_ = json.Unmarshal(m.Data(), &env)
			id := m.Headers().Get(jetstream.MsgIDHeader)
			if id == "" {
				id = env.ID
			}
			e := out[id]
			if e == nil {
				e = &storedEvent{tenant: env.Tenant, provider: env.Provider, typ: env.Type, providerEventID: env.ProviderEventID}
				out[id] = e
			}
			e.count++
			if md.Sequence.Stream >= last {
				return out, nil
			}
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, fmt.Errorf("the stream ended before sequence %d", last)
		}
	}
}

func (s *simulation) checkProjections(ctx context.Context) result {
	res := result{name: "the live projections equal a rebuild from the stream"}
	fail := func(err error) result {
		res.broken = append(res.broken, err.Error())
		return res
	}
	dir, err := contacts.Open(ctx, s.js)
	if err != nil {
		return fail(err)
	}
	live, err := projection.Open(ctx, s.js, "", 1)
	if err != nil {
		return fail(err)
	}
	rebuilt := projection.Memories()
	if _, err := projection.Replay(ctx, s.js, rebuilt, projection.ReplayOptions{Dir: dir}); err != nil {
		return fail(err)
	}
	for _, name := range projection.Names {
		a, _ := rebuilt.Of(name)
		b, _ := live.Of(name)
		d, err := projection.Diff(ctx, name, a, b)
		if err != nil {
			return fail(err)
		}
		if d.Equal() {
			continue
		}
		res.broken = append(res.broken, fmt.Sprintf("%s: rebuilt %d keys, live %d keys: %d only in the rebuild, %d only live, %d differ",
			name, d.KeysA, d.KeysB, d.OnlyA, d.OnlyB, d.Differ))
		for _, k := range d.First {
			res.broken = append(res.broken, fmt.Sprintf("%s: key %s differs", name, k))
		}
	}
	return res
}
