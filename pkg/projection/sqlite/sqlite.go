// Package sqlite writes the projections into an SQLite file, one table per projection,
// for analysts to query with SQL (`exacto replay --into sqlite:FILE`), and reads the
// raw stores back to resume an interrupted replay.
//
// The tables (every time is RFC 3339 UTC text, every flag an INTEGER 0 or 1, every list
// comma-separated text):
//
//   - contacts: one row per contact record, the columns of its contact-level view
//     (Contact.View) and the record's JSON.
//   - contact_campaigns: one row per contact in each of its campaigns, from its
//     effective view there (Contact.InCampaign).
//   - campaigns: each campaign's counts, summed over the members of its shards as
//     projection.Reader.Campaign does; campaign_status the same counts by status.
//   - suppression: the suppression entries.
//   - discrepancies and undecided: those of every view above, campaign empty for the
//     contact-level view. A campaign's view includes what happened to the contact
//     everywhere, so a discrepancy of a contact-wide event may be listed under the
//     contact and under each of its campaigns.
//   - replay: the checkpoint (last_seq, done, projection, start, written_at), key and value.
//   - store: every key and value of the three stores (with the revision it had), from
//     which Read rebuilds them.
//
// The file is written in one transaction into FILE.tmp, synced, and renamed over FILE:
// a reader never sees a half-written file.
package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, pure Go

	"exacto.dev/pkg/lifecycle"
	"exacto.dev/pkg/projection"
)

// Checkpoint is where the replay written into a file got to.
type Checkpoint struct {
	LastSeq    uint64 `json:"last_seq"`   // the stream sequence of the last event applied
	Done       bool   `json:"done"`       // the replay reached the end it fixed
	Projection string `json:"projection"` // the projection the replay was asked for
	// Start is where the replay was asked to start: "" (the first event), "seq:N" or
	// "since:T"; a resume must ask for the same.
	Start string `json:"start,omitempty"`
}

// schema creates the tables; indexes are created once the rows are in.
var schema = []string{
	`CREATE TABLE contacts (
		tenant TEXT NOT NULL,
		contact_id TEXT NOT NULL,
		account_id TEXT NOT NULL,
		status TEXT NOT NULL,
		status_event TEXT NOT NULL,
		since TEXT,
		keys TEXT NOT NULL,
		emails TEXT NOT NULL,
		phones TEXT NOT NULL,
		campaigns TEXT NOT NULL,
		replied INTEGER NOT NULL,
		bounced INTEGER NOT NULL,
		soft_bounces INTEGER NOT NULL,
		unsubscribed INTEGER NOT NULL,
		suppressed INTEGER NOT NULL,
		meeting_booked INTEGER NOT NULL,
		opportunity INTEGER NOT NULL,
		auto_replies INTEGER NOT NULL,
		lead_status TEXT NOT NULL,
		discrepancies INTEGER NOT NULL,
		undecided INTEGER NOT NULL,
		record TEXT NOT NULL,
		PRIMARY KEY (tenant, contact_id))`,
	`CREATE TABLE contact_campaigns (
		tenant TEXT NOT NULL,
		contact_id TEXT NOT NULL,
		campaign TEXT NOT NULL,
		status TEXT NOT NULL,
		status_event TEXT NOT NULL,
		since TEXT,
		replied INTEGER NOT NULL,
		bounced INTEGER NOT NULL,
		unsubscribed INTEGER NOT NULL,
		suppressed INTEGER NOT NULL,
		meeting_booked INTEGER NOT NULL,
		opportunity INTEGER NOT NULL,
		discrepancies INTEGER NOT NULL,
		undecided INTEGER NOT NULL,
		PRIMARY KEY (tenant, contact_id, campaign))`,
	`CREATE TABLE campaigns (
		tenant TEXT NOT NULL,
		campaign TEXT NOT NULL,
		contacts INTEGER NOT NULL,
		replies INTEGER NOT NULL,
		bounces INTEGER NOT NULL,
		unsubscribes INTEGER NOT NULL,
		meetings INTEGER NOT NULL,
		opportunities INTEGER NOT NULL,
		discrepancies INTEGER NOT NULL,
		undecided INTEGER NOT NULL,
		by_status TEXT NOT NULL,
		PRIMARY KEY (tenant, campaign))`,
	`CREATE TABLE campaign_status (
		tenant TEXT NOT NULL,
		campaign TEXT NOT NULL,
		status TEXT NOT NULL,
		contacts INTEGER NOT NULL,
		PRIMARY KEY (tenant, campaign, status))`,
	`CREATE TABLE suppression (
		tenant TEXT NOT NULL,
		contact_id TEXT NOT NULL,
		status TEXT NOT NULL,
		event TEXT NOT NULL,
		since TEXT NOT NULL,
		keys TEXT NOT NULL,
		PRIMARY KEY (tenant, contact_id))`,
	`CREATE TABLE discrepancies (
		tenant TEXT NOT NULL,
		contact_id TEXT NOT NULL,
		campaign TEXT NOT NULL,
		event TEXT NOT NULL,
		type TEXT NOT NULL,
		time TEXT,
		target TEXT NOT NULL,
		state TEXT NOT NULL,
		against TEXT NOT NULL,
		rule TEXT NOT NULL,
		why TEXT NOT NULL)`,
	`CREATE TABLE undecided (
		tenant TEXT NOT NULL,
		contact_id TEXT NOT NULL,
		campaign TEXT NOT NULL,
		a TEXT NOT NULL,
		b TEXT NOT NULL,
		why TEXT NOT NULL)`,
	`CREATE TABLE replay (key TEXT PRIMARY KEY, value TEXT NOT NULL)`,
	`CREATE TABLE store (
		projection TEXT NOT NULL,
		key TEXT NOT NULL,
		value BLOB NOT NULL,
		rev INTEGER NOT NULL,
		PRIMARY KEY (projection, key))`,
}

