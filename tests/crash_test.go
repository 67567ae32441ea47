package tests

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/stream"
)

// Crash points: the stopper, run as its own process, kills itself with SIGKILL at a step
// boundary of its first event (after the guard, after the stop was made but before the
// guard and JetStream heard of it, after the ack), and is started again: every reply is
// stopped exactly once, and each has one sequence.stopped.
func TestChaosCrashPoints(t *testing.T) {
	t.Parallel()
	for _, point := range []string{consumer.CrashAfterGuard, consumer.CrashAfterEffect, consumer.CrashAfterAck} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			n := size(20, 200)
			conn := brokertest.Start(t, "")
			sb := sandbox.Start(t)
			var ids []string
			for i := range n {
				email := fmt.Sprintf("crash%d@northwind.example", i)
				sb.AddInstantlyLead(campaign, email)
				env := envelope.Envelope{SpecVersion: "1.0", ID: envelope.ID("demo", "instantly", fmt.Sprint(point, i)), Type: envelope.TypeReplyReceived,
					Tenant: "demo", Provider: "instantly", Endpoint: "instantly", Time: time.Now(), ReceivedAt: time.Now(),
					Data: envelope.Data{ProviderType: "reply_received", Contact: &envelope.Contact{Email: email},
						Campaign: &envelope.Campaign{ID: campaign}, Message: &envelope.Message{ID: fmt.Sprint("m", i), Text: "Can you send pricing?"}}}
				sb.AddInstantlyReply(campaign, email, env.Data.Message.ID, env.Data.Message.Text, false, env.Time) // Instantly holds it
				msg, _ := stream.EventMessage(context.Background(), env)
				if _, err := conn.JS.PublishMsg(context.Background(), msg); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, env.ID)
			}
			worker := func(crashAt string) *exec.Cmd {
				cmd := exec.Command(exactoBin, "worker", "stopper", "--log-text")
				cmd.Env = append(cmd.Environ(), "EXACTO_NATS_URL="+conn.Embedded.ClientURL(), "EXACTO_SANDBOX_URL="+sb.URL,
					"EXACTO_ADMIN_ADDR="+freePort(t), "EXACTO_CONFIG=", "EXACTO_CRASH_AT="+crashAt)
				cmd.Dir = t.TempDir()
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
				return cmd
			}
			first := worker(point)
			done := make(chan error, 1)
			go func() { done <- first.Wait() }()
			select {
			case err := <-done:
				var exit *exec.ExitError
				if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Fatalf("the worker did not die by SIGKILL at %s: %v", point, err)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("the worker never reached %s", point)
			}
			worker("")
			settled(t, conn.JS, stream.Stopper)
			stops, dup, lost := 0, 0, 0
			for i := range n {
				s := len(sb.Stops(fmt.Sprintf("crash%d@northwind.example", i)))
				stops += min(s, 1)
				dup += max(0, s-1)
				if s == 0 {
					lost++
				}
			}
			guards, _ := conn.JS.KeyValue(context.Background(), stream.Guards)
			for _, id := range ids {
				if rec, _, err := guard.Status(context.Background(), guards, stream.Stopper, id); err != nil || rec.Status != guard.Completed {
					t.Errorf("reply %s in the stopper: %+v %v", id, rec, err)
				}
			}
			stopped := 0
			for _, env := range readStream(t, conn.JS, stream.Events, "events.*.*.sequence.stopped") {
				if data, _ := env["data"].(map[string]any); data != nil {
					stopped++
				}
			}
			if stopped != n {
				t.Errorf("%d sequence.stopped for %d replies", stopped, n)
			}
			row(t, "crash "+point, n, n, stops, lost, dup, 0)
		})
	}
}
