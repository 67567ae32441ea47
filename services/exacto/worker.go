package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/stream"
)

func workerCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "worker", Short: "Operate the consumer services"}
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
		nc, err := nats.Connect(natsURL, nats.Timeout(5*time.Second))
		if err != nil {
			return nil, nil, fmt.Errorf("connect to %s: %w", natsURL, err)
		}
		js, err := jetstream.New(nc)
		return js, nc.Close, err
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