var indexes = []string{
	`CREATE INDEX contact_campaigns_by_campaign ON contact_campaigns (tenant, campaign, status)`,
	`CREATE INDEX contacts_by_status ON contacts (tenant, status)`,
	`CREATE INDEX discrepancies_by_contact ON discrepancies (tenant, contact_id, campaign)`,
	`CREATE INDEX discrepancies_by_rule ON discrepancies (rule)`,
	`CREATE INDEX undecided_by_contact ON undecided (tenant, contact_id, campaign)`,
}

// Write creates the file at path, or replaces its contents, with the projections of s
// and checkpoint. path must not be a directory and its directory must exist.
func Write(ctx context.Context, path string, s projection.Stores, checkpoint Checkpoint) (err error) {
	if s.Contacts == nil || s.Campaigns == nil || s.Suppression == nil {
		return errors.New("sqlite: write: the stores of all three projections are needed")
	}
	if err := checkPath(path); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := removeDB(tmp); err != nil {
		return fmt.Errorf("sqlite: %s: %w", tmp, err)
	}
	defer func() {
		if err != nil {
			removeDB(tmp)
		}
	}()
	if err := write(ctx, tmp, s, checkpoint); err != nil {
		return fmt.Errorf("sqlite: write %s: %w", path, err)
	}
	// The file is written without a journal or syncs (it is not FILE yet): sync it once,
	// then swap it in.
	if err := syncFile(tmp); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	// A journal left by a crashed writer of the old file must not be applied to the new.
	for _, suffix := range []string{"-journal", "-wal", "-shm"} {
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("sqlite: %w", err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	syncFile(filepath.Dir(path)) // the rename, best effort
	return nil
}

// checkPath rejects what Write cannot replace with a file.
func checkPath(path string) error {
	if path == "" {
		return errors.New("sqlite: no file named")
	}
	if strings.HasSuffix(path, string(os.PathSeparator)) {
		return fmt.Errorf("sqlite: %s names a directory, not a file", path)
	}
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		return fmt.Errorf("sqlite: %s is a directory, not a file", path)
	case err == nil && !fi.Mode().IsRegular():
		return fmt.Errorf("sqlite: %s is not a regular file", path)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("sqlite: %w", err)
	}
	dir := filepath.Dir(path)
	fi, err = os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("sqlite: cannot write %s: its directory %s does not exist", path, dir)
	case err != nil:
		return fmt.Errorf("sqlite: cannot write %s: %w", path, err)
	case !fi.IsDir():
		return fmt.Errorf("sqlite: cannot write %s: %s is not a directory", path, dir)
	}
	return nil
}

