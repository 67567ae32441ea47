package broker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"exacto.dev/pkg/stream"
)

// The process syncs its own writes. With sync always, nats-server fsyncs each stored
// message on its own: concurrent writers cannot share an fsync, and its one way to
// share one on a single node (an atomic batch) stages every batch in a store of its own
// — six sync operations, a dozen directory operations and every message written twice
// (docs/durability.md). The embedded server therefore runs with its own periodic sync
// (nats-server's default, every two minutes) and this process fsyncs, itself, what a
// writer must not acknowledge before it is on disk: after its PubAcks, a writer asks
// for its stores' sync (Conn.Durable, or the $EXACTO.SYNC request from another
// process) and the syncer makes every write those stores held when it was asked
// durable — one round of fdatasyncs for every request waiting, however many. The
// server has written a stored message to its block file before it acknowledges it
// (flush in place: every store but the asynchronously persisted ones), so an fsync of
// that file after the PubAck covers it.
//
// What a round syncs of a store (<store>/$G/streams/<name>): its last two message
// blocks (a message is always appended to the last; the one before it may have been
// filled since the last round), the blocks directory when a block was added, and the
// stream's own files (meta.inf, meta.sum) when they changed. Once a second a sweep
// fsyncs every file of every durable store that changed (a block nats-server
// compacted, a consumer's state, a rewritten definition) and its directory.
//
// This depends on the filestore's layout (nats-server 2.15: msgs/<index>.blk, the
// stream's meta files beside); TestSyncCoversWhatTheServerStored checks it on the
// server embedded, and tests/TestPowerCut checks what a power cut leaves.
// sweepEvery is how often every changed file of the durable stores is fsynced.
const sweepEvery = time.Second

// Each round's size: what one round of fdatasyncs made durable.
var (
	roundRequests, _ = otel.Meter("exacto/store").Int64Histogram("exacto_store_sync_round_requests",
		metric.WithDescription("writes made durable per round of fdatasyncs of the embedded store (the process's group commit): webhooks' events, derived events, checkpoints, dead letters"),
		metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
	fdatasyncs, _ = otel.Meter("exacto/store").Int64Counter("exacto_store_fsyncs",
		metric.WithDescription("fsyncs and fdatasyncs of the embedded store's files by the process"))
)

// syncer makes the embedded server's durable stores durable on request.
type syncer struct {
	root    string   // <store>/$G/streams
	durable []string // the stores the sweep keeps synced

	mu      sync.Mutex
	pending []*syncReq
	kick    chan struct{}
	stop    chan struct{}
	stopped sync.Once
	done    chan struct{}
	// What each file was when last synced, and each store's last block: shared by the
	// rounds and the sweep, which run side by side (a round never waits for a sweep's
	// fsyncs); held only to read or write them, never across an fsync.
	notes     sync.Mutex
	seen      map[string]fileState
	last      map[string]int
	lastStart time.Time // when the last round began (the rounds' own)
	// observe, when set (tests, under notes), sees each file fsynced and its size then.
	observe func(path string, size int64)
}

type syncReq struct {
	names []string
	full  bool // every file of the stores, not only the last blocks
	done  chan error
}

type fileState struct {
	size  int64
	mtime time.Time
	ino   uint64
}

func newSyncer(storeDir string) *syncer {
	s := &syncer{root: filepath.Join(storeDir, "$G", "streams"), kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), seen: map[string]fileState{}, last: map[string]int{}}
	go s.run()
	return s
}

// Sync returns once everything the named stores held when it was called is on disk.
func (s *syncer) Sync(ctx context.Context, names ...string) error {
	return s.request(ctx, &syncReq{names: names, done: make(chan error, 1)})
}

// SyncAll fsyncs every file of the named stores, and their directories.
func (s *syncer) SyncAll(ctx context.Context, names ...string) error {
	return s.request(ctx, &syncReq{names: names, full: true, done: make(chan error, 1)})
}

func (s *syncer) request(ctx context.Context, r *syncReq) error {
	s.mu.Lock()
	s.pending = append(s.pending, r)
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return errors.New("sync stopped: shutting down")
	}
}

// Keep makes the sweep keep names synced (the durable stores, once declared).
func (s *syncer) Keep(names []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.durable = append([]string(nil), names...)
}

// close stops the syncer (a Conn may be closed twice).
func (s *syncer) close() {
	s.stopped.Do(func() { close(s.stop) })
	<-s.done
}

func (s *syncer) run() {
	swept := make(chan struct{})
	defer func() { <-swept; close(s.done) }()
	go s.sweep(swept)
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
			s.gather()
			s.round()
		}
	}
}

// sweep runs beside the rounds: a sweep fsyncs every changed file of every durable
// store (a second's consumer states and compacted blocks: 1 to 25 ms under load), and
// a round waiting behind it would hold every writer's acknowledgement that long.
func (s *syncer) sweep(done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		durable := s.durable
		s.mu.Unlock()
		for _, name := range durable {
			s.syncAll(name) // an error here is the next request's to meet
		}
		s.forget()
	}
}

