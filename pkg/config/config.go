// Package config loads and validates Exacto's YAML configuration. A config that would
// accept unverified events refuses to load, and every error names the file and line.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"exacto.dev/pkg/classify"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/forwarded"
	"exacto.dev/pkg/memlimit"
	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/providers/registry"
	"exacto.dev/pkg/ratelimit"
	"exacto.dev/pkg/stream"
)

// Config is the whole configuration of one Exacto deployment.
type Config struct {
	HTTPAddr string `yaml:"http_addr"`
	// TrustedProxies are the proxies (CIDRs or addresses) whose X-Forwarded-Proto the
	// gateway and the console believe (default: loopback, a TLS proxy on the same
	// machine); a client's own is ignored.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// AdminHosts are the names the admin address (/metrics, the console) answers
	// besides IP addresses and localhost: the console's name behind a proxy, a
	// scraper's DNS name. Any other Host is refused (a DNS-rebinding page).
	AdminHosts []string `yaml:"admin_hosts"`
	AdminAddr  string   `yaml:"admin_addr"`
	DataDir    string   `yaml:"data_dir"`
	NATS       NATS     `yaml:"nats"`
	Gateway    Gateway  `yaml:"gateway"`
	DLQ        DLQ      `yaml:"dlq"`
	Console    Console  `yaml:"console"`
	// SandboxAddr is where `exacto up` serves the built-in sandbox of Instantly,
	// Smartlead and HubSpot, which stands in for every platform a tenant has no
	// credentials for. SandboxURL points single parts (`exacto worker`) at a sandbox
	// already running; without it they start a private one.
	SandboxAddr string   `yaml:"sandbox_addr"`
	SandboxURL  string   `yaml:"sandbox_url"`
	Tenants     []Tenant `yaml:"tenants"`
	// SLOs are the service-level objectives by class of event (default DefaultSLOs).
	SLOs []SLOClass `yaml:"slos"`
	// Consumers tunes the consumer services, by name (classifier, stopper, crmwriter,
	// suppressor, projector).
	Consumers map[string]ConsumerTuning `yaml:"consumers"`
	// WorkflowVersion names the version of the rules and handlers this deployment runs
	// (routing, classifier, …): every event metric carries it, so a rollout shows beside
	// the version before it. Default "v1".
	WorkflowVersion string `yaml:"workflow_version"`
	// MemoryLimit is the process's soft memory limit (pkg/memlimit): a size such as
	// 100MiB, which the process raises itself while its live heap needs more, or "off".
	// Unset, `exacto up` takes DefaultMemoryLimit and a part run alone none. GOMEMLIMIT,
	// when set, wins.
	MemoryLimit string `yaml:"memory_limit"`

	// Warnings collects what loaded but deserves the operator's attention (literal
	// secrets, short path tokens).
	Warnings []string `yaml:"-"`
	// Source is the file the config came from ("built-in demo" when none).
	Source string `yaml:"-"`
}

// NATS configures the broker: the embedded server, or an external one (URL).
type NATS struct {
	// Listen is the embedded server's client address, so the stock `nats` CLI can
	// inspect it.
	Listen string `yaml:"listen"`
	// URL selects an external server or cluster; when set, no server is embedded.
	URL string `yaml:"url"`
	// Sync is "always" (fsync before every acknowledgement, the default: a 200 means
	// the event is on disk) or a duration such as "2m" (nats-server's lazy default:
	// acknowledged writes from the last interval can be lost on a crash or power cut).
	Sync string `yaml:"sync"`
	// DuplicateWindow is the stream's Nats-Msg-Id window (default 2m).
	DuplicateWindow time.Duration `yaml:"duplicate_window"`
	// Replicas of every stream and bucket: 1 on one node, 3 in a cluster.
	Replicas int `yaml:"replicas"`
}

// ConsumerTuning is one consumer service's settings in each process that runs it.
type ConsumerTuning struct {
	// Workers is how many of its events the service handles at once (default: its
	// subscription's in pkg/stream — 32 for the stopper, 8 for the crmwriter and the
	// suppressor, 4 for the classifier and the projector). Two events of one contact
	// never run at once, whatever the number.
	Workers int `yaml:"workers"`
}

// MaxWorkers bounds ConsumerTuning.Workers.
const MaxWorkers = 64

// MaxBatch is nats-server's default limit of messages in one atomic batch.
const MaxBatch = 1000

