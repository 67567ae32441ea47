package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// A power cut, simulated. kill -9 keeps the page cache, so an event written but not yet
// fsynced survives it: TestKill9LosesNoAcknowledgedEvent cannot catch a 200 sent before
// its fsync. Here `exacto up` runs under strace, which logs every open, write, fsync,
// rename and unlink the process makes. After kill -9 in the middle of a burst the log is
// replayed to find, for every file of the JetStream store, the length an fsync (or an
// O_SYNC write, or syncfs) had made durable, and each file is cut back to that length:
// what a power cut may leave of it. `exacto up` restarted on that store must hold every
// event it answered 200, once. The harness must be able to fail: with lazy sync
// (EXACTO_NATS_SYNC=2m: acknowledged before any fsync) it must find lost 200s.
//
// It holds whatever the gateway's publish path (one publish per event, or group commit):
// it looks only at the HTTP answers and at the server's syscalls.
func TestPowerCut(t *testing.T) {
	strace := straceForPowerCut(t)
	t.Run("sync-always", func(t *testing.T) {
		n := newNode(t, stripeConfig)
		// From an empty data dir, under strace from the first syscall: the streams'
		// creation is judged too (a stream whose meta was never synced vanishes).
		tr, m := n.startUnderStrace(strace, nil)
		url := "http://" + n.http + "/hooks/pay/tok-0123456789abcdef"
		const total = 300
		began := time.Now()
		acked := burstAndCut(t, url, total, total/3, tr.kill)
		burst := time.Since(began)
		if len(acked) == total {
			t.Fatal("the power cut came after the burst; nothing was tested")
		}
		cuts := m.cutThePower(t, m.alias)
		if m.eventsWrites == 0 || m.eventsSyncs == 0 {
			t.Fatalf("the trace shows %d writes and %d fsyncs of EXACTO_EVENTS' blocks: the replay saw nothing", m.eventsWrites, m.eventsSyncs)
		}
		n.start()
		lost := verifyAcknowledged(t, n, url, total, acked)
		for _, i := range lost {
			t.Errorf("event %d was answered 200 before the power cut but is not in the stream after restart", i)
		}
		t.Logf("burst: %d of %d answered 200 in %v before the power cut; %d files cut back (%s); lost: %d",
			len(acked), total, burst.Round(time.Millisecond), len(cuts), describeCuts(cuts), len(lost))
	})
	// The self-check: lazy sync answers 200 before the fsync, and a power cut loses
	// those events. The harness must report them lost, or it proves nothing.
	t.Run("lazy-sync-loses-acknowledged", func(t *testing.T) {
		n := newNode(t, stripeConfig)
		n.extraEnv = append(n.extraEnv, "EXACTO_NATS_SYNC=2m")
		// Create the store first, and make all of it durable (an fsync of every file and
		// directory), so that what is judged is the burst, not the streams' creation.
		n.start()
		if err := n.stop(); err != nil {
			t.Fatalf("SIGTERM: %v\n%s", err, n.out.String())
		}
		store := filepath.Join(n.dir, "data", "jetstream")
		baseline := map[string]int64{}
		err := filepath.WalkDir(store, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := f.Sync(); err != nil {
				return err
			}
			if d.Type().IsRegular() {
				info, err := f.Stat()
				if err != nil {
					return err
				}
				baseline[p] = info.Size()
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		tr, strict := n.startUnderStrace(strace, baseline)
		url := "http://" + n.http + "/hooks/pay/tok-0123456789abcdef"
		const total = 120
		acked := burstAndCut(t, url, total, total/2, tr.kill)
		// Two cuts of the same trace. The strict one (the model of sync-always) also
		// empties the stream definitions that `exacto up` rewrote at start without an
		// fsync (a temporary file renamed over meta.inf): the streams vanish. The other,
		// on a copy, lets a rename that replaces a file carry its data (ext4's
		// auto_da_alloc), so the definitions stay and what is lost is the unsynced tail
		// of the blocks: the acknowledgement before the fsync itself.
		ext4 := newNode(t, stripeConfig)
		ext4.extraEnv = n.extraEnv
		copyTree(t, filepath.Join(n.dir, "data"), filepath.Join(ext4.dir, "data"))
		strictCuts := strict.cutThePower(t, store)
		m := &powerCutModel{log: strict.log, alias: store, baseline: baseline, replaceCarriesData: true}
		ext4Cuts := m.cutThePower(t, filepath.Join(ext4.dir, "data", "jetstream"))
		n.start()
		strictLost := verifyAcknowledged(t, n, url, total, acked)
		ext4.start()
		ext4Lost := verifyAcknowledged(t, ext4, "http://"+ext4.http+"/hooks/pay/tok-0123456789abcdef", total, acked)
		for _, c := range []struct {
			name string
			lost []int
			cuts []pcCutFile
		}{{"strict", strictLost, strictCuts}, {"rename carries data", ext4Lost, ext4Cuts}} {
			if len(c.lost) == 0 {
				t.Errorf("%s cut: with lazy sync %d events answered 200 and the power cut lost none: the harness does not bite (%d files cut back: %s)", c.name, len(acked), len(c.cuts), describeCuts(c.cuts))
			}
			t.Logf("lazy sync, %s cut: %d of %d answered 200; %d files cut back (%s); the harness found %d acknowledged events lost",
				c.name, len(acked), total, len(c.cuts), describeCuts(c.cuts), len(c.lost))
		}
	})
}

// copyTree copies the regular files and directories under src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The syscalls the replay follows. A name prefixed with ? is one an architecture may
// lack (arm64 has no open, creat, rename, unlink).
const powerCutSyscalls = "openat,?open,?creat,close,write,writev,pwrite64,pwritev,pwritev2,ftruncate,truncate," +
	"fsync,fdatasync,sync_file_range,syncfs,sync,?rename,renameat,renameat2,?unlink,unlinkat"

func powerCutStraceArgs(log string) []string {
	// -f: every thread; -y: each fd printed with its path; -s 0: no buffer contents;
	// --seccomp-bpf: stop only at the traced syscalls (fast enough for a burst).
	return []string{"-f", "-qq", "-y", "-s", "0", "--seccomp-bpf", "-e", "trace=" + powerCutSyscalls, "-o", log}
}

// straceForPowerCut returns strace's path, or skips the test when strace is missing or
// ptrace is not permitted here (a container without it). .ci/run installs strace.
func straceForPowerCut(t *testing.T) string {
	p, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace is not installed (.ci/run installs it): the power cut cannot be simulated")
	}
	log := filepath.Join(t.TempDir(), "probe.strace")
	out, err := exec.Command(p, append(powerCutStraceArgs(log), "/bin/sh", "-c", "exit 0")...).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "Operation not permitted") || strings.Contains(string(out), "EPERM") {
			t.Skipf("ptrace is not permitted here, strace cannot trace: %s", strings.TrimSpace(string(out)))
		}
		t.Fatalf("strace does not run: %v\n%s", err, out)
	}
	return p
}

