package handler

import (
	"sync"
	"time"

	"exacto.dev/pkg/platform/hubspot"
)

// A reply's classification follows it within seconds (the classifier is the fastest
// consumer, and the contact's lease hands the reply's note to its classification in
// order), and all it changes is that note's classification paragraph and owner. The
// crmwriter remembers, for noteMemoryFor, the note it just wrote for a reply (its id,
// body and owner as written), so the classification updates it without reading it back
// first: one HubSpot request per classification instead of two. A note changed in
// HubSpot within that window by anyone but this process (a person, another
// integration) would have its body written over; past it, and
// on any other replica, the note is read first as before. A remembered note HubSpot no
// longer has (404: archived, merged) is read again at once.

// noteMemoryFor is how long a written note is remembered (a var for tests).
var noteMemoryFor = 30 * time.Second

// noteMemoryBytes bounds the bodies remembered (a body may be up to 64 KB).
const noteMemoryBytes = 4 << 20

// recentNotes are the notes written for replies in the last noteMemoryFor, by the
// reply's event id; each is taken at most once.
type recentNotes struct {
	mu    sync.Mutex
	by    map[string]recentNote
	order []putAt // oldest first; an entry taken or replaced since is skipped
	bytes int     // of the bodies in by
}

type recentNote struct {
	note hubspot.Note // ID, Body and OwnerID as written
	at   time.Time
}

type putAt struct {
	key string
	at  time.Time
}

func newRecentNotes() *recentNotes { return &recentNotes{by: map[string]recentNote{}} }

func noteKey(tenant, replyID string) string { return tenant + "\x00" + replyID }

// put remembers n, the note of tenant's reply replyID, as written now.
func (r *recentNotes) put(tenant, replyID string, n hubspot.Note, now time.Time) {
	key := noteKey(tenant, replyID)
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.by[key]; ok {
		r.bytes -= len(old.note.Body)
	}
	r.by[key] = recentNote{hubspot.Note{ID: n.ID, Body: n.Body, OwnerID: n.OwnerID}, now}
	r.bytes += len(n.Body)
	r.order = append(r.order, putAt{key, now})
	for len(r.order) > 0 && (r.bytes > noteMemoryBytes || now.Sub(r.order[0].at) >= noteMemoryFor) {
		w := r.order[0]
		r.order = r.order[1:]
		if e, ok := r.by[w.key]; ok && e.at.Equal(w.at) {
			delete(r.by, w.key)
			r.bytes -= len(e.note.Body)
		}
	}
}

// take returns and forgets the note of tenant's reply replyID, if it was written less
// than noteMemoryFor before now.
func (r *recentNotes) take(tenant, replyID string, now time.Time) (hubspot.Note, bool) {
	key := noteKey(tenant, replyID)
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.by[key]
	if !ok {
		return hubspot.Note{}, false
	}
	delete(r.by, key)
	r.bytes -= len(e.note.Body)
	return e.note, now.Sub(e.at) < noteMemoryFor
}
