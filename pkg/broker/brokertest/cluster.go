package brokertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/stream"
)

// account is the account every stream lives in: the servers have no accounts
// configured, so clients are in the global one.
const account = server.DEFAULT_GLOBAL_ACCOUNT

// Cluster is n real nats-servers with JetStream in this process, routed to each other
// on loopback: nodes n1..nN of cluster "exacto", each with its own store, SyncAlways,
// and fixed client and route ports so a killed node restarts where it was.
type Cluster struct {
	t    testing.TB
	opts []broker.Options
	mu   sync.Mutex
	srv  []*server.Server // nil while a node is killed
}

// StartCluster starts an n-node cluster and waits until JetStream has a meta leader;
// the nodes stop when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	ports := FreePorts(t, 2*n)
	routes := make([]string, n)
	for i := range n {
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i])
	}
	c := &Cluster{t: t, opts: make([]broker.Options, n), srv: make([]*server.Server, n)}
	for i := range n {
		c.opts[i] = broker.Options{
			Name:    fmt.Sprintf("n%d", i+1),
			Listen:  fmt.Sprintf("127.0.0.1:%d", ports[i]),
			DataDir: t.TempDir(),
			Sync:    "always",
			Cluster: &broker.Cluster{Name: "exacto", Listen: fmt.Sprintf("127.0.0.1:%d", ports[n+i]), Routes: routes},
		}
	}
	t.Cleanup(c.shutdown)
	// Start the nodes together: each waits for its routes before JetStream is ready.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = c.start(i) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node n%d: %v", i+1, err)
		}
	}
	c.waitMetaLeader(t)
	return c
}

// FreePorts returns n distinct loopback ports free now, for servers bound a moment
// later (a cluster's routes, a child process). They are picked below the kernel's
// ephemeral range: a port from that range, released here, may become the source port
// of any outgoing connection on the machine before it is bound again (seen once: a
// child `exacto up` that could not listen). A port is handed out once per process.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports.mu.Lock()
	defer ports.mu.Unlock()
	out := make([]int, 0, n)
	lo, hi := portsFrom, ephemeralStart()
	if hi-lo < 1000 { // an unusual range: let the kernel choose
		lo, hi = 0, 0
	}
	for tries := 0; len(out) < n; tries++ {
		if tries > 10000 {
			t.Fatalf("no free loopback port below %d", hi)
		}
		port := 0
		if hi > lo {
			port = lo + rand.IntN(hi-lo)
			if ports.given[port] {
				continue
			}
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken: another
		}
		port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if ports.given[port] {
			continue // the kernel's choice, given before
		}
		ports.given[port] = true
		out = append(out, port)
	}
	return out
}

// ports are those FreePorts has handed out in this process.
var ports = struct {
	mu    sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

// portsFrom is the lowest port FreePorts picks.
const portsFrom = 10000

// ephemeralStart is the first port of the kernel's ephemeral range (Linux's
// ip_local_port_range; 32768, its default, where it cannot be read).
func ephemeralStart() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(data))
	if len(f) < 1 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}

func (c *Cluster) start(i int) error {
	s, err := broker.Start(c.opts[i])
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.srv[i] = s
	c.mu.Unlock()
	return nil
}

func (c *Cluster) shutdown() {
	for i := range c.srv {
		c.Kill(i)
	}
}

// N is the number of nodes.
func (c *Cluster) N() int { return len(c.opts) }

// Name is node i's server name (n1..nN).
func (c *Cluster) Name(i int) string { return c.opts[i].Name }

// URLs are the client URLs of every node.
func (c *Cluster) URLs() []string {
	urls := make([]string, len(c.opts))
	for i, o := range c.opts {
		urls[i] = "nats://" + o.Listen
	}
	return urls
}

// Server is node i's server, nil while it is killed.
func (c *Cluster) Server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.srv[i]
}

// Conn connects to the cluster as Exacto's services do (broker.Open: every node's URL,
// reconnect forever with a short wait); it closes when the test ends.
func (c *Cluster) Conn(t testing.TB) *broker.Conn {
	t.Helper()
	conn, err := broker.Open(strings.Join(c.URLs(), ","), broker.Options{}, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn
}

// Ensure declares Exacto's topology (stream.Ensure) through a connection of its own and
// waits until EXACTO_EVENTS is healthy.
func (c *Cluster) Ensure(t testing.TB, o stream.Options) {
	t.Helper()
	conn := c.Conn(t)
	// Right after the meta leader is elected an API request can go unanswered: retry
	// each attempt with its own timeout (Ensure is idempotent).
	var err error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = stream.Ensure(ctx, conn.JS, o)
		cancel()
		if err == nil {
			c.WaitHealthy(t)
			return
		}
		t.Logf("ensure topology (retrying): %v", err)
	}
	t.Fatal(err)
}

