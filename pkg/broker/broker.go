// Package broker starts the embedded nats-server with JetStream that `exacto up` runs
// when no external NATS is configured.
package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/listen"
	"exacto.dev/pkg/stream"
)

// Options configures the embedded server.
type Options struct {
	// Listen is host:port of the client port; port -1 picks a free one (tests).
	Listen string
	// DataDir holds the JetStream store (under DataDir/jetstream).
	DataDir string
	// Sync is "always" (fsync before each acknowledgement) or a flush interval.
	Sync string
	// Logs turns on the server's own log lines.
	Logs bool
	// Name is the server's name, "exacto" when empty; every node of a cluster needs its
	// own.
	Name string
	// Cluster, when set, makes the server a node of a JetStream cluster (tests: `exacto
	// up` runs a single node and leaves it nil).
	Cluster *Cluster
	// SelfSync, with Sync always, runs the server with its own periodic sync: the
	// process that embeds it fsyncs what must be durable itself (sync.go). Open sets it
	// for the single node it embeds, unless ServerSync.
	SelfSync bool
	// ServerSync, with Sync always, leaves every fsync to nats-server (an fsync per
	// stored message): the benches' per-message baseline.
	ServerSync bool
}

// Cluster is a node's cluster block: the cluster's name, the host:port its routes
// listen on, and the nats-route:// URLs of every node (its own included).
type Cluster struct {
	Name   string
	Listen string
	Routes []string
}

// MaxPayload is raised above nats-server's 1 MiB default because an envelope holds a
// raw payload of up to the gateway's body limit plus its attributes.
const MaxPayload = 8 << 20

// Start starts the server and waits until it accepts connections.
func Start(o Options) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(o.Listen)
	if err != nil {
		return nil, fmt.Errorf("nats listen %q: %w", o.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("nats listen %q: bad port", o.Listen)
	}
	name := o.Name
	if name == "" {
		name = "exacto"
	}
	opts := &server.Options{
		ServerName: name,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   filepath.Join(o.DataDir, "jetstream"),
		MaxPayload: MaxPayload,
		NoSigs:     true, // the process handles signals and shuts the server down itself
		NoLog:      !o.Logs,
	}
	switch {
	case (o.Sync == "" || o.Sync == "always") && o.SelfSync:
		// The process fsyncs each acknowledged write before relying on it (sync.go);
		// the server's own periodic sync (its default) covers the rest.
	case o.Sync == "" || o.Sync == "always":
		// Jepsen (NATS 2.12.1, 2025): the default two-minute fsync loses acknowledged
		// writes on a crash. A 200 to a provider must mean the event is on disk.
		opts.SyncAlways = true
	default:
		d, err := time.ParseDuration(o.Sync)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("nats sync %q: want always or a positive duration", o.Sync)
		}
		opts.SyncInterval = d
	}
	if c := o.Cluster; c != nil {
		chost, cport, err := net.SplitHostPort(c.Listen)
		if err != nil {
			return nil, fmt.Errorf("nats cluster listen %q: %w", c.Listen, err)
		}
		opts.Cluster.Name, opts.Cluster.Host = c.Name, chost
		if opts.Cluster.Port, err = strconv.Atoi(cport); err != nil {
			return nil, fmt.Errorf("nats cluster listen %q: bad port", c.Listen)
		}
		opts.Routes = server.RoutesFromStr(strings.Join(c.Routes, ","))
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	if o.Logs {
		s.ConfigureLogger()
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats did not start within 30s on %s: is the port in use?", o.Listen)
	}
	if !s.JetStreamEnabled() {
		s.Shutdown()
		return nil, errors.New("embedded nats started without JetStream")
	}
	return s, nil
}

// Conn is a NATS connection with JetStream, and the embedded server behind it if any.
type Conn struct {
	NC       *nats.Conn
	JS       jetstream.JetStream
	Embedded *server.Server // nil when an external NATS is used
	// syncer, with an embedded single node and sync always, fsyncs the durable stores
	// on request (sync.go); nil: the server syncs each write itself (or nothing does).
	syncer   *syncer
	syncSub  *nats.Subscription
	withdraw func() // the syncer, as this process's connections to the server see it
	unlock   func() // the data dir's lock, once the embedded server is down
}

