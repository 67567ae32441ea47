// Package service is the start-up every Exacto process shares: load and validate the
// config before opening any port, connect to NATS (or embed it), declare the topology,
// and serve the admin address.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/admin"
	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/config"
	"exacto.dev/pkg/confirm"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/ingest"
	"exacto.dev/pkg/listen"
	"exacto.dev/pkg/memlimit"
	"exacto.dev/pkg/platform"
	"exacto.dev/pkg/platform/accounts"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/retry"
	"exacto.dev/pkg/stream"
	"exacto.dev/pkg/telemetry"
)

// Options say how to start.
type Options struct {
	Name       string // the process's NATS connection name
	ConfigPath string // "" : EXACTO_CONFIG, ./exacto.yaml, the demo
	LogText    bool
	// Embed allows starting the embedded NATS server when no URL is configured;
	// single parts (gateway, workers) refuse to run without EXACTO_NATS_URL.
	Embed bool
}

// Env is a started process's shared state.
type Env struct {
	Config    *config.Config
	Conn      *broker.Conn
	Log       *slog.Logger
	Admin     *http.ServeMux
	AdminAddr string // the bound admin address
	// Platforms are every tenant's platform clients; Sandbox is the sandbox this
	// process started for the platforms without credentials (nil if none).
	Platforms *accounts.Set
	Sandbox   *sandbox.Server
	// Breakers are the process's circuit breakers, one per dependency, shared by every
	// consumer of the process (and shown by the console).
	Breakers *consumer.Breakers
	// Pacer holds each dependency's Retry-After pause: a 429 one consumer of the
	// process receives pauses that dependency for every consumer of the process.
	Pacer *retry.Pacer
	// Commit is the process's group committer of webhooks on EXACTO_EVENTS (nil when
	// the config's group commit is off): concurrent webhooks share one fsync. derived
	// is the consumers' committer of derived events, with its longer window.
	Commit                 *ingest.Committer
	derived                *ingest.Committer
	precedence             consumer.Precedence // the process's consumers' (consumer.Options.Precedence)
	gateMu                 sync.Mutex
	gate                   *confirm.Gate // shared by the process's consumers (Gate)
	adminSrv               *http.Server
	telemetry              *telemetry.Providers
	stopBreakers, stopSLOs func()
	parts, up              atomic.Int32
}

// Part registers one part of the process (the gateway, a worker) that must be up
// before /readyz answers 200; the part calls the returned func once it serves (the
// gateway listens, the worker's consumer is bound). Register every part before
// starting any.
func (e *Env) Part() (up func()) {
	e.parts.Add(1)
	var once sync.Once
	return func() { once.Do(func() { e.up.Add(1) }) }
}

