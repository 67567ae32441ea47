package main

import (
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"exacto.dev/pkg/console"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/service"
	"exacto.dev/pkg/stream"
	classifier "exacto.dev/services/classifier/handler"
	crmwriter "exacto.dev/services/crmwriter/handler"
	projector "exacto.dev/services/projector/handler"
	reconciler "exacto.dev/services/reconciler/handler"
	stopper "exacto.dev/services/stopper/handler"
	suppressor "exacto.dev/services/suppressor/handler"
)

// workers are the consumer services this binary runs, by name.
var workers = map[string]service.Run{
	stream.Classifier: classifier.Run,
	stream.Stopper:    stopper.Run,
	stream.CRMWriter:  crmwriter.Run,
	stream.Suppressor: suppressor.Run,
	stream.Projector:  projector.Run,
	stream.Reconciler: reconciler.Run,
}

func workerCmd() *cobra.Command {
	var cfgPath string
	var logText bool
	cmd := &cobra.Command{
		Use:   "worker NAME",
		Short: "Run one consumer service alone against EXACTO_NATS_URL, or pause and resume one",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runWorker(cmd, args[0], cfgPath, logText)
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "config file (default ./exacto.yaml, else the built-in demo)")
	cmd.Flags().BoolVar(&logText, "log-text", false, "log as text instead of JSON")
	var natsURL, until string
	names := func() string {
		var n []string
		for _, s := range stream.Subscriptions {
			n = append(n, s.Durable)
		}
		return strings.Join(n, ", ")
	}
	connect := func(name string) (jetstream.JetStream, func(), error) {
		if _, ok := stream.SubscriptionOf(name); !ok {
			return nil, nil, fmt.Errorf("no worker %q (known: %s)", name, names())
		}
		return dial(natsURL)
	}
	pause := &cobra.Command{
		Use:   "pause NAME",
		Short: "Pause a worker's durable consumer: events wait in the stream",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := time.ParseDuration(until)
			if err != nil || d <= 0 {
				return fmt.Errorf("--for %q: want a positive duration such as 30m", until)
			}
			js, closeConn, err := connect(args[0])
			if err != nil {
				return err
			}
			defer closeConn()
			at := time.Now().Add(d)
			if err := consumer.Pause(cmd.Context(), js, args[0], at); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s paused until %s\n", args[0], at.UTC().Format(time.RFC3339))
			return nil
		},
	}
	pause.Flags().StringVar(&until, "for", "8760h", "how long to pause (resume earlier with `exacto worker resume`)")
	resume := &cobra.Command{
		Use:   "resume NAME",
		Short: "Resume a paused worker: held events drain at its pace",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			js, closeConn, err := connect(args[0])
			if err != nil {
				return err
			}
			defer closeConn()
			if err := consumer.Resume(cmd.Context(), js, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s resumed\n", args[0])
			return nil
		},
	}
	for _, c := range []*cobra.Command{pause, resume} {
		c.Flags().StringVar(&natsURL, "nats-url", nats.DefaultURL, "NATS of the deployment")
		cmd.AddCommand(c)
	}
	return cmd
}

func runnable() []string {
	var names []string
	for n := range workers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// runWorker runs consumer service name alone against EXACTO_NATS_URL until SIGINT or
// SIGTERM.
func runWorker(cmd *cobra.Command, name, cfgPath string, logText bool) error {
	run, ok := workers[name]
	if !ok {
		return fmt.Errorf("no runnable worker %q (runnable: %s)", name, strings.Join(runnable(), ", "))
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env, err := service.Start(ctx, service.Options{Name: "exacto-" + name, ConfigPath: cfgPath, LogText: logText})
	if err != nil {
		return err
	}
	defer env.Close()
	if name == stream.Reconciler { // the singleton: it serves the DLQ gauges and the console
		if err := console.Operations(ctx, env); err != nil {
			return err
		}
	}
	return run(ctx, env, env.Part())
}

// partCmd is `exacto projector` and `exacto reconciler`: the same as `exacto worker NAME`.
func partCmd(name, short string) *cobra.Command {
	var cfgPath string
	var logText bool
	cmd := &cobra.Command{
		Use:   name,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runWorker(cmd, name, cfgPath, logText)
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "config file (default ./exacto.yaml, else the built-in demo)")
	cmd.Flags().BoolVar(&logText, "log-text", false, "log as text instead of JSON")
	return cmd
}
