package config

import (
	"strings"
	"testing"
	"time"
)

const withSLOs = `
workflow_version: "2026-12-b"
slos:
  - {name: unsubscribe, types: [lead.unsubscribed], target: 30s, objective: 0.999}
  - {name: hot_reply, types: [reply.classified], labels: [interested], target: 45s}
  - {name: reply, types: [reply.received, reply.classified], target: 3m}
`

func TestSLOClasses(t *testing.T) {
	c, err := Parse([]byte(withSLOs+good), "exacto.yaml", env(goodEnv))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		typ, label, class string
		target            time.Duration
		objective         float64
	}{
		{"lead.unsubscribed", "", "unsubscribe", 30 * time.Second, 0.999},
		{"reply.classified", "interested", "hot_reply", 45 * time.Second, 0.99}, // objective defaulted
		{"reply.classified", "out_of_office", "reply", 3 * time.Minute, 0.99},
		{"reply.received", "", "reply", 3 * time.Minute, 0.99},
		{"email.opened", "", "other", OtherSLO.Target, OtherSLO.Objective},
	} {
		s := c.SLOOf(tc.typ, tc.label)
		if s.Name != tc.class || s.Target != tc.target || s.Objective != tc.objective {
			t.Errorf("%s/%s: got %s %v %v, want %s %v %v", tc.typ, tc.label, s.Name, s.Target, s.Objective, tc.class, tc.target, tc.objective)
		}
	}
	if c.WorkflowVersion != "2026-12-b" {
		t.Errorf("workflow version %q", c.WorkflowVersion)
	}
	if n := len(c.SLOClasses()); n != 4 {
		t.Errorf("%d classes, want the 3 configured and other", n)
	}
	c, err = Parse([]byte(good), "exacto.yaml", env(mapWith(goodEnv, "EXACTO_WORKFLOW_VERSION", "v7")))
	if err != nil {
		t.Fatal(err)
	}
	if c.SLOOf("lead.unsubscribed", "").Target != time.Minute || c.SLOOf("reply.classified", "interested").Name != "positive_reply" {
		t.Errorf("defaults not applied: %+v", c.SLOs)
	}
	if c.WorkflowVersion != "v7" {
		t.Errorf("EXACTO_WORKFLOW_VERSION not applied: %q", c.WorkflowVersion)
	}
}

func mapWith(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func TestSLORefusals(t *testing.T) {
	for _, tc := range []struct{ name, slos, want string }{
		{"bad name", `[{name: Reply, types: [reply.received], target: 1m}]`, `name "Reply"`},
		{"reserved name", `[{name: other, types: [reply.received], target: 1m}]`, `name "other" is used twice`},
		{"twice", `[{name: a, types: [reply.received], target: 1m}, {name: a, types: [email.opened], target: 1m}]`, `slos[1]: name "a" is used twice`},
		{"no types", `[{name: a, target: 1m}]`, "a: types is empty"},
		{"unknown type", `[{name: a, types: [reply.recieved], target: 1m}]`, `unknown event type "reply.recieved"`},
		{"unknown label", `[{name: a, types: [reply.classified], labels: [keen], target: 1m}]`, `unknown reply label "keen"`},
		{"label on another type", `[{name: a, types: [reply.received], labels: [interested], target: 1m}]`, "labels apply only to reply.classified"},
		{"no target", `[{name: a, types: [reply.received]}]`, "target must be a positive duration"},
		{"objective of 1", `[{name: a, types: [reply.received], target: 1m, objective: 1}]`, "objective 1: want a share"},
		{"not a duration", `[{name: a, types: [reply.received], target: soon}]`, "soon"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte("slos: "+tc.slos+"\n"+good), "exacto.yaml", env(goodEnv))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v does not contain %q", err, tc.want)
			}
		})
	}
}
