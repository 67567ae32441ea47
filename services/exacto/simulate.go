package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/projection"
	"exacto.dev/pkg/providers/instantly"
	"exacto.dev/pkg/stream"
	"exacto.dev/pkg/suppression"
)

func simulateCmd() *cobra.Command {
	var file, gateway, natsURL, sandboxURL, admin, endpoint, tenant, configFile string
	var drain time.Duration
	cmd := &cobra.Command{
		Use:   "simulate --scenario FILE",
		Short: "Replay a campaign's event map against a running Exacto and check its invariants",
		Long: `Replay a scenario (a YAML file of contacts, a story of events and faults: duplicates,
reorderings, delays, timeouts after commit, outages) against a running Exacto and its
sandbox of the platforms, wait until the consumers have drained, and report each
invariant as HELD or BROKEN with the events or contacts that broke it:

  1. every delivery is eventually answered 200 (retried like a provider would)
  2. every replied or unsubscribed contact is stopped at the platform exactly once
     (an unsubscribed or bounced one may be stopped by its block alone: then its lead
     is not active)
  3. every replied contact has exactly one CRM note, the note of its reply, and no
     other contact has one
  4. every reply's note has an owner, or the reply is counted as without one
     (exacto_replies_without_owner_total, read from the admin address's /metrics)
  5. every unsubscribed or bounced contact is on the suppression list
  6. nothing is stored twice: each delivered event is in the stream once
  7. the live projections equal a rebuild from the stream

The exit code is 0 when every invariant held, 1 otherwise.`,
		Example: "  exacto simulate --scenario deployments/scenarios/noisy-campaign.yaml",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			sc, err := loadScenario(file)
			if err != nil {
				return err
			}
			cfg, cfgErr := config.Load(configFile, os.Getenv)
			if err := sc.target(cfg, cfgErr, endpoint, tenant); err != nil {
				return err
			}
			js, closeConn, err := dial(natsURL)
			if err != nil {
				return err
			}
			defer closeConn()
			sim := &simulation{sc: sc, gateway: strings.TrimRight(gateway, "/"), sandbox: strings.TrimRight(sandboxURL, "/"),
				admin: strings.TrimRight(admin, "/"), js: js, out: cmd.OutOrStdout(), drain: drain}
			if err := sim.preflight(cmd.Context(), cfg); err != nil {
				return err
			}
			return sim.run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&file, "scenario", "", "scenario YAML file (required)")
	cmd.Flags().StringVar(&gateway, "gateway", "http://127.0.0.1:8080", "gateway of the deployment")
	cmd.Flags().StringVar(&natsURL, "nats-url", nats.DefaultURL, "NATS of the deployment")
	cmd.Flags().StringVar(&sandboxURL, "sandbox", "http://127.0.0.1:8082", "sandbox of the platforms")
	cmd.Flags().StringVar(&admin, "admin", "http://127.0.0.1:8081", "admin address of the deployment (its /metrics count replies without an owner)")
	cmd.Flags().DurationVar(&drain, "drain-timeout", 2*time.Minute, "how long to wait for the consumers to drain")
	cmd.Flags().StringVar(&endpoint, "endpoint", "", "the Instantly endpoint to post to, instead of the scenario's: its tenant, path token and secret from the config")
	cmd.Flags().StringVar(&tenant, "tenant", "", "the tenant whose invariants are checked, instead of the scenario's (default: the endpoint's in the config)")
	cmd.Flags().StringVar(&configFile, "config", "", "the deployment's config (default ./exacto.yaml, else the built-in demo)")
	cmd.MarkFlagRequired("scenario")
	return cmd
}

// scenario is a campaign's event map: its contacts, what happens to them, and the
// faults the run injects.
type scenario struct {
	Name      string `yaml:"name"`
	Tenant    string `yaml:"tenant"`
	Endpoint  string `yaml:"endpoint"`
	PathToken string `yaml:"path_token"`
	// Secret is the endpoint's shared secret, sent as Instantly does (default: the
	// endpoint's first secret in the config, or the built-in demo's).
	Secret   string  `yaml:"secret"`
	Campaign string  `yaml:"campaign"`
	Contacts int     `yaml:"contacts"`
	Seed     uint64  `yaml:"seed"`
	Story    []step  `yaml:"story"`
	Faults   faultsY `yaml:"faults"`
}

