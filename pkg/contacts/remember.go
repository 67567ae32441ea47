package contacts

import "sync"

// The index entries of a live directory are remembered. An entry (an identity key →
// the contact it was linked to) changes only when Record merges that contact into
// another, and then the contact's own record, which is always read, names the one it
// was merged into: a remembered entry is taken only when its contact's record is
// current and its own (resolve), else it is read again, so every answer is the one
// reading gives. A write at a remembered revision that moved on (another process
// wrote) fails, and everything Record remembered of its keys is forgotten and read
// again. Only entries found or written are remembered (a key not linked yet is asked
// each time: another process may link it). Live, each event's keys cost no round trip
// once their contact is known: the projector names every event, and the consumers
// find contacts by e-mail. (An entry the bucket lost in a power cut, while a worker of
// another process kept its memory, would be remembered until it is evicted or written:
// the projector links it again from the stream when it recovers.)

// indexMemorySize bounds each of the two generations of remembered entries.
const indexMemorySize = 8192

type indexMemory struct {
	mu        sync.Mutex
	cur, prev map[string]indexEntry
}

// indexEntry is a key's contact id at revision rev.
type indexEntry struct {
	id  string
	rev uint64
}

func newIndexMemory() *indexMemory {
	return &indexMemory{cur: map[string]indexEntry{}, prev: map[string]indexEntry{}}
}

func (m *indexMemory) get(key string) (indexEntry, bool) {
	if m == nil {
		return indexEntry{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.cur[key]; ok {
		return e, true
	}
	e, ok := m.prev[key]
	if ok {
		m.keep(key, e)
	}
	return e, ok
}

func (m *indexMemory) put(key string, e indexEntry) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keep(key, e)
}

// keep puts e in the current generation, starting a new one when it is full.
func (m *indexMemory) keep(key string, e indexEntry) {
	if _, in := m.cur[key]; !in && len(m.cur) >= indexMemorySize {
		m.prev, m.cur = m.cur, make(map[string]indexEntry, indexMemorySize)
	}
	m.cur[key] = e
}

func (m *indexMemory) forget(keys []string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		delete(m.cur, k)
		delete(m.prev, k)
	}
}
