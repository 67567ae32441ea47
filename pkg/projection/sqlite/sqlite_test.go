package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/lifecycle"
	"exacto.dev/pkg/projection"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func event(n int, typ, email, campaign string, at time.Duration) envelope.Envelope {
	env := envelope.Envelope{SpecVersion: "1.0", ID: envelope.ID("acme", "instantly", fmt.Sprint(typ, n, email)), Type: typ,
		Tenant: "acme", Provider: "instantly", Endpoint: "ep", Time: t0.Add(at), ReceivedAt: t0.Add(at),
		Data: envelope.Data{ProviderType: typ, Contact: &envelope.Contact{Email: email}}}
	if campaign != "" {
		env.Data.Campaign = &envelope.Campaign{ID: campaign}
	}
	switch typ {
	case envelope.TypeReplyReceived:
		env.Data.Message = &envelope.Message{ID: fmt.Sprint("m", n), Text: "sounds good"}
	case envelope.TypeEmailBounced:
		env.Data.Bounce = &envelope.Bounce{Kind: "hard"}
	}
	return env
}

// history is a campaign's events over a few contacts: sends, deliveries, opens, a
// reply, an unsubscribe, a hard bounce, and a follow-up sent after the unsubscribe.
func history() []envelope.Envelope {
	var evs []envelope.Envelope
	types := []string{envelope.TypeEmailSent, envelope.TypeEmailDelivered, envelope.TypeEmailOpened, envelope.TypeReplyReceived}
	for c := range 6 {
		email := fmt.Sprintf("lead%d@northwind.example", c)
		for i, typ := range types[:1+c%4] {
			evs = append(evs, event(i, typ, email, "camp-1", time.Duration(c*10+i)*time.Minute))
		}
		if c%3 == 0 { // in a second campaign too
			evs = append(evs, event(9, envelope.TypeEmailSent, email, "camp-2", time.Duration(c)*time.Minute))
		}
	}
	return append(evs,
		event(7, envelope.TypeLeadUnsubscribed, "lead1@northwind.example", "", 30*time.Minute),
		event(8, envelope.TypeEmailBounced, "lead2@northwind.example", "camp-1", 45*time.Minute),
		// A follow-up sent after the unsubscribe: a discrepancy, not a change.
		event(9, envelope.TypeEmailSent, "lead1@northwind.example", "camp-1", 90*time.Minute))
}