type step struct {
	Type  string   `yaml:"type"`
	After duration `yaml:"after"`
	Share *float64 `yaml:"share"`
	Text  string   `yaml:"text"`
	index int      // in the story
	who   []bool   // by contact index
}

type faultsY struct {
	Duplicates float64        `yaml:"duplicates"`
	Reorder    bool           `yaml:"reorder"`
	Delay      duration       `yaml:"delay"`
	Timeouts   *timeoutsFault `yaml:"timeouts"`
	Outage     *outageFault   `yaml:"outage"`
}

type timeoutsFault struct {
	Route string `yaml:"route"`
	Count int    `yaml:"count"`
}

type outageFault struct {
	Dependency string   `yaml:"dependency"`
	For        duration `yaml:"for"`
	At         float64  `yaml:"at"`
}

// duration is a time.Duration written as "10s" in YAML.
type duration struct{ time.Duration }

func (d *duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil || v < 0 {
		return fmt.Errorf("line %d: want a duration such as 90s or 2h, got %q", n.Line, n.Value)
	}
	d.Duration = v
	return nil
}

// yamlTypes names the scenario's parts in decoding errors instead of Go types.
var yamlTypes = strings.NewReplacer("in type main.scenario", "in the scenario", "in type main.step", "in a story step",
	"in type main.faultsY", "in faults", "in type main.timeoutsFault", "in faults.timeouts", "in type main.outageFault", "in faults.outage")

var storyTypes = []string{"email_sent", "email_opened", "reply_received", "lead_unsubscribed", "email_bounced"}

const defaultCampaign = "5e1a0000-0000-4000-8000-00000000c0de"

func loadScenario(file string) (*scenario, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	sc, err := parseScenario(data)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", file, err)
	}
	return sc, nil
}

func parseScenario(data []byte) (*scenario, error) {
	var sc scenario
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&sc); err != nil {
		return nil, errors.New(yamlTypes.Replace(strings.ReplaceAll(err.Error(), "\n ", "")))
	}
	if sc.Name == "" || !intoName.MatchString(sc.Name) {
		return nil, fmt.Errorf("name: want [a-z0-9_-], up to 32 characters, got %q", sc.Name)
	}
	sc.Tenant = orDefault(sc.Tenant, "demo")
	sc.Endpoint = orDefault(sc.Endpoint, "instantly")
	sc.PathToken = orDefault(sc.PathToken, "demo-instantly-token")
	sc.Campaign = orDefault(sc.Campaign, defaultCampaign)
	if sc.Contacts <= 0 || sc.Contacts > 100000 {
		return nil, fmt.Errorf("contacts: want a count from 1 to 100000, got %d", sc.Contacts)
	}
	if len(sc.Story) == 0 {
		return nil, errors.New("story: want at least one step")
	}
	if sc.Seed == 0 {
		sc.Seed = 1
	}
	for i := range sc.Story {
		st := &sc.Story[i]
		st.index = i
		if !slices.Contains(storyTypes, st.Type) {
			return nil, fmt.Errorf("story[%d].type: want one of %s, got %q", i, strings.Join(storyTypes, ", "), st.Type)
		}
		share := 1.0
		if st.Share != nil {
			share = *st.Share
		}
		if share < 0 || share > 1 {
			return nil, fmt.Errorf("story[%d].share: want 0..1, got %g", i, share)
		}
		// Exactly round(share·N) contacts, the same ones on every run.
		r := rand.New(rand.NewPCG(sc.Seed, uint64(i)+1))
		st.who = make([]bool, sc.Contacts)
		for _, c := range r.Perm(sc.Contacts)[:int(math.Round(share*float64(sc.Contacts)))] {
			st.who[c] = true
		}
	}
	f := sc.Faults
	if f.Duplicates < 0 || f.Duplicates > 1 {
		return nil, fmt.Errorf("faults.duplicates: want 0..1, got %g", f.Duplicates)
	}
	if t := f.Timeouts; t != nil {
		if !slices.Contains(sandbox.Routes, t.Route) {
			return nil, fmt.Errorf("faults.timeouts.route: want a sandbox route (%s), got %q", strings.Join(sandbox.Routes, ", "), t.Route)
		}
		if t.Count <= 0 {
			return nil, fmt.Errorf("faults.timeouts.count: want at least 1, got %d", t.Count)
		}
	}
	if o := f.Outage; o != nil {
		if !slices.Contains(platform.Dependencies, o.Dependency) {
			return nil, fmt.Errorf("faults.outage.dependency: want hubspot, instantly or smartlead, got %q", o.Dependency)
		}
		if o.For.Duration <= 0 {
			return nil, errors.New("faults.outage.for: want a duration such as 20s")
		}
		if o.At < 0 || o.At > 1 {
			return nil, fmt.Errorf("faults.outage.at: want a fraction of the run 0..1, got %g", o.At)
		}
	}
	return &sc, nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func (sc *scenario) email(i int) string { return fmt.Sprintf("sim%d@%s.example", i, sc.Name) }

