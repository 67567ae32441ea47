package tests

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

// The DLQ alerts and the store's of deployments/prometheus/alerts.yml, evaluated by Prometheus's
// own rule code over synthetic series, minute by minute (in series time: the test takes
// no wall-clock time to speak of): each fires when it should, after its `for`, and stays
// quiet on a healthy queue.
func TestDeadLetterAlerts(t *testing.T) {
	p := parser.NewParser(promqltest.TestParserOpts)
	groups, errs := rulefmt.ParseFile("../deployments/prometheus/alerts.yml", false, model.UTF8Validation, p, slog.Default())
	if len(errs) > 0 {
		t.Fatalf("alerts.yml: %v", errs)
	}
	alert := func(name string) rulefmt.Rule {
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				if r.Alert == name {
					return r
				}
			}
		}
		t.Fatalf("alerts.yml has no %s", name)
		return rulefmt.Rule{}
	}
	for _, c := range []struct {
		name, alert string
		series      string // promqltest load statements, one sample a minute from 0
		minutes     int    // evaluated at 0, 1, … minutes
		firesAt     int    // the first minute it fires; -1: never
	}{
		// Past SLO (15m): the oldest letter's age passes 900 s at minute 16, and the
		// alert fires after its `for: 1m`.
		{"past SLO", "ExactoDeadLetterPastSLO", `
			exacto_dlq_slo_seconds 900x40
			exacto_dlq_oldest_open_seconds 0+60x40`, 40, 17},
		{"within SLO", "ExactoDeadLetterPastSLO", `
			exacto_dlq_slo_seconds 900x40
			exacto_dlq_oldest_open_seconds 0+20x40`, 40, -1},
		{"past SLO for less than its for", "ExactoDeadLetterPastSLO", `
			exacto_dlq_slo_seconds 900x40
			exacto_dlq_oldest_open_seconds 300x10 1000 300x29`, 40, -1},
		{"empty queue", "ExactoDeadLetterPastSLO", `
			exacto_dlq_slo_seconds 900x40
			exacto_dlq_oldest_open_seconds 0x40`, 40, -1},
		// Growing: letters wait and the oldest's age rises a second a second; true from
		// minute 1 (two points for deriv), firing after its `for: 30m`.
		{"growing", "ExactoDeadLettersGrowing", `
			exacto_dlq_open{consumer="crmwriter"} 3x90
			exacto_dlq_open{consumer="stopper"} 0x90
			exacto_dlq_oldest_open_seconds 0+60x90`, 90, 31},
		{"worked slowly but steadily", "ExactoDeadLettersGrowing", `
			exacto_dlq_open{consumer="crmwriter"} 3x90
			exacto_dlq_oldest_open_seconds 0+10x90`, 90, -1},
		{"steady age", "ExactoDeadLettersGrowing", `
			exacto_dlq_open{consumer="crmwriter"} 2x90
			exacto_dlq_oldest_open_seconds 600x90`, 90, -1},
		{"grows for 20 minutes, then worked to empty", "ExactoDeadLettersGrowing", `
			exacto_dlq_open{consumer="crmwriter"} 3x20 0x70
			exacto_dlq_oldest_open_seconds 0+60x20 0x70`, 90, -1},
		{"an empty queue whatever the age gauge says", "ExactoDeadLettersGrowing", `
			exacto_dlq_open{consumer="crmwriter"} 0x90
			exacto_dlq_oldest_open_seconds 0+60x90`, 90, -1},
		// The store: used grows 1 MiB a minute towards a 100 MiB limit, past four
		// fifths at minute 81; the alert fires after its `for: 5m`.
		{"store filling", "ExactoStoreFilling", `
			exacto_store_limit_bytes 104857600x100
			exacto_store_used_bytes 0+1048576x100`, 100, 86},
		{"no store limit", "ExactoStoreFilling", `
			exacto_store_limit_bytes 0x100
			exacto_store_used_bytes 0+1048576x100`, 100, -1},
		// The disk: free falls 10 MiB a minute from 1 GiB, under four times the 100 MiB
		// kept at minute 63.
		{"disk filling", "ExactoStoreFilling", `
			exacto_store_min_free_disk_bytes 104857600x100
			exacto_store_free_disk_bytes 1073741824-10485760x100`, 100, 68},
		{"disk with room", "ExactoStoreFilling", `
			exacto_store_min_free_disk_bytes 104857600x100
			exacto_store_free_disk_bytes 1073741824x100`, 100, -1},
		// Slots held: an Instantly outage's events take 40 more of the stopper's 1,000
		// slots a minute (parked, or nacked to wait for their redelivery), past half at
		// minute 13; the alert fires after its `for: 5m`. Two replicas read the same
		// count from the server. The crmwriter's slots are its own.
		{"slots held", "ExactoDeliverySlotsHeld", `
			exacto_consumer_ack_pending{consumer="stopper",instance="a"} 0+40x30
			exacto_consumer_ack_pending{consumer="stopper",instance="b"} 0+40x30
			exacto_consumer_max_ack_pending{consumer="stopper",instance="a"} 1000x30
			exacto_consumer_max_ack_pending{consumer="stopper",instance="b"} 1000x30
			exacto_consumer_ack_pending{consumer="crmwriter",instance="a"} 10x30
			exacto_consumer_max_ack_pending{consumer="crmwriter",instance="a"} 500x30`, 30, 18},
		{"a burst's prefetch", "ExactoDeliverySlotsHeld", `
			exacto_consumer_ack_pending{consumer="stopper",instance="a"} 160x30
			exacto_consumer_max_ack_pending{consumer="stopper",instance="a"} 1000x30`, 30, -1},
		{"an outage shorter than its for", "ExactoDeliverySlotsHeld", `
			exacto_consumer_ack_pending{consumer="stopper",instance="a"} 0x5 900x3 0x22
			exacto_consumer_max_ack_pending{consumer="stopper",instance="a"} 1000x30`, 30, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := alert(c.alert)
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				t.Fatal(err)
			}
			rule := rules.NewAlertingRule(r.Alert, expr, time.Duration(r.For), time.Duration(r.KeepFiringFor),
				labels.FromMap(r.Labels), labels.FromMap(r.Annotations), labels.EmptyLabels(), "", false, slog.New(slog.DiscardHandler))
			storage := promqltest.LoadedStorage(t, "load 1m"+c.series)
			query := rules.EngineQueryFunc(promqltest.NewTestEngine(t, false, 0, 1_000_000), storage)
			firstFiring, pending := -1, false
			for m := 0; m <= c.minutes; m++ {
				at := time.Unix(0, 0).Add(time.Duration(m) * time.Minute)
				if _, err := rule.Eval(context.Background(), 0, at, query, nil, 0); err != nil {
					t.Fatalf("minute %d: %v", m, err)
				}
				rule.SetEvaluationTimestamp(at) // as the rule group does after each evaluation
				switch rule.State() {
				case rules.StatePending:
					pending = true
				case rules.StateFiring:
					if firstFiring < 0 {
						firstFiring = m
					}
				}
			}
			if firstFiring != c.firesAt {
				t.Errorf("%s first fires at minute %d, want %d (-1: never)", c.alert, firstFiring, c.firesAt)
			}
			if c.firesAt >= 0 && !pending {
				t.Errorf("%s fired without waiting for its `for` (%v)", c.alert, r.For)
			}
			if c.firesAt >= 0 && rule.State() != rules.StateFiring {
				t.Errorf("%s stopped firing by minute %d while the condition holds", c.alert, c.minutes)
			}
		})
	}
}
