package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/platform/accounts"
	"exacto.dev/pkg/reconcile"
	"exacto.dev/pkg/stream"
)

// reconcileCmd is `exacto reconcile`: one reconciliation pass now.
func reconcileCmd() *cobra.Command {
	var natsURL, tenant, configPath string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "reconcile [--dry-run] [--tenant T]",
		Short: "Run one reconciliation pass now: compare the platforms and the CRM with Exacto's state",
		Long: `Compare every tenant's campaigns, leads, replies, unsubscribes, bounces, meetings and
opportunities at the sending platforms and HubSpot with the projections and the
suppression list (pkg/reconcile), as the reconciler's schedule does, once, now.

Unsubscribes, blocks and bounces that Exacto missed, and suppressed contacts still
active at a platform, are repaired at once by events on the stream (the suppressor
and the stopper act on them); every other finding is reported for review. Each
finding is written to the diff queue (EXACTO_DIFFS) and printed with a count by kind.

--dry-run publishes nothing and writes nothing to the diff queue: it prints what a
pass would do. Nothing is ever deleted at a platform or in the CRM.

Platforms without credentials in the config are read at the sandbox of a running
` + "`exacto up`" + ` (sandbox_url / EXACTO_SANDBOX_URL, else http://<sandbox_addr>).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(configPath, os.Getenv)
			if err != nil {
				return err
			}
			sandboxURL := cfg.SandboxURL
			if sandboxURL == "" && cfg.SandboxAddr != "" {
				sandboxURL = "http://" + cfg.SandboxAddr
			}
			tenants, err := tenantsOf(cfg, tenant)
			if err != nil {
				return err
			}
			js, closeConn, err := dial(natsURL)
			if err != nil {
				return err
			}
			defer closeConn()
			deps, err := reconcile.Open(cmd.Context(), js, cfg)
			if err != nil {
				return err
			}
			limits, err := js.KeyValue(cmd.Context(), stream.RateLimits)
			if err != nil {
				return fmt.Errorf("bucket %s: %w", stream.RateLimits, err)
			}
			// Paced with the running deployment: one budget per platform account.
			platforms := accounts.New(cfg, sandboxURL, accounts.Pacing{Limits: limits})
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			for _, t := range tenants {
				clients, _ := platforms.For(t.ID)
				rep, err := deps.RunTenant(cmd.Context(), t.ID, clients, log, dryRun)
				if err != nil {
					return fmt.Errorf("tenant %s: %w", t.ID, err)
				}
				printReport(cmd.OutOrStdout(), rep)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "publish nothing and write no finding: print what the pass would do")
	cmd.Flags().StringVar(&tenant, "tenant", "", "reconcile this tenant only (default: every tenant)")
	cmd.Flags().StringVar(&configPath, "config", "", "config file (default ./exacto.yaml, else the demo config)")
	cmd.Flags().StringVar(&natsURL, "nats-url", nats.DefaultURL, "NATS of the deployment")
	return cmd
}

func printReport(w io.Writer, rep reconcile.Report) {
	mode := ""
	if rep.DryRun {
		mode = " (dry run: nothing published, nothing written)"
	}
	fmt.Fprintf(w, "tenant %s%s\n", rep.Tenant, mode)
	for _, f := range rep.Findings {
		fmt.Fprintf(w, "  %s %s [%s]\n    where:  %s\n    found:  %s\n    repair: %s\n", f.Kind, f.ID, f.Provider, f.Where, f.Found, f.Repair)
		switch {
		case rep.DryRun:
			fmt.Fprintf(w, "    %s\n", f.Would())
		case f.Applied:
			fmt.Fprintf(w, "    applied: event %s (status %s)\n", f.Event, f.Status)
		default:
			fmt.Fprintf(w, "    status: %s\n", f.Status)
		}
	}
	kinds := make([]string, 0, len(rep.ByKind))
	for k := range rep.ByKind {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	fmt.Fprintf(w, "  %d finding(s), %d new, %d repair(s) published\n", len(rep.Findings), rep.New, rep.Applied)
	for _, k := range kinds {
		fmt.Fprintf(w, "  %-24s %d\n", k, rep.ByKind[k])
	}
	for _, err := range rep.Errors {
		fmt.Fprintf(w, "  check failed: %v\n", err)
	}
}