// roundEvery is the least time from one round's start to the next: an fdatasync costs
// this machine about 100 µs of CPU whatever it covers, so under load the requests
// arriving meanwhile share the next round instead of each paying for one. A request
// that finds the last round longer ago than this is served at once.
const roundEvery = time.Millisecond

// gather waits until roundEvery has passed since the last round began.
func (s *syncer) gather() {
	wait := time.Until(s.lastStart.Add(roundEvery))
	if wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.stop:
	}
}

// round syncs the stores of every request waiting now and answers them.
func (s *syncer) round() {
	s.mu.Lock()
	reqs := s.pending
	s.pending = nil
	s.mu.Unlock()
	s.lastStart = time.Now()
	roundRequests.Record(context.Background(), int64(len(reqs)))
	errs := map[string]error{}
	for _, r := range reqs {
		for _, name := range r.names {
			if _, done := errs[name]; !done && !r.full {
				errs[name] = s.syncLast(name)
			}
		}
	}
	for _, r := range reqs {
		var err error
		for _, name := range r.names {
			if r.full {
				err = errors.Join(err, s.syncAll(name))
			} else if err = errs[name]; err != nil {
				break
			}
		}
		r.done <- err
	}
}

// syncLast fsyncs store name's blocks written since its last round (the last two, or
// every one added since), the blocks directory when a block was added, and its meta
// files when they changed.
func (s *syncer) syncLast(name string) error {
	dir := filepath.Join(s.root, name)
	msgs := filepath.Join(dir, "msgs")
	block := func(i int) string { return filepath.Join(msgs, strconv.Itoa(i)+".blk") }
	s.notes.Lock()
	prev, ok := s.last[name]
	s.notes.Unlock()
	if ok { // the store made again, or its blocks removed: find its blocks anew
		if _, err := os.Stat(block(prev)); err != nil {
			ok = false
		}
	}
	if !ok {
		// Not known where the last round left it (the first round, a block removed):
		// every block that changed since it was last seen synced, not only the last.
		last, err := lastBlock(msgs)
		if err != nil {
			return err
		}
		if last == 0 {
			return fmt.Errorf("sync %s: no message block in %s (has the store's layout changed?)", name, msgs)
		}
		if err := s.syncDir(msgs, true); err != nil {
			return fmt.Errorf("sync %s: %w", name, err)
		}
		s.noteLast(name, last)
		return s.syncMeta(name, dir)
	}
	last, grew := prev, false
	for { // blocks added since: the directory holds new names
		if _, err := os.Stat(block(last + 1)); err != nil {
			break
		}
		last, grew = last+1, true
	}
	// Every block from the one last synced to the last (a burst of large messages may
	// have filled several), each only if it changed since it was synced: a round that
	// finds the store as the last one left it costs no fdatasync.
	for i := prev; i <= last; i++ {
		if _, err := s.syncChanged(block(i), true); err != nil && !(i < last && errors.Is(err, fs.ErrNotExist)) {
			return fmt.Errorf("sync %s: %w", name, err)
		}
	}
	if grew {
		if err := fsyncPath(msgs); err != nil {
			return fmt.Errorf("sync %s: %w", name, err)
		}
	}
	s.noteLast(name, last) // only once every block up to it is synced
	return s.syncMeta(name, dir)
}

// syncMeta fsyncs store name's own files (meta.inf, meta.sum) when they changed, and
// then its directory, or the directory alone when it changed.
func (s *syncer) syncMeta(name, dir string) error {
	// The directory too, by its own note: nats-server renames a new meta file in, and a
	// sweep beside this round may have synced and noted the file but not yet the
	// directory that names it.
	st, changed, err := s.changed(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", name, err)
	}
	for _, f := range []string{"meta.inf", "meta.sum"} {
		c, err := s.syncChanged(filepath.Join(dir, f), false)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("sync %s: %w", name, err)
		}
		changed = changed || c
	}
	if changed {
		return s.syncedDir(dir, st)
	}
	return nil
}

// syncDir fsyncs every file of dir that changed since it was last synced (data only
// with data), and dir itself when one did or its entries changed.
func (s *syncer) syncDir(dir string, data bool) error {
	st, changed, err := s.changed(dir) // before listing: the entries listed are in st
	if err != nil {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		c, err := s.syncChanged(filepath.Join(dir, e.Name()), data)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		changed = changed || c
	}
	if changed {
		return s.syncedDir(dir, st)
	}
	return nil
}

// changed reports whether file or directory p changed (a directory: an entry added,
// removed or renamed over) since it was last synced, and what it is now.
func (s *syncer) changed(p string) (fileState, bool, error) {
	st, err := stat(p)
	if err != nil {
		return fileState{}, false, err
	}
	s.notes.Lock()
	prev, ok := s.seen[p]
	s.notes.Unlock()
	return st, !ok || prev != st, nil
}