// Gateway configures the webhook HTTP server.
type Gateway struct {
	BodyLimit int64 `yaml:"body_limit"` // bytes, default 1 MiB
	MaxEvents int   `yaml:"max_events"` // events per delivery, default 1000
	// QuarantineCap is the most the gateway reads of a delivery (default 8 MiB, at
	// least body_limit): a verified body over body_limit but within it is kept in the
	// quarantine; a body over it is refused (413) unread and unverified.
	QuarantineCap int64 `yaml:"quarantine_cap"`
	// DedupTTL is how long a stored event id is remembered to answer late
	// redeliveries: at least as long as any endpoint takes events (max_event_age,
	// providers.Spec.MaxEventAge), so that an id is never forgotten while an event
	// bearing it would still be taken; default 7 days, or that when longer.
	DedupTTL       time.Duration `yaml:"dedup_ttl"`
	PublishTimeout time.Duration `yaml:"publish_timeout"` // default 10s
	RateLimit      RateLimit     `yaml:"rate_limit"`
	// StoreLimit is the most JetStream storage (bytes, every stream of the account)
	// the gateway lets grow: at it, deliveries are refused 507 with Retry-After. 0: no
	// limit of Exacto's own (JetStream's max_file_store still holds).
	StoreLimit int64 `yaml:"store_limit"`
	// MinFreeDisk is the free space (bytes) the embedded server's data dir must keep:
	// under it, deliveries are refused 507 before the disk is full. Default 100 MiB.
	MinFreeDisk int64       `yaml:"min_free_disk"`
	GroupCommit GroupCommit `yaml:"group_commit"`
}

// GroupCommit coalesces the events of concurrent webhooks into one atomic batch, stored
// with one fsync; each webhook is still answered only once its own events are on disk.
type GroupCommit struct {
	// MaxEvents per batch (default 256 on one node with sync always; nats-server
	// allows 1000). 1 turns group commit off: every event is its own publish (and
	// fsync). Default 1 when nats.replicas > 1, where the Raft log already commits in
	// groups, and when sync is lazy, where there is no fsync to share.
	MaxEvents int `yaml:"max_events"`
	// MaxWait bounds what group commit adds to a webhook's latency: a batch closes this
	// long after its first event at the latest (default 1ms).
	MaxWait time.Duration `yaml:"max_wait"`
	// DerivedWait is the same bound for the events consumers derive (a classification,
	// a stop), which no webhook waits for: a longer window gathers the derived events of
	// every consumer of the process into fewer commits, and delays each by as much
	// (default 1ms: on one embedded node a commit is one round of fdatasyncs, which
	// every commit waiting shares, so a wait buys little; docs/durability.md).
	DerivedWait time.Duration `yaml:"derived_wait"`
}

// DLQ configures the dead-letter workflow.
type DLQ struct {
	// SLO is how long the DLQ may hold a dead letter before it alerts (default 15m).
	SLO time.Duration `yaml:"slo"`
	// Freshness is, by event type ("default" for the rest), how old a dead letter's
	// event may be and still be replayed: a follow-up older than its limit is refused
	// with its reason instead of being sent late (default 72h).
	Freshness map[string]time.Duration `yaml:"freshness"`
}

// Fresh is how old an event of type typ may be and still be replayed.
func (d DLQ) Fresh(typ string) time.Duration {
	if f, ok := d.Freshness[typ]; ok {
		return f
	}
	return d.Freshness["default"]
}

// Console protects the operator console on the admin address: a bearer token, or
// basic-auth users (name: password reference). Without either the console is not
// served.
type Console struct {
	Token Secret            `yaml:"token"`
	Users map[string]Secret `yaml:"users"`
}

// Reconcile schedules a tenant's reconciliation.
type Reconcile struct {
	// Every is the interval between passes (default 1h); "off" (or 0) disables the
	// schedule; `exacto reconcile` runs a pass on demand either way.
	Every Duration `yaml:"every"`
}

// Duration is a time.Duration that also reads "off" as 0.
type Duration struct {
	time.Duration
	Set bool
}

// UnmarshalYAML reads a duration or "off".
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	d.Set = true
	if n.Value == "off" {
		d.Duration = 0
		return nil
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (or off)", n.Line, n.Value)
	}
	d.Duration = v
	return nil
}

// Tenant owns endpoints.
type Tenant struct {
	ID        string     `yaml:"id"`
	Endpoints []Endpoint `yaml:"endpoints"`
	// EventLimit is the most events the tenant's history may hold (0: no limit of its
	// own): at it, its deliveries are refused 507, the other tenants' taken.
	EventLimit int64 `yaml:"event_limit"`
	// Owners says who answers for a dead letter, by event type ("default" for the
	// rest): a team, a person or an on-call alias.
	Owners map[string]string `yaml:"owners"`
	// Platforms holds the tenant's API credentials for the sending platforms and the
	// CRM; a platform left out is served by the sandbox.
	Platforms Platforms `yaml:"platforms"`
	// Routing assigns each reply's CRM activity an owner: the first rule that matches
	// wins; a rule with no condition matches every reply.
	Routing   []Route   `yaml:"routing"`
	Reconcile Reconcile `yaml:"reconcile"`
	Retention Retention `yaml:"retention"`
	Line      int       `yaml:"-"`
}

// Retention is how long a tenant's history keeps what it does not need for ever
// (`exacto retention`, pkg/privacy): 0 keeps it all.
type Retention struct {
	// Payloads: events stored longer ago lose their raw payload and free texts (message
	// subject and text, evidence, reasons, the contact's name); quarantined deliveries
	// and dead letters that old are deleted.
	Payloads Age `yaml:"payloads"`
	// Events: events stored longer ago that the projections do not need are deleted;
	// those they need are kept, compacted as Payloads says.
	Events Age `yaml:"events"`
}

