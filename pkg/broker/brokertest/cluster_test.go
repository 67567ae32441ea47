package brokertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/stream"
)

// A 3-node cluster takes Exacto's topology at replicas 3, elects a new EXACTO_EVENTS
// leader when the old one is killed, and the killed node catches up after a restart.
func TestClusterKillAndRestartLeader(t *testing.T) {
	c := StartCluster(t, 3)
	c.Ensure(t, stream.Options{Replicas: 3, DuplicateWindow: 2 * time.Minute, DedupTTL: 7 * 24 * time.Hour})
	conn := c.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	info, err := conn.JS.Stream(ctx, stream.Events)
	if err != nil {
		t.Fatal(err)
	}
	if r := info.CachedInfo().Config.Replicas; r != 3 {
		t.Fatalf("%s has %d replicas, want 3", stream.Events, r)
	}
	publish := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			msg := &nats.Msg{Subject: "events.t.p.x", Data: []byte("x"), Header: nats.Header{}}
			msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprint("id-", i))
			for attempt := 0; ; attempt++ {
				// Each attempt has its own timeout: a publish sent to a leader that dies is
				// never answered.
				actx, acancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := conn.JS.PublishMsg(actx, msg, jetstream.WithExpectStream(stream.Events))
				acancel()
				if err == nil {
					break
				}
				if attempt == 20 {
					t.Fatalf("publish %d: %v", i, err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	publish(0, 50)
	leader := c.StreamLeader(t, stream.Events)
	c.Kill(leader)
	publish(50, 100) // retried until a new leader takes them
	if l := c.StreamLeader(t, stream.Events); l == leader {
		t.Fatalf("killed n%d is still the leader", leader+1)
	}
	c.Restart(t, leader)
	c.WaitHealthy(t)
	if st := c.State(leader, stream.Events); st == nil || st.Msgs != 100 {
		t.Fatalf("restarted n%d holds %s, want 100 msgs", leader+1, fmtState(st))
	}
	if n := Count(t, conn, stream.Events); n != 100 {
		t.Fatalf("stream holds %d, want 100", n)
	}
}
