package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// One positive reply through `exacto up` with EXACTO_TRACE_FILE set: its trace, from the
// gateway's request to the HubSpot note, is one tree in the exported file; /metrics then
// shows every metric of the observability issue by name, the ones this run provoked
// with a count; the alert rules and the dashboard in deployments/ use only those.
func TestObservabilityReplyTraceAndMetrics(t *testing.T) {
	n := newNode(t, "")
	traceFile := filepath.Join(n.dir, "trace.jsonl")
	n.extraEnv = append(n.extraEnv, "EXACTO_TRACE_FILE="+traceFile, "EXACTO_LOG_FORMAT=json")
	n.start()
	hook := "http://" + n.http + "/hooks/instantly/demo-instantly-token"
	body := `{"timestamp":"` + time.Now().UTC().Add(-time.Hour).Format("2006-01-02T15:04:05.000Z") + `","event_type":"reply_received","workspace":"ws_1","campaign_id":"cmp_1","campaign_name":"Q4","lead_email":"ana.lima@example.com","email_account":"sam@outbound.example","step":1,"variant":1,"email_id":"em_obs_1","reply_subject":"Re: quick question","reply_text":"Yes, I'm interested. Can we talk next Tuesday?"}`
	n.happened("instantly", body)
	post := func(secret string) int {
		req, _ := http.NewRequest(http.MethodPost, hook, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Exacto-Secret", secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := post("demo-instantly-secret"); s != 200 {
		t.Fatalf("reply: %d", s)
	}
	if s := post("demo-instantly-secret"); s != 200 { // the provider's retry: a duplicate
		t.Fatalf("duplicate: %d", s)
	}
	if s := post("not-the-secret"); s != 401 {
		t.Fatalf("forged: %d", s)
	}

	// Wait until the reply is completed everywhere and its classification is written.
	reply := waitStored(t, n, "events.demo.instantly.reply.received")
	classified := waitStored(t, n, "events.demo.instantly.reply.classified")
	waitCompleted(t, n, reply, "classifier", "stopper", "crmwriter", "projector")
	waitCompleted(t, n, classified, "crmwriter")

	// A completed event's ack goes with its consumer's next batch of acks (within a
	// second): the queues drain then.
	var metrics []sample
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		metrics = scrape(t, "http://"+n.admin+"/metrics")
		drained := true
		for _, c := range []string{"classifier", "stopper", "crmwriter", "suppressor", "projector"} {
			v, _ := sum(metrics, "exacto_consumer_pending", map[string]string{"consumer": c})
			drained = drained && v == 0
		}
		if drained || time.Now().After(deadline) {
			break
		}
	}
	checkMetrics(t, metrics)
	checkRulesAndDashboard(t, metrics)

	if err := n.stop(); err != nil { // SIGTERM flushes the batched spans
		t.Fatalf("SIGTERM: %v\n%s", err, n.out.String())
	}
	if strings.Contains(n.out.String(), "panic") {
		t.Fatalf("the process panicked:\n%s", n.out.String())
	}
	tree := traceTree(t, traceFile, reply)
	t.Logf("trace of reply %s:\n%s", reply, tree)
	// Keep the tree beside the exported spans, and where the caller asks for a copy.
	if err := os.WriteFile(filepath.Join(n.dir, "trace-tree.txt"), []byte(tree), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := os.Getenv("EXACTO_TRACE_OUT"); out != "" {
		data, _ := os.ReadFile(traceFile)
		os.WriteFile(out, data, 0o644)
		os.WriteFile(out+".tree.txt", []byte(tree), 0o644)
	}
	// JSON logs carry the trace id of the event they speak of.
	logLine := regexp.MustCompile(`\{[^\n]*"msg":"crm activity written"[^\n]*\}`).FindString(n.out.String())
	var rec map[string]any
	if err := json.Unmarshal([]byte(logLine), &rec); err != nil || rec["trace_id"] == nil || rec["trace_id"] == "" {
		t.Fatalf("the CRM writer's log line has no trace id: %q (%v)", logLine, err)
	}
}

// waitStored returns the event id of the last message on subject, waiting for it.
func waitStored(t *testing.T, n *node, subject string) string {
	t.Helper()
	st, err := n.js().Stream(t.Context(), "EXACTO_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m, err := st.GetLastMsgForSubject(t.Context(), subject); err == nil {
			return m.Header.Get("Nats-Msg-Id")
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing stored on %s\n%s", subject, n.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitCompleted waits until `exacto events show` reports id completed in consumers.
func waitCompleted(t *testing.T, n *node, id string, consumers ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, c := range consumers {
		for {
			out, _ := n.run("events", "show", id, "--nats-url", "nats://"+n.natsAddr)
			var shown struct {
				Consumers map[string]struct {
					Status string `json:"status"`
				} `json:"consumers"`
			}
			json.Unmarshal([]byte(out), &shown)
			if shown.Consumers[c].Status == "completed" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("event %s in %s: %q\n%s", id, c, shown.Consumers[c].Status, out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// sample is one line of the Prometheus text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

func scrape(t *testing.T, url string) []sample {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out []sample
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		m := sampleLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		s := sample{name: m[1], labels: map[string]string{}, value: v}
		for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
			s.labels[p[1]] = p[2]
		}
		out = append(out, s)
	}
	return out
}

// sum adds the samples named name whose labels include want.
func sum(ss []sample, name string, want map[string]string) (total float64, found bool) {
	for _, s := range ss {
		if s.name != name {
			continue
		}
		ok := true
		for k, v := range want {
			if s.labels[k] != v {
				ok = false
			}
		}
		if ok {
			total, found = total+s.value, true
		}
	}
	return total, found
}

func checkMetrics(t *testing.T, ss []sample) {
	t.Helper()
	eventLabels := []string{"consumer", "tenant", "provider", "type", "workflow_version"}
	for _, m := range []struct {
		name    string
		where   map[string]string
		atLeast float64 // what this run provoked; 0: present (a zero series counts)
		labels  []string
	}{
		// the gateway
		{"exacto_gateway_events_received_total", map[string]string{"tenant": "demo", "provider": "instantly", "type": "reply.received", "workflow_version": "v1"}, 2, nil},
		{"exacto_gateway_duplicates_total", map[string]string{"tenant": "demo", "provider": "instantly"}, 1, nil},
		{"exacto_gateway_invalid_signatures_total", map[string]string{"tenant": "demo", "provider": "instantly"}, 1, nil},
		// each consumer
		{"exacto_consumer_attempts_total", map[string]string{"consumer": "crmwriter", "type": "reply.received", "first_attempt": "true", "result": "completed"}, 1, eventLabels},
		{"exacto_consumer_attempts_total", map[string]string{"consumer": "stopper", "result": "retry"}, 0, nil},
		{"exacto_consumer_duplicates_total", map[string]string{"consumer": "stopper"}, 0, nil},
		{"exacto_consumer_receipt_to_completed_seconds_count", map[string]string{"consumer": "stopper", "type": "reply.received", "slo_class": "reply"}, 1, eventLabels},
		{"exacto_slo_events_total", map[string]string{"consumer": "crmwriter", "type": "reply.classified", "slo_class": "positive_reply"}, 1, []string{"within_slo"}},
		{"exacto_dead_letters_total", map[string]string{"consumer": "crmwriter"}, 0, nil},
		{"exacto_consumer_pending", map[string]string{"consumer": "classifier"}, 0, nil},
		{"exacto_consumer_pending", map[string]string{"consumer": "projector"}, 0, nil},
		{"exacto_consumer_ack_pending", map[string]string{"consumer": "suppressor"}, 0, nil},
		{"exacto_consumer_queue_age_seconds", map[string]string{"consumer": "crmwriter"}, 0, nil},
		{"exacto_consumer_parked", map[string]string{"consumer": "stopper"}, 0, nil},
		{"exacto_consumer_max_ack_pending", map[string]string{"consumer": "stopper"}, 1000, nil},
		{"exacto_consumer_deferred_seconds_total", map[string]string{"consumer": "stopper"}, 0, nil},
		// consequences
		{"exacto_sequences_stopped_total", map[string]string{"tenant": "demo", "cause": "reply", "slo_class": "reply"}, 1, []string{"within_slo", "status", "workflow_version"}},
		{"exacto_duplicate_effects_avoided_total", map[string]string{"consumer": "crmwriter"}, 0, nil},
		{"exacto_crm_duplicate_activities_found_total", map[string]string{"tenant": "demo"}, 0, nil},
		{"exacto_replies_without_owner_total", map[string]string{"tenant": "demo", "provider": "instantly"}, 1, eventLabels},
		{"exacto_reconcile_findings_total", map[string]string{"tenant": "demo", "kind": "missed_unsubscribe"}, 0, nil},
		{"exacto_breaker_state", map[string]string{"dependency": "hubspot"}, 0, nil},
		{"exacto_slo_target_seconds", map[string]string{"slo_class": "unsubscribe"}, 60, nil},
		{"exacto_slo_objective", map[string]string{"slo_class": "unsubscribe"}, 0.999, nil},
	} {
		got, found := sum(ss, m.name, m.where)
		if !found {
			t.Errorf("/metrics has no %s%v", m.name, m.where)
			continue
		}
		if got < m.atLeast {
			t.Errorf("%s%v = %v, want at least %v", m.name, m.where, got, m.atLeast)
		}
		for _, s := range ss {
			if s.name != m.name {
				continue
			}
			for _, l := range m.labels {
				if _, ok := s.labels[l]; !ok && s.value > 0 {
					t.Errorf("%s%v lacks the label %s", m.name, s.labels, l)
				}
			}
		}
	}
	// The reply's breaker stayed closed; every consumer's queue drained.
	if v, _ := sum(ss, "exacto_breaker_state", map[string]string{"dependency": "hubspot"}); v != 0 {
		t.Errorf("hubspot breaker state %v, want 0 (closed)", v)
	}
	for _, c := range []string{"classifier", "stopper", "crmwriter", "suppressor", "projector"} {
		if v, found := sum(ss, "exacto_consumer_pending", map[string]string{"consumer": c}); !found || v != 0 {
			t.Errorf("%s pending %v (found %v), want 0 after the run", c, v, found)
		}
	}
}

// checkRulesAndDashboard: the alert rules parse as Prometheus parses them (rule
// format and PromQL), the dashboard's queries parse as PromQL, and every metric either
// uses is on /metrics or recorded by a rule.
func checkRulesAndDashboard(t *testing.T, ss []sample) {
	t.Helper()
	exported := map[string]bool{}
	for _, s := range ss {
		exported[s.name] = true
	}
	promql := parser.NewParser(parser.Options{})
	uses := func(expr string) ([]string, error) {
		e, err := promql.ParseExpr(expr)
		if err != nil {
			return nil, err
		}
		var names []string
		parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				names = append(names, vs.Name)
			}
			return nil
		})
		return names, nil
	}
	groups, errs := rulefmt.ParseFile("../deployments/prometheus/alerts.yml", false, model.UTF8Validation, promql, slog.Default())
	if len(errs) > 0 {
		t.Fatalf("alerts.yml: %v", errs)
	}
	recorded := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = true
			}
		}
	}
	var alerts []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts = append(alerts, r.Alert)
				if s := r.Labels["severity"]; s != "page" && s != "ticket" {
					t.Errorf("alert %s: severity %q, want page or ticket", r.Alert, s)
				}
			}
			names, err := uses(r.Expr)
			if err != nil {
				t.Fatalf("rule %s%s: %v", r.Alert, r.Record, err)
			}
			for _, m := range names {
				if !exported[m] && !recorded[m] {
					t.Errorf("rule %s%s uses %s, which neither /metrics nor a recording rule provides", r.Alert, r.Record, m)
				}
			}
		}
	}
	for _, want := range []string{"ExactoSLOBurn", "ExactoSequenceStopsLate", "ExactoConsumerBacklogAging", "ExactoBreakerOpen", "ExactoDeadLettered",
		"ExactoDeadLetterPastSLO", "ExactoDeadLettersGrowing"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alerts.yml has no %s", want)
		}
	}

	dash, err := os.ReadFile("../deployments/grafana/exacto.json")
	if err != nil {
		t.Fatal(err)
	}
	var board struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(dash, &board); err != nil || len(board.Panels) == 0 {
		t.Fatalf("dashboard: %v", err)
	}
	onBoard := map[string]bool{}
	for _, p := range board.Panels {
		for _, q := range p.Targets {
			names, err := uses(q.Expr)
			if err != nil {
				t.Fatalf("dashboard panel %q: %v", p.Title, err)
			}
			for _, m := range names {
				onBoard[m] = true
				if !exported[m] && !recorded[m] {
					t.Errorf("dashboard panel %q uses %s, which neither /metrics nor a recording rule provides", p.Title, m)
				}
			}
		}
	}
	// Every Exacto metric is on the dashboard somewhere.
	for m := range exported {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_count"), "_sum")
		if strings.HasPrefix(m, "exacto_") && !onBoard[m] && !onBoard[base+"_bucket"] && !onBoard[base+"_count"] && !onBoard[base+"_sum"] {
			t.Errorf("the dashboard shows no panel of %s", m)
		}
	}
}