// Open connects to url, or, when url is empty, starts the embedded server and connects
// to it in-process.
func Open(url string, o Options, name string) (*Conn, error) {
	c := &Conn{}
	opts := connOptions(name)
	if url == "" {
		o.SelfSync = o.Cluster == nil && !o.ServerSync && (o.Sync == "" || o.Sync == "always")
		unlock, err := lockDataDir(o.DataDir)
		if err != nil {
			return nil, err
		}
		c.unlock = unlock
		// A taken port is said at once (nats-server would retry for 30 s); -1 is its
		// random port, 0 its default one.
		if host, port, _ := net.SplitHostPort(o.Listen); port != "-1" {
			addr := o.Listen
			if port == "0" {
				addr = net.JoinHostPort(host, strconv.Itoa(server.DEFAULT_PORT))
			}
			if err := listen.Free("nats.listen", addr); err != nil {
				c.Close()
				return nil, err
			}
		}
		s, err := Start(o)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Embedded = s
		if o.SelfSync {
			c.syncer = newSyncer(s.StoreDir())
		}
		url = s.ClientURL()
		opts = append(opts, nats.InProcessServer(s))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("connect to nats %s: %w", url, err)
	}
	c.NC = nc
	// The default async window (4000) would stall bursts of batched deliveries.
	c.JS, err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(65536))
	if err != nil {
		c.Close()
		return nil, err
	}
	if c.syncer != nil { // this process's connections call it, other processes ask
		c.withdraw = stream.ServeSync(c.Embedded.ID(), c.syncer.Sync)
		if c.syncSub, err = serveSync(nc, c.syncer); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// SelfSynced reports whether this process fsyncs the embedded server's durable stores
// itself (Durable); false: the server does, on each write.
func (c *Conn) SelfSynced() bool { return c.syncer != nil }

// Durable returns once everything the named streams held when it was called is on
// disk: at once when the server syncs each write itself.
func (c *Conn) Durable(ctx context.Context, streams ...string) error {
	if c.syncer == nil {
		return nil
	}
	return c.syncer.Sync(ctx, streams...)
}

// KeepDurable makes every file of the named streams durable now, and, once a second
// from now on, every one that changed (a compacted block, a rewritten definition, a
// consumer's state): the process's durable stores, declared.
func (c *Conn) KeepDurable(ctx context.Context, streams ...string) error {
	if c.syncer == nil {
		return nil
	}
	c.syncer.Keep(streams)
	return c.syncer.SyncAll(ctx, streams...)
}

// Ready reports whether JetStream answers.
func (c *Conn) Ready(ctx context.Context) error {
	_, err := c.JS.AccountInfo(ctx)
	return err
}

// Close drains the connection and stops the embedded server, if any.
func (c *Conn) Close() {
	defer func() {
		if c.syncer != nil { // after the drain: a sync asked for is answered
			if c.withdraw != nil {
				c.withdraw()
			}
			c.syncer.close()
		}
	}()
	if c.NC != nil {
		// Drain lets in-flight acknowledgements finish; a connection that is already
		// down has nothing to drain.
		if c.NC.IsConnected() && c.NC.Drain() == nil {
			for c.NC.IsDraining() {
				time.Sleep(10 * time.Millisecond)
			}
		}
		c.NC.Close()
	}
	if c.Embedded != nil {
		c.Embedded.Shutdown()
		c.Embedded.WaitForShutdown()
	}
	if c.unlock != nil {
		c.unlock()
	}
}

// Dial opens another connection to the same server: watermill's subscriber drains and
// closes the connection it is given, so each consumer runner gets its own.
func (c *Conn) Dial(name string) (*nats.Conn, error) {
	opts := connOptions(name)
	if c.Embedded != nil {
		opts = append(opts, nats.InProcessServer(c.Embedded))
	}
	return nats.Connect(c.NC.ConnectedUrl(), opts...)
}

// connOptions are every Exacto connection's: reconnect forever (the broker restarting
// must not end a worker) and a bounded drain on shutdown.
func connOptions(name string) []nats.Option {
	return []nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond), nats.DrainTimeout(10 * time.Second)}
}
