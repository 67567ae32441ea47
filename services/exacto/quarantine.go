package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/quarantine"
)

func quarantineCmd() *cobra.Command {
	var natsURL, cfgPath, by, why string
	var f quarantine.Filter
	var body, dryRun bool
	cmd := &cobra.Command{Use: "quarantine", Short: "Verified deliveries the gateway could not turn into events: list, show, replay"}
	open := func(ctx context.Context) (*quarantine.Store, func(), error) {
		return dialBound(ctx, natsURL, quarantine.New)
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "The open quarantined deliveries (with --all, also those replayed)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			q, closeConn, err := open(cmd.Context())
			if err != nil {
				return err
			}
			defer closeConn()
			entries, err := q.List(cmd.Context(), f)
			if err != nil {
				return err
			}
			printQuarantine(cmd.OutOrStdout(), entries)
			return nil
		},
	}
	list.Flags().StringVar(&f.Tenant, "tenant", "", "only this tenant's")
	list.Flags().StringVar(&f.Endpoint, "endpoint", "", "only this endpoint's")
	list.Flags().StringVar(&f.Reason, "reason", "", "only this reason's (body_too_large, too_many_events, malformed_body, empty_batch)")
	list.Flags().BoolVar(&f.All, "all", false, "also the deliveries already replayed")
	show := &cobra.Command{
		Use:   "show ID",
		Short: "One quarantined delivery: why it was refused, its headers, size and replays (--body: its body alone)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q, closeConn, err := open(cmd.Context())
			if err != nil {
				return err
			}
			defer closeConn()
			e, err := q.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if body {
				_, err := cmd.OutOrStdout().Write(e.Body)
				return err
			}
			return printJSON(cmd.OutOrStdout(), e)
		},
	}
	show.Flags().BoolVar(&body, "body", false, "print the kept body alone, byte for byte")
	replay := &cobra.Command{
		Use:   "replay ID --why W [--by WHO] [--dry-run]",
		Short: "Turn a quarantined delivery into its events with the current parser and limits",
		Long: `Run the endpoint's provider, as the config configures it now and under its
gateway limits now (body_limit, max_events), over the quarantined body and headers, and
store the events it holds exactly as the gateway would have: the same ids, through the
same duplicate checks. The signature was verified when the delivery arrived and is not
kept: it is not verified again. Replaying twice stores the events once. Every replay is
recorded with --by and --why (a why is required).

A delivery still refused (the parser still fails, the body is still over body_limit,
more events than max_events), one whose body was cut when it was kept, or one whose
endpoint the config no longer has is refused with its reason, and nothing changes.

--dry-run changes nothing, so it needs no --why: it says which events a replay would
store and which are already stored, or why it would be refused.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !dryRun {
				if err := needWhoWhy(by, why); err != nil {
					return err
				}
			}
			cfg, err := config.Load(cfgPath, os.Getenv)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			q, closeConn, err := open(ctx)
			if err != nil {
				return err
			}
			defer closeConn()
			e, err := q.Get(ctx, args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if dryRun {
				events, refused, err := q.Preview(ctx, cfg, e)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "quarantined delivery %s (%s/%s, %s): dry run, nothing stored\n", e.ID, e.Tenant, e.Endpoint, e.Reason)
				if refused != nil {
					fmt.Fprintf(out, "  replay: would be refused: %v\n", refused)
					return nil
				}
				fresh := 0
				for _, p := range events {
					what := "would be stored"
					if p.Stored {
						what = "already stored"
					} else {
						fresh++
					}
					fmt.Fprintf(out, "  %s %s: %s\n", p.ID, p.Type, what)
				}
				fmt.Fprintf(out, "  replay: would store %d of %d events\n", fresh, len(events))
				return nil
			}
			a, err := q.Replay(ctx, cfg, e, by, why)
			if err != nil {
				return fmt.Errorf("quarantined delivery %s not replayed: %w", e.ID, err)
			}
			fmt.Fprintf(out, "quarantined delivery %s replayed by %s: %d events stored, %d already stored: %s\n",
				e.ID, a.By, a.Stored, a.Duplicates, strings.Join(a.IDs, " "))
			return nil
		},
	}
	replay.Flags().StringVar(&cfgPath, "config", "", "config file whose endpoints and gateway limits the replay runs under (default ./exacto.yaml, else the built-in demo)")
	replay.Flags().BoolVar(&dryRun, "dry-run", false, "change nothing: say what the replay would store")
	whoWhyFlags(replay, &by, &why)
	for _, c := range []*cobra.Command{list, show, replay} {
		c.Flags().StringVar(&natsURL, "nats-url", nats.DefaultURL, "NATS of the deployment")
		cmd.AddCommand(c)
	}
	return cmd
}

func printQuarantine(w io.Writer, entries []quarantine.Entry) {
	if len(entries) == 0 {
		fmt.Fprintln(w, "no quarantined deliveries")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRECEIVED\tTENANT\tENDPOINT\tPROVIDER\tREASON\tSIZE\tSTATUS\tERROR")
	for _, e := range entries {
		size := fmt.Sprint(e.Size)
		if e.Cut {
			size += " (cut)"
		}
		fmt.Fprintf(tw, "%s\t%s ago\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, time.Since(e.ReceivedAt).Round(time.Second), e.Tenant, e.Endpoint, e.Provider,
			e.Reason, size, e.Status, errorCell(e.Error))
	}
	tw.Flush()
}