// span is what the trace file holds of one span (OpenTelemetry's stdout exporter).
type span struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
}

func (s span) attr(key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return fmt.Sprint(a.Value.Value)
		}
	}
	return ""
}

// traceTree finds the trace of event id in the file, checks it is one tree from the
// gateway's request down to the HubSpot note, and draws it.
func traceTree(t *testing.T, file, id string) string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var all []span
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var s span
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("trace file line is not a span: %v", err)
		}
		all = append(all, s)
	}
	var traceID string
	for _, s := range all {
		if strings.HasPrefix(s.Name, "consume ") && s.attr("exacto.event_id") == id {
			traceID = s.SpanContext.TraceID
		}
	}
	if traceID == "" {
		t.Fatalf("no consumer span of event %s among %d spans", id, len(all))
	}
	byID := map[string]span{}
	children := map[string][]span{}
	var roots []span
	for _, s := range all {
		if s.SpanContext.TraceID != traceID {
			continue
		}
		byID[s.SpanContext.SpanID] = s
	}
	for _, s := range byID {
		if _, ok := byID[s.Parent.SpanID]; ok {
			children[s.Parent.SpanID] = append(children[s.Parent.SpanID], s)
		} else {
			roots = append(roots, s)
		}
	}
	if len(roots) != 1 || roots[0].Name != "webhook instantly" {
		t.Fatalf("trace %s: want one root, the gateway's request; got %d roots: %v", traceID, len(roots), names(roots))
	}
	var b strings.Builder
	var draw func(s span, depth int, path []string)
	var notePath []string
	draw = func(s span, depth int, path []string) {
		path = append(path, s.Name)
		fmt.Fprintf(&b, "%s%s", strings.Repeat("  ", depth), s.Name)
		if p := s.attr("url.path"); p != "" {
			fmt.Fprintf(&b, " %s", p)
		}
		if e := s.attr("exacto.type"); e != "" {
			fmt.Fprintf(&b, " [%s]", e)
		}
		b.WriteString("\n")
		if p := s.attr("url.path"); s.Name == "POST hubspot" && (p == "/crm/v3/objects/notes" || p == "/crm/v3/objects/notes/batch/upsert") {
			notePath = slices.Clone(path)
		}
		kids := children[s.SpanContext.SpanID]
		slices.SortFunc(kids, func(a, b span) int { return strings.Compare(a.Name, b.Name) })
		for _, k := range kids {
			draw(k, depth+1, path)
		}
	}
	draw(roots[0], 0, nil)
	if notePath == nil || !slices.Contains(notePath, "consume crmwriter") {
		t.Fatalf("the trace does not reach the HubSpot note through the CRM writer:\n%s", b.String())
	}
	for _, want := range []string{"consume classifier", "consume stopper"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("the trace has no %q:\n%s", want, b.String())
		}
	}
	return b.String()
}

func names(ss []span) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}
