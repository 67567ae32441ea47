package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestFlagsHaveEnvironmentTwins(t *testing.T) {
	t.Setenv("EXACTO_PROVIDER", "stripe")
	t.Setenv("EXACTO_NATS_URL", "nats://127.0.0.1:4333")
	root := &cobra.Command{Use: "exacto"}
	root.AddCommand(sendCmd(), eventsCmd())
	bindEnv(root)
	send, _, _ := root.Find([]string{"send"})
	p := send.Flags().Lookup("provider")
	if p.Value.String() != "stripe" || !p.Changed {
		t.Fatalf("--provider from env: %q changed=%v", p.Value, p.Changed)
	}
	if strings.Count(p.Usage, "(env EXACTO_PROVIDER)") != 1 {
		t.Fatalf("usage: %q", p.Usage)
	}
	show, _, _ := root.Find([]string{"events", "show"})
	if v := show.Flags().Lookup("nats-url").Value.String(); v != "nats://127.0.0.1:4333" {
		t.Fatalf("--nats-url from env: %q", v)
	}
}

// What the commands print for a person keeps a message id's angle brackets and an
// ampersand as written.
func TestPrintJSONIsReadable(t *testing.T) {
	var b strings.Builder
	if err := printJSON(&b, map[string]string{"message_id": "<CA1@mail.example>", "q": "a&b"}); err != nil {
		t.Fatal(err)
	}
	if want := "{\n  \"message_id\": \"<CA1@mail.example>\",\n  \"q\": \"a&b\"\n}\n"; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}
