package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/privacy"
	"exacto.dev/pkg/stream"
)

// forgetPause bounds how long an erasure holds the consumers: the server resumes them
// by itself after it, should the command die.
const forgetPause = 15 * time.Minute

func forgetCmd() *cobra.Command {
	var natsURL, tenant, by, why string
	cmd := &cobra.Command{
		Use:   "forget EMAIL|PHONE --tenant T --why W",
		Short: "Erase a person's personal data from everything Exacto keeps; they stay suppressed",
		Long: `Forget removes a person's personal data (GDPR art. 17) from the event history, the
projections, the contact directory, guards, dead letters and the quarantine. Every event
about them is stored again anonymized (their anonymous id instead of them, no texts, no
raw payload) and the original is erased from disk; other people's events that name them
have it replaced by "[erased]". They stay suppressed by a keyed hash of each of their
addresses and ids: a later event about them is stored anonymized and acted on by no one.
The consumers are paused while it runs (seconds to minutes, with the size of the
history), and resume after. Running it again is harmless: it erases what is left.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needWhoWhy(by, why); err != nil {
				return err
			}
			if tenant == "" {
				return errors.New("--tenant is required: whose contact to forget")
			}
			if _, err := privacy.Identify(args[0]); err != nil {
				return err
			}
			js, closeConn, err := dial(natsURL)
			if err != nil {
				return err
			}
			defer closeConn()
			return forget(cmd.Context(), js, cmd.OutOrStdout(), tenant, args[0], by, why)
		},
	}
	cmd.Flags().StringVar(&natsURL, "nats-url", nats.DefaultURL, "NATS of the deployment")
	cmd.Flags().StringVar(&tenant, "tenant", "", "the tenant whose contact it is (required)")
	whoWhyFlags(cmd, &by, &why)
	return cmd
}

// forget runs one erasure: the person found and remembered as forgotten, the
// consumers paused and idle, their data erased, the run recorded, the consumers
// resumed.
func forget(ctx context.Context, js jetstream.JetStream, out io.Writer, tenant, address, by, why string) error {
	p, again, err := privacy.Find(ctx, js, tenant, address)
	if err != nil {
		return err
	}
	if err := privacy.Remember(ctx, js, p); err != nil {
		return err
	}
	resume, err := pauseAll(ctx, js)
	defer resume()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "consumers paused; erasing %s (%d identity keys) ...\n", p.Anonymous, len(p.Keys))
	report, err := privacy.Erase(ctx, js, p)
	if err != nil {
		return fmt.Errorf("erasure of %s stopped: %w (run it again: it goes on where it stopped)", p.Anonymous, err)
	}
	run := privacy.Run{Tenant: tenant, Anonymous: p.Anonymous, By: by, Why: why, At: time.Now().UTC(), Again: again, Keys: len(p.Keys), Report: report}
	if err := privacy.Record(ctx, js, run); err != nil {
		return fmt.Errorf("erased, but the record of it was not kept: %w", err)
	}
	fmt.Fprintf(out, "forgotten as %s: %d events rewritten (%d about them), dead letters, outcomes and quarantine: %d messages erased, %d bucket entries removed, %d buckets rewritten\n",
		p.Anonymous, report.Events, report.About, total(report.Deleted), total(report.Removed), len(report.Rewritten))
	return nil
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// pauseAll pauses every consumer service and waits until none holds an event: they
// write the buckets an erasure rewrites. resume resumes them (also after an error).
func pauseAll(ctx context.Context, js jetstream.JetStream) (resume func(), err error) {
	var paused []string
	resume = func() {
		for _, d := range paused {
			if err := consumer.Resume(context.WithoutCancel(ctx), js, d); err != nil {
				fmt.Printf("resume %s: %v (the server resumes it at %s)\n", d, err, time.Now().Add(forgetPause).Format(time.RFC3339))
			}
		}
	}
	until := time.Now().Add(forgetPause)
	for _, s := range stream.Subscriptions {
		err := consumer.Pause(ctx, js, s.Durable, until)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue // the service never ran here
		}
		if err != nil {
			return resume, err
		}
		paused = append(paused, s.Durable)
	}
	// The projector and the suppressor must be idle: they write the projections, the
	// contact directory and the suppression list, which the erasure writes anew, and
	// a write of theirs lost to it would be acked and lost. Another consumer's write
	// lost to it is a guard's (its attempt is tried again and finds its effect made,
	// docs/durability.md); those get a moment to finish, no more: one may wait for a
	// paused one (the CRM writer for a classification).
	for _, d := range paused {
		within := 10 * time.Second
		if d == stream.Projector || d == stream.Suppressor {
			within = 2 * time.Minute
		}
		if err := idle(ctx, js, d, within); err != nil {
			return resume, err
		}
	}
	return resume, nil
}

// idle waits up to within until durable (and its replays) holds no event, and says
// whether it does not when it must.
func idle(ctx context.Context, js jetstream.JetStream, durable string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for _, name := range []string{stream.Events, stream.Replays} {
		d := durable
		if name == stream.Replays {
			d = stream.Subscription{Durable: durable}.Replays().Durable
		}
		for {
			c, err := js.Consumer(ctx, name, d)
			if errors.Is(err, jetstream.ErrConsumerNotFound) {
				break
			}
			if err != nil {
				return err
			}
			info, err := c.Info(ctx)
			if err != nil {
				return err
			}
			if info.NumAckPending == 0 {
				break
			}
			if time.Now().After(deadline) {
				if durable == stream.Projector || durable == stream.Suppressor {
					return fmt.Errorf("consumer %s still holds %d events after %s: try again later", d, info.NumAckPending, within)
				}
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}