func build(t *testing.T, evs []envelope.Envelope) projection.Stores {
	t.Helper()
	s := projection.Memories()
	for _, env := range evs {
		if _, err := projection.Apply(context.Background(), s, nil, env); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func open(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func query[T any](t *testing.T, db *sql.DB, q string, args ...any) T {
	t.Helper()
	var v T
	if err := db.QueryRow(q, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

func contact(t *testing.T, r projection.Reader, email string) projection.Contact {
	t.Helper()
	c, ok, err := r.ContactByEmail(context.Background(), "acme", email)
	if err != nil || !ok {
		t.Fatalf("%s: %v %v", email, ok, err)
	}
	return c
}

// The tables answer with SQL what projection.Reader answers for the same stores.
func TestTablesAnswerAsTheReader(t *testing.T) {
	ctx := context.Background()
	s := build(t, history())
	path := filepath.Join(t.TempDir(), "x.db")
	if err := Write(ctx, path, s, Checkpoint{LastSeq: 42, Done: true, Projection: projection.Contacts}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the temporary file is left: %v", err)
	}
	db := open(t, path)
	r := projection.Reader{Stores: s}

	for _, campaign := range []string{"camp-1", "camp-2"} {
		want, err := r.Campaign(ctx, "acme", campaign)
		if err != nil {
			t.Fatal(err)
		}
		// One row per contact in the campaign, by status.
		rows, err := db.Query(`SELECT status, count(*) FROM contact_campaigns WHERE tenant = 'acme' AND campaign = ? GROUP BY status`, campaign)
		if err != nil {
			t.Fatal(err)
		}
		got := map[lifecycle.Status]int{}
		for rows.Next() {
			var status string
			var n int
			if err := rows.Scan(&status, &n); err != nil {
				t.Fatal(err)
			}
			got[lifecycle.Status(status)] = n
		}
		rows.Close()
		if fmt.Sprint(got) != fmt.Sprint(want.ByStatus) {
			t.Fatalf("%s contact_campaigns by status %v, reader %v", campaign, got, want.ByStatus)
		}
		// The campaign's counts.
		var c lifecycle.Counts
		var byStatus string
		err = db.QueryRow(`SELECT contacts, replies, bounces, unsubscribes, meetings, opportunities, discrepancies, undecided, by_status
			FROM campaigns WHERE tenant = 'acme' AND campaign = ?`, campaign).Scan(&c.Contacts, &c.Replies, &c.Bounces,
			&c.Unsubscribes, &c.Meetings, &c.Opportunities, &c.Discrepancies, &c.Undecided, &byStatus)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(byStatus), &c.ByStatus); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprintf("%+v", c) != fmt.Sprintf("%+v", want) {
			t.Fatalf("%s campaigns row %+v, reader %+v", campaign, c, want)
		}
		for status, n := range want.ByStatus {
			if got := query[int](t, db, `SELECT contacts FROM campaign_status WHERE tenant = 'acme' AND campaign = ? AND status = ?`, campaign, status); got != n {
				t.Fatalf("%s campaign_status %s: %d, reader %d", campaign, status, got, n)
			}
		}
		if n := query[int](t, db, `SELECT sum(contacts) FROM campaign_status WHERE campaign = ?`, campaign); n != want.Contacts {
			t.Fatalf("%s campaign_status sums to %d, reader %d", campaign, n, want.Contacts)
		}
	}
	// camp-1: lead0 sent; lead1 unsubscribed; lead2 bounced; lead3 replied; lead4 sent; lead5 delivered.
	if n := query[int](t, db, `SELECT replies FROM campaigns WHERE campaign = 'camp-1'`); n != 1 {
		t.Fatalf("camp-1 replies %d", n)
	}
	// A reply is a campaign's fact; the contact who sent it replied all the same.
	lead3 := contact(t, r, "lead3@northwind.example")
	if n := query[int](t, db, `SELECT replied FROM contacts WHERE contact_id = ?`, lead3.ContactID); n != 1 || lead3.View().Replied {
		t.Fatalf("contacts.replied of lead3 %d (its contact-level view says %v)", n, lead3.View().Replied)
	}
	if n := query[int](t, db, `SELECT count(*) FROM contacts WHERE replied = 1`); n != 1 {
		t.Fatalf("%d contacts replied, want 1", n)
	}

	// The follow-up after the unsubscribe, listed with SQL.
	lead1 := contact(t, r, "lead1@northwind.example")
	want := lead1.InCampaign("camp-1").Discrepancies
	if len(want) != 1 {
		t.Fatalf("lead1 camp-1 discrepancies %+v", want)
	}
	if n := query[int](t, db, `SELECT count(*) FROM discrepancies WHERE campaign = 'camp-1' AND rule = ?`, lifecycle.Forbidden); n != 1 {
		t.Fatalf("camp-1 forbidden discrepancies: %d", n)
	}
	var d lifecycle.Discrepancy
	var at string
	err := db.QueryRow(`SELECT event, type, time, target, state, against, rule, why FROM discrepancies
		WHERE contact_id = ? AND campaign = 'camp-1'`, lead1.ContactID).Scan(&d.Event, &d.Type, &at, &d.Target, &d.State, &d.Against, &d.Rule, &d.Why)
	if err != nil {
		t.Fatal(err)
	}
	if d.Time, err = time.Parse(time.RFC3339Nano, at); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%+v", d) != fmt.Sprintf("%+v", want[0]) {
		t.Fatalf("discrepancy row %+v, view %+v", d, want[0])
	}
	var total int
	for _, k := range mustKeys(t, s.Contacts) {
		c, _, _ := r.Contact(ctx, "acme", strings.TrimPrefix(k, "acme."))
		total += len(c.View().Discrepancies)
		for campaign := range c.Campaigns {
			total += len(c.InCampaign(campaign).Discrepancies)
		}
	}
	if n := query[int](t, db, `SELECT count(*) FROM discrepancies`); n != total {
		t.Fatalf("%d discrepancies, views %d", n, total)
	}

	// Suppression: lead1 unsubscribed, lead2 bounced, nobody else.
	for _, email := range []string{"lead1@northwind.example", "lead2@northwind.example", "lead3@northwind.example"} {
		c := contact(t, r, email)
		want, ok, err := r.Suppressed(ctx, "acme", c.ContactID)
		if err != nil {
			t.Fatal(err)
		}
		var got suppressionRow
		err = db.QueryRow(`SELECT status, event, since, keys FROM suppression WHERE tenant = 'acme' AND contact_id = ?`, c.ContactID).
			Scan(&got.Status, &got.Event, &got.Since, &got.Keys)
		if errors.Is(err, sql.ErrNoRows) == ok {
			t.Fatalf("%s: suppressed %v, row: %v", email, ok, err)
		}
		if ok && (got.Status != string(want.Status) || got.Event != want.Event || got.Since != want.Since || got.Keys != strings.Join(want.Keys, ",")) {
			t.Fatalf("%s suppression row %+v, reader %+v", email, got, want)
		}
	}
	if n := query[int](t, db, `SELECT count(*) FROM suppression`); n != len(mustKeys(t, s.Suppression)) || n != 2 {
		t.Fatalf("%d suppression rows", n)
	}
	if st := query[string](t, db, `SELECT status FROM suppression WHERE contact_id = ?`, contact(t, r, "lead2@northwind.example").ContactID); st != string(lifecycle.Bounced) {
		t.Fatalf("lead2 suppression status %s", st)
	}

	// Contacts: one row per record, its view's columns and the record itself.
	if n := query[int](t, db, `SELECT count(*) FROM contacts`); n != 6 || n != len(mustKeys(t, s.Contacts)) {
		t.Fatalf("%d contacts", n)
	}
	var id, status string
	var unsub, discrepancies int
	err = db.QueryRow(`SELECT contact_id, status, unsubscribed, discrepancies FROM contacts WHERE emails = 'lead1@northwind.example'`).
		Scan(&id, &status, &unsub, &discrepancies)
	if err != nil {
		t.Fatal(err)
	}
	if v := lead1.View(); id != lead1.ContactID || status != string(v.Status) || unsub != 1 || discrepancies != len(v.Discrepancies) {
		t.Fatalf("lead1 row %s %s %d %d, view %s", id, status, unsub, discrepancies, v)
	}
	if got := query[string](t, db, `SELECT json_extract(record, '$.keys[0]') FROM contacts WHERE contact_id = ?`, id); got != "email:lead1@northwind.example" {
		t.Fatalf("record keys[0] %q", got)
	}
	if n := query[int](t, db, `SELECT count(*) FROM contact_campaigns WHERE contact_id = ?`, contact(t, r, "lead0@northwind.example").ContactID); n != 2 {
		t.Fatalf("lead0 in %d campaigns", n)
	}

	// The checkpoint, and the raw stores.
	for k, v := range map[string]string{"last_seq": "42", "done": "true", "projection": "contacts"} {
		if got := query[string](t, db, `SELECT value FROM replay WHERE key = ?`, k); got != v {
			t.Fatalf("replay %s = %q", k, got)
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, query[string](t, db, `SELECT value FROM replay WHERE key = 'written_at'`)); err != nil {
		t.Fatal(err)
	}
	for _, name := range projection.Names {
		st, _ := s.Of(name)
		if n := query[int](t, db, `SELECT count(*) FROM store WHERE projection = ?`, name); n != len(mustKeys(t, st)) || n == 0 {
			t.Fatalf("store %s: %d rows", name, n)
		}
	}
}

// suppressionRow is a row of the suppression table.
type suppressionRow struct{ Status, Event, Since, Keys string }

func mustKeys(t *testing.T, s projection.Store) []string {
	t.Helper()
	keys, err := s.Keys(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func diffEqual(t *testing.T, a, b projection.Stores) {
	t.Helper()
	for _, name := range projection.Names {
		x, _ := a.Of(name)
		y, _ := b.Of(name)
		d, err := projection.Diff(context.Background(), name, x, y)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Equal() || d.KeysA == 0 {
			t.Fatalf("%s: %+v", name, d)
		}
	}
}

// Read gives back the stores written and the checkpoint; a replay resumed on them
// builds what an uninterrupted one builds.
func TestReadResumes(t *testing.T) {
	ctx := context.Background()
	evs := history()
	// The replay stopped before the last events.
	s := build(t, evs[:len(evs)-2])
	path := filepath.Join(t.TempDir(), "x.db")
	if _, _, ok, err := Read(ctx, path); ok || err != nil {
		t.Fatalf("no file: %v %v", ok, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Read created the file: %v", err)
	}
	cp := Checkpoint{LastSeq: 1<<40 + 7, Done: false, Projection: projection.Campaigns, Start: "since:2026-12-01T09:00:00.5Z"}
	if err := Write(ctx, path, s, cp); err != nil {
		t.Fatal(err)
	}
	back, got, ok, err := Read(ctx, path)
	if err != nil || !ok {
		t.Fatalf("read: %v %v", ok, err)
	}
	if got != cp {
		t.Fatalf("checkpoint %+v, wrote %+v", got, cp)
	}
	diffEqual(t, s, back)

	// Resume: the rest of the events, and news for contacts with many revisions.
	rest := append(evs[len(evs)-2:],
		event(5, envelope.TypeReplyReceived, "lead0@northwind.example", "camp-1", 2*time.Hour),
		event(6, envelope.TypeEmailBounced, "lead5@northwind.example", "camp-2", 2*time.Hour))
	for _, env := range rest {
		for _, st := range []projection.Stores{s, back} {
			if _, err := projection.Apply(ctx, st, nil, env); err != nil {
				t.Fatal(err)
			}
		}
	}
	diffEqual(t, s, back)
	diffEqual(t, build(t, append(evs, rest[2:]...)), back)
	for _, campaign := range []string{"camp-1", "camp-2"} {
		a, _ := projection.Reader{Stores: s}.Campaign(ctx, "acme", campaign)
		b, _ := projection.Reader{Stores: back}.Campaign(ctx, "acme", campaign)
		if fmt.Sprintf("%+v", a) != fmt.Sprintf("%+v", b) {
			t.Fatalf("%s: %+v, resumed %+v", campaign, a, b)
		}
	}

	// Written again over the same file: replaced, the new checkpoint read back.
	cp = Checkpoint{LastSeq: 99, Done: true, Projection: projection.Contacts}
	if err := Write(ctx, path, back, cp); err != nil {
		t.Fatal(err)
	}
	again, got, ok, err := Read(ctx, path)
	if err != nil || !ok || got != cp {
		t.Fatalf("read again: %+v %v %v", got, ok, err)
	}
	diffEqual(t, back, again)
	if n := query[int](t, open(t, path), `SELECT count(*) FROM replay`); n != 5 {
		t.Fatalf("%d replay rows after a rewrite", n)
	}
}

func TestRejectsWhatIsNoFile(t *testing.T) {
	ctx := context.Background()
	s := build(t, history()[:3])
	dir := t.TempDir()
	cp := Checkpoint{LastSeq: 1}
	err := Write(ctx, dir, s, cp)
	if err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("a directory: %v", err)
	}
	missing := filepath.Join(dir, "missing", "x.db")
	err = Write(ctx, missing, s, cp)
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("a missing directory: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(missing)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the directory was created: %v", err)
	}
	if err := Write(ctx, "", s, cp); err == nil {
		t.Fatal("no path")
	}
	if err := Write(ctx, filepath.Join(dir, "y.db"), projection.Stores{}, cp); err == nil {
		t.Fatal("no stores")
	}
	if _, _, _, err := Read(ctx, dir); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("read a directory: %v", err)
	}

	// A file that is not a replay's is not taken for one.
	other := filepath.Join(dir, "other.db")
	if _, err := open(t, other).Exec(`CREATE TABLE t (x)`); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := Read(ctx, other); err == nil || ok {
		t.Fatalf("read another database: %v %v", ok, err)
	}
	text := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(text, []byte("not a database, but long enough to have a header of sorts............................................................"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := Read(ctx, text); err == nil || ok {
		t.Fatalf("read a text file: %v %v", ok, err)
	}

	// A write that fails (here: cancelled) leaves the file as it was and nothing else.
	path := filepath.Join(dir, "x.db")
	if err := Write(ctx, path, s, cp); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := Write(cancelled, path, build(t, history()), Checkpoint{LastSeq: 2}); err == nil {
		t.Fatal("a cancelled write succeeded")
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatal("a failed write changed the file")
	}
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed write left its temporary file: %v", err)
	}
	if _, got, ok, err := Read(ctx, path); err != nil || !ok || got != cp {
		t.Fatalf("after a failed write: %+v %v %v", got, ok, err)
	}
}
