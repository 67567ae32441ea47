package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/lifecycle"
	"exacto.dev/pkg/privacy"
	"exacto.dev/pkg/projection"
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
	warnIfNotSuppressed(ctx, js, out, tenant, address)
	if err := privacy.Remember(ctx, js, p); err != nil {
		return err
	}
	h, err := pauseAll(ctx, js)
	if err != nil {
		h.resume()
		return err
	}
	fmt.Fprintf(out, "consumers paused; erasing %s (%d identity keys) ...\n", p.Anonymous, len(p.Keys))
	report, err := privacy.Erase(ctx, js, p)
	if err != nil {
		// A bucket may be half written back: a consumer resumed now would write into it,
		// and the next run, finishing it from its copy, would lose that write.
		until := h.hold(24 * time.Hour)
		return fmt.Errorf("erasure of %s stopped: %w\nThe consumers stay paused until %s: run the same command again, it finishes the erasure and resumes them",
			p.Anonymous, err, until.Format(time.RFC3339))
	}
	h.resume()
	run := privacy.Run{Tenant: tenant, Anonymous: p.Anonymous, By: by, Why: why, At: time.Now().UTC(), Again: again, Keys: len(p.Keys), Report: report}
	if err := privacy.Record(ctx, js, run); err != nil {
		return fmt.Errorf("erased, but the record of it was not kept: %w", err)
	}
	fmt.Fprintf(out, "forgotten as %s: %d events rewritten (%d about them), dead letters, outcomes and quarantine: %d messages erased, %d bucket entries removed or changed, %d buckets rewritten\n",
		p.Anonymous, report.Events, report.About, total(report.Deleted), total(report.Removed), len(report.Rewritten))
	return nil
}

// warnIfNotSuppressed says when the person is not suppressed: an erasure makes Exacto
// leave them alone, it tells no platform to stop e-mailing them.
func warnIfNotSuppressed(ctx context.Context, js jetstream.JetStream, out io.Writer, tenant, address string) {
	stores, err := projection.Open(ctx, js, "", 1)
	if err != nil {
		return
	}
	dir, err := contacts.Open(ctx, js)
	if err != nil {
		return
	}
	key, _ := privacy.Identify(address)
	kind, value, _ := strings.Cut(key, ":")
	c, found, err := projection.Reader{Stores: stores, Dir: dir}.ContactByKey(ctx, tenant, kind, value)
	if err != nil || !found {
		return
	}
	if st := c.View().Status; !lifecycle.Terminal(st) {
		fmt.Fprintf(out, "warning: this contact is %s, not suppressed: Exacto will leave them alone from now on, but a platform with an active sequence for them still e-mails them; unsubscribe them there (or send Exacto their unsubscribe) first\n", st)
	}
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// held are the consumers an erasure paused (not those an operator had paused: they
// stay as they were), kept paused while it runs.
type held struct {
	js      jetstream.JetStream
	durable []string
	stop    chan struct{}
	renewed sync.WaitGroup
}

// pauseAll pauses every consumer service that is running unpaused and waits until none
// is working on an event: they write the buckets an erasure rewrites. The pause is
// renewed while the erasure runs; should the command die, the server resumes them
// after forgetPause.
func pauseAll(ctx context.Context, js jetstream.JetStream) (*held, error) {
	h := &held{js: js, stop: make(chan struct{})}
	// A run after one that failed finds the consumers that one paused still paused:
	// they are this erasure's, not an operator's.
	ours, err := privacy.Paused(ctx, js)
	if err != nil {
		return h, err
	}
	var pausing []string
	for _, s := range stream.Subscriptions {
		c, err := js.Consumer(ctx, stream.Events, s.Durable)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		if err != nil {
			return h, err
		}
		if !c.CachedInfo().Paused || slices.Contains(ours, s.Durable) {
			pausing = append(pausing, s.Durable)
		}
	}
	if err := privacy.SetPaused(ctx, js, pausing); err != nil {
		return h, err
	}
	var waits []time.Duration
	for _, s := range stream.Subscriptions {
		if !slices.Contains(pausing, s.Durable) {
			continue // never ran here, or an operator's pause: it makes no write, and stays theirs
		}
		if err := consumer.Pause(ctx, js, s.Durable, time.Now().Add(forgetPause)); err != nil {
			return h, err
		}
		h.durable = append(h.durable, s.Durable)
		waits = append(waits, s.AckWait)
	}
	h.renewed.Add(1)
	go func() {
		defer h.renewed.Done()
		tick := time.NewTicker(forgetPause / 5)
		defer tick.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-tick.C:
				for _, d := range h.durable {
					consumer.Pause(context.WithoutCancel(ctx), js, d, time.Now().Add(forgetPause))
				}
			}
		}
	}()
	// An attempt under way ends within its consumer's ack wait (its handler's context
	// does): past it, an event still pending is waiting out a retry, not being worked.
	for i, d := range h.durable {
		if err := idle(ctx, js, d, waits[i]+5*time.Second); err != nil {
			return h, err
		}
	}
	return h, nil
}