// Age is a duration that also reads whole days ("90d").
type Age struct{ time.Duration }

// UnmarshalYAML reads "90d", or a Go duration ("2160h").
func (a *Age) UnmarshalYAML(n *yaml.Node) error {
	if days, ok := strings.CutSuffix(n.Value, "d"); ok {
		if d, err := strconv.Atoi(days); err == nil && d >= 0 {
			a.Duration = time.Duration(d) * 24 * time.Hour
			return nil
		}
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not an age (90d, or a duration: 2160h)", n.Line, n.Value)
	}
	a.Duration = v
	return nil
}

// Platforms are one tenant's accounts at the platforms Exacto acts on.
type Platforms struct {
	Instantly *Platform `yaml:"instantly"`
	Smartlead *Platform `yaml:"smartlead"`
	HubSpot   *Platform `yaml:"hubspot"`
}

// Platform is one API account: its key (for HubSpot, the private app's access token)
// and, optionally, another base URL (a proxy, or a sandbox of one's own) and another
// rate than the platform documents for the lowest tier ("190/10s" for a HubSpot
// Professional app), as N/DURATION windows separated by commas.
type Platform struct {
	APIKey  Secret `yaml:"api_key"`
	BaseURL string `yaml:"base_url"`
	Rate    string `yaml:"rate"`
	// Rates is Rate parsed (nil: the platform's documented rates).
	Rates []ratelimit.Rate `yaml:"-"`
}

// Route gives replies matching every condition set on it to Owner (a HubSpot owner
// id). Conditions: the event's provider, its campaign id, and the reply's label once
// classified.
type Route struct {
	Provider string `yaml:"provider"`
	Campaign string `yaml:"campaign"`
	Label    string `yaml:"label"`
	Owner    string `yaml:"owner"`
}

// CRMOwner is the owner of a reply of tenant from provider in campaign with label ("" if
// not yet classified): the first matching route's owner, "" when none matches.
func (c *Config) CRMOwner(tenant, provider, campaign, label string) string {
	for _, t := range c.Tenants {
		if t.ID != tenant {
			continue
		}
		for _, r := range t.Routing {
			if (r.Provider == "" || r.Provider == provider) && (r.Campaign == "" || r.Campaign == campaign) && (r.Label == "" || r.Label == label) {
				return r.Owner
			}
		}
	}
	return ""
}

// TenantIDs lists the tenants' ids, in the config's order.
func (c *Config) TenantIDs() []string {
	ids := make([]string, len(c.Tenants))
	for i, t := range c.Tenants {
		ids[i] = t.ID
	}
	return ids
}

// Tenant returns the tenant with id.
func (c *Config) Tenant(id string) (*Tenant, bool) {
	for i := range c.Tenants {
		if c.Tenants[i].ID == id {
			return &c.Tenants[i], true
		}
	}
	return nil, false
}

// Endpoint returns the endpoint with id and its tenant (nil, nil when none has it).
func (c *Config) Endpoint(id string) (*Tenant, *Endpoint) {
	for i := range c.Tenants {
		t := &c.Tenants[i]
		for j := range t.Endpoints {
			if t.Endpoints[j].ID == id {
				return t, &t.Endpoints[j]
			}
		}
	}
	return nil, nil
}

// Unresolved says which of e's secrets LoadPartial could not resolve, and why (nil
// when each has its value).
func (e *Endpoint) Unresolved() error {
	errs := []error{e.PathToken.Unresolved, e.VerifyToken.Unresolved}
	for _, s := range append(slices.Clone(e.Secrets), e.SigningSecrets...) {
		errs = append(errs, s.Unresolved)
	}
	return errors.Join(errs...)
}

// EndpointIDs lists every endpoint's id, in the config's order.
func (c *Config) EndpointIDs() []string {
	var ids []string
	for _, t := range c.Tenants {
		for _, e := range t.Endpoints {
			ids = append(ids, e.ID)
		}
	}
	return ids
}

// Owner is who answers for tenant's dead letters of event type typ ("" if nobody is
// configured).
func (c *Config) Owner(tenant, typ string) string {
	for _, t := range c.Tenants {
		if t.ID != tenant {
			continue
		}
		if o, ok := t.Owners[typ]; ok {
			return o
		}
		return t.Owners["default"]
	}
	return ""
}

// Endpoint is one provider account posting to one URL.
type Endpoint struct {
	ID           string             `yaml:"id"`
	Provider     string             `yaml:"provider"`
	PathToken    Secret             `yaml:"path_token"`
	Secrets      []Secret           `yaml:"secrets"`
	Tolerance    time.Duration      `yaml:"tolerance"`
	PublicURL    string             `yaml:"public_url"`
	VerifyToken  Secret             `yaml:"verify_token"`
	SecretHeader string             `yaml:"secret_header"`
	Generic      *providers.Generic `yaml:"generic"`
	// SigningSecrets verify Smartlead's optional X-Smartlead-Signature: when set, a
	// delivery without a valid one is refused.
	SigningSecrets []Secret `yaml:"signing_secrets"`
	// SignatureVersions are the signature versions the endpoint takes, for a provider
	// with several (HubSpot: v3 alone unless older ones are named).
	SignatureVersions []string `yaml:"signature_versions"`
	// MaxEventAge is how old an event may be when it arrives (unset: the provider's
	// retry horizon and a day, providers.Spec.MaxEventAge); an older one is a replay.
	MaxEventAge time.Duration `yaml:"max_event_age"`

	Line int `yaml:"-"`
}