// has reports whether contact i has a step of type typ.
func (sc *scenario) has(i int, types ...string) bool {
	for _, st := range sc.Story {
		if st.who[i] && slices.Contains(types, st.Type) {
			return true
		}
	}
	return false
}

// delivery is one webhook POST of the run (a duplicate is another delivery of the
// same body).
type delivery struct {
	n       int // its event's number
	contact int
	typ     string
	at      time.Time
	body    []byte
	dup     bool
	status  int
	err     string
	ids     []string
}

func (d *delivery) String() string {
	s := fmt.Sprintf("event %d (%s %s", d.n, d.typ, d.at.Format("15:04:05"))
	if d.dup {
		s += ", duplicate"
	}
	return s + ")"
}

// storyStart is when a run's stories begin: 09:00 UTC the day before now. Recent, as
// the gateway takes no event older than its provider still retries (max_event_age);
// the same all day, so that runs of one day send the same deliveries.
func storyStart(now time.Time) time.Time {
	return now.UTC().Truncate(24 * time.Hour).Add(-24*time.Hour + 9*time.Hour)
}

// deliveries builds the run's deliveries, faults applied, in sending order, the first
// contact's story starting at base.
func (sc *scenario) deliveries(r *rand.Rand, base time.Time) []*delivery {
	var out []*delivery
	for i := range sc.Contacts {
		start := base.Add(time.Duration(i) * time.Minute)
		for _, st := range sc.Story {
			if !st.who[i] {
				continue
			}
			at := start.Add(st.After.Duration)
			body, _ := json.Marshal(map[string]any{
				"timestamp": at.Format("2006-01-02T15:04:05.000Z"), "event_type": st.Type,
				"workspace": "51a70000-0000-4000-8000-00000000a11e", "campaign_id": sc.Campaign, "campaign_name": sc.Name,
				"lead_email": sc.email(i), "email_account": "sdr@exacto-sim.example", "step": st.index + 1,
				"email_id":      fmt.Sprintf("sim-%s-%d-%d", sc.Name, i, st.index),
				"reply_subject": "Re: " + sc.Name, "reply_text": st.Text, "reply_text_snippet": st.Text,
			})
			out = append(out, &delivery{contact: i, typ: st.Type, at: at, body: body})
		}
	}
	slices.SortStableFunc(out, func(a, b *delivery) int { return a.at.Compare(b.at) })
	for n, d := range out {
		d.n = n + 1
	}
	if sc.Faults.Reorder {
		r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	}
	if p := sc.Faults.Duplicates; p > 0 {
		for i := 0; i < len(out); i++ {
			if out[i].dup || r.Float64() >= p {
				continue
			}
			c := *out[i]
			c.dup = true
			at := i + 1 // a provider's retry comes after the original
			if sc.Faults.Reorder {
				at += r.IntN(len(out) - i)
			}
			out = slices.Insert(out, at, &c)
		}
	}
	return out
}

type simulation struct {
	sc                      *scenario
	gateway, sandbox, admin string
	// unowned are the replied contacts whose note has no owner (checkNotes).
	unowned []string
	js      jetstream.JetStream
	out     io.Writer
	drain   time.Duration
	client  http.Client
}

