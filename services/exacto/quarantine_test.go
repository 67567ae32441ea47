package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// A replay without a why is refused before anything is read or connected to; every
// quarantine flag has its environment twin.
func TestQuarantineCommand(t *testing.T) {
	t.Setenv("EXACTO_REASON", "too_many_events")
	root := &cobra.Command{Use: "exacto", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(quarantineCmd())
	bindEnv(root)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"quarantine", "replay", "qr_00000000000000000000000000000000", "--by", "ana", "--nats-url", "nats://127.0.0.1:1"})
	if err := root.Execute(); err == nil || !strings.HasPrefix(err.Error(), "--why is required") {
		t.Fatalf("replay without --why: %v", err)
	}
	list, _, _ := root.Find([]string{"quarantine", "list"})
	if v := list.Flags().Lookup("reason").Value.String(); v != "too_many_events" {
		t.Fatalf("--reason from env: %q", v)
	}
	for _, sub := range []string{"list", "show", "replay"} {
		c, _, _ := root.Find([]string{"quarantine", sub})
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Name != "help" && !strings.Contains(f.Usage, "(env EXACTO_") {
				t.Errorf("quarantine %s --%s has no environment twin", sub, f.Name)
			}
		})
	}
}