// removeDB removes an SQLite file and whatever journal it has.
func removeDB(path string) error {
	var errs []error
	for _, suffix := range []string{"", "-journal", "-wal", "-shm"} {
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	return errors.Join(err, f.Close())
}

// dsn is the driver's name for path: a file: URI (so that no character of the path is
// taken for a parameter) with params.
func dsn(path string, params string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(abs), RawQuery: params}
	return u.String(), nil
}

func write(ctx context.Context, file string, s projection.Stores, cp Checkpoint) error {
	name, err := dsn(file, "_pragma=journal_mode(OFF)&_pragma=synchronous(OFF)")
	if err != nil {
		return err
	}
	db, err := sql.Open("sqlite", name)
	if err != nil {
		return err
	}
	db.SetMaxOpenConns(1)
	err = fill(ctx, db, s, cp)
	return errors.Join(err, db.Close())
}

func fill(ctx context.Context, db *sql.DB, s projection.Stores, cp Checkpoint) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, stmt := range schema {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("create: %w", err)
		}
	}
	w, err := newWriter(ctx, tx)
	if err != nil {
		return err
	}
	defer w.close()
	if err := w.contacts(ctx, s.Contacts); err != nil {
		return fmt.Errorf("contacts: %w", err)
	}
	if err := w.campaigns(ctx, s.Campaigns); err != nil {
		return fmt.Errorf("campaigns: %w", err)
	}
	if err := w.suppression(ctx, s.Suppression); err != nil {
		return fmt.Errorf("suppression: %w", err)
	}
	for _, kv := range [][2]string{
		{"last_seq", strconv.FormatUint(cp.LastSeq, 10)},
		{"done", strconv.FormatBool(cp.Done)},
		{"projection", cp.Projection},
		{"start", cp.Start},
		{"written_at", time.Now().UTC().Format(time.RFC3339Nano)},
	} {
		if _, err := tx.ExecContext(ctx, `INSERT INTO replay (key, value) VALUES (?, ?)`, kv[0], kv[1]); err != nil {
			return fmt.Errorf("replay: %w", err)
		}
	}
	for _, stmt := range indexes {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("index: %w", err)
		}
	}
	return tx.Commit()
}

// writer holds the prepared inserts of one Write.
type writer struct {
	store, contact, member, campaign, status, suppressed, discrepancy, undecided *sql.Stmt
}

func newWriter(ctx context.Context, tx *sql.Tx) (*writer, error) {
	w := &writer{}
	for _, p := range []struct {
		stmt **sql.Stmt
		sql  string
	}{
		{&w.store, `INSERT INTO store (projection, key, value, rev) VALUES (?, ?, ?, ?)`},
		{&w.contact, `INSERT INTO contacts (tenant, contact_id, account_id, status, status_event, since, keys, emails, phones,
			campaigns, replied, bounced, soft_bounces, unsubscribed, suppressed, meeting_booked, opportunity, auto_replies,
			lead_status, discrepancies, undecided, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`},
		{&w.member, `INSERT INTO contact_campaigns (tenant, contact_id, campaign, status, status_event, since, replied, bounced,
			unsubscribed, suppressed, meeting_booked, opportunity, discrepancies, undecided)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`},
		{&w.campaign, `INSERT INTO campaigns (tenant, campaign, contacts, replies, bounces, unsubscribes, meetings,
			opportunities, discrepancies, undecided, by_status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`},
		{&w.status, `INSERT INTO campaign_status (tenant, campaign, status, contacts) VALUES (?, ?, ?, ?)`},
		{&w.suppressed, `INSERT INTO suppression (tenant, contact_id, status, event, since, keys) VALUES (?, ?, ?, ?, ?, ?)`},
		{&w.discrepancy, `INSERT INTO discrepancies (tenant, contact_id, campaign, event, type, time, target, state, against,
			rule, why) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`},
		{&w.undecided, `INSERT INTO undecided (tenant, contact_id, campaign, a, b, why) VALUES (?, ?, ?, ?, ?, ?)`},
	} {
		st, err := tx.PrepareContext(ctx, p.sql)
		if err != nil {
			w.close()
			return nil, fmt.Errorf("prepare: %w", err)
		}
		*p.stmt = st
	}
	return w, nil
}