func (s *simulation) run(ctx context.Context) error {
	sc := s.sc
	r := newRand(sc)
	ds := sc.deliveries(r, storyStart(time.Now()))
	dups := 0
	for _, d := range ds {
		if d.dup {
			dups++
		}
	}
	fmt.Fprintf(s.out, "scenario %s: %d contacts, %d deliveries (%d duplicates) to %s\n", sc.Name, sc.Contacts, len(ds), dups, s.hookURL())

	emails := make([]string, sc.Contacts)
	for i := range emails {
		emails[i] = sc.email(i)
	}
	if err := s.control(ctx, http.MethodDelete, sandbox.ControlFaults, nil); err != nil {
		return err
	}
	if err := s.control(ctx, http.MethodPost, sandbox.ControlLeads, sandbox.ControlLeadsRequest{Campaign: sc.Campaign, Emails: emails}); err != nil {
		return err
	}
	if t := sc.Faults.Timeouts; t != nil {
		err := s.control(ctx, http.MethodPost, sandbox.ControlFaults, sandbox.ControlFaultRequest{Route: t.Route,
			Fault: sandbox.ControlFault{TimeoutAfterCommit: "30s", Count: t.Count}})
		if err != nil {
			return err
		}
		fmt.Fprintf(s.out, "fault: the next %d requests to %s time out after their commit\n", t.Count, t.Route)
	}

	unownedBefore, unownedErr := s.unownedCount(ctx)
	began := time.Now()
	outageAt := -1
	if o := sc.Faults.Outage; o != nil {
		outageAt = int(o.At * float64(len(ds)))
	}
	for i, d := range ds {
		if i == outageAt {
			o := sc.Faults.Outage
			err := s.control(ctx, http.MethodPost, sandbox.ControlFaults, sandbox.ControlFaultRequest{Route: o.Dependency,
				Fault: sandbox.ControlFault{DownFor: o.For.String()}})
			if err != nil {
				return err
			}
			fmt.Fprintf(s.out, "fault: %s is down for %s from delivery %d\n", o.Dependency, o.For, i+1)
		}
		if dl := sc.Faults.Delay.Duration; dl > 0 {
			if err := sleepCtx(ctx, time.Duration(r.Int64N(int64(dl)+1))); err != nil {
				return err
			}
		}
		s.deliver(ctx, d)
		if i == 0 && d.status/100 == 4 && d.status != http.StatusTooManyRequests {
			return fmt.Errorf("the gateway refused the first delivery: %d %s: nothing more sent%s", d.status, d.err, refusalHint(d.status))
		}
	}
	fmt.Fprintf(s.out, "sent %d deliveries in %s; waiting for the consumers to drain\n", len(ds), time.Since(began).Round(time.Millisecond))
	if o := sc.Faults.Outage; o != nil && outageAt >= len(ds) {
		fmt.Fprintf(s.out, "note: the outage of %s was never started (at %g is past the last delivery)\n", o.Dependency, o.At)
	}
	waited, err := s.waitDrained(ctx)
	if err != nil {
		fmt.Fprintf(s.out, "warning: %v; checking anyway\n", err)
	} else {
		fmt.Fprintf(s.out, "drained in %s\n", waited.Round(time.Millisecond))
	}
	// Timeouts not used up should not outlive the run.
	_ = s.control(ctx, http.MethodDelete, sandbox.ControlFaults, nil)

	results := []result{
		s.checkDelivered(ds),
		s.checkStopped(ctx),
		s.checkNotes(ctx, ds),
		s.checkOwners(ctx, unownedBefore, unownedErr),
		s.checkSuppressed(ctx),
		s.checkStoredOnce(ctx, ds),
		s.checkProjections(ctx),
	}
	broken := 0
	for _, res := range results {
		verdict := "HELD  "
		if len(res.broken) > 0 {
			verdict = "BROKEN"
			broken++
		}
		fmt.Fprintf(s.out, "%s  %s\n", verdict, res.name)
		for i, b := range res.broken {
			if i == 10 {
				fmt.Fprintf(s.out, "          … and %d more\n", len(res.broken)-10)
				break
			}
			fmt.Fprintf(s.out, "          %s\n", b)
		}
	}
	if broken > 0 {
		return fmt.Errorf("%d of %d invariants broken", broken, len(results))
	}
	fmt.Fprintf(s.out, "all %d invariants held\n", len(results))
	return nil
}

