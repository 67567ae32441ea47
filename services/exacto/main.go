// Command exacto runs Exacto: the whole pipeline on an embedded NATS server (`exacto
// up`), one part alone against EXACTO_NATS_URL, or the operator's tools.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"exacto.dev/pkg/stream"
)

func main() {
	root := &cobra.Command{
		Use:           "exacto",
		Short:         "Exacto turns provider webhooks into exactly one correct effect each",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(upCmd(), gatewayCmd(), sendCmd(), eventsCmd(), workerCmd(),
		partCmd(stream.Projector, "Run the projector alone against EXACTO_NATS_URL"),
		partCmd(stream.Reconciler, "Run the scheduled reconciliation alone against EXACTO_NATS_URL"),
		replayCmd(), contactCmd(), campaignCmd(), dlqCmd(), quarantineCmd(), reconcileCmd(), classifyCmd(), simulateCmd(), forgetCmd(), retentionCmd(), tailCmd())
	bindEnv(root)
	stopProfile := cpuProfile()
	stopHeap := heapProfile()
	err := root.Execute()
	stopProfile()
	stopHeap()
	if err != nil {
		fmt.Fprintln(os.Stderr, "exacto:", err)
		os.Exit(1)
	}
}

// bindEnv gives every flag of cmd and its subcommands an environment twin:
// --nats-url reads EXACTO_NATS_URL when the flag is not given.
func bindEnv(cmd *cobra.Command) {
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" {
			return
		}
		env := "EXACTO_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		f.Usage += " (env " + env + ")"
		if v, ok := os.LookupEnv(env); ok && v != "" {
			f.Value.Set(v)
			f.DefValue = v
			f.Changed = true // counts as given, for required flags
		}
	})
	for _, c := range cmd.Commands() {
		bindEnv(c)
	}
}

// printJSON writes v as indented JSON for a person to read: a message id's <…> as
// written, not as \u003c…\u003e.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// dialBound connects to the deployment's NATS at url and binds what bind builds on it
// (a queue, a store); closeConn closes the connection.
func dialBound[T any](ctx context.Context, url string, bind func(context.Context, jetstream.JetStream) (T, error)) (v T, closeConn func(), err error) {
	js, closeConn, err := dial(url)
	if err != nil {
		return v, nil, err
	}
	if v, err = bind(ctx, js); err != nil {
		closeConn()
		return v, nil, err
	}
	return v, closeConn, nil
}

// dial connects the operator's tools to the deployment's NATS at url.
func dial(url string) (jetstream.JetStream, func(), error) {
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return js, nc.Close, nil
}
