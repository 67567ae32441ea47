package tests

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/config"
)

// Every sample the demo takes goes all the way through: `exacto send --endpoint ID`, as
// `make run` suggests it, for each of the demo's endpoints, and each event is completed
// by every consumer that takes it — the unsigned Smartlead reply confirmed at the
// sandbox under the lead id it carries, not retried for want of its lead.
func TestEveryDemoSampleGoesAllTheWay(t *testing.T) {
	t.Parallel()
	demo, err := config.Parse([]byte(config.Demo), "built-in demo", os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	n := newNode(t, "")
	n.start()
	sent := map[string]string{} // endpoint → envelope ids
	for _, ep := range demo.EndpointIDs() {
		out, err := n.run("send", "--endpoint", ep, "--gateway", "http://"+n.http, "--sandbox", "http://"+n.sandbox)
		body, ok := strings.CutPrefix(strings.TrimSpace(out), "200 ")
		var answer struct {
			IDs []string `json:"ids"`
		}
		if err != nil || !ok || json.Unmarshal([]byte(body), &answer) != nil || len(answer.IDs) == 0 {
			t.Fatalf("send --endpoint %s: %v\n%s", ep, err, out)
		}
		sent[ep] = answer.IDs[0]
	}
	type shown struct {
		Consumers map[string]struct {
			Status    string `json:"status"`
			LastError string `json:"last_error"`
		} `json:"consumers"`
	}
	deadline := time.Now().Add(45 * time.Second)
	for ep, id := range sent {
		for {
			out, err := n.run("events", "show", id, "--nats-url", "nats://"+n.natsAddr)
			var s shown
			if err != nil || json.Unmarshal([]byte(out), &s) != nil {
				t.Fatalf("events show %s: %v\n%s", id, err, out)
			}
			var open []string
			for name, c := range s.Consumers {
				if c.Status != "completed" && c.Status != "not_subscribed" {
					open = append(open, name+": "+c.Status+" "+c.LastError)
				}
			}
			if len(open) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s's sample %s is not done: %s", ep, id, strings.Join(open, "; "))
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
}