// RateLimit is how many deliveries a second the gateway takes of one endpoint and of
// one tenant, with bursts of Burst's worth; more are answered 429 with Retry-After.
// The defaults leave room for any campaign's burst (a provider with weak retries
// loses what it is refused) and bound a flood against one URL; "off" (0) for none.
type RateLimit struct {
	Endpoint PerSecond     `yaml:"endpoint"` // default 2,000
	Tenant   PerSecond     `yaml:"tenant"`   // default 5,000
	Burst    time.Duration `yaml:"burst"`    // default 10s
}

// PerSecond is a rate a second: a positive number, or "off" (none, 0 once read).
type PerSecond struct {
	Rate float64
	Set  bool
}

// UnmarshalYAML reads a positive number or "off".
func (p *PerSecond) UnmarshalYAML(n *yaml.Node) error {
	p.Set = true
	if n.Value == "off" {
		p.Rate = 0
		return nil
	}
	v, err := strconv.ParseFloat(n.Value, 64)
	if err != nil || !(v > 0) || math.IsInf(v, 0) { // !(v > 0): NaN too
		return fmt.Errorf("line %d: %q is not a positive rate a second (or off)", n.Line, n.Value)
	}
	p.Rate = v
	return nil
}

// Secret is a reference (env:NAME, file:PATH) or, with a warning, a literal. Value is
// resolved at load time and never printed.
type Secret struct {
	Ref   string
	Value string
	Line  int
	// Unresolved says why Ref has no value (an unset variable, an unreadable file);
	// only LoadPartial leaves a secret so, where Load fails.
	Unresolved error
}

// given: the config names a value, resolved or not.
func (s Secret) given() bool { return s.Value != "" || s.Unresolved != nil }

// UnmarshalYAML keeps the reference and its line; resolution happens in Load.
func (s *Secret) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: a secret is a string (env:NAME, file:PATH or a literal)", n.Line)
	}
	s.Ref, s.Line = n.Value, n.Line
	return nil
}

// String never shows the value.
func (s Secret) String() string {
	if strings.HasPrefix(s.Ref, "env:") || strings.HasPrefix(s.Ref, "file:") {
		return s.Ref
	}
	return "(literal)"
}

// Defaults, all loopback.
const (
	DefaultHTTPAddr  = "127.0.0.1:8080"
	DefaultAdminAddr = "127.0.0.1:8081"
	DefaultListen    = "127.0.0.1:4222"
	DefaultDataDir   = "./.exacto"
	DefaultSandbox   = "127.0.0.1:8082"
	DefaultFile      = "./exacto.yaml"
	// DefaultMemoryLimit is `exacto up`'s soft memory limit: the garbage collector
	// keeps the whole pipeline near it (docs/performance.md, Memory) instead of letting
	// the heap grow to twice what is live.
	DefaultMemoryLimit = "100MiB"
)

// Env lists the environment variables that override the file, by field.
var Env = map[string]string{
	"EXACTO_HTTP_ADDR":   "http_addr",
	"EXACTO_ADMIN_ADDR":  "admin_addr",
	"EXACTO_NATS_LISTEN": "nats.listen",
	"EXACTO_NATS_URL":    "nats.url",
	"EXACTO_DATA_DIR":    "data_dir",
	"EXACTO_NATS_SYNC":   "nats.sync",
	// The sandbox standing in for platforms without credentials.
	"EXACTO_SANDBOX_ADDR": "sandbox_addr",
	"EXACTO_SANDBOX_URL":  "sandbox_url",
	// The version label of every event metric.
	"EXACTO_WORKFLOW_VERSION": "workflow_version",
	// The process's soft memory limit.
	"EXACTO_MEMORY_LIMIT": "memory_limit",
}

func load(path string, getenv func(string) string, partial bool) (*Config, error) {
	if path == "" {
		path = getenv("EXACTO_CONFIG")
	}
	var data []byte
	source := path
	switch {
	case path != "":
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		data = b
	default:
		if b, err := os.ReadFile(DefaultFile); err == nil {
			data, source = b, DefaultFile
		} else {
			data, source = []byte(Demo), "built-in demo"
		}
	}
	return parse(data, source, getenv, partial)
}

// Load reads the config: path if given, else EXACTO_CONFIG, else ./exacto.yaml if it
// exists, else the built-in demo. Environment variables override the file; getenv is
// os.Getenv outside tests.
func Load(path string, getenv func(string) string) (*Config, error) {
	return load(path, getenv, false)
}

