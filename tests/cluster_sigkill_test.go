package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/stream"
)

// The cluster scenario with a real kill: the same 3-node cluster, replicas 3, but each
// node a nats-server process of its own (the stock binary, built from the module we
// embed), configured as deployments/nats/cluster-node.conf (sync_interval: always). The
// EXACTO_EVENTS leader gets SIGKILL mid-load — no shutdown, no flush — and is started
// again on its store. Every event answered 200 is in the stream exactly once, and the
// killed node, back, holds all of them in its own store.
func TestClusterLeaderSIGKILLedUnderLoad(t *testing.T) {
	c := startProcessCluster(t, 3)
	conn, err := broker.Open(strings.Join(c.urls(), ","), broker.Options{}, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	topo := stream.Options{Replicas: 3, DuplicateWindow: 2 * time.Minute, DedupTTL: 7 * 24 * time.Hour}
	var ensureErr error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ensureErr = stream.Ensure(ctx, conn.JS, topo) // idempotent: retried while the meta leader settles
		cancel()
		if ensureErr == nil {
			break
		}
	}
	if ensureErr != nil {
		t.Fatal(ensureErr)
	}
	url := startGateway(t, conn.JS, gatewayTimeout, 3)

	// Longer than the in-process scenario: with no graceful step-down, the followers
	// elect a new leader only after Raft's election timeout (seconds), and the load
	// must still be running when the new leader serves it.
	l := newLoad(url)
	stop := l.run(t, 16, 14*time.Second, 6000, 400)
	time.Sleep(2 * time.Second)
	leader := c.streamLeader(t, conn)
	killedAt := time.Now()
	c.kill(leader)
	next := c.streamLeader(t, conn)
	t.Logf("SIGKILLed the %s leader %s at %v (the gateway was connected to %s); %s leads after %v", stream.Events, c.name(leader),
		killedAt.Sub(l.began).Round(time.Millisecond), conn.NC.ConnectedServerName(), c.name(next), time.Since(killedAt).Round(time.Millisecond))
	time.Sleep(time.Until(killedAt.Add(8 * time.Second)))
	c.start(t, leader)
	stop()
	l.retry(t)

	ids := storedIDs(t, conn.JS)
	l.check(t, "cluster: stream leader SIGKILLed", ids, killedAt)
	// Every node, the killed one included, holds every event in its own store.
	for i := range c.nodes {
		eventually(t, 45*time.Second, c.name(i)+" holds every event", func() bool {
			return c.messages(i, stream.Events) == uint64(len(ids))
		})
	}
}

// processCluster is n nats-server processes routed to each other on loopback.
type processCluster struct {
	bin   string
	nodes []*processNode
}

type processNode struct {
	name, conf        string
	client, monitor   int
	mu                sync.Mutex
	cmd               *exec.Cmd
	exited            chan struct{}
	logs              *syncBuffer
	clientURL, monURL string
}

var (
	natsServerOnce sync.Once
	natsServerBin  string
	natsServerErr  error
)

// natsServer builds the stock nats-server of the version Exacto embeds, once, beside
// exactoBin (TestMain removes that directory).
func natsServer(t *testing.T) string {
	t.Helper()
	natsServerOnce.Do(func() {
		natsServerBin = filepath.Join(filepath.Dir(exactoBin), "nats-server")
		out, err := exec.Command("go", "build", "-o", natsServerBin, "github.com/nats-io/nats-server/v2").CombinedOutput()
		if err != nil {
			natsServerErr = fmt.Errorf("building nats-server: %v\n%s", err, out)
		}
	})
	if natsServerErr != nil {
		t.Fatal(natsServerErr)
	}
	return natsServerBin
}

func startProcessCluster(t *testing.T, n int) *processCluster {
	t.Helper()
	c := &processCluster{bin: natsServer(t)}
	ports := brokertest.FreePorts(t, 3*n)
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i]))
	}
	for i := range n {
		node := &processNode{name: fmt.Sprintf("n%d", i+1), client: ports[i], monitor: ports[2*n+i], logs: &syncBuffer{}}
		node.clientURL = fmt.Sprintf("nats://127.0.0.1:%d", node.client)
		node.monURL = fmt.Sprintf("http://127.0.0.1:%d", node.monitor)
		dir := t.TempDir()
		node.conf = filepath.Join(dir, "node.conf")
		conf := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
max_payload: 8MB
jetstream {
  store_dir: %q
  sync_interval: always
}
cluster {
  name: exacto
  listen: 127.0.0.1:%d
  routes: [%s]
}
`, node.name, node.client, node.monitor, filepath.Join(dir, "jetstream"), ports[n+i], strings.Join(routes, ", "))
		if err := os.WriteFile(node.conf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, node)
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.kill(i)
		}
		if t.Failed() {
			for _, node := range c.nodes {
				t.Logf("%s log:\n%s", node.name, node.logs.String())
			}
		}
	})
	for i := range c.nodes {
		c.start(t, i)
	}
	for i := range c.nodes {
		c.waitHealthz(t, i)
	}
	return c
}

func (c *processCluster) name(i int) string { return c.nodes[i].name }

func (c *processCluster) urls() []string {
	var urls []string
	for _, node := range c.nodes {
		urls = append(urls, node.clientURL)
	}
	return urls
}

// start runs node i's process on its config and store.
func (c *processCluster) start(t *testing.T, i int) {
	t.Helper()
	node := c.nodes[i]
	cmd := exec.Command(c.bin, "-c", node.conf)
	cmd.Stdout, cmd.Stderr = node.logs, node.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	node.mu.Lock()
	node.cmd, node.exited = cmd, exited
	node.mu.Unlock()
}

// kill sends node i SIGKILL and waits until the process is gone.
func (c *processCluster) kill(i int) {
	node := c.nodes[i]
	node.mu.Lock()
	cmd, exited := node.cmd, node.exited
	node.cmd = nil
	node.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// waitHealthz waits until node i answers its monitoring /healthz with 200 (JetStream
// up and current).
func (c *processCluster) waitHealthz(t *testing.T, i int) {
	t.Helper()
	eventually(t, 60*time.Second, c.name(i)+" healthy", func() bool {
		resp, err := http.Get(c.nodes[i].monURL + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// streamLeader is the node leading stream name, as the cluster reports it.
func (c *processCluster) streamLeader(t *testing.T, conn *broker.Conn) int {
	t.Helper()
	leader := -1
	eventually(t, 30*time.Second, "a stream leader", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := conn.JS.Stream(ctx, stream.Events)
		if err != nil {
			return false
		}
		info, err := st.Info(ctx)
		if err != nil || info.Cluster == nil {
			return false
		}
		for i, node := range c.nodes {
			if node.name == info.Cluster.Leader {
				leader = i
			}
		}
		return leader >= 0
	})
	return leader
}

// messages is how many messages node i holds of stream name in its own store (its
// monitoring /jsz), 0 when it cannot say.
func (c *processCluster) messages(i int, name string) uint64 {
	resp, err := http.Get(c.nodes[i].monURL + "/jsz?streams=true")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var jsz struct {
		Accounts []struct {
			Streams []struct {
				Name  string `json:"name"`
				State struct {
					Messages uint64 `json:"messages"`
				} `json:"state"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if json.NewDecoder(resp.Body).Decode(&jsz) != nil {
		return 0
	}
	for _, a := range jsz.Accounts {
		for _, s := range a.Streams {
			if s.Name == name {
				return s.State.Messages
			}
		}
	}
	return 0
}