// tracedUp is `exacto up` run under strace.
type tracedUp struct {
	t    *testing.T
	cmd  *exec.Cmd // strace
	done chan struct{}
}

// startUnderStrace runs `exacto up` for n under strace and waits until /readyz answers
// 200. baseline holds the sizes of the store's files before (all durable); nil: none.
// n.start() runs it again later, without strace, on the same data dir.
func (n *node) startUnderStrace(strace string, baseline map[string]int64) (*tracedUp, *powerCutModel) {
	n.t.Helper()
	log := filepath.Join(n.t.TempDir(), "exacto.strace")
	n.out = &syncBuffer{}
	tr := &tracedUp{t: n.t, cmd: exec.Command(strace, append(powerCutStraceArgs(log), exactoBin, "up")...), done: make(chan struct{})}
	tr.cmd.Dir = n.dir
	tr.cmd.Env = n.env()
	tr.cmd.Stdout, tr.cmd.Stderr = n.out, n.out
	if err := tr.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	go func() { tr.cmd.Wait(); close(tr.done) }()
	n.t.Cleanup(tr.kill)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + n.admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case <-tr.done:
			n.t.Fatalf("exacto up under strace exited before it was ready; output:\n%s", n.out.String())
		default:
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("exacto up under strace did not become ready; output:\n%s", n.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return tr, &powerCutModel{log: log, alias: filepath.Join(n.dir, "data", "jetstream"), baseline: baseline}
}

// kill sends SIGKILL to the process strace traces (not to strace, which must live on
// to write the end of its log), then waits until strace has exited.
func (tr *tracedUp) kill() {
	select {
	case <-tr.done:
		return
	default:
	}
	for _, pid := range childPIDs(tr.cmd.Process.Pid) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	select {
	case <-tr.done:
	case <-time.After(30 * time.Second):
		tr.cmd.Process.Kill()
		<-tr.done
		tr.t.Errorf("strace did not exit within 30s of its tracee's SIGKILL")
	}
}

// childPIDs lists the processes whose parent is pid.
func childPIDs(pid int) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			pids = append(pids, child)
		}
	}
	return pids
}

