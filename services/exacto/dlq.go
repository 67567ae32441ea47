package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/dlq"
	"exacto.dev/pkg/guard"
)

func dlqCmd() *cobra.Command {
	var natsURL, cfgPath, by, why string
	var f dlq.Filter
	cmd := &cobra.Command{Use: "dlq", Short: "Work the dead-letter queue: list, show, replay, discard"}
	open := func(ctx context.Context) (*dlq.Queue, func(), error) {
		cfg, err := config.Load(cfgPath, os.Getenv)
		if err != nil {
			return nil, nil, err
		}
		return dialBound(ctx, natsURL, func(ctx context.Context, js jetstream.JetStream) (*dlq.Queue, error) {
			return dlq.New(ctx, js, cfg.DLQ)
		})
	}
	get := func(ctx context.Context, q *dlq.Queue, id string) (dlq.Letter, error) {
		seq, err := strconv.ParseUint(id, 10, 64)
		if err != nil || seq == 0 {
			return dlq.Letter{}, fmt.Errorf("%q is not a dead letter id (the number `exacto dlq list` shows)", id)
		}
		return q.Get(ctx, seq)
	}
	// letter opens the queue and reads dead letter id from it.
	letter := func(ctx context.Context, id string) (*dlq.Queue, dlq.Letter, func(), error) {
		q, closeConn, err := open(ctx)
		if err != nil {
			return nil, dlq.Letter{}, nil, err
		}
		l, err := get(ctx, q, id)
		if err != nil {
			closeConn()
			return nil, dlq.Letter{}, nil, err
		}
		return q, l, closeConn, nil
	}
	filters := func(c *cobra.Command) {
		c.Flags().StringVar(&f.Consumer, "consumer", "", "only this consumer's dead letters")
		c.Flags().StringVar(&f.Tenant, "tenant", "", "only this tenant's")
		c.Flags().StringVar(&f.Provider, "provider", "", "only this provider's")
		c.Flags().StringVar(&f.Type, "type", "", "only this event type's")
		c.Flags().StringVar(&f.Class, "class", "", "only this error class (permanent, transient)")
		c.Flags().DurationVar(&f.OlderThan, "older-than", 0, "only those whose last attempt is older than this")
		c.Flags().DurationVar(&f.NewerThan, "newer-than", 0, "only those whose last attempt is newer than this")
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "The open dead letters (with --all, also those replayed or discarded)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			q, closeConn, err := open(cmd.Context())
			if err != nil {
				return err
			}
			defer closeConn()
			letters, err := q.List(cmd.Context(), f)
			if err != nil {
				return err
			}
			printLetters(cmd.OutOrStdout(), letters)
			return nil
		},
	}
	filters(list)
	list.Flags().BoolVar(&f.All, "all", false, "also the letters already replayed or discarded")
	show := &cobra.Command{
		Use:   "show ID",
		Short: "One dead letter: its event, error, attempts, owner and what was done with it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q, l, closeConn, err := letter(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer closeConn()
			// What its actions achieved: its consumer's status of the event now, and each
			// action's result in words.
			p, err := q.Preview(cmd.Context(), l, false)
			if err != nil {
				return err
			}
			results := make([]string, len(l.Actions))
			for i, a := range l.Actions {
				results[i] = a.Kind + ": " + cmp.Or(a.ResultText(), "closed")
			}
			return printJSON(cmd.OutOrStdout(), struct {
				dlq.Letter
				EventNow string   `json:"event_now"`
				Achieved []string `json:"achieved,omitempty"`
			}{l, cmp.Or(p.Guard, guard.Received), results})
		},
	}
	var force, dryRun, matching bool
	replay := &cobra.Command{
		Use:   "replay ID --why W | replay --matching [filters] --why W [--dry-run]",
		Short: "Send dead letters back to their consumer, judged by the freshness rules",
		Long: `Send a dead letter back to its consumer, through the consumer's own effect-once
guard: replaying twice makes the effect once. Every replay is recorded with --by and
--why (a why is required). An event older than its type's freshness limit (config
dlq.freshness) is refused with its reason; --force sends it anyway.

--dry-run changes nothing, so it needs no --why: with one ID it prints the freshness
verdict, the consumer's guard status and what a replay would do; with --matching it
prints that verdict for each dead letter the filters select, then the counts.

With --matching, every open dead letter the filters select is replayed, one line of
progress each ("[i/n] ..."), then "R replayed, F refused, of N matching". A stale
letter is refused with its reason and the others go on (exit status 0). Ctrl-C (or
SIGTERM) stops after the dead letter in hand: the command prints "stopped after i of
n" and the counts, and exits with status 1; the same command again goes on with the
letters still open; a --dry-run stops the same way. With one ID, Ctrl-C (or SIGTERM)
lets the replay in hand finish, then exits with status 1.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if matching != (len(args) == 0) {
				return errors.New("give one dead letter ID, or --matching with filters")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if !dryRun { // a dry run records nothing and needs no why
				if err := needWhoWhy(by, why); err != nil {
					return err
				}
			}
			// The queue's calls run on ctx, which Ctrl-C does not cancel; Ctrl-C is caught
			// around every replay, so a replay in hand is finished, never left half done
			// (then the command exits 1); a bulk replay or dry run stops between two.
			ctx := cmd.Context()
			q, closeConn, err := open(ctx)
			if err != nil {
				return err
			}
			defer closeConn()
			out := cmd.OutOrStdout()
			if !matching {
				l, err := get(ctx, q, args[0])
				if err != nil {
					return err
				}
				if dryRun {
					p, err := q.Preview(ctx, l, force)
					if err != nil {
						return err
					}
					printPreview(out, l, p)
					return nil
				}
				interrupted := onInterrupt(cmd.ErrOrStderr(), "interrupted: finishing the replay in hand")
				defer interrupted.stop()
				a, err := q.Replay(ctx, l, by, why, force)
				if err != nil {
					return fmt.Errorf("dead letter %d not replayed: %w", l.Seq, err)
				}
				fmt.Fprintln(out, replayed(l, a))
				if interrupted.happened() {
					return fmt.Errorf("interrupted: dead letter %d was replayed before stopping", l.Seq)
				}
				return nil
			}
			interrupted := onInterrupt(cmd.ErrOrStderr(), "interrupted: stopping after the dead letter in hand")
			defer interrupted.stop()
			letters, err := q.List(ctx, f)
			if err != nil {
				return err
			}
			if dryRun {
				judged, fresh, send := 0, 0, 0
				for i, l := range letters {
					if interrupted.happened() {
						fmt.Fprintf(out, "stopped after %d of %d\n", i, len(letters))
						break
					}
					p, err := q.Preview(ctx, l, force)
					if err != nil {
						return err
					}
					judged++
					if p.Stale == nil {
						fresh++
					}
					if p.Refused == nil && p.Send {
						send++
					}
					fmt.Fprintf(out, "[%d/%d] dead letter %d (%s, %s, event %s): %s\n", i+1, len(letters), l.Seq, l.Consumer, l.Type, l.EventID, verdict(l, p))
				}
				if judged < len(letters) {
					fmt.Fprintf(out, "%d dead letters match; of the %d judged, %d fresh enough to replay, %d stale; %d would be sent back (dry run: nothing replayed)\n",
						len(letters), judged, fresh, judged-fresh, send)
					return fmt.Errorf("interrupted: %d of %d dead letters not judged (dry run: nothing replayed)", len(letters)-judged, len(letters))
				}
				fmt.Fprintf(out, "%d dead letters match; %d fresh enough to replay, %d stale; %d would be sent back (dry run: nothing replayed)\n",
					len(letters), fresh, len(letters)-fresh, send)
				return nil
			}
			done, refused := 0, 0
			for i, l := range letters {
				if interrupted.happened() {
					fmt.Fprintf(out, "stopped after %d of %d\n", i, len(letters))
					break
				}
				a, err := q.Replay(ctx, l, by, why, force)
				if err != nil {
					refused++
					fmt.Fprintf(out, "[%d/%d] dead letter %d (event %s) refused: %v\n", i+1, len(letters), l.Seq, l.EventID, err)
					continue
				}
				done++
				fmt.Fprintf(out, "[%d/%d] %s\n", i+1, len(letters), replayed(l, a))
			}
			fmt.Fprintf(out, "%d replayed, %d refused, of %d matching\n", done, refused, len(letters))
			if interrupted.happened() {
				return fmt.Errorf("interrupted: %d of %d dead letters not tried; the same command again goes on", len(letters)-done-refused, len(letters))
			}
			return nil
		},
	}
	filters(replay)
	replay.Flags().BoolVar(&matching, "matching", false, "replay every open dead letter the filters select")
	replay.Flags().BoolVar(&dryRun, "dry-run", false, "change nothing: say what the replay would do")
	replay.Flags().BoolVar(&force, "force", false, "replay even past the freshness limit")
	discard := &cobra.Command{
		Use:   "discard ID --why TEXT",
		Short: "Close a dead letter without replaying it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needWhoWhy(by, why); err != nil {
				return err
			}
			q, l, closeConn, err := letter(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer closeConn()
			if _, err := q.Discard(cmd.Context(), l, by, why); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "dead letter %d (%s, event %s) discarded by %s: %s\n", l.Seq, l.Consumer, l.EventID, by, why)
			return nil
		},
	}
	for _, c := range []*cobra.Command{list, show, replay, discard} {
		c.Flags().StringVar(&natsURL, "nats-url", nats.DefaultURL, "NATS of the deployment")
		c.Flags().StringVar(&cfgPath, "config", "", "config file (its dlq.freshness rules; default ./exacto.yaml, else the built-in demo)")
		cmd.AddCommand(c)
	}
	for _, c := range []*cobra.Command{replay, discard} {
		whoWhyFlags(c, &by, &why)
	}
	return cmd
}

// whoWhyFlags gives c --by (default $USER) and --why, recorded with its decision.
func whoWhyFlags(c *cobra.Command, by, why *string) {
	operator := os.Getenv("USER")
	if operator == "" {
		operator = "operator"
	}
	c.Flags().StringVar(by, "by", operator, "who decides (recorded)")
	c.Flags().StringVar(why, "why", "", "why (recorded; required)")
}

// needWhoWhy refuses a replay or discard without who (--by) or why (--why):
// dlq.NeedWhoWhy's check, its error naming the flag.
func needWhoWhy(by, why string) error {
	err := dlq.NeedWhoWhy(by, why)
	switch {
	case errors.Is(err, dlq.ErrNoWho):
		return flagError{"--by is required: who decides is recorded with the action", dlq.ErrNoWho}
	case errors.Is(err, dlq.ErrNoWhy):
		return flagError{"--why is required: it is recorded with the action", dlq.ErrNoWhy}
	}
	return err
}

// flagError names the flag a refusal is about, in its own words, and is still the
// refusal it wraps (errors.Is).
type flagError struct {
	msg string
	err error
}

func (e flagError) Error() string { return e.msg }
func (e flagError) Unwrap() error { return e.err }

// interrupt reports whether Ctrl-C or SIGTERM came since onInterrupt.
type interrupt struct {
	ch   chan struct{} // closed once the signal came and the note is printed
	done chan struct{} // closed by stop
	sigs chan os.Signal
}

// onInterrupt catches Ctrl-C and SIGTERM until stop, printing note to w when one comes.
func onInterrupt(w io.Writer, note string) *interrupt {
	in := &interrupt{ch: make(chan struct{}), done: make(chan struct{}), sigs: make(chan os.Signal, 1)}
	signal.Notify(in.sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case <-in.sigs:
			fmt.Fprintln(w, note)
			close(in.ch)
		case <-in.done:
		}
	}()
	return in
}

func (in *interrupt) happened() bool {
	select {
	case <-in.ch:
		return true
	default:
		return false
	}
}

func (in *interrupt) stop() {
	signal.Stop(in.sigs)
	close(in.done)
}

// verdict is what a replay would do, in a few words.
func verdict(l dlq.Letter, p dlq.Preview) string {
	switch {
	case p.Refused != nil:
		return "would be refused: " + p.Refused.Error()
	case p.Send:
		return "would be sent back to " + l.Consumer
	}
	return "nothing to send: " + l.Consumer + " already has the event " + p.Guard
}

func replayed(l dlq.Letter, a dlq.Action) string {
	what := "sent back to " + l.Consumer
	if a.Result != dlq.SentBack {
		what = a.ResultText()
	}
	if a.Forced {
		what += " (forced past its freshness limit)"
	}
	return fmt.Sprintf("dead letter %d (event %s): %s", l.Seq, l.EventID, what)
}

// printPreview says what a replay of l would do (a dry run).
func printPreview(w io.Writer, l dlq.Letter, p dlq.Preview) {
	fmt.Fprintf(w, "dead letter %d (%s, event %s): dry run, nothing replayed\n", l.Seq, l.Consumer, l.EventID)
	switch {
	case p.Stale != nil:
		fmt.Fprintf(w, "  freshness: %v\n", p.Stale)
	case p.Limit > 0:
		fmt.Fprintf(w, "  freshness: fresh (the %s event is %s old; its limit is %s)\n", l.Type, p.Age.Round(time.Minute), p.Limit)
	default:
		fmt.Fprintf(w, "  freshness: fresh (no limit for %s)\n", l.Type)
	}
	guardStatus := p.Guard
	if guardStatus == "" {
		guardStatus = "no record"
	}
	fmt.Fprintf(w, "  %s guard: %s\n", l.Consumer, guardStatus)
	fmt.Fprintf(w, "  replay: %s\n", verdict(l, p))
}

// errorCell is an error message in a table cell: its first 60 bytes, on one line.
func errorCell(msg string) string {
	if len(msg) > 60 {
		msg = msg[:60] + "…"
	}
	return strings.ReplaceAll(msg, "\n", " ")
}

func printLetters(w io.Writer, letters []dlq.Letter) {
	if len(letters) == 0 {
		fmt.Fprintln(w, "no dead letters")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCONSUMER\tTYPE\tTENANT\tPROVIDER\tCLASS\tATTEMPTS\tAGE\tOWNER\tSTATUS\tERROR")
	for _, l := range letters {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", l.Seq, l.Consumer, l.Type, l.Tenant, l.Provider, l.Class,
			l.Attempts, time.Since(l.LastAttempt).Round(time.Second), l.Owner, l.Status, errorCell(l.Error))
	}
	tw.Flush()
}