// syncedDir fsyncs directory dir and notes it as it was (st) before.
func (s *syncer) syncedDir(dir string, st fileState) error {
	if err := fsyncPath(dir); err != nil {
		return err
	}
	s.noteSynced(dir, st)
	return nil
}

// syncAll fsyncs every file of store name that changed since it was last synced, and
// the directories that hold them.
func (s *syncer) syncAll(name string) error {
	// The last block as it is before the walk: each block up to it is synced by the
	// walk as the walk finds it, so the next round may start there. One found after the
	// walk may have been added while it ran, after it synced the block before: a round
	// starting at it would leave that block's last writes unsynced.
	last, lerr := lastBlock(filepath.Join(s.root, name, "msgs"))
	dirs := map[string]fileState{} // the directories seen, as they were when seen
	toSync := map[string]bool{}    // those to fsync
	err := filepath.WalkDir(filepath.Join(s.root, name), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) { // removed meanwhile (a compacted block's temp)
				return nil
			}
			return err
		}
		if d.IsDir() { // a block removed or renamed over changes its directory alone
			if st, changed, err := s.changed(p); err == nil {
				dirs[p], toSync[p] = st, changed
			}
			return nil
		}
		changed, err := s.syncChanged(p, false)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if changed {
			toSync[filepath.Dir(p)] = true
		}
		return nil
	})
	for d, st := range dirs {
		if toSync[d] {
			err = errors.Join(err, s.syncedDir(d, st))
		}
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", name, err)
	}
	if lerr == nil && last > 0 {
		s.noteLast(name, last) // every block up to it is synced: the next round starts there
	}
	return nil
}

// forget drops what the syncer noted of files that are gone (removed blocks, temp
// files), so that its notes do not grow with the store's history.
func (s *syncer) forget() {
	s.notes.Lock()
	paths := slices.Collect(maps.Keys(s.seen))
	s.notes.Unlock()
	for _, p := range paths {
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			s.notes.Lock()
			delete(s.seen, p)
			s.notes.Unlock()
		}
	}
}

// noteLast notes that every block of store name up to last is synced. A note taken
// earlier than another may land after it: that only makes the next round look at a
// block more.
func (s *syncer) noteLast(name string, last int) {
	s.notes.Lock()
	s.last[name] = last
	s.notes.Unlock()
}

// syncChanged fsyncs file p (its data alone: fdatasync) if it changed since it was last
// synced (or was never seen); it reports whether it did — then its directory holds a
// new name, perhaps.
func (s *syncer) syncChanged(p string, data bool) (bool, error) {
	if _, changed, err := s.changed(p); err != nil || !changed {
		return false, err
	}
	if err := s.syncFile(p, data); err != nil {
		return false, err
	}
	return true, nil
}

// syncFile fdatasyncs p (data only: the size a read needs is part of it) and notes
// what it was then.
func (s *syncer) syncFile(p string, data bool) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := stat(p)
	if err != nil {
		return err
	}
	if data {
		err = syscall.Fdatasync(int(f.Fd()))
	} else {
		err = f.Sync()
	}
	fdatasyncs.Add(context.Background(), 1)
	if err != nil {
		return err
	}
	s.noteSynced(p, st)
	return nil
}

// noteSynced notes file or directory p as it was (st) before an fsync of it that has
// completed, never before that fsync: a round beside the sweep would take it as synced.
func (s *syncer) noteSynced(p string, st fileState) {
	s.notes.Lock()
	s.seen[p] = st
	observe := s.observe
	s.notes.Unlock()
	if observe != nil {
		observe(p, st.size)
	}
}

func stat(p string) (fileState, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return fileState{}, err
	}
	st := fileState{size: fi.Size(), mtime: fi.ModTime()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
	}
	return st, nil
}

// fsyncPath fsyncs a directory (its entries) or file.
func fsyncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	fdatasyncs.Add(context.Background(), 1)
	return f.Sync()
}

// lastBlock is the highest block index in dir (0: none).
func lastBlock(dir string) (int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	last := 0
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".blk"); ok {
			if i, err := strconv.Atoi(n); err == nil {
				last = max(last, i)
			}
		}
	}
	return last, nil
}

// validStore reports whether name can be a stream's name (no path of another file).
func validStore(name string) bool {
	return name != "" && !strings.ContainsAny(name, "/\\.") && name != ".."
}

// serveSync answers stream.SyncSubject requests on nc with s: each in a goroutine of its own,
// so that concurrent requests share a round.
func serveSync(nc *nats.Conn, s *syncer) (*nats.Subscription, error) {
	return nc.Subscribe(stream.SyncSubject, func(m *nats.Msg) {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			reply := ""
			names := strings.Fields(string(m.Data))
			for _, n := range names {
				if !validStore(n) {
					m.Respond([]byte(fmt.Sprintf("sync: %q is no store name", n)))
					return
				}
			}
			if err := s.Sync(ctx, names...); err != nil {
				reply = err.Error()
			}
			m.Respond([]byte(reply))
		}()
	})
}