// Kill stops node i as abruptly as an in-process server allows: Shutdown closes its
// connections and routes at once, and WaitForShutdown waits until it is gone. Killing a
// killed node does nothing.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	s := c.srv[i]
	c.srv[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Restart starts a killed node again on the same store and ports; it rejoins the
// cluster through its routes and catches up from the stream leaders.
func (c *Cluster) Restart(t testing.TB, i int) {
	t.Helper()
	if c.Server(i) != nil {
		t.Fatalf("restart n%d: it is running", i+1)
	}
	if err := c.start(i); err != nil {
		t.Fatalf("restart n%d: %v", i+1, err)
	}
}

// StreamLeader waits for stream name to have a leader and returns its node.
func (c *Cluster) StreamLeader(t testing.TB, name string) int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if i := c.streamLeader(name); i >= 0 {
			return i
		}
	}
	t.Fatalf("stream %s has no leader after 30s", name)
	return -1
}

func (c *Cluster) streamLeader(name string) int {
	for i := range c.opts {
		if s := c.Server(i); s != nil && s.JetStreamIsStreamLeader(account, name) {
			return i
		}
	}
	return -1
}

func (c *Cluster) waitMetaLeader(t testing.TB) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for i := range c.opts {
			if s := c.Server(i); s != nil && s.JetStreamIsLeader() {
				return
			}
		}
	}
	t.Fatal("JetStream has no meta leader after 30s")
}

// State is stream name's state as node i holds it in its own store (nil when the node
// is down or does not hold the stream).
func (c *Cluster) State(i int, name string) *server.StreamState {
	s := c.Server(i)
	if s == nil {
		return nil
	}
	jsz, err := s.Jsz(&server.JSzOptions{Account: account, Streams: true})
	if err != nil {
		return nil
	}
	for _, a := range jsz.AccountDetails {
		for _, sd := range a.Streams {
			if sd.Name == name {
				st := sd.State
				return &st
			}
		}
	}
	return nil
}

// Current reports whether node i's replica of stream name is current with its leader.
func (c *Cluster) Current(i int, name string) bool {
	s := c.Server(i)
	return s != nil && s.JetStreamIsStreamCurrent(account, name)
}

// WaitHealthy waits until every node is up, JetStream has a meta leader, and
// EXACTO_EVENTS has a leader with every replica current and holding the same messages
// as the leader (a restarted node has caught up).
func (c *Cluster) WaitHealthy(t testing.TB) {
	t.Helper()
	var why string
	for deadline := time.Now().Add(45 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if why = c.unhealthy(stream.Events); why == "" {
			return
		}
	}
	t.Fatalf("cluster not healthy after 45s: %s", why)
}

// unhealthy says why stream name is not healthy, "" when it is.
func (c *Cluster) unhealthy(name string) string {
	meta := false
	for i := range c.opts {
		s := c.Server(i)
		if s == nil {
			return c.Name(i) + " is down"
		}
		meta = meta || s.JetStreamIsLeader()
		if !s.JetStreamIsCurrent() {
			return c.Name(i) + ": meta group not current"
		}
	}
	if !meta {
		return "no meta leader"
	}
	l := c.streamLeader(name)
	if l < 0 {
		return name + " has no leader"
	}
	want := c.State(l, name)
	if want == nil {
		return name + ": no state on its leader " + c.Name(l)
	}
	for i := range c.opts {
		if !c.Current(i, name) {
			return name + ": replica on " + c.Name(i) + " not current"
		}
		if got := c.State(i, name); got == nil || got.Msgs != want.Msgs || got.LastSeq != want.LastSeq {
			return fmt.Sprintf("%s: %s holds %v, the leader %s holds %d msgs up to seq %d", name, c.Name(i), fmtState(got), c.Name(l), want.Msgs, want.LastSeq)
		}
	}
	return ""
}

func fmtState(st *server.StreamState) string {
	if st == nil {
		return "nothing"
	}
	return fmt.Sprintf("%d msgs up to seq %d", st.Msgs, st.LastSeq)
}
