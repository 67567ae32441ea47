package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestShippedScenarios(t *testing.T) {
	files, _ := filepath.Glob("../../deployments/scenarios/*.yaml")
	if len(files) < 3 {
		t.Fatalf("scenarios: %v", files)
	}
	for _, f := range files {
		sc, err := loadScenario(f)
		if err != nil {
			t.Fatal(err)
		}
		start := storyStart(time.Now())
		a := sc.deliveries(newRand(sc), start)
		b := sc.deliveries(newRand(sc), start)
		if len(a) != len(b) {
			t.Fatalf("%s: not reproducible: %d then %d deliveries", f, len(a), len(b))
		}
		for i := range a {
			if string(a[i].body) != string(b[i].body) || a[i].dup != b[i].dup {
				t.Fatalf("%s: delivery %d differs between two runs", f, i)
			}
		}
	}
}

func TestScenarioShares(t *testing.T) {
	data, _ := os.ReadFile("../../deployments/scenarios/noisy-campaign.yaml")
	sc, err := parseScenario(data)
	if err != nil {
		t.Fatal(err)
	}
	ds := sc.deliveries(newRand(sc), storyStart(time.Now()))
	events, dups, replies := 0, 0, 0
	seen := map[string]int{}
	for _, d := range ds {
		seen[string(d.body)]++
		if d.dup {
			dups++
			continue
		}
		events++
		if d.typ == "reply_received" {
			replies++
		}
	}
	if replies != 30 { // 15% of 200
		t.Errorf("replies: %d, want 30", replies)
	}
	if len(seen) != events || dups < events/4 || dups > events/2 {
		t.Errorf("%d events, %d distinct bodies, %d duplicates", events, len(seen), dups)
	}
}

func TestScenarioErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"name: x\ncontacts: 1\nstory: [{type: email_sent}]\nfaults: {duplicatez: 1}\n", "field duplicatez not found in faults"},
		{"name: x\ncontacts: 1\nstory: [{type: email_sent, afterr: 1s}]\n", "field afterr not found in a story step"},
		{"name: x\ncontacts: 0\nstory: [{type: email_sent}]\n", "contacts:"},
		{"name: x\ncontacts: 1\nstory: [{type: sent}]\n", "story[0].type"},
		{"name: x\ncontacts: 1\nstory: [{type: email_sent, share: 2}]\n", "story[0].share"},
		{"name: x\ncontacts: 1\nstory: [{type: email_sent, after: soon}]\n", "want a duration"},
		{"name: x\ncontacts: 1\nstory: [{type: email_sent}]\nfaults: {outage: {dependency: salesforce, for: 1s}}\n", "faults.outage.dependency"},
		{"name: x\ncontacts: 1\nstory: [{type: email_sent}]\nfaults: {timeouts: {route: nowhere, count: 1}}\n", "faults.timeouts.route"},
	} {
		_, err := parseScenario([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.yaml, err, c.want)
		}
	}
}