// resume stops the renewal and resumes the consumers.
func (h *held) resume() {
	h.stopRenewing()
	ok := true
	for _, d := range h.durable {
		if err := consumer.Resume(context.Background(), h.js, d); err != nil {
			ok = false
			fmt.Printf("resume %s: %v (the server resumes it within %s)\n", d, err, forgetPause)
		}
	}
	if ok {
		if err := privacy.SetPaused(context.Background(), h.js, nil); err != nil {
			fmt.Printf("the record of the paused consumers stays: %v\n", err)
		}
	}
}

// hold stops the renewal and keeps the consumers paused for d.
func (h *held) hold(d time.Duration) time.Time {
	h.stopRenewing()
	until := time.Now().Add(d)
	for _, c := range h.durable {
		consumer.Pause(context.Background(), h.js, c, until)
	}
	return until
}

func (h *held) stopRenewing() {
	select {
	case <-h.stop:
	default:
		close(h.stop)
	}
	h.renewed.Wait()
}

// idle waits up to within until durable (and its replays) has no event in hand.
func idle(ctx context.Context, js jetstream.JetStream, durable string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for _, name := range []string{stream.Events, stream.Replays} {
		d := durable
		if name == stream.Replays {
			d = stream.Subscription{Durable: durable}.Replays().Durable
		}
		for time.Now().Before(deadline) {
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
			select {
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// retentionCmd is `exacto retention`: each tenant's retention applied now.
func retentionCmd() *cobra.Command {
	var natsURL, tenant, configPath string
	cmd := &cobra.Command{
		Use:   "retention [--tenant T] [--config F]",
		Short: "Apply each tenant's retention now: compact or remove old events, erase old quarantined deliveries and dead letters",
		Long: `Apply the config's tenants[].retention now, as the reconciler does once a day:
events stored more than retention.payloads ago lose their raw payload and free texts
(stored again compacted, the original erased from disk); events stored more than
retention.events ago that the projections do not need are erased, the others
compacted; quarantined deliveries and dead letters older than retention.payloads are
erased. An event a consumer has not handled yet is left for a later run. A replay
after it equals the live projection.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(configPath, os.Getenv)
			if err != nil {
				return err
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
			for _, t := range tenants {
				r := t.Retention
				if r.Payloads.Duration <= 0 && r.Events.Duration <= 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: no retention configured: everything is kept\n", t.ID)
					continue
				}
				got, err := privacy.Retain(cmd.Context(), js, t.ID, r.Payloads.Duration, r.Events.Duration, time.Now())
				if err != nil {
					return fmt.Errorf("%s: %w", t.ID, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %d events compacted, %d removed, %d left until every consumer has handled them; %d quarantined deliveries and dead letters erased\n",
					t.ID, got.Compacted, got.Removed, got.Waiting, total(got.Deleted))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&natsURL, "nats-url", nats.DefaultURL, "NATS of the deployment")
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant")
	cmd.Flags().StringVar(&configPath, "config", "", "config file (default ./exacto.yaml, else the built-in demo)")
	return cmd
}

// tenantsOf are cfg's tenants, or the one named tenant ("": all of them).
func tenantsOf(cfg *config.Config, tenant string) ([]config.Tenant, error) {
	var out []config.Tenant
	for _, t := range cfg.Tenants {
		if tenant == "" || t.ID == tenant {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no tenant %q in the config", tenant)
	}
	return out, nil
}
