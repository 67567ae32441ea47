package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"exacto.dev/pkg/platform"
	"exacto.dev/pkg/platform/sandbox"
)

// A scenario: a campaign's event map (contacts, a story of events, faults), parsed
// strictly, and the deliveries it makes.

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

// newRand is the run's source of randomness: the same seed, the same run.
func newRand(sc *scenario) *rand.Rand { return rand.New(rand.NewPCG(sc.Seed, 0)) }