// burstAndCut sends total signed Stripe deliveries from 8 senders, calls cut once killAfter
// of them were answered 200, and returns the events answered 200 with their ids.
func burstAndCut(t *testing.T, url string, total, killAfter int, cut func()) map[int]string {
	t.Helper()
	var next atomic.Int64
	var mu sync.Mutex
	acked := map[int]string{}
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 10 * time.Second}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1))
				if i > total {
					return
				}
				resp, err := client.Do(stripeDelivery(t, url, i, time.Now()))
				if err != nil {
					continue // the process died under us: not answered, not promised
				}
				var ans struct {
					IDs []string `json:"ids"`
				}
				err = json.NewDecoder(resp.Body).Decode(&ans)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					id := ""
					if err == nil && len(ans.IDs) == 1 {
						id = ans.IDs[0]
					}
					mu.Lock()
					acked[i] = id
					mu.Unlock()
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	deadline := time.After(60 * time.Second)
wait:
	for {
		mu.Lock()
		k := len(acked)
		mu.Unlock()
		if k >= killAfter {
			break
		}
		select {
		case <-done:
			break wait
		case <-deadline:
			break wait
		case <-time.After(time.Millisecond):
		}
	}
	cut()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(acked) == 0 {
		t.Fatal("no delivery was answered 200 before the power cut")
	}
	return acked
}