// LoadPartial loads as Load does, except that a secret whose reference does not
// resolve fails nothing: it is left with Unresolved set, for a tool that needs some of
// the config's secrets (one endpoint's, none) and says which it lacks
// (Endpoint.Unresolved). Everything else fails as in Load, but for what only the
// secret's value shows: such an endpoint's verifier is not built to check it.
func LoadPartial(path string, getenv func(string) string) (*Config, error) {
	return load(path, getenv, true)
}

// Parse decodes, resolves and validates a config document.
func Parse(data []byte, source string, getenv func(string) string) (*Config, error) {
	return parse(data, source, getenv, false)
}

func parse(data []byte, source string, getenv func(string) string, partial bool) (*Config, error) {
	c := &Config{Source: source}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return nil, explain(data, source, err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err == nil {
		c.recordLines(&root)
	}
	c.applyEnv(getenv)
	c.applyDefaults()
	if err := c.resolve(getenv, partial); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// recordLines notes where each tenant and endpoint starts, for error messages.
func (c *Config) recordLines(root *yaml.Node) {
	tenants := child(root, "tenants")
	if tenants == nil {
		return
	}
	for i, tn := range tenants.Content {
		if i >= len(c.Tenants) {
			return
		}
		c.Tenants[i].Line = tn.Line
		if eps := child(tn, "endpoints"); eps != nil {
			for j, en := range eps.Content {
				if j < len(c.Tenants[i].Endpoints) {
					c.Tenants[i].Endpoints[j].Line = en.Line
				}
			}
		}
	}
}

// child finds key in a mapping node (or a document's mapping).
func child(n *yaml.Node, key string) *yaml.Node {
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func (c *Config) applyEnv(getenv func(string) string) {
	set := func(dst *string, name string) {
		if v := getenv(name); v != "" {
			*dst = v
		}
	}
	set(&c.HTTPAddr, "EXACTO_HTTP_ADDR")
	set(&c.AdminAddr, "EXACTO_ADMIN_ADDR")
	set(&c.NATS.Listen, "EXACTO_NATS_LISTEN")
	set(&c.NATS.URL, "EXACTO_NATS_URL")
	set(&c.DataDir, "EXACTO_DATA_DIR")
	set(&c.NATS.Sync, "EXACTO_NATS_SYNC")
	set(&c.SandboxAddr, "EXACTO_SANDBOX_ADDR")
	set(&c.SandboxURL, "EXACTO_SANDBOX_URL")
	set(&c.WorkflowVersion, "EXACTO_WORKFLOW_VERSION")
	set(&c.MemoryLimit, "EXACTO_MEMORY_LIMIT")
}

// Proxies are TrustedProxies, parsed (Validate refused any that does not parse).
func (c *Config) Proxies() forwarded.Trusted {
	t, _ := forwarded.Parse(c.TrustedProxies)
	return t
}

// defaultDedupTTL is a week, or longer when an endpoint takes older events (WhatsApp
// retries for 7 days, so a meta endpoint takes events up to 8 days old): the index
// must remember every id an endpoint would still take.
func (c *Config) defaultDedupTTL() time.Duration {
	ttl := 7 * 24 * time.Hour
	for _, t := range c.Tenants {
		for _, e := range t.Endpoints {
			if spec, ok := registry.Lookup(e.Provider); ok && e.MaxEventAge >= 0 {
				ttl = max(ttl, spec.MaxEventAge(e.MaxEventAge))
			}
		}
	}
	return ttl
}

func (c *Config) applyDefaults() {
	def := func(dst *string, v string) {
		if *dst == "" {
			*dst = v
		}
	}
	def(&c.HTTPAddr, DefaultHTTPAddr)
	def(&c.AdminAddr, DefaultAdminAddr)
	def(&c.NATS.Listen, DefaultListen)
	def(&c.DataDir, DefaultDataDir)
	def(&c.SandboxAddr, DefaultSandbox)
	def(&c.NATS.Sync, "always")
	def(&c.WorkflowVersion, "v1")
	for i := range c.SLOs {
		if c.SLOs[i].Objective == 0 {
			c.SLOs[i].Objective = 0.99
		}
	}
	if c.SLOs == nil {
		c.SLOs = DefaultSLOs
	}
	if c.NATS.DuplicateWindow == 0 {
		c.NATS.DuplicateWindow = 2 * time.Minute
	}
	if c.NATS.Replicas == 0 {
		c.NATS.Replicas = 1
	}
	if c.Gateway.BodyLimit == 0 {
		c.Gateway.BodyLimit = 1 << 20
	}
	if c.Gateway.MaxEvents == 0 {
		c.Gateway.MaxEvents = 1000
	}
	if c.Gateway.QuarantineCap == 0 {
		c.Gateway.QuarantineCap = max(8<<20, c.Gateway.BodyLimit)
	}
	if c.Gateway.DedupTTL == 0 {
		c.Gateway.DedupTTL = c.defaultDedupTTL()
	}
	if c.Gateway.PublishTimeout == 0 {
		c.Gateway.PublishTimeout = 10 * time.Second
	}
	if c.TrustedProxies == nil {
		c.TrustedProxies = forwarded.DefaultTrusted
	}
	if c.Gateway.MinFreeDisk == 0 {
		c.Gateway.MinFreeDisk = 100 << 20
	}
	rl := &c.Gateway.RateLimit
	if rl.Burst == 0 {
		rl.Burst = 10 * time.Second
	}
	if !rl.Endpoint.Set {
		rl.Endpoint.Rate = 2000
	}
	if !rl.Tenant.Set {
		rl.Tenant.Rate = 5000
	}
	if gc := &c.Gateway.GroupCommit; gc.MaxEvents == 0 {
		gc.MaxEvents = 256
		if c.NATS.Replicas > 1 || c.NATS.Sync != "always" {
			gc.MaxEvents = 1
		}
	}
	if gc := &c.Gateway.GroupCommit; gc.MaxWait == 0 {
		gc.MaxWait = time.Millisecond
	}
	if gc := &c.Gateway.GroupCommit; gc.DerivedWait == 0 {
		gc.DerivedWait = time.Millisecond
	}
	if c.DLQ.SLO == 0 {
		c.DLQ.SLO = 15 * time.Minute
	}
	if _, ok := c.DLQ.Freshness["default"]; !ok {
		if c.DLQ.Freshness == nil {
			c.DLQ.Freshness = map[string]time.Duration{}
		}
		c.DLQ.Freshness["default"] = 72 * time.Hour
	}
	for i := range c.Tenants {
		if r := &c.Tenants[i].Reconcile; !r.Every.Set {
			r.Every = Duration{Duration: time.Hour, Set: true}
		}
	}
}

// resolve replaces every secret reference by its value; partial leaves the failures on
// their secrets instead of failing.
func (c *Config) resolve(getenv func(string) string, partial bool) error {
	var errs []error
	one := func(where string, s *Secret) {
		if s.Ref == "" {
			return
		}
		v, warn, err := resolveSecret(s.Ref, getenv)
		if err != nil {
			err = fmt.Errorf("%s:%d: %s: %v", c.Source, s.Line, where, err)
			if partial {
				s.Unresolved = err
			} else {
				errs = append(errs, err)
			}
			return
		}
		if warn && c.Source != "built-in demo" {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s:%d: %s is a literal secret; use env:NAME or file:PATH in production", c.Source, s.Line, where))
		}
		s.Value = v
	}
	for ti := range c.Tenants {
		t := &c.Tenants[ti]
		for ei := range t.Endpoints {
			e := &t.Endpoints[ei]
			name := "endpoint " + e.ID
			one(name+" path_token", &e.PathToken)
			one(name+" verify_token", &e.VerifyToken)
			for si := range e.Secrets {
				one(fmt.Sprintf("%s secrets[%d]", name, si), &e.Secrets[si])
			}
			for si := range e.SigningSecrets {
				one(fmt.Sprintf("%s signing_secrets[%d]", name, si), &e.SigningSecrets[si])
			}
		}
		for name, p := range t.Platforms.each() {
			one("tenant "+t.ID+" platforms."+name+".api_key", &p.APIKey)
		}
	}
	one("console token", &c.Console.Token)
	for name, u := range c.Console.Users {
		one("console user "+name, &u)
		c.Console.Users[name] = u
	}
	return errors.Join(errs...)
}

func resolveSecret(ref string, getenv func(string) string) (value string, literal bool, err error) {
	switch {
	case strings.HasPrefix(ref, "env:"):
		name := strings.TrimPrefix(ref, "env:")
		v := getenv(name)
		if v == "" {
			return "", false, fmt.Errorf("environment variable %s is not set", name)
		}
		return v, false, nil
	case strings.HasPrefix(ref, "file:"):
		b, err := os.ReadFile(strings.TrimPrefix(ref, "file:"))
		if err != nil {
			return "", false, fmt.Errorf("secret file: %v", err)
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return "", false, fmt.Errorf("secret file %s is empty", strings.TrimPrefix(ref, "file:"))
		}
		return v, false, nil
	default:
		return ref, true, nil
	}
}

var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// Validate fails closed: an endpoint that could accept unverified events, an unknown
// provider or an unusable address is an error naming its line.
func (c *Config) Validate() error {
	var errs []error
	fail := func(line int, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s:%d: %s", c.Source, line, fmt.Sprintf(format, args...)))
	}
	for _, a := range []struct{ name, addr string }{{"http_addr", c.HTTPAddr}, {"admin_addr", c.AdminAddr}, {"nats.listen", c.NATS.Listen}, {"sandbox_addr", c.SandboxAddr}} {
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			fail(0, "%s %q: %v", a.name, a.addr, err)
		}
	}
	errs = append(errs, c.validateSLOs()...)
	for name, t := range c.Consumers {
		if _, ok := stream.SubscriptionOf(name); !ok {
			fail(0, "consumers.%s: no such consumer service (classifier, stopper, crmwriter, suppressor, projector)", name)
		}
		if t.Workers < 1 || t.Workers > MaxWorkers {
			fail(0, "consumers.%s.workers %d: want 1 to %d", name, t.Workers, MaxWorkers)
		}
	}
	if gc := c.Gateway.GroupCommit; gc.MaxEvents < 1 || gc.MaxEvents > MaxBatch {
		fail(0, "gateway.group_commit.max_events %d: want 1 (off) to %d (nats-server's batch limit)", gc.MaxEvents, MaxBatch)
	}
	if gc := c.Gateway.GroupCommit; gc.MaxWait < 0 || gc.MaxWait > 100*time.Millisecond {
		fail(0, "gateway.group_commit.max_wait %v: want at most 100ms (it adds to every webhook's latency)", gc.MaxWait)
	}
	if gc := c.Gateway.GroupCommit; gc.DerivedWait < 0 || gc.DerivedWait > 5*time.Second {
		fail(0, "gateway.group_commit.derived_wait %v: want at most 5s (it delays every derived event)", gc.DerivedWait)
	}
	if c.MemoryLimit != "" {
		if _, err := memlimit.Parse(c.MemoryLimit); err != nil {
			fail(0, "memory_limit: %v", err)
		}
	}
	if c.NATS.Sync != "always" {
		if d, err := time.ParseDuration(c.NATS.Sync); err != nil || d <= 0 {
			fail(0, "nats.sync %q: want \"always\" or a positive duration such as 2m", c.NATS.Sync)
		}
	}
	if c.NATS.Replicas < 1 || c.NATS.Replicas > 5 {
		fail(0, "nats.replicas %d: want 1 to 5", c.NATS.Replicas)
	}
	if c.NATS.DuplicateWindow < 0 {
		fail(0, "nats.duplicate_window must be positive")
	}
	if c.Gateway.BodyLimit < 1024 {
		fail(0, "gateway.body_limit %d: want at least 1024 bytes", c.Gateway.BodyLimit)
	}
	if c.Gateway.QuarantineCap < c.Gateway.BodyLimit {
		fail(0, "gateway.quarantine_cap %d: want at least gateway.body_limit (%d): a verified body between the two is kept in the quarantine", c.Gateway.QuarantineCap, c.Gateway.BodyLimit)
	}
	if _, err := forwarded.Parse(c.TrustedProxies); err != nil {
		fail(0, "%v", err)
	}
	for _, t := range c.Tenants {
		if t.EventLimit < 0 {
			fail(t.Line, "tenant %s: event_limit must be positive", t.ID)
		}
		for _, r := range []struct {
			what string
			age  time.Duration
		}{{"payloads", t.Retention.Payloads.Duration}, {"events", t.Retention.Events.Duration}} {
			if r.age != 0 && r.age < 24*time.Hour {
				fail(t.Line, "tenant %s: retention.%s %s: want at least a day (1d), or leave it out to keep everything", t.ID, r.what, r.age)
			}
		}
	}
	if c.Gateway.StoreLimit < 0 || c.Gateway.MinFreeDisk < 0 {
		fail(0, "gateway.store_limit and gateway.min_free_disk are sizes in bytes: want them positive")
	}
	if c.Gateway.RateLimit.Burst < 0 {
		fail(0, "gateway.rate_limit.burst must be positive")
	}
	if c.DLQ.SLO < 0 {
		fail(0, "dlq.slo must be positive")
	}
	for typ, f := range c.DLQ.Freshness {
		if typ != "default" && !slices.Contains(envelope.AllTypes, typ) {
			fail(0, "dlq.freshness: %q is not an event type (or default)", typ)
		}
		if f <= 0 {
			fail(0, "dlq.freshness %s: want a positive duration", typ)
		}
	}
	if c.Gateway.MaxEvents < 1 {
		fail(0, "gateway.max_events %d: want at least 1", c.Gateway.MaxEvents)
	}
	if len(c.Tenants) == 0 {
		fail(0, "no tenants: nothing would be accepted")
	}
	tenants := map[string]bool{}
	endpoints := map[string]int{}
	for _, t := range c.Tenants {
		if !idPattern.MatchString(t.ID) {
			fail(t.Line, "tenant id %q: want [a-z0-9-]", t.ID)
		}
		if tenants[t.ID] {
			fail(t.Line, "tenant %q is declared twice", t.ID)
		}
		tenants[t.ID] = true
		for typ := range t.Owners {
			if typ != "default" && !slices.Contains(envelope.AllTypes, typ) {
				fail(t.Line, "tenant %s: owners: %q is not an event type (or default)", t.ID, typ)
			}
		}
		for name, p := range t.Platforms.each() {
			if !p.APIKey.given() {
				fail(t.Line, "tenant %s: platforms.%s: api_key is required (leave the platform out to use the sandbox)", t.ID, name)
			}
			if p.BaseURL != "" {
				if u, err := url.Parse(p.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					fail(t.Line, "tenant %s: platforms.%s: base_url %q is not an absolute http(s) URL", t.ID, name, p.BaseURL)
				}
			}
			if p.Rate != "" {
				rates, err := ratelimit.Parse(p.Rate)
				if err != nil {
					fail(t.Line, "tenant %s: platforms.%s: %v", t.ID, name, err)
				}
				p.Rates = rates
			}
		}
		if t.Reconcile.Every.Duration < 0 || (t.Reconcile.Every.Duration > 0 && t.Reconcile.Every.Duration < time.Minute) {
			fail(t.Line, "tenant %s: reconcile.every %v: want at least 1m, or off", t.ID, t.Reconcile.Every.Duration)
		}
		for i, r := range t.Routing {
			if r.Owner == "" {
				fail(t.Line, "tenant %s: routing[%d]: owner is required", t.ID, i)
			}
			if r.Label != "" && !slices.Contains(classify.Labels, r.Label) {
				fail(t.Line, "tenant %s: routing[%d]: unknown label %q (known: %s)", t.ID, i, r.Label, strings.Join(classify.Labels, ", "))
			}
			if r.Provider != "" && !slices.Contains(registry.Names(), r.Provider) {
				fail(t.Line, "tenant %s: routing[%d]: unknown provider %q", t.ID, i, r.Provider)
			}
		}
		for _, e := range t.Endpoints {
			if !idPattern.MatchString(e.ID) {
				fail(e.Line, "endpoint id %q: want [a-z0-9-]", e.ID)
			}
			if prev, dup := endpoints[e.ID]; dup {
				fail(e.Line, "endpoint %q is already declared at line %d (endpoint ids are global: they are the URL)", e.ID, prev)
			}
			endpoints[e.ID] = e.Line
			spec, ok := registry.Lookup(e.Provider)
			if !ok {
				fail(e.Line, "endpoint %s: unknown provider %q (known: %s)", e.ID, e.Provider, strings.Join(registry.Names(), ", "))
				continue
			}
			if !e.PathToken.given() {
				fail(e.Line, "endpoint %s: path_token is required", e.ID)
			} else if e.PathToken.Unresolved == nil && len(e.PathToken.Value) < 16 {
				c.Warnings = append(c.Warnings, fmt.Sprintf("%s:%d: endpoint %s: path_token is shorter than 16 characters; it is the only secret in the URL", c.Source, e.PathToken.Line, e.ID))
			}
			if spec.NeedsSecret && len(e.Secrets) == 0 {
				fail(e.Line, "endpoint %s: provider %s signs its webhooks; at least one secret is required", e.ID, e.Provider)
			}
			if e.Tolerance < 0 {
				fail(e.Line, "endpoint %s: tolerance must be positive", e.ID)
			}
			if e.PublicURL != "" {
				if u, err := url.Parse(e.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					fail(e.Line, "endpoint %s: public_url %q is not an absolute http(s) URL", e.ID, e.PublicURL)
				}
			}
			if e.Provider == "meta" && !e.VerifyToken.given() {
				fail(e.Line, "endpoint %s: provider meta needs verify_token for the subscription handshake", e.ID)
			}
			if e.Generic != nil && e.Provider != "generic" {
				fail(e.Line, "endpoint %s: the generic block is only for provider generic", e.ID)
			}
			if len(e.SigningSecrets) > 0 && spec.SignOptional == nil {
				fail(e.Line, "endpoint %s: signing_secrets is only for smartlead (its optional X-Smartlead-Signature); provider %s takes its secrets in secrets", e.ID, e.Provider)
			}
			if e.MaxEventAge < 0 {
				fail(e.Line, "endpoint %s: max_event_age must be positive", e.ID)
			} else if age := spec.MaxEventAge(e.MaxEventAge); age > c.Gateway.DedupTTL {
				fail(e.Line, "endpoint %s: events up to %v old are taken (max_event_age), longer than gateway.dedup_ttl %v remembers their ids: "+
					"one stored again after its id is forgotten would be acted on twice; raise dedup_ttl or lower max_event_age", e.ID, age, c.Gateway.DedupTTL)
			}
			if len(e.SignatureVersions) > 0 && len(spec.SignatureVersions) == 0 {
				fail(e.Line, "endpoint %s: signature_versions is only for a provider with several (hubspot); provider %s has one", e.ID, e.Provider)
			}
			// An endpoint with a secret unresolved (LoadPartial) has no verifier to build.
			if _, err := spec.New(e.ProviderConfig()); err != nil && e.Unresolved() == nil {
				fail(e.Line, "endpoint %s: %v", e.ID, err)
			}
		}
	}
	return errors.Join(errs...)
}

// ProviderConfig is what the endpoint's provider package is built from.
func (e *Endpoint) ProviderConfig() providers.Config {
	return providers.Config{Secrets: values(e.Secrets), SigningSecrets: values(e.SigningSecrets),
		Tolerance: e.Tolerance, SecretHeader: e.SecretHeader, Generic: e.Generic, SignatureVersions: e.SignatureVersions}
}

// values are the resolved values of secrets; nil for none.
func values(secrets []Secret) []string {
	if len(secrets) == 0 {
		return nil
	}
	out := make([]string, len(secrets))
	for i, s := range secrets {
		out[i] = s.Value
	}
	return out
}

// each yields the platforms that are configured, by name.
func (p *Platforms) each() map[string]*Platform {
	out := map[string]*Platform{}
	for name, v := range map[string]*Platform{"instantly": p.Instantly, "smartlead": p.Smartlead, "hubspot": p.HubSpot} {
		if v != nil {
			out[name] = v
		}
	}
	return out
}