// target points sc at the endpoint given (else the scenario's) as the config has it:
// its tenant, path token and secret, so that a scenario written for the demo runs
// against a deployment's own config. A tenant given must be the endpoint's.
func (sc *scenario) target(cfg *config.Config, cfgErr error, endpoint, tenant string) error {
	if endpoint != "" {
		sc.Endpoint = endpoint
	}
	var t *config.Tenant
	var e *config.Endpoint
	if cfgErr == nil {
		t, e = cfg.Endpoint(sc.Endpoint)
	}
	switch {
	case e != nil && e.Provider != "instantly":
		return fmt.Errorf("endpoint %s is a %s endpoint: a scenario posts Instantly's webhooks (give --endpoint with an Instantly one: %s)", e.ID, e.Provider, strings.Join(instantlyEndpoints(cfg), ", "))
	case e != nil && tenant != "" && tenant != t.ID:
		return fmt.Errorf("--tenant %s: endpoint %s is tenant %s's", tenant, e.ID, t.ID)
	case e != nil:
		sc.Tenant, sc.PathToken = t.ID, e.PathToken.Value
		if sc.Secret == "" && len(e.Secrets) > 0 {
			sc.Secret = e.Secrets[0].Value
		}
	case endpoint != "" && cfgErr != nil:
		return fmt.Errorf("--endpoint %s: %w", endpoint, cfgErr)
	case endpoint != "":
		return fmt.Errorf("--endpoint %s: no such endpoint in %s (its Instantly endpoints: %s)", endpoint, cfg.Source, strings.Join(instantlyEndpoints(cfg), ", "))
	}
	if tenant != "" {
		sc.Tenant = tenant
	}
	return nil
}

// instantlyEndpoints lists the config's Instantly endpoints ("none" when it has none).
func instantlyEndpoints(cfg *config.Config) []string {
	var ids []string
	if cfg != nil {
		for _, t := range cfg.Tenants {
			for _, e := range t.Endpoints {
				if e.Provider == "instantly" {
					ids = append(ids, e.ID+" (tenant "+t.ID+")")
				}
			}
		}
	}
	if len(ids) == 0 {
		return []string{"none"}
	}
	return ids
}

// preflight asks the gateway and the sandbox once before a delivery is sent, and says
// what is wrong instead of sending hundreds of deliveries that will all be refused.
func (s *simulation) preflight(ctx context.Context, cfg *config.Config) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// A GET is no delivery: the gateway answers 405 at an endpoint that exists with
	// that path token, 404 otherwise, and stores nothing.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.hookURL(), nil)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("no gateway answers at %s (%v): is exacto up running? (--gateway)", s.gateway, err)
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusMethodNotAllowed:
	case http.StatusNotFound:
		return fmt.Errorf("the gateway at %s has no endpoint %q with the path token the scenario uses (404): give --endpoint with the deployment's Instantly endpoint (in %s: %s), and --config if the gateway runs another config",
			s.gateway, s.sc.Endpoint, cfgSource(cfg), strings.Join(instantlyEndpoints(cfg), ", "))
	default:
		return fmt.Errorf("the gateway at %s answered %d to a GET of the endpoint's URL: not an Exacto gateway? (--gateway)", s.gateway, resp.StatusCode)
	}
	if err := s.control(ctx, http.MethodDelete, sandbox.ControlFaults, nil); err != nil {
		return fmt.Errorf("the sandbox of the platforms at %s: %w (--sandbox: exacto up prints its address)", s.sandbox, err)
	}
	return nil
}

func cfgSource(cfg *config.Config) string {
	if cfg == nil {
		return "the config (it did not load)"
	}
	return cfg.Source
}

func (s *simulation) hookURL() string {
	return s.gateway + "/hooks/" + url.PathEscape(s.sc.Endpoint) + "/" + url.PathEscape(s.sc.PathToken)
}

// deliver posts d, retrying what is not a 200 as a provider would (bounded). The
// sandbox, standing in for Instantly, is told first what the event says happened (a
// provider's retry, d.dup, happened already), as the real platform would hold it when
// its webhook fires: the consumers confirm unsigned events there.
func (s *simulation) deliver(ctx context.Context, d *delivery) {
	if !d.dup {
		if err := s.control(ctx, http.MethodPost, sandbox.ControlHappened, sandbox.ControlHappenedRequest{Provider: "instantly", Body: d.body}); err != nil {
			fmt.Fprintf(s.out, "warning: delivery %d: the sandbox was not told what happened: %v\n", d.n, err)
		}
	}
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		d.status, d.err, d.ids = s.post(ctx, d.body)
		// A provider retries what may succeed later: no answer, 408, 429 and 5xx.
		retry := d.status == 0 || d.status == http.StatusRequestTimeout || d.status == http.StatusTooManyRequests || d.status >= 500
		if !retry || attempt == 6 || ctx.Err() != nil {
			return
		}
		if sleepCtx(ctx, backoff) != nil {
			return
		}
		backoff = min(2*backoff, 3*time.Second)
	}
}

