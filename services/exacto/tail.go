package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/stream"
)

// tailCmd prints events as they are stored, one line each, like `stripe listen`: the
// first thing to watch while pointing a provider at a new URL.
func tailCmd() *cobra.Command {
	var natsURL, tenant, provider, typ string
	var since time.Duration
	var count int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "tail [--tenant T] [--provider P] [--type TYPE] [--since D] [--count N] [--json]",
		Short: "Print events as they are stored, one line each (Ctrl-C stops)",
		Long: `Print each event as it is stored in EXACTO_EVENTS, one line each: stored time,
tenant, provider, type, envelope id, contact, campaign, and for a derived event what it
says (a reply's label, the event it came from). --since D shows the events of the last
D first; --count N stops after N events; --json prints each envelope as JSON instead
(raw payload left out). Refused deliveries are not events: the console's Refused
page lists them, with why each was refused.`,
		Example: "  exacto tail --provider instantly\n  exacto tail --type reply.classified --since 1h",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			filter, err := stream.EventFilter(tenant, provider, typ)
			if err != nil {
				return fmt.Errorf("--%w", err)
			}
			if typ != "" && !slices.Contains(envelope.AllTypes, typ) {
				return fmt.Errorf("--type %q: no such event type (known: %s)", typ, strings.Join(envelope.AllTypes, ", "))
			}
			if since < 0 || count < 0 {
				return errors.New("--since and --count are not negative")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			js, closeConn, err := dial(natsURL)
			if err != nil {
				return err
			}
			defer closeConn()
			err = tail(ctx, js, cmd.OutOrStdout(), cmd.ErrOrStderr(), filter, since, count, asJSON)
			if errors.Is(err, context.Canceled) {
				return nil // Ctrl-C
			}
			return err
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant's events")
	cmd.Flags().StringVar(&provider, "provider", "", "only this provider's events (instantly, hubspot, …; an event derived from one is its provider's too)")
	cmd.Flags().StringVar(&typ, "type", "", "only events of this canonical type (reply.received, reply.classified, …)")
	cmd.Flags().DurationVar(&since, "since", 0, "first show the events stored in this last span (e.g. 10m)")
	cmd.Flags().IntVar(&count, "count", 0, "stop after this many events (0: until Ctrl-C)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "each envelope as a line of JSON (raw payload left out)")
	cmd.Flags().StringVar(&natsURL, "nats-url", nats.DefaultURL, "NATS of the deployment")
	return cmd
}

// tail prints the events filter takes, from since ago (0: from now on), until ctx ends
// or count are printed.
func tail(ctx context.Context, js jetstream.JetStream, out, errOut io.Writer, filter string, since time.Duration, count int, asJSON bool) error {
	st, err := js.Stream(ctx, stream.Events)
	if err != nil {
		return err
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverNewPolicy}
	if since > 0 {
		at := time.Now().Add(-since)
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &at
	}
	c, err := st.OrderedConsumer(ctx, cfg)
	if err != nil {
		return err
	}
	msgs, err := c.Messages()
	if err != nil {
		return err
	}
	defer msgs.Stop()
	go func() { <-ctx.Done(); msgs.Stop() }()
	from := "from now on"
	if since > 0 {
		from = "stored since " + cfg.OptStartTime.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(errOut, "tail: the events of %s %s (Ctrl-C stops)\n", filter, from)
	for printed := 0; count == 0 || printed < count; printed++ {
		m, err := msgs.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		line, err := tailLine(m, asJSON)
		if err != nil {
			return err
		}
		fmt.Fprintln(out, line)
	}
	return nil
}

// tailLine is one stored event as tail prints it.
func tailLine(m jetstream.Msg, asJSON bool) (string, error) {
	var env envelope.Envelope
	if err := envelope.Decode(m.Data(), &env); err != nil {
		return "", fmt.Errorf("%s: not an envelope: %w", m.Subject(), err)
	}
	if asJSON {
		env.Data.Raw = nil
		b, err := json.Marshal(env)
		return string(b), err
	}
	stored := "-"
	if md, err := m.Metadata(); err == nil {
		stored = md.Timestamp.UTC().Format(time.RFC3339)
	}
	parts := []string{stored, env.Tenant, env.Provider, env.Type, env.ID}
	d := env.Data
	switch c := d.Contact; {
	case c == nil:
	case c.Email != "":
		parts = append(parts, c.Email)
	case c.Phone != "":
		parts = append(parts, c.Phone)
	case c.Anonymous != "":
		parts = append(parts, c.Anonymous)
	}
	if d.Campaign != nil && d.Campaign.ID != "" {
		parts = append(parts, "campaign "+d.Campaign.ID)
	}
	if cl := d.Classification; cl != nil {
		parts = append(parts, fmt.Sprintf("%s %.2f", cl.Label, cl.Confidence))
	}
	if d.Cause != "" {
		parts = append(parts, "from "+d.Cause)
	}
	if !env.Signed && env.AuthMethod != envelope.AuthDerived {
		parts = append(parts, "unsigned")
	}
	return strings.Join(parts, "  "), nil
}
