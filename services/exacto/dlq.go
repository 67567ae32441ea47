package main

import (
	"context"
	"encoding/json"
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
	"github.com/spf13/cobra"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/dlq"
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
		js, closeConn, err := dial(natsURL)
		if err != nil {
			return nil, nil, err
		}
		q, err := dlq.New(ctx, js, cfg.DLQ)
		if err != nil {
			closeConn()
			return nil, nil, err
		}
		return q, closeConn, nil
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
			_, l, closeConn, err := letter(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer closeConn()
			b, _ := json.MarshalIndent(l, "", "  ")
			fmt.Fprintln(cmd.OutOrStdout(), string(b))
			return nil
		},
	}
	var force, dryRun, matching bool
	replay := &cobra.Command{
		Use:   "replay ID | replay --matching [filters] [--dry-run]",
		Short: "Send dead letters back to their consumer, judged by the freshness rules",
		Long: `Send a dead letter back to its consumer, through the consumer's own effect-once
guard: replaying twice makes the effect once. An event older than its type's freshness
limit (config dlq.freshness) is refused with its reason; --force sends it anyway and
needs --why. With --matching, every open dead letter the filters select is replayed
(--dry-run only counts them); Ctrl-C stops between two.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if matching != (len(args) == 0) {
				return errors.New("give one dead letter ID, or --matching with filters")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
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
				a, err := q.Replay(ctx, l, by, why, force)
				if err != nil {
					return fmt.Errorf("dead letter %d not replayed: %w", l.Seq, err)
				}
				fmt.Fprintln(out, replayed(l, a))
				return nil
			}
			letters, err := q.List(ctx, f)
			if err != nil {
				return err
			}
			if dryRun {
				fresh := 0
				for _, l := range letters {
					if q.Fresh(l) == nil {
						fresh++
					}
				}
				fmt.Fprintf(out, "%d dead letters match; %d fresh enough to replay, %d stale\n", len(letters), fresh, len(letters)-fresh)
				return nil
			}
			done, refused := 0, 0
			for i, l := range letters {
				if ctx.Err() != nil {
					fmt.Fprintf(out, "stopped after %d of %d\n", i, len(letters))
					break
				}
				a, err := q.Replay(ctx, l, by, why, force)
				if err != nil {
					refused++
					fmt.Fprintf(out, "%d refused: %v\n", l.Seq, err)
					continue
				}
				done++
				fmt.Fprintf(out, "[%d/%d] %s\n", i+1, len(letters), replayed(l, a))
			}
			fmt.Fprintf(out, "%d replayed, %d refused, of %d matching\n", done, refused, len(letters))
			return nil
		},
	}
	filters(replay)
	replay.Flags().BoolVar(&matching, "matching", false, "replay every open dead letter the filters select")
	replay.Flags().BoolVar(&dryRun, "dry-run", false, "with --matching: only count what would be replayed")
	replay.Flags().BoolVar(&force, "force", false, "replay even past the freshness limit (needs --why)")
	discard := &cobra.Command{
		Use:   "discard ID --why TEXT",
		Short: "Close a dead letter without replaying it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
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
	operator := os.Getenv("USER")
	if operator == "" {
		operator = "operator"
	}
	for _, c := range []*cobra.Command{list, show, replay, discard} {
		c.Flags().StringVar(&natsURL, "nats-url", nats.DefaultURL, "NATS of the deployment")
		c.Flags().StringVar(&cfgPath, "config", "", "config file (its dlq.freshness rules; default ./exacto.yaml, else the built-in demo)")
		cmd.AddCommand(c)
	}
	for _, c := range []*cobra.Command{replay, discard} {
		c.Flags().StringVar(&by, "by", operator, "who decides (recorded)")
		c.Flags().StringVar(&why, "why", "", "why (recorded; required to discard or to force)")
	}
	return cmd
}

func replayed(l dlq.Letter, a dlq.Action) string {
	what := "sent back to " + l.Consumer
	if a.Result != "dead_letter" {
		what = "nothing to send: " + l.Consumer + " already has the event " + a.Result
	}
	if a.Forced {
		what += " (forced past its freshness limit)"
	}
	return fmt.Sprintf("dead letter %d (event %s): %s", l.Seq, l.EventID, what)
}

func printLetters(w io.Writer, letters []dlq.Letter) {
	if len(letters) == 0 {
		fmt.Fprintln(w, "no dead letters")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCONSUMER\tTYPE\tTENANT\tPROVIDER\tCLASS\tATTEMPTS\tAGE\tOWNER\tSTATUS\tERROR")
	for _, l := range letters {
		msg := l.Error
		if len(msg) > 60 {
			msg = msg[:60] + "…"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", l.Seq, l.Consumer, l.Type, l.Tenant, l.Provider, l.Class,
			l.Attempts, time.Since(l.LastAttempt).Round(time.Second), l.Owner, l.Status, strings.ReplaceAll(msg, "\n", " "))
	}
	tw.Flush()
}