func (s *simulation) post(ctx context.Context, body []byte) (int, string, []string) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.hookURL(), bytes.NewReader(body))
	if err != nil {
		return 0, err.Error(), nil
	}
	h, _, _ := instantly.Sign(http.MethodPost, req.URL.String(), body, s.sc.Secret, time.Now())
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err.Error(), nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var ans struct {
		IDs []string `json:"ids"`
	}
	_ = json.Unmarshal(data, &ans)
	return resp.StatusCode, strings.TrimSpace(string(data)), ans.IDs
}

// refusalHint says what a refused delivery usually means.
func refusalHint(status int) string {
	if status == http.StatusUnauthorized {
		return " (the scenario's secret is not the endpoint's: give --config with the gateway's config, or secret: in the scenario)"
	}
	return ""
}

// control calls the sandbox's control API.
func (s *simulation) control(ctx context.Context, method, path string, body any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.sandbox+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("sandbox at %s: %w", s.sandbox, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("sandbox %s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(data)))
	}
	return nil
}

// state is what the platforms hold for email; with notes, how many HubSpot notes carry
// each of those external ids (envelope ids).
func (s *simulation) state(ctx context.Context, email string, notes ...string) (sandbox.ControlStateAnswer, error) {
	var a sandbox.ControlStateAnswer
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	q := url.Values{"email": {email}, "note": notes}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.sandbox+sandbox.ControlState+"?"+q.Encode(), nil)
	if err != nil {
		return a, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return a, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return a, fmt.Errorf("sandbox state: %d", resp.StatusCode)
	}
	return a, json.NewDecoder(resp.Body).Decode(&a)
}

// drained are the consumers whose work the invariants look at.
var drained = []string{stream.Classifier, stream.Stopper, stream.CRMWriter, stream.Suppressor, stream.Projector}