// verifyAcknowledged checks, after the restart, that the stream holds each event once,
// and returns the events answered 200 before the cut that it lost. Like
// TestKill9LosesNoAcknowledgedEvent it then redelivers everything: an event answered
// 200 must be a duplicate (stored 0), and the stream must end with all of them, once.
func verifyAcknowledged(t *testing.T, n *node, url string, total int, acked map[int]string) []int {
	t.Helper()
	ids := storedIDs(t, n.js())
	for id, c := range ids {
		if c != 1 {
			t.Errorf("envelope %s stored %d times after the power cut", id, c)
		}
	}
	lost := map[int]bool{}
	for i, id := range acked {
		if id != "" && ids[id] != 1 {
			lost[i] = true
		}
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for i := 1; i <= total; i++ {
		resp, err := client.Do(stripeDelivery(t, url, i, time.Now()))
		if err != nil {
			t.Fatal(err)
		}
		var ans struct {
			Stored int      `json:"stored"`
			IDs    []string `json:"ids"`
		}
		json.NewDecoder(resp.Body).Decode(&ans)
		resp.Body.Close()
		if resp.StatusCode != 200 || len(ans.IDs) != 1 {
			t.Fatalf("redelivery %d: %d %+v", i, resp.StatusCode, ans)
		}
		id, ok := acked[i]
		if !ok {
			continue
		}
		if id != "" && id != ans.IDs[0] {
			t.Errorf("event %d: answered id %s before the cut, %s after", i, id, ans.IDs[0])
		}
		if ans.Stored != 0 || ids[ans.IDs[0]] != 1 {
			lost[i] = true
		}
	}
	after := storedIDs(t, n.js())
	if len(after) != total {
		t.Errorf("after redelivering all %d events the stream holds %d distinct events", total, len(after))
	}
	for id, c := range after {
		if c != 1 {
			t.Errorf("envelope %s stored %d times after redelivery", id, c)
		}
	}
	var out []int
	for i := range lost {
		out = append(out, i)
	}
	sort.Ints(out)
	return out
}

// The replay. Each line of the log is an instant (its number); a call starts at its
// first line and completes at its last (strace splits a call that another thread
// interrupts into "<unfinished ...>" and "<... resumed>", per pid). strace logs a
// syscall's entry before the kernel runs it and its exit after, and the tracee waits
// for strace at both: so a write logged complete before an fsync is logged started
// did complete before that fsync began, and a 200 sent after an fsync returned was sent
// after strace logged that return.
//
// Per file (an inode: renames move it, fds follow it), the replay keeps the file's
// length after each completed write or truncate. An fsync or fdatasync that completed
// makes durable the length the file had when it started; so does syncfs or sync for
// every file; a write through an O_SYNC or O_DSYNC fd (nats-server's atomic meta files)
// makes the file durable as of its completion. sync_file_range promises nothing.
// A file the process created is durable at length 0 until then; a file in the baseline
// (the store before the traced run, made durable with sync(2)) at its baseline length.
// The cut truncates each file to its durable length; a file on disk the replay does not
// know (created by a call the kill interrupted) is cut to 0.
//
// Simplifications, each noted where it matters:
//   - Lengths only: a write inside the durable length that was never synced is kept
//     (a real power cut may leave the old bytes there). nats-server only appends to
//     its blocks, and rewrites other files whole through a new file and a rename. A
//     truncation (ftruncate, O_TRUNC) not yet synced caps the durable length: what the
//     file holds beyond it was written since.
//   - One fd table: exacto up is one process (its threads share fds); strace -y's path
//     of each fd is checked against the replay's, and a mismatch fails the test.
//   - Directory entries: creations, renames and unlinks are durable at once. A real
//     power cut can drop an entry whose directory was not fsynced since: a new file
//     vanishes, a rename or an unlink is undone (the old file back). On ext4 and xfs an
//     fsync of a new file also commits its name; the files with durable data whose name
//     no directory fsync covered are logged, not removed. A rename over an existing
//     file carries no data of its own (strict: the file keeps the length its fsyncs made
//     durable; an unsynced replacement is cut to 0) unless replaceCarriesData.
//   - O_SYNC: a write through such an fd is treated as write then fsync, which also
//     covers other fds' earlier writes to the same file (nats-server uses O_SYNC only on
//     fresh temporary files written once).
type powerCutModel struct {
	log      string
	alias    string           // the store dir as the process was given it
	store    string           // the same, symlinks resolved (as -y prints paths)
	baseline map[string]int64 // the store's files before the traced run: durable
	// replaceCarriesData: a rename over an existing file makes the renamed file's data
	// durable with it (ext4's auto_da_alloc); otherwise (strict) it carries none.
	replaceCarriesData bool

	seq     int
	files   map[string]*pcFile // by current path
	fds     map[int]*pcFd
	pending map[string]*pcCall // by pid: a call "<unfinished ...>"

	lines, calls              int
	fileSyncs, dirSyncs       int
	eventsWrites, eventsSyncs int // on EXACTO_EVENTS' message blocks: the replay saw the burst
	notes                     []string
	lostTrack                 []string // the replay's idea of an fd disagrees with strace's
	killed                    bool     // the log records the SIGKILL: strace wrote it to the end
}

type pcFile struct {
	hist           []pcPoint // the length after each completed change, in completion order
	synced         int       // lengths of changes completed before this instant are durable
	entryAt        int       // when its current name appeared (0: in the baseline)
	entryDirSynced bool      // a directory fsync (or syncfs) began after entryAt
}

type pcPoint struct {
	seq   int
	size  int64
	trunc bool // a truncation: what the file held beyond size is gone, whatever follows
}

type pcFd struct {
	file          *pcFile // nil: not a file of the store (or a directory)
	path          string
	pos           int64
	append, osync bool
	at            int // when the open that made it returned
}

type pcCall struct {
	name, args string
	start      int
}

func (f *pcFile) sizeAt(seq int) int64 {
	var s int64
	for _, p := range f.hist {
		if p.seq >= seq {
			break
		}
		s = p.size
	}
	return s
}

func (f *pcFile) size() int64 {
	if len(f.hist) == 0 {
		return 0
	}
	return f.hist[len(f.hist)-1].size
}

// durable is the length synced, less what truncations since then removed: the bytes a
// file holds beyond a truncation were written after it, and are not the synced ones.
func (f *pcFile) durable() int64 {
	d := f.sizeAt(f.synced)
	for _, p := range f.hist {
		if p.seq >= f.synced && p.trunc {
			d = min(d, p.size)
		}
	}
	return d
}

func (f *pcFile) syncedFrom(start int) { f.synced = max(f.synced, start) }

var (
	pcRetRe = regexp.MustCompile(`^(.*)\)\s+= (.*)$`)
	pcFdRe  = regexp.MustCompile(`^(-?\d+|AT_FDCWD)<(.*)>$`)
)

// cutThePower replays the log and truncates each file of the store to its durable
// length. root is the store (or a copy of it, with the same files).
func (m *powerCutModel) cutThePower(t *testing.T, root string) []pcCutFile {
	t.Helper()
	if err := m.replay(); err != nil {
		t.Fatalf("replaying %s: %v", m.log, err)
	}
	if !m.killed {
		t.Fatalf("the strace log does not record the SIGKILL: it is incomplete")
	}
	var cuts []pcCutFile
	var entryUnsynced []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var target int64
		if f := m.files[filepath.Join(m.store, rel)]; f != nil {
			target = f.durable()
			if !f.entryDirSynced && target > 0 {
				entryUnsynced = append(entryUnsynced, rel)
			}
		} else {
			m.notes = append(m.notes, "not in the trace, cut to 0: "+rel)
		}
		if target < info.Size() {
			if err := os.Truncate(p, target); err != nil {
				return err
			}
			cuts = append(cuts, pcCutFile{rel, info.Size(), target})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	kind := "strict"
	if m.replaceCarriesData {
		kind = "rename carries data"
	}
	t.Logf("%s replay of the strace log: %d lines, %d calls on the store, %d fsyncs of files and %d of directories, %d writes and %d fsyncs of EXACTO_EVENTS' blocks",
		kind, m.lines, m.calls, m.fileSyncs, m.dirSyncs, m.eventsWrites, m.eventsSyncs)
	for _, c := range cuts {
		t.Logf("cut %s: %d -> %d bytes", c.rel, c.from, c.to)
	}
	if len(entryUnsynced) > 0 && !m.replaceCarriesData {
		sort.Strings(entryUnsynced)
		t.Logf("%d files hold durable data under a name no directory fsync made durable (kept: ext4 and xfs commit a new file's name with its fsync; strict POSIX may drop them): %s",
			len(entryUnsynced), strings.Join(entryUnsynced, ", "))
	}
	for _, note := range m.notes {
		t.Log(note)
	}
	for _, e := range m.lostTrack {
		t.Errorf("the replay lost track of a file, its cut cannot be trusted: %s", e)
	}
	return cuts
}

type pcCutFile struct {
	rel      string
	from, to int64
}

func describeCuts(cuts []pcCutFile) string {
	var parts []string
	for _, c := range cuts {
		parts = append(parts, fmt.Sprintf("%s -%d", c.rel, c.from-c.to))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func (m *powerCutModel) rel(p string) string {
	if r, err := filepath.Rel(m.store, p); err == nil {
		return r
	}
	return p
}

func (m *powerCutModel) replay() error {
	store, err := filepath.EvalSymlinks(m.alias)
	if err != nil {
		return err
	}
	m.store = store
	m.files, m.fds, m.pending = map[string]*pcFile{}, map[int]*pcFd{}, map[string]*pcCall{}
	for p, size := range m.baseline {
		m.files[m.canon(p)] = &pcFile{hist: []pcPoint{{seq: 0, size: size}}, synced: 1, entryDirSynced: true}
	}
	f, err := os.Open(m.log)
	if err != nil {
		return err
	}
	defer f.Close()
	m.seq = 1 // instants start after the baseline's
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		m.seq++
		m.lines++
		pid, rest, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		rest = strings.TrimLeft(rest, " ")
		switch {
		case strings.HasPrefix(rest, "+++"):
			m.killed = m.killed || rest == "+++ killed by SIGKILL +++"
		case strings.HasPrefix(rest, "---"):
		case strings.HasPrefix(rest, "<... "):
			name, after, ok := strings.Cut(rest[len("<... "):], " resumed>")
			call := m.pending[pid]
			delete(m.pending, pid)
			if !ok || call == nil || call.name != name {
				m.notes = append(m.notes, fmt.Sprintf("line %d: a resumption without its start: %s", m.seq-1, rest))
				continue
			}
			m.complete(call.name, call.args+after, call.start)
		case strings.HasSuffix(rest, " <unfinished ...>"):
			name, args, _ := strings.Cut(strings.TrimSuffix(rest, " <unfinished ...>"), "(")
			m.pending[pid] = &pcCall{name: name, args: args, start: m.seq}
		default:
			name, args, _ := strings.Cut(rest, "(")
			m.complete(name, args, m.seq)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	// Calls the kill interrupted: a rename or unlink may have happened in the kernel
	// before strace could log its return. The disk tells.
	for _, c := range m.pending {
		a := pcSplitArgs(c.args)
		switch c.name {
		case "rename", "renameat", "renameat2":
			from, to := m.renamePaths(c.name, a)
			if from != "" && !pcExists(from) && pcExists(to) {
				m.rename(from, to)
				m.notes = append(m.notes, fmt.Sprintf("interrupted %s happened: %s -> %s", c.name, m.rel(from), m.rel(to)))
			}
		case "unlink", "unlinkat":
			if p := m.unlinkPath(c.name, a); p != "" && !pcExists(p) {
				m.remove(p)
			}
		}
	}
	return nil
}

// complete applies a call completed at the current instant that started at start.
// argsRet is what follows "name(": the arguments, ") = " and the result.
func (m *powerCutModel) complete(name, argsRet string, start int) {
	g := pcRetRe.FindStringSubmatch(argsRet)
	if g == nil {
		return
	}
	a := pcSplitArgs(g[1])
	retField := strings.FieldsFunc(g[2], func(r rune) bool { return r == '<' || r == ' ' })
	if len(retField) == 0 {
		return
	}
	ret, err := strconv.ParseInt(retField[0], 10, 64)
	if err != nil || ret < 0 {
		return // failed, or "?" (killed before it returned): changed nothing we count on
	}
	now := m.seq
	switch name {
	case "openat", "open", "creat":
		fd := int(ret)
		delete(m.fds, fd)
		p, flags := "", ""
		if _, rp, ok := pcParseFd(g[2]); ok {
			p = rp
		}
		switch {
		case name == "openat" && len(a) >= 3:
			flags = a[2]
		case name == "open" && len(a) >= 2:
			flags = a[1]
		case name == "creat":
			flags = "O_CREAT|O_WRONLY|O_TRUNC"
		}
		if !m.inStore(p) {
			return
		}
		m.calls++
		st := &pcFd{path: p, append: strings.Contains(flags, "O_APPEND"),
			osync: strings.Contains(flags, "O_SYNC") || strings.Contains(flags, "O_DSYNC"), at: now}
		f := m.files[p]
		if f == nil && strings.Contains(flags, "O_CREAT") {
			f = &pcFile{entryAt: now}
			f.hist = append(f.hist, pcPoint{seq: now})
			m.files[p] = f
		}
		if f != nil && strings.Contains(flags, "O_TRUNC") {
			f.hist = append(f.hist, pcPoint{seq: now, trunc: true})
		}
		st.file = f
		m.fds[fd] = st
	case "close":
		// The kernel frees the number as the close begins: another thread's open may
		// return it before strace logs this close's return. That open's fd stays.
		if fd, _, ok := pcParseFd(a[0]); ok {
			if st := m.fds[fd]; st != nil && st.at < start {
				delete(m.fds, fd)
			}
		}
	case "write", "writev", "pwrite64", "pwritev", "pwritev2":
		st := m.fd(a[0])
		if st == nil || st.file == nil {
			return
		}
		m.calls++
		f := st.file
		off := int64(-1)
		if name != "write" && name != "writev" && len(a) >= 4 {
			off, _ = strconv.ParseInt(a[3], 10, 64)
		}
		positional := off < 0
		if positional {
			off = st.pos
			if st.append {
				off = f.size()
			}
			st.pos = off + ret
		}
		f.hist = append(f.hist, pcPoint{seq: now, size: max(f.size(), off+ret)})
		if st.osync || (name == "pwritev2" && len(a) >= 5 && strings.Contains(a[4], "SYNC")) {
			f.syncedFrom(now + 1)
		}
		if m.isEventsBlock(st.path) {
			m.eventsWrites++
		}
	case "ftruncate":
		st := m.fd(a[0])
		if st == nil || st.file == nil || len(a) < 2 {
			return
		}
		m.calls++
		size, _ := strconv.ParseInt(a[1], 10, 64)
		st.file.hist = append(st.file.hist, pcPoint{seq: now, size: size, trunc: true})
	case "truncate":
		p := m.path("AT_FDCWD", a[0])
		if f := m.files[p]; f != nil && len(a) >= 2 {
			m.calls++
			size, _ := strconv.ParseInt(a[1], 10, 64)
			f.hist = append(f.hist, pcPoint{seq: now, size: size, trunc: true})
		}
	case "fsync", "fdatasync":
		_, p, ok := pcParseFd(a[0])
		if !ok || !m.inStore(p) && !strings.HasPrefix(m.store+"/", p+"/") {
			return
		}
		m.calls++
		info, err := os.Stat(p)
		if err != nil || !info.IsDir() {
			// A file: the one strace names (an fsync covers the file, through any fd).
			if st := m.fd(a[0]); st != nil && st.file != nil {
				st.file.syncedFrom(start)
				m.fileSyncs++
				if m.isEventsBlock(st.path) {
					m.eventsSyncs++
				}
			}
			return
		}
		// A directory: the entries it held when the fsync began are durable.
		m.dirSyncs++
		for fp, f := range m.files {
			if filepath.Dir(fp) == p && f.entryAt < start {
				f.entryDirSynced = true
			}
		}
	case "syncfs", "sync":
		m.calls++
		for _, f := range m.files {
			f.synced = max(f.synced, start)
			if f.entryAt < start {
				f.entryDirSynced = true
			}
		}
	case "rename", "renameat", "renameat2":
		if from, to := m.renamePaths(name, a); from != "" && (m.inStore(from) || m.inStore(to)) {
			m.calls++
			m.rename(from, to)
		}
	case "unlink", "unlinkat":
		if p := m.unlinkPath(name, a); m.inStore(p) {
			m.calls++
			m.remove(p)
		}
	}
}

// rename moves the file (or every file under the directory) from to, now.
func (m *powerCutModel) rename(from, to string) {
	replaced := m.files[to] != nil
	m.remove(to)
	for p, f := range m.files {
		if p == from || strings.HasPrefix(p, from+"/") {
			delete(m.files, p)
			m.files[to+p[len(from):]] = f
			f.entryAt, f.entryDirSynced = m.seq, false
			if replaced && p == from && m.replaceCarriesData {
				f.syncedFrom(m.seq + 1)
			}
		}
	}
	for _, st := range m.fds {
		if st.path == from || strings.HasPrefix(st.path, from+"/") {
			st.path = to + st.path[len(from):]
		}
	}
}

func (m *powerCutModel) remove(p string) {
	for fp := range m.files {
		if fp == p || strings.HasPrefix(fp, p+"/") {
			delete(m.files, fp)
		}
	}
}

func (m *powerCutModel) renamePaths(name string, a []string) (from, to string) {
	switch {
	case name == "rename" && len(a) >= 2:
		return m.path("AT_FDCWD", a[0]), m.path("AT_FDCWD", a[1])
	case name != "rename" && len(a) >= 4:
		return m.path(a[0], a[1]), m.path(a[2], a[3])
	}
	return "", ""
}

func (m *powerCutModel) unlinkPath(name string, a []string) string {
	switch {
	case name == "unlink" && len(a) >= 1:
		return m.path("AT_FDCWD", a[0])
	case name == "unlinkat" && len(a) >= 2:
		return m.path(a[0], a[1])
	}
	return ""
}

// fd returns the state of the fd printed as "N</path>", if it is a file of the store.
func (m *powerCutModel) fd(arg string) *pcFd {
	fd, p, ok := pcParseFd(arg)
	if !ok || !m.inStore(strings.TrimSuffix(p, " (deleted)")) {
		return nil
	}
	st := m.fds[fd]
	if st != nil && st.file != nil && !strings.HasSuffix(p, " (deleted)") && m.files[p] != st.file {
		m.lostTrack = append(m.lostTrack, fmt.Sprintf("line %d: fd %d is %s for strace, %s for the replay", m.seq-1, fd, p, st.path))
	}
	if st == nil {
		// Opened before the trace began, or by a call it did not follow: judge it by
		// its path; unknown files stay at durable length 0.
		f := m.files[p]
		if f == nil {
			f = &pcFile{entryAt: m.seq}
			m.files[p] = f
			m.notes = append(m.notes, "an fd the trace did not see opened: "+m.rel(p))
		}
		st = &pcFd{file: f, path: p, pos: f.size()}
		m.fds[fd] = st
	}
	return st
}

// path resolves a path argument (a quoted string) against a dirfd ("AT_FDCWD</cwd>" or
// "N</dir>"), in the store's resolved spelling.
func (m *powerCutModel) path(dirfd, arg string) string {
	p, err := strconv.Unquote(arg)
	if err != nil {
		p = strings.Trim(arg, `"`)
	}
	if !filepath.IsAbs(p) {
		if _, dir, ok := pcParseFd(dirfd); ok {
			p = filepath.Join(dir, p)
		}
	}
	return m.canon(filepath.Clean(p))
}

func (m *powerCutModel) canon(p string) string {
	if m.store != m.alias && (p == m.alias || strings.HasPrefix(p, m.alias+"/")) {
		return m.store + p[len(m.alias):]
	}
	return p
}

func (m *powerCutModel) inStore(p string) bool {
	return p != "" && strings.HasPrefix(p, m.store+"/")
}

func (m *powerCutModel) isEventsBlock(p string) bool {
	return strings.Contains(p, "/streams/EXACTO_EVENTS/msgs/") && strings.HasSuffix(p, ".blk")
}

// pcParseFd parses "N</path>" (or "AT_FDCWD</cwd>", fd -100).
func pcParseFd(s string) (int, string, bool) {
	g := pcFdRe.FindStringSubmatch(strings.TrimSpace(s))
	if g == nil {
		return 0, "", false
	}
	if g[1] == "AT_FDCWD" {
		return -100, g[2], true
	}
	fd, err := strconv.Atoi(g[1])
	return fd, g[2], err == nil
}

// pcSplitArgs splits strace's argument list at its top-level commas.
func pcSplitArgs(s string) []string {
	var args []string
	depth, begin := 0, 0
	quoted, escaped := false, false
	for i, r := range s {
		switch {
		case escaped:
			escaped = false
		case quoted:
			switch r {
			case '\\':
				escaped = true
			case '"':
				quoted = false
			}
		case r == '"':
			quoted = true
		case r == '(' || r == '[' || r == '{' || r == '<':
			depth++
		case r == ')' || r == ']' || r == '}' || r == '>':
			depth--
		case r == ',' && depth == 0:
			args = append(args, strings.TrimSpace(s[begin:i]))
			begin = i + 1
		}
	}
	return append(args, strings.TrimSpace(s[begin:]))
}

func pcExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// The replay follows an fd number another thread's open reuses before strace logs the
// close that freed it (the kernel frees the number as the close begins), and credits an
// fsync to the file strace names: the syncer's fdatasync of a block through such a
// reused number makes the block durable. Without both, this fsync was dropped and a
// 200 that was on disk reported lost.
func TestPowerCutModelFollowsAReusedFd(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "jetstream")
	blk := filepath.Join(store, "$G", "streams", "EXACTO_EVENTS", "msgs", "1.blk")
	if err := os.MkdirAll(filepath.Dir(blk), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blk, make([]byte, 300), 0o640); err != nil {
		t.Fatal(err)
	}
	store, _ = filepath.EvalSymlinks(store)
	blk = filepath.Join(store, "$G", "streams", "EXACTO_EVENTS", "msgs", "1.blk")
	log := strings.Join([]string{
		fmt.Sprintf(`100 openat(AT_FDCWD</>, "%s", O_RDWR|O_CREAT|O_CLOEXEC, 0640) = 7<%s>`, blk, blk),
		fmt.Sprintf(`100 pwrite64(7<%s>, "a"..., 100, 0) = 100`, blk),
		fmt.Sprintf(`300 openat(AT_FDCWD</>, "%s", O_RDONLY|O_CLOEXEC) = 9<%s>`, blk, blk),
		fmt.Sprintf(`300 close(9<%s> <unfinished ...>`, blk),
		fmt.Sprintf(`100 pwrite64(7<%s>, "b"..., 100, 100) = 100`, blk),
		fmt.Sprintf(`400 openat(AT_FDCWD</>, "%s", O_RDONLY|O_CLOEXEC) = 9<%s>`, blk, blk),
		`300 <... close resumed>) = 0`,
		fmt.Sprintf(`400 fdatasync(9<%s>) = 0`, blk),
		fmt.Sprintf(`400 close(9<%s>) = 0`, blk),
		fmt.Sprintf(`100 pwrite64(7<%s>, "c"..., 100, 200) = 100`, blk),
		`100 +++ killed by SIGKILL +++`,
	}, "\n") + "\n"
	logPath := filepath.Join(dir, "strace.log")
	if err := os.WriteFile(logPath, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	m := &powerCutModel{log: logPath, alias: store}
	m.cutThePower(t, store)
	info, err := os.Stat(blk)
	if err != nil {
		t.Fatal(err)
	}
	// The first two writes completed before the fdatasync began; the third after it.
	if info.Size() != 200 {
		t.Fatalf("the block was cut to %d bytes, want 200 (the two writes before the fdatasync)", info.Size())
	}
}
