package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/memlimit"
	"exacto.dev/pkg/projection"
	"exacto.dev/pkg/projection/sqlite"
	"exacto.dev/pkg/stream"
)

// replayCheckpoints holds where each replay into a bucket got to, by its NAME.
const replayCheckpoints = stream.ProjectionPrefix + "REPLAYS"

var intoName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

func replayCmd() *cobra.Command {
	var natsURL, name, since, into string
	var fromSeq uint64
	var progress, restart bool
	var waitLive time.Duration
	cmd := &cobra.Command{
		Use:   "replay --projection NAME [--from-seq N | --since T] [--into NAME | --into sqlite:FILE]",
		Short: "Rebuild a projection from the stream and report its difference to the live one",
		Long: `Rebuild the projections from EXACTO_EVENTS (from sequence N, from time T, or from the
first event) and report how projection NAME (contacts, campaigns, suppression) differs
from the live one: key counts and the first differing keys. The comparison waits (up to
--wait-live) for the live projector to have handled the events the rebuild did, and
says how far behind it still is if it has not.

--into NAME writes the rebuild into the buckets EXACTO_PROJ_<PROJECTION>_<NAME>;
--into sqlite:FILE into an SQLite file with one table per projection, for SQL. Without
--into nothing is written, and only projection NAME (and the contact records it is
derived from) is rebuilt. A replay stopped with Ctrl-C (or SIGTERM) writes what it has
and where it got to; the same command again (same --projection, --from-seq, --since and
--into) resumes it after the last event it applied. A different replay into a target
holding an unfinished one is refused unless --restart says to start it over. A start
at or after which nothing is stored ends at once and writes nothing.

The rebuild names contacts through the live contact directory, as the projector does:
a contact the directory did not know yet is added to it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := (projection.Stores{}).Of(name); err != nil {
				return err
			}
			if fromSeq > 0 && since != "" {
				return errors.New("--from-seq and --since are exclusive")
			}
			var sinceT time.Time
			if since != "" {
				t, err := time.Parse(time.RFC3339, since)
				if err != nil {
					return fmt.Errorf("--since %q: want an RFC 3339 time such as 2026-12-01T00:00:00Z", since)
				}
				sinceT = t
			}
			target, err := parseInto(into)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			js, closeConn, err := dial(natsURL)
			if err != nil {
				return err
			}
			defer closeConn()
			return replay(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), js, replayRun{
				projection: name, fromSeq: fromSeq, since: sinceT, target: target, restart: restart, progress: progress || isTerminal(os.Stderr), waitLive: waitLive})
		},
	}
	cmd.Flags().StringVar(&name, "projection", "", "contacts, campaigns or suppression (required)")
	cmd.Flags().Uint64Var(&fromSeq, "from-seq", 0, "replay from this stream sequence")
	cmd.Flags().StringVar(&since, "since", "", "replay from the first event stored at or after this time (RFC 3339)")
	cmd.Flags().StringVar(&into, "into", "", "NAME (buckets EXACTO_PROJ_<PROJECTION>_<NAME>) or sqlite:FILE")
	cmd.Flags().StringVar(&natsURL, "nats-url", nats.DefaultURL, "NATS of the deployment")
	cmd.Flags().BoolVar(&progress, "progress", false, "print progress even when stderr is not a terminal")
	cmd.Flags().BoolVar(&restart, "restart", false, "start over a target that holds an unfinished replay with another projection or start")
	cmd.Flags().DurationVar(&waitLive, "wait-live", 30*time.Second, "how long to wait for the live projector to handle what the rebuild did before comparing (it is behind right after a burst)")
	cmd.MarkFlagRequired("projection")
	return cmd
}

// target is where a replay is written: nowhere, buckets, or an SQLite file.
type target struct {
	bucket string // NAME of --into NAME
	file   string // FILE of --into sqlite:FILE
}

func parseInto(into string) (target, error) {
	switch {
	case into == "":
		return target{}, nil
	case strings.HasPrefix(into, "sqlite:"):
		f := strings.TrimPrefix(into, "sqlite:")
		if f == "" {
			return target{}, errors.New("--into sqlite:FILE: the file is missing")
		}
		return target{file: f}, nil
	case intoName.MatchString(into):
		return target{bucket: into}, nil
	}
	return target{}, fmt.Errorf("--into %q: want NAME ([a-z0-9_-], up to 32) or sqlite:FILE", into)
}

type replayRun struct {
	projection string
	fromSeq    uint64
	since      time.Time
	target     target
	restart    bool
	progress   bool
	waitLive   time.Duration // how long the comparison waits for the live projector
}

// start says where r was asked to start, as its checkpoint keeps it: "" (the first
// event), "seq:N" or "since:T".
func (r replayRun) start() string {
	switch {
	case r.fromSeq > 0:
		return "seq:" + strconv.FormatUint(r.fromSeq, 10)
	case !r.since.IsZero():
		return "since:" + r.since.UTC().Format(time.RFC3339Nano)
	}
	return ""
}

// describeStart says a checkpoint's start in words.
func describeStart(start string) string {
	kind, v, _ := strings.Cut(start, ":")
	switch kind {
	case "seq":
		return "from sequence " + v
	case "since":
		return "since " + v
	}
	return "from the first event"
}

func replay(ctx context.Context, out, errOut io.Writer, js jetstream.JetStream, r replayRun) error {
	dir, err := contacts.Open(ctx, js)
	if err != nil {
		return err
	}
	live, err := projection.Open(ctx, js, "", 1)
	if err != nil {
		return err
	}
	// Resume where an interrupted replay into the same target stopped, if it is this
	// replay (same projection, same start).
	rebuilt := projection.Memories()
	start := r.start()
	cp, resumed, err := loadCheckpoint(ctx, js, r.target)
	if err != nil {
		return err
	}
	opts := projection.ReplayOptions{FromSeq: r.fromSeq, Since: r.since, Dir: dir}
	if r.target == (target{}) { // kept nowhere: only what the comparison reads is built
		opts.Only = r.projection
	}
	resuming := false
	if resumed && !cp.Done {
		switch {
		case cp.Projection == r.projection && cp.Start == start:
			if rebuilt, err = loadTarget(ctx, js, r.target); err != nil {
				return err
			}
			opts.FromSeq, opts.Since, resuming = cp.LastSeq+1, time.Time{}, true
			fmt.Fprintf(out, "resuming the replay into %s after sequence %d\n", r.target, cp.LastSeq)
		case !r.restart:
			return fmt.Errorf("%s holds an unfinished replay of %s %s (stopped after sequence %d), not of %s %s: "+
				"run that replay again to resume it, or add --restart to start this one over it",
				r.target, cp.Projection, describeStart(cp.Start), cp.LastSeq, r.projection, describeStart(start))
		}
	}
	if r.progress {
		opts.OnProgress = func(p projection.Progress) { fmt.Fprintf(errOut, "\rreplay: %s   ", p) }
	}
	began := time.Now()
	restoreGC := memlimit.Batch(memlimit.BatchHeap) // a batch: fewer collections
	p, rerr := projection.Replay(ctx, js, rebuilt, opts)
	restoreGC()
	if r.progress {
		fmt.Fprintln(errOut)
	}
	stopped := errors.Is(rerr, context.Canceled)
	if rerr != nil && !stopped {
		return rerr
	}
	if p.Total == 0 && !stopped && !resuming && start != "" {
		fmt.Fprintf(out, "nothing to replay: no event stored %s (the last is sequence %d); nothing written\n",
			describeFrom(opts), p.End)
		return nil
	}
	// Written even when stopped: what was rebuilt, and where to resume.
	cp = sqlite.Checkpoint{LastSeq: p.LastSeq, Done: !stopped, Projection: r.projection, Start: start}
	if err := saveTarget(context.WithoutCancel(ctx), js, r.target, rebuilt, cp); err != nil {
		return err
	}
	took := time.Since(began)
	fmt.Fprintf(out, "replayed %d events up to sequence %d in %s (%.0f events/s)\n", p.Done, p.LastSeq, took.Round(time.Millisecond), float64(p.Done)/max(took.Seconds(), 1e-9))
	if stopped {
		if r.target != (target{}) {
			fmt.Fprintf(out, "stopped; written into %s: run the same command again to resume\n", r.target)
		}
		return errors.New("replay stopped before the end")
	}
	// The live projection is compared once its projector has handled what the rebuild
	// did: right after a burst it is behind, and that is no difference.
	handled, paused, err := liveHandled(ctx, js, p.LastSeq, r.waitLive, func(handled uint64) {
		fmt.Fprintf(errOut, "waiting up to %v for the live projector: it has handled the stream up to sequence %d of %d\n", r.waitLive, handled, p.LastSeq)
	})
	if err != nil {
		return err
	}
	a, _ := rebuilt.Of(r.projection)
	b, _ := live.Of(r.projection)
	d, err := projection.Diff(context.WithoutCancel(ctx), r.projection, a, b)
	if err != nil {
		return err
	}
	if d.Equal() {
		fmt.Fprintf(out, "%s: rebuilt %d keys, live %d keys: equal to the live projection\n", r.projection, d.KeysA, d.KeysB)
		return nil
	}
	fmt.Fprintf(out, "%s: rebuilt %d keys, live %d keys: %d only in the rebuild, %d only live, %d differ\n",
		r.projection, d.KeysA, d.KeysB, d.OnlyA, d.OnlyB, d.Differ)
	fmt.Fprintf(out, "first differing keys: %s\n", strings.Join(d.First, " "))
	switch {
	case paused:
		fmt.Fprintf(out, "the live projection is behind: its projector is paused (exacto worker resume %s) and has handled the stream up to sequence %d of the %d replayed; "+
			"the difference may be only that\n", stream.Projector, handled, p.LastSeq)
	case handled < p.LastSeq:
		fmt.Fprintf(out, "the live projection is behind: its projector has handled the stream up to sequence %d of the %d replayed; "+
			"the difference may be only that: run the replay again once it has caught up\n", handled, p.LastSeq)
	}
	return nil
}

// liveHandled waits up to wait for the live projector to have handled the stream up to
// seq, saying once that it waits, and returns how far it has (seq when caught up, or
// when no projector ever ran) and whether it is paused (then it is not waited for).
func liveHandled(ctx context.Context, js jetstream.JetStream, seq uint64, wait time.Duration, waiting func(handled uint64)) (uint64, bool, error) {
	deadline := time.Now().Add(wait)
	for said := false; ; said = true {
		c, err := js.Consumer(ctx, stream.Events, stream.Projector)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return seq, false, nil // no live projector has ever run: nothing to wait for
		}
		if err != nil {
			return 0, false, fmt.Errorf("the live projector's progress: %w", err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			return 0, false, fmt.Errorf("the live projector's progress: %w", err)
		}
		handled := info.AckFloor.Stream
		switch {
		case handled >= seq || info.NumPending+uint64(info.NumAckPending) == 0:
			return seq, false, nil
		case info.Paused:
			return handled, true, nil
		case time.Now().After(deadline):
			return handled, false, nil
		}
		if !said {
			waiting(handled)
		}
		select {
		case <-ctx.Done():
			return handled, false, nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// describeFrom says where opts start (a sequence or a time), for a replay that found
// nothing there.
func describeFrom(o projection.ReplayOptions) string {
	switch {
	case o.FromSeq > 0:
		return "at or after sequence " + strconv.FormatUint(o.FromSeq, 10)
	}
	return "at or after " + o.Since.UTC().Format(time.RFC3339Nano)
}

func (t target) String() string {
	switch {
	case t.bucket != "":
		return "buckets " + stream.ProjectionPrefix + "<PROJECTION>_" + strings.ToUpper(t.bucket)
	case t.file != "":
		return "sqlite:" + t.file
	}
	return "memory"
}

// loadCheckpoint reads where the last replay into t got to.
func loadCheckpoint(ctx context.Context, js jetstream.JetStream, t target) (sqlite.Checkpoint, bool, error) {
	switch {
	case t.file != "":
		_, cp, ok, err := sqlite.Read(ctx, t.file)
		return cp, ok, err
	case t.bucket != "":
		kv, err := checkpoints(ctx, js)
		if err != nil {
			return sqlite.Checkpoint{}, false, err
		}
		e, err := kv.Get(ctx, t.bucket)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return sqlite.Checkpoint{}, false, nil
		}
		if err != nil {
			return sqlite.Checkpoint{}, false, err
		}
		var cp sqlite.Checkpoint
		return cp, true, json.Unmarshal(e.Value(), &cp)
	}
	return sqlite.Checkpoint{}, false, nil
}

func checkpoints(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	return js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: replayCheckpoints, Description: "where each replay into buckets got to"})
}

// loadTarget reads an interrupted replay's projections back into memory.
func loadTarget(ctx context.Context, js jetstream.JetStream, t target) (projection.Stores, error) {
	mem := projection.Memories()
	if t.file != "" {
		s, _, _, err := sqlite.Read(ctx, t.file)
		if err != nil {
			return mem, err
		}
		mem.Contacts = s.Contacts
	} else {
		from, err := projection.Open(ctx, js, t.bucket, 1)
		if err != nil {
			return mem, err
		}
		if err := projection.Copy(ctx, mem, from); err != nil {
			return mem, err
		}
	}
	// The derived entries carry the revisions of the store they were written from:
	// derive them again against this one.
	return projection.Rederive(ctx, mem)
}

// saveTarget writes the rebuilt projections and the checkpoint into t.
func saveTarget(ctx context.Context, js jetstream.JetStream, t target, rebuilt projection.Stores, cp sqlite.Checkpoint) error {
	switch {
	case t.file != "":
		return sqlite.Write(ctx, t.file, rebuilt, cp)
	case t.bucket != "":
		// Replace what a previous replay left: the buckets hold this rebuild only.
		for _, name := range projection.Names {
			err := js.DeleteKeyValue(ctx, stream.ProjectionBucket(name, t.bucket, 1).Bucket)
			if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
				return err
			}
		}
		if _, err := projection.Open(ctx, js, t.bucket, 1); err != nil {
			return err
		}
		if err := projection.Fill(ctx, js, t.bucket, rebuilt); err != nil {
			return err
		}
		// The buckets are on disk before the checkpoint that says they are filled, and
		// it before this returns (stores a process syncs itself are not in the sweep's
		// list: they are named here).
		var filled []string
		for _, name := range projection.Names {
			filled = append(filled, "KV_"+stream.ProjectionBucket(name, t.bucket, 1).Bucket)
		}
		if err := stream.Durable(ctx, js, filled...); err != nil {
			return err
		}
		kv, err := checkpoints(ctx, js)
		if err != nil {
			return err
		}
		data, _ := json.Marshal(cp)
		if _, err = kv.Put(ctx, t.bucket, data); err != nil {
			return err
		}
		return stream.Durable(ctx, js, "KV_"+replayCheckpoints)
	}
	return nil
}

// isTerminal reports whether f is a terminal, where progress is shown.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