// waitDrained waits until the consumers have nothing pending nor unacknowledged, twice
// in a row.
func (s *simulation) waitDrained(ctx context.Context) (time.Duration, error) {
	began := time.Now()
	deadline := began.Add(s.drain)
	quiet := 0
	last := ""
	for {
		busy, err := s.busy(ctx)
		switch {
		case err != nil:
			last = err.Error()
			quiet = 0
		case busy == "":
			quiet++
		default:
			last = busy
			quiet = 0
		}
		if quiet >= 3 {
			return time.Since(began), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the consumers did not drain within %s (%s)", s.drain, last)
		}
		if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

func (s *simulation) busy(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var busy []string
	for _, name := range drained {
		c, err := s.js.Consumer(ctx, stream.Events, name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		if err != nil {
			return "", err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return "", err
		}
		if info.NumPending > 0 || info.NumAckPending > 0 {
			busy = append(busy, fmt.Sprintf("%s: %d pending, %d unacknowledged", name, info.NumPending, info.NumAckPending))
		}
	}
	return strings.Join(busy, "; "), nil
}

type result struct {
	name   string
	broken []string
}

func (s *simulation) checkDelivered(ds []*delivery) result {
	res := result{name: "every delivery is eventually answered 200"}
	for _, d := range ds {
		if d.status != http.StatusOK {
			res.broken = append(res.broken, fmt.Sprintf("%s of %s: %d %s", d, s.sc.email(d.contact), d.status, d.err))
		}
	}
	return res
}

func (s *simulation) checkStopped(ctx context.Context) result {
	res := result{name: "every replied or unsubscribed contact is stopped at the platform exactly once"}
	for i := range s.sc.Contacts {
		if !s.sc.has(i, "reply_received", "lead_unsubscribed") {
			continue
		}
		e := s.sc.email(i)
		st, err := s.state(ctx, e)
		if err != nil {
			res.broken = append(res.broken, fmt.Sprintf("%s: %v", e, err))
			continue
		}
		switch {
		case st.Stops > 1:
			res.broken = append(res.broken, fmt.Sprintf("%s: stopped %d times", e, st.Stops))
		case st.Stops == 0 && s.sc.has(i, "lead_unsubscribed", "email_bounced") && st.Blocklisted && !anyActive(st.Leads):
			// Blocked first (its unsubscribe, or a bounce handled before its reply): the
			// block ended the sequence, no stop was needed.
		case st.Stops == 0 && st.Raises > 0 && !anyActive(st.Leads):
			// The stopper took the reply's classification first: raising the lead to its
			// positive label stopped it, and the reply found it stopped already.
		case st.Stops == 0:
			res.broken = append(res.broken, fmt.Sprintf("%s: never stopped (blocklisted %t, leads active %t)", e, st.Blocklisted, anyActive(st.Leads)))
		}
	}
	return res
}

// checkNotes: a reply reaches the CRM exactly once, whatever was duplicated, reordered,
// timed out after HubSpot committed or held back by an outage; nothing else writes one.
func (s *simulation) checkNotes(ctx context.Context, ds []*delivery) result {
	res := result{name: "every replied contact has exactly one CRM note, of its reply"}
	replies := map[int][]string{} // contact → the envelope ids its reply was answered with
	for _, d := range ds {
		if d.typ == "reply_received" {
			for _, id := range d.ids {
				if !slices.Contains(replies[d.contact], id) {
					replies[d.contact] = append(replies[d.contact], id)
				}
			}
		}
	}
	for i := range s.sc.Contacts {
		e := s.sc.email(i)
		replied := s.sc.has(i, "reply_received")
		if replied && len(replies[i]) == 0 {
			res.broken = append(res.broken, e+": its reply was never stored")
			continue
		}
		st, err := s.state(ctx, e, replies[i]...)
		if err != nil {
			res.broken = append(res.broken, fmt.Sprintf("%s: %v", e, err))
			continue
		}
		switch {
		case !replied && st.Notes > 0:
			res.broken = append(res.broken, fmt.Sprintf("%s: %d notes without a reply", e, st.Notes))
		case replied && (st.Notes != 1 || len(replies[i]) != 1 || st.NoteIDs[replies[i][0]] != 1):
			res.broken = append(res.broken, fmt.Sprintf("%s: %d notes, %v by reply envelope", e, st.Notes, st.NoteIDs))
		case replied && st.NoteOwners[replies[i][0]] == "":
			s.unowned = append(s.unowned, e)
		}
	}
	return res
}

// checkOwners: a reply's note without an owner (no routing rule matched) must be
// counted, so that nobody's reply goes unanswered unseen.
func (s *simulation) checkOwners(ctx context.Context, before float64, beforeErr error) result {
	res := result{name: "every reply's note has an owner, or the reply is counted as without one"}
	if len(s.unowned) == 0 {
		return res
	}
	after, err := s.unownedCount(ctx)
	if err = errors.Join(beforeErr, err); err != nil {
		res.broken = append(res.broken, fmt.Sprintf("%d replies without an owner, and their count could not be read: %v", len(s.unowned), err))
		return res
	}
	if counted := int(after - before); counted < len(s.unowned) {
		res.broken = append(res.broken, fmt.Sprintf("%d replies without an owner, %d counted in exacto_replies_without_owner_total", len(s.unowned), counted))
		res.broken = append(res.broken, s.unowned...)
	} else {
		fmt.Fprintf(s.out, "note: %d replies without an owner (no routing rule matched), each counted\n", len(s.unowned))
	}
	return res
}

// unownedCount sums the tenant's exacto_replies_without_owner_total at the admin address.
func (s *simulation) unownedCount(ctx context.Context) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.admin+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s/metrics: %d", s.admin, resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return 0, err
	}
	sum := 0.0
	tenant := `tenant="` + s.sc.Tenant + `"`
	for line := range strings.Lines(string(data)) {
		if !strings.HasPrefix(line, "exacto_replies_without_owner_total{") || !strings.Contains(line, tenant) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("%s/metrics: %q", s.admin, strings.TrimSpace(line))
		}
		sum += v
	}
	return sum, nil
}

func anyActive(leads []sandbox.InstantlyLead) bool {
	for _, l := range leads {
		if l.Status == sandbox.InstantlyActive {
			return true
		}
	}
	return false
}

func (s *simulation) checkSuppressed(ctx context.Context) result {
	res := result{name: "every unsubscribed or bounced contact is on the suppression list"}
	kv, err := s.js.KeyValue(ctx, stream.Suppression)
	if err != nil {
		res.broken = append(res.broken, "suppression list: "+err.Error())
		return res
	}
	list := suppression.New(kv)
	for i := range s.sc.Contacts {
		if !s.sc.has(i, "lead_unsubscribed", "email_bounced") {
			continue
		}
		e := s.sc.email(i)
		_, ok, err := list.Lookup(ctx, s.sc.Tenant, "email:"+e)
		switch {
		case err != nil:
			res.broken = append(res.broken, fmt.Sprintf("%s: %v", e, err))
		case !ok:
			res.broken = append(res.broken, e+": not suppressed")
		}
	}
	return res
}