func (w *writer) close() {
	for _, st := range []*sql.Stmt{w.store, w.contact, w.member, w.campaign, w.status, w.suppressed, w.discrepancy, w.undecided} {
		if st != nil {
			st.Close()
		}
	}
}

// each calls f with every key and value of projection name's store st, after keeping
// it in the store table.
func (w *writer) each(ctx context.Context, name string, st projection.Store, f func(key string, value []byte) error) error {
	keys, err := st.Keys(ctx, "")
	if err != nil {
		return err
	}
	for _, k := range keys {
		v, rev, err := st.Get(ctx, k)
		if err != nil {
			return err
		}
		if rev == 0 {
			continue // deleted since it was listed
		}
		if v == nil {
			v = []byte{}
		}
		if _, err := w.store.ExecContext(ctx, name, k, v, int64(rev)); err != nil {
			return err
		}
		if err := f(k, v); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	return nil
}

func (w *writer) contacts(ctx context.Context, st projection.Store) error {
	return w.each(ctx, projection.Contacts, st, func(_ string, value []byte) error {
		var c projection.Contact
		if err := json.Unmarshal(value, &c); err != nil {
			return err
		}
		v := c.View()
		var emails, phones []string
		for _, k := range c.Keys {
			if e, ok := strings.CutPrefix(k, "email:"); ok {
				emails = append(emails, e)
			} else if p, ok := strings.CutPrefix(k, "phone:"); ok {
				phones = append(phones, p)
			}
		}
		campaigns := slices.Sorted(maps.Keys(c.Campaigns))
		if _, err := w.contact.ExecContext(ctx, c.Tenant, c.ContactID, c.AccountID, string(v.Status), v.StatusEvent, when(v.Since),
			list(c.Keys), list(emails), list(phones), list(campaigns), flag(c.Replied()), flag(v.Bounced), v.SoftBounces,
			flag(v.Unsubscribed), flag(v.Suppressed), flag(v.MeetingBooked), flag(v.Opportunity), v.AutoReplies, v.LeadStatus,
			len(v.Discrepancies), len(v.Undecided), string(value)); err != nil {
			return err
		}
		if err := w.findings(ctx, c, "", v); err != nil {
			return err
		}
		for _, campaign := range campaigns {
			cv := c.InCampaign(campaign)
			if _, err := w.member.ExecContext(ctx, c.Tenant, c.ContactID, campaign, string(cv.Status), cv.StatusEvent, when(cv.Since),
				flag(cv.Replied), flag(cv.Bounced), flag(cv.Unsubscribed), flag(cv.Suppressed), flag(cv.MeetingBooked),
				flag(cv.Opportunity), len(cv.Discrepancies), len(cv.Undecided)); err != nil {
				return err
			}
			if err := w.findings(ctx, c, campaign, cv); err != nil {
				return err
			}
		}
		return nil
	})
}

// findings writes the discrepancies and undecided pairs of c's view in campaign.
func (w *writer) findings(ctx context.Context, c projection.Contact, campaign string, v lifecycle.View) error {
	for _, d := range v.Discrepancies {
		if _, err := w.discrepancy.ExecContext(ctx, c.Tenant, c.ContactID, campaign, d.Event, d.Type, when(d.Time),
			string(d.Target), string(d.State), d.Against, string(d.Rule), d.Why); err != nil {
			return err
		}
	}
	for _, u := range v.Undecided {
		if _, err := w.undecided.ExecContext(ctx, c.Tenant, c.ContactID, campaign, u.A, u.B, u.Why); err != nil {
			return err
		}
	}
	return nil
}

func (w *writer) campaigns(ctx context.Context, st projection.Store) error {
	type id struct{ tenant, campaign string }
	counts := map[id]*lifecycle.Counts{}
	err := w.each(ctx, projection.Campaigns, st, func(_ string, value []byte) error {
		var sh projection.Shard
		if err := json.Unmarshal(value, &sh); err != nil {
			return err
		}
		c := counts[id{sh.Tenant, sh.Campaign}]
		if c == nil {
			c = &lifecycle.Counts{ByStatus: map[lifecycle.Status]int{}}
			counts[id{sh.Tenant, sh.Campaign}] = c
		}
		for _, m := range sh.Members { // as projection.Reader.Campaign counts them
			c.Add(lifecycle.View{Status: m.Status, Replied: m.Replied, Bounced: m.Bounced, Unsubscribed: m.Unsubscribed,
				MeetingBooked: m.MeetingBooked, Opportunity: m.Opportunity,
				Discrepancies: make([]lifecycle.Discrepancy, m.Discrepancies), Undecided: make([]lifecycle.Undecided, m.Undecided)})
		}
		return nil
	})
	if err != nil {
		return err
	}
	ids := slices.SortedFunc(maps.Keys(counts), func(a, b id) int {
		return cmp.Or(cmp.Compare(a.tenant, b.tenant), cmp.Compare(a.campaign, b.campaign))
	})
	for _, k := range ids {
		c := counts[k]
		byStatus, err := json.Marshal(c.ByStatus)
		if err != nil {
			return err
		}
		if _, err := w.campaign.ExecContext(ctx, k.tenant, k.campaign, c.Contacts, c.Replies, c.Bounces, c.Unsubscribes,
			c.Meetings, c.Opportunities, c.Discrepancies, c.Undecided, string(byStatus)); err != nil {
			return err
		}
		for _, status := range slices.Sorted(maps.Keys(c.ByStatus)) {
			if _, err := w.status.ExecContext(ctx, k.tenant, k.campaign, string(status), c.ByStatus[status]); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *writer) suppression(ctx context.Context, st projection.Store) error {
	return w.each(ctx, projection.Suppression, st, func(_ string, value []byte) error {
		var s projection.Suppressed
		if err := json.Unmarshal(value, &s); err != nil {
			return err
		}
		_, err := w.suppressed.ExecContext(ctx, s.Tenant, s.ContactID, string(s.Status), s.Event, s.Since, list(s.Keys))
		return err
	})
}

func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

func list(s []string) string { return strings.Join(s, ",") }

// when is t as the projections write times, NULL for none.
func when(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// Read loads the stores and the checkpoint of the file at path, written by Write, into
// memory, to resume the replay. ok is false, with empty stores, when there is no file
// (or an empty one); a file that is not one Write wrote is an error.
//
// The revisions are renumbered: each value is at revision 1 of its store, and a
// campaign member or suppression entry keeps, relative to its contact record, whether
// it was computed from the record's latest revision (then 1) or an older one (then 0),
// so that applying further events to the stores updates them as it would have.
func Read(ctx context.Context, path string) (s projection.Stores, cp Checkpoint, ok bool, err error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return projection.Memories(), Checkpoint{}, false, nil
	case err != nil:
		return projection.Stores{}, Checkpoint{}, false, fmt.Errorf("sqlite: %w", err)
	case fi.IsDir():
		return projection.Stores{}, Checkpoint{}, false, fmt.Errorf("sqlite: %s is a directory, not a file", path)
	case fi.Size() == 0:
		return projection.Memories(), Checkpoint{}, false, nil
	}
	name, err := dsn(path, "mode=ro")
	if err != nil {
		return projection.Stores{}, Checkpoint{}, false, fmt.Errorf("sqlite: %w", err)
	}
	db, err := sql.Open("sqlite", name)
	if err != nil {
		return projection.Stores{}, Checkpoint{}, false, fmt.Errorf("sqlite: %w", err)
	}
	defer db.Close()
	s, cp, err = read(ctx, db)
	if err != nil {
		return projection.Stores{}, Checkpoint{}, false, fmt.Errorf("sqlite: read %s: %w", path, err)
	}
	return s, cp, true, nil
}

func read(ctx context.Context, db *sql.DB) (projection.Stores, Checkpoint, error) {
	var cp Checkpoint
	var tables int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name IN ('replay', 'store')`).Scan(&tables)
	if err != nil {
		return projection.Stores{}, cp, err
	}
	if tables != 2 {
		return projection.Stores{}, cp, errors.New("not a replay file (no replay and store tables): remove it or name another file")
	}
	rows, err := db.QueryContext(ctx, `SELECT key, value FROM replay`)
	if err != nil {
		return projection.Stores{}, cp, err
	}
	vals := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			rows.Close()
			return projection.Stores{}, cp, err
		}
		vals[k] = v
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return projection.Stores{}, cp, err
	}
	if cp.LastSeq, err = strconv.ParseUint(vals["last_seq"], 10, 64); err != nil {
		return projection.Stores{}, cp, fmt.Errorf("checkpoint last_seq %q: %w", vals["last_seq"], err)
	}
	if cp.Done, err = strconv.ParseBool(vals["done"]); err != nil {
		return projection.Stores{}, cp, fmt.Errorf("checkpoint done %q: %w", vals["done"], err)
	}
	cp.Projection, cp.Start = vals["projection"], vals["start"]

	type entry struct {
		key   string
		value []byte
	}
	raw := map[string][]entry{}
	revs := map[string]int64{} // of the contact records
	rows, err = db.QueryContext(ctx, `SELECT projection, key, value, rev FROM store ORDER BY projection, key`)
	if err != nil {
		return projection.Stores{}, cp, err
	}
	for rows.Next() {
		var name, key string
		var value []byte
		var rev int64
		if err := rows.Scan(&name, &key, &value, &rev); err != nil {
			rows.Close()
			return projection.Stores{}, cp, err
		}
		if _, err := (projection.Stores{}).Of(name); err != nil {
			rows.Close()
			return projection.Stores{}, cp, fmt.Errorf("store: %w", err)
		}
		raw[name] = append(raw[name], entry{key, value})
		if name == projection.Contacts {
			revs[key] = rev
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return projection.Stores{}, cp, err
	}
	// latest is the renumbered revision of a value computed from revision rev of a
	// contact record: 1 if it is the record's revision (now 1), else 0.
	latest := func(tenant, contactID string, rev uint64) uint64 {
		if r := revs[projection.ContactKey(tenant, contactID)]; r > 0 && rev >= uint64(r) {
			return 1
		}
		return 0
	}
	s := projection.Memories()
	for _, name := range projection.Names {
		st, _ := s.Of(name)
		for _, e := range raw[name] {
			v := e.value
			switch name {
			case projection.Campaigns:
				var sh projection.Shard
				if err := json.Unmarshal(v, &sh); err != nil {
					return projection.Stores{}, cp, fmt.Errorf("store: campaign shard %s: %w", e.key, err)
				}
				for id, m := range sh.Members {
					m.Rev = latest(sh.Tenant, id, m.Rev)
					sh.Members[id] = m
				}
				if v, err = json.Marshal(sh); err != nil {
					return projection.Stores{}, cp, err
				}
			case projection.Suppression:
				var su projection.Suppressed
				if err := json.Unmarshal(v, &su); err != nil {
					return projection.Stores{}, cp, fmt.Errorf("store: suppression entry %s: %w", e.key, err)
				}
				su.Rev = latest(su.Tenant, su.ContactID, su.Rev)
				if v, err = json.Marshal(su); err != nil {
					return projection.Stores{}, cp, err
				}
			}
			if _, err := st.Put(ctx, e.key, v, 0); err != nil {
				return projection.Stores{}, cp, fmt.Errorf("store: %s %s: %w", name, e.key, err)
			}
		}
	}
	return s, cp, nil
}
