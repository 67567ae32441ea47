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
	if o.Sync == "" || o.Sync == "always" {
		// Jepsen (NATS 2.12.1, 2025): the default two-minute fsync loses acknowledged
		// writes on a crash. A 200 to a provider must mean the event is on disk.
		opts.SyncAlways = true
	} else {
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
		return nil, errors.New("embedded nats did not start within 30s (is the port in use?)")
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
}

// Open connects to url, or, when url is empty, starts the embedded server and connects
// to it in-process.
func Open(url string, o Options, name string) (*Conn, error) {
	c := &Conn{}
	opts := connOptions(name)
	if url == "" {
		s, err := Start(o)
		if err != nil {
			return nil, err
		}
		c.Embedded = s
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
	return c, nil
}

// Ready reports whether JetStream answers.
func (c *Conn) Ready(ctx context.Context) error {
	_, err := c.JS.AccountInfo(ctx)
	return err
}

// Close drains the connection and stops the embedded server, if any.
func (c *Conn) Close() {
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