// Start loads the config, connects and serves the admin address.
func Start(ctx context.Context, o Options) (*Env, error) {
	text := o.LogText
	switch os.Getenv(telemetry.EnvLogFormat) {
	case "json":
		text = false
	case "text":
		text = true
	case "":
	default:
		return nil, fmt.Errorf("%s: want json or text, not %q", telemetry.EnvLogFormat, os.Getenv(telemetry.EnvLogFormat))
	}
	log := telemetry.Logger(os.Stderr, text, slog.LevelInfo)
	cfg, err := config.Load(o.ConfigPath, os.Getenv)
	if err != nil {
		return nil, err
	}
	for _, w := range cfg.Warnings {
		log.Warn(w)
	}
	if !o.Embed && cfg.NATS.URL == "" {
		return nil, errors.New("EXACTO_NATS_URL is required: this part runs against an existing NATS (`exacto up` embeds one)")
	}
	keepMemoryLimit(ctx, cfg, o.Embed, log)
	tel, err := telemetry.Setup(ctx, o.Name, os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	conn, err := broker.Open(cfg.NATS.URL, broker.Options{Listen: cfg.NATS.Listen, DataDir: cfg.DataDir, Sync: cfg.NATS.Sync}, o.Name)
	if err != nil {
		return nil, err
	}
	topo := stream.Options{DuplicateWindow: cfg.NATS.DuplicateWindow, Replicas: cfg.NATS.Replicas, DedupTTL: cfg.Gateway.DedupTTL,
		Embedded: conn.Embedded != nil, SelfSync: conn.SelfSynced()}
	if err := stream.Ensure(ctx, conn.JS, topo); err != nil {
		conn.Close()
		return nil, err
	}
	// The streams as made (their definitions, their blocks) are durable before any write
	// is acknowledged, and the process keeps them so (pkg/broker, sync.go).
	if err := conn.KeepDurable(ctx, stream.DurableStores(topo)...); err != nil {
		conn.Close()
		return nil, fmt.Errorf("sync the store: %w", err)
	}
	// Platforms without credentials are served by the sandbox: the configured one, or
	// one this process starts (on sandbox_addr for `exacto up`, anywhere on loopback
	// for a part alone).
	var sb *sandbox.Server
	sandboxURL := cfg.SandboxURL
	if accounts.NeedsSandbox(cfg) && sandboxURL == "" {
		addr := "127.0.0.1:0"
		if o.Embed {
			addr = cfg.SandboxAddr
		}
		if sb, err = sandbox.Listen(sandbox.Options{Addr: addr, AutoEnroll: true}); err != nil {
			conn.Close()
			return nil, fmt.Errorf("sandbox: %w", err)
		}
		sandboxURL = sb.URL
	}
	// Every process paces each platform account through one shared bucket.
	limits, err := conn.JS.KeyValue(ctx, stream.RateLimits)
	var ln net.Listener
	if err == nil {
		ln, err = listen.TCP("admin_addr", cfg.AdminAddr)
	}
	if err != nil {
		conn.Close()
		if sb != nil {
			sb.Close()
		}
		return nil, err
	}
	env := &Env{Config: cfg, Conn: conn, Log: log, AdminAddr: ln.Addr().String(),
		Platforms: accounts.New(cfg, sandboxURL, accounts.Pacing{Limits: limits}), Sandbox: sb, Breakers: consumer.NewBreakers(30*time.Second, 5), Pacer: retry.NewPacer(), telemetry: tel}
	env.Admin = admin.Mux(tel.Metrics, map[string]admin.Check{
		"jetstream": conn.Ready,
		"started": func(context.Context) error {
			if n := env.parts.Load(); n == 0 || env.up.Load() < n {
				return errors.New("still starting")
			}
			return nil
		},
	})
	// Every platform's breaker exists from the start, so its state is on /metrics
	// before the first call.
	for _, dep := range platform.Dependencies {
		env.Breakers.State(dep)
	}
	if env.stopBreakers, err = consumer.ObserveBreakers(env.Breakers); err != nil {
		conn.Close()
		return nil, err
	}
	if env.stopSLOs, err = observeSLOs(cfg); err != nil {
		conn.Close()
		return nil, err
	}
	// On a node its process syncs, the syncer's rounds are the group commit: every
	// webhook and derived event waiting shares one round of fdatasyncs, with no window
	// to wait for and no atomic batch to stage (docs/durability.md).
	byProcess, err := stream.SyncedByProcess(ctx, conn.JS)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if gc := cfg.Gateway.GroupCommit; gc.MaxEvents > 1 && !byProcess {
		env.Commit = ingest.NewCommitter(conn.JS, gc.MaxEvents, gc.MaxWait, cfg.Gateway.PublishTimeout)
		env.derived = ingest.NewCommitter(conn.JS, derivedBatch, gc.DerivedWait, cfg.Gateway.PublishTimeout)
	}
	env.adminSrv = admin.Server(cfg.AdminAddr, admin.Hosts(cfg.AdminHosts, env.Admin))
	go env.adminSrv.Serve(ln)
	return env, nil
}

// keepMemoryLimit holds the process under the config's memory_limit (`exacto up`:
// config.DefaultMemoryLimit when unset), raised while the live heap needs more
// (pkg/memlimit), until ctx ends. GOMEMLIMIT, when set, wins: the runtime applied it.
func keepMemoryLimit(ctx context.Context, cfg *config.Config, up bool, log *slog.Logger) {
	limit := cfg.MemoryLimit
	if limit == "" && up {
		limit = config.DefaultMemoryLimit
	}
	if os.Getenv("GOMEMLIMIT") != "" || limit == "" || limit == "off" {
		return
	}
	base, err := memlimit.Parse(limit)
	if err != nil { // Validate refused it already
		return
	}
	memlimit.Keep(ctx, base, time.Second, func(limit, live int64) {
		log.Info("memory limit", "limit_mib", limit>>20, "live_heap_mib", live>>20, "memory_limit_mib", base>>20)
	})
}

// Deriver stores derived events on EXACTO_EVENTS once, through the process's group
// committer of derived events when there is one (every consumer's derived events of
// the last group_commit.derived_wait share one commit), else each on its own; either
// way the attempt that made one is settled only once it is stored.
func (e *Env) Deriver(ctx context.Context) (*consumer.Deriver, error) {
	d, err := consumer.NewDeriver(ctx, e.Conn.JS)
	switch {
	case err != nil:
		return nil, err
	case e.derived == nil && e.checkpointed():
		// Each on its own, its attempt settled once it is stored: the checkpoint that
		// passes its cause syncs it (pkg/consumer/checkpoint.go).
		return d.Via(ingest.PublishOne(e.Conn.JS)), nil
	case e.derived == nil: // each on its own, its attempt settled once it is on disk
		return d.Via(ingest.PublishDurable(e.Conn.JS)), nil
	}
	return d.Via(e.derived.Publish), nil
}

// derivedBatch is the most derived events one commit stores. Under load a batch fills
// before its window (group_commit.derived_wait) ends, so a stop is stored tens of
// milliseconds after it was made, not the whole window later; at a trickle the window
// still gathers what it can, so each commit's cost (an atomic batch: docs/durability.md)
// is shared.
const derivedBatch = 32

// Gate is the process's confirmation gate (pkg/confirm), one for all its consumers: the
// consumers that need one unsigned event's verdict ask its source once.
func (e *Env) Gate(ctx context.Context) (*confirm.Gate, error) {
	e.gateMu.Lock()
	defer e.gateMu.Unlock()
	if e.gate == nil {
		g, err := confirm.Open(ctx, e.Conn.JS, e.Config.TenantIDs(), e.Platforms.For, e.Log)
		if err != nil {
			return nil, err
		}
		e.gate = g
	}
	return e.gate, nil
}

// Close stops the admin server and the NATS connection (and embedded server), and
// flushes the spans and metrics still buffered.
func (e *Env) Close() {
	e.adminSrv.Close()
	if e.Commit != nil {
		e.Commit.Close()
		e.derived.Close()
	}
	if e.Sandbox != nil {
		e.Sandbox.Close()
	}
	e.Conn.Close()
	e.stopBreakers()
	e.stopSLOs()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.telemetry.Shutdown(ctx); err != nil {
		e.Log.Warn("telemetry not flushed", "err", err)
	}
}

// Run is one part of a process: it serves until ctx ends, calling up once it does.
type Run func(ctx context.Context, env *Env, up func()) error

// Main is the main of a one-part binary (services/NAME): start against
// EXACTO_NATS_URL, run until SIGINT or SIGTERM, exit 1 with the error on failure.
func Main(name string, run Run) {
	if err := refuseArgs(name, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	env, err := Start(ctx, Options{Name: "exacto-" + name})
	if err == nil {
		err = run(ctx, env, env.Part())
		env.Close()
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// refuseArgs: a one-part binary reads its settings from EXACTO_* variables alone. An
// argument (a --help, a flag meant for `exacto`) would otherwise go unread while the
// part starts as if it were not there.
func refuseArgs(name string, args []string) error {
	if len(args) == 0 {
		return nil
	}
	twin := "exacto worker " + name
	switch name {
	case "gateway", stream.Projector, stream.Reconciler:
		twin = "exacto " + name
	}
	return fmt.Errorf("takes no arguments (got %q): it reads its settings from EXACTO_* variables, which `%s --help` lists", args, twin)
}

// Checkpoints is the bucket where consumers keep their ack floors when their state is
// in the server's memory: on one embedded node (pkg/consumer/checkpoint.go); nil
// otherwise, where consumers keep their state on disk.
func (e *Env) Checkpoints(ctx context.Context) (jetstream.KeyValue, error) {
	if !e.checkpointed() {
		return nil, nil
	}
	kv, err := e.Conn.JS.KeyValue(ctx, stream.ConsumerCheckpoints)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", stream.ConsumerCheckpoints, err)
	}
	return stream.DurableKV(e.Conn.JS, kv), nil
}

// checkpointed: the consumers of this process keep their state in the server's memory
// and their ack floors in checkpoints (one embedded node).
// StoreDir is the embedded server's data dir ("" for a server of its own, whose disk
// is not this process's to watch).
func (e *Env) StoreDir() string {
	if e.Conn.Embedded == nil {
		return ""
	}
	return e.Config.DataDir
}

func (e *Env) checkpointed() bool { return e.Conn.Embedded != nil && e.Config.NATS.Replicas <= 1 }

// Consume runs consumer service name until ctx ends: its subscription to the events
// and its subscription to the replays an operator sends it from the DLQ, each on a
// connection of its own (watermill drains it on close), with the config's dead-letter
// owners, SLOs, workflow version and the process's log; o gives the handler, its
// dependencies and how many events run at once (config consumers.NAME.workers wins,
// default 2). up is called once both are bound.
func (e *Env) Consume(ctx context.Context, name string, up func(), o consumer.Options) error {
	sub, ok := stream.SubscriptionOf(name)
	if !ok {
		return fmt.Errorf("no consumer %q in the topology", name)
	}
	if o.Owner == nil {
		o.Owner = e.Config.Owner
	}
	if o.Breakers == nil {
		o.Breakers = e.Breakers
	}
	if o.Pacer == nil {
		o.Pacer = e.Pacer
	}
	if w := e.Config.Consumers[name].Workers; w > 0 { // the operator's setting wins
		o.Workers = w
	}
	if o.Workers == 0 {
		o.Workers = max(sub.Workers, 1)
	}
	o.WorkflowVersion = e.Config.WorkflowVersion
	o.SLO = func(env envelope.Envelope) (string, time.Duration) {
		label := ""
		if c := env.Data.Classification; c != nil {
			label = c.Label
		}
		s := e.Config.SLOOf(env.Type, label)
		return s.Name, s.Target
	}
	o.Solo = &consumer.Solo{} // the process's runners of the service are one member
	o.Precedence = &e.precedence
	replays := o
	replays.Workers = 1
	// The replays' consumer stays on disk: its events are rare, each an operator's action.
	var err error
	if o.Checkpoints, err = e.Checkpoints(ctx); err != nil {
		return err
	}
	var mu sync.Mutex
	waiting := 2
	bound := func() {
		mu.Lock()
		defer mu.Unlock()
		if waiting--; waiting == 0 && up != nil {
			up()
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	for _, run := range []struct {
		sub stream.Subscription
		o   consumer.Options
	}{{sub, o}, {sub.Replays(), replays}} {
		go func() {
			err := e.consume(ctx, run.sub, bound, run.o)
			cancel() // one stops, both stop
			errs <- err
		}()
	}
	return errors.Join(<-errs, <-errs)
}

func (e *Env) consume(ctx context.Context, sub stream.Subscription, up func(), o consumer.Options) error {
	nc, err := e.Conn.Dial("exacto-" + sub.Durable)
	if err != nil {
		return err
	}
	defer nc.Close()
	o.NC, o.Sub, o.Ready, o.Log = nc, sub, up, e.Log
	return consumer.Run(ctx, o)
}