func (s *simulation) checkStoredOnce(ctx context.Context, ds []*delivery) result {
	res := result{name: "nothing is stored twice: each delivered event is in the stream once"}
	ours := map[string]*delivery{} // envelope id → a delivery answered with it
	for _, d := range ds {
		for _, id := range d.ids {
			ours[id] = d
		}
	}
	stored, err := scanStream(ctx, s.js)
	if err != nil {
		res.broken = append(res.broken, "reading "+stream.Events+": "+err.Error())
		return res
	}
	byKey := map[string][]string{} // provider event key → envelope ids stored
	for id, st := range stored {
		if ours[id] == nil {
			continue
		}
		if st.count > 1 {
			res.broken = append(res.broken, fmt.Sprintf("%s: envelope %s stored %d times", ours[id], id, st.count))
		}
		k := st.tenant + "/" + st.provider + "/" + st.typ + "/" + st.providerEventID
		if st.providerEventID != "" {
			byKey[k] = append(byKey[k], id)
		}
	}
	for id, d := range ours {
		if _, ok := stored[id]; !ok {
			res.broken = append(res.broken, fmt.Sprintf("%s: answered with %s, which is not in the stream", d, id))
		}
	}
	for k, ids := range byKey {
		if len(ids) > 1 {
			res.broken = append(res.broken, fmt.Sprintf("provider event %s stored as %d envelopes: %s", k, len(ids), strings.Join(ids, " ")))
		}
	}
	slices.Sort(res.broken)
	return res
}

type storedEvent struct {
	count                                  int
	tenant, provider, typ, providerEventID string
}

// scanStream reads every envelope of EXACTO_EVENTS stored so far, by its id.
func scanStream(ctx context.Context, js jetstream.JetStream) (map[string]*storedEvent, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	st, err := js.Stream(ctx, stream.Events)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]*storedEvent{}
	if info.State.Msgs == 0 {
		return out, nil
	}
	last := info.State.LastSeq
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	for {
		batch, err := c.Fetch(500, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			var env envelope.Envelope
			_ = json.Unmarshal(m.Data(), &env)
			id := m.Headers().Get(jetstream.MsgIDHeader)
			if id == "" {
				id = env.ID
			}
			e := out[id]
			if e == nil {
				e = &storedEvent{tenant: env.Tenant, provider: env.Provider, typ: env.Type, providerEventID: env.ProviderEventID}
				out[id] = e
			}
			e.count++
			if md.Sequence.Stream >= last {
				return out, nil
			}
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, fmt.Errorf("the stream ended before sequence %d", last)
		}
	}
}

func (s *simulation) checkProjections(ctx context.Context) result {
	res := result{name: "the live projections equal a rebuild from the stream"}
	fail := func(err error) result {
		res.broken = append(res.broken, err.Error())
		return res
	}
	dir, err := contacts.Open(ctx, s.js)
	if err != nil {
		return fail(err)
	}
	live, err := projection.Open(ctx, s.js, "", 1)
	if err != nil {
		return fail(err)
	}
	rebuilt := projection.Memories()
	if _, err := projection.Replay(ctx, s.js, rebuilt, projection.ReplayOptions{Dir: dir}); err != nil {
		return fail(err)
	}
	for _, name := range projection.Names {
		a, _ := rebuilt.Of(name)
		b, _ := live.Of(name)
		d, err := projection.Diff(ctx, name, a, b)
		if err != nil {
			return fail(err)
		}
		if d.Equal() {
			continue
		}
		res.broken = append(res.broken, fmt.Sprintf("%s: rebuilt %d keys, live %d keys: %d only in the rebuild, %d only live, %d differ",
			name, d.KeysA, d.KeysB, d.OnlyA, d.OnlyB, d.Differ))
		for _, k := range d.First {
			res.broken = append(res.broken, fmt.Sprintf("%s: key %s differs", name, k))
		}
	}
	return res
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// newRand is the run's source of randomness: the same seed, the same run.
func newRand(sc *scenario) *rand.Rand { return rand.New(rand.NewPCG(sc.Seed, 0)) }
