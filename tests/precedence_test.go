package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/stream"
	crmwriter "exacto.dev/services/crmwriter/handler"
	stopper "exacto.dev/services/stopper/handler"
)

// An Instantly outage holds the stopper: its workers wait at Instantly's breaker while
// Instantly's replies pile up behind them. It must hold nothing else. The CRM writer
// goes on writing the HubSpot notes of Smartlead's replies at once, where it used to
// take one event per worker every 5 s for as long as the outage lasted, because the
// stopper counted as behind (pkg/consumer/precedence.go).
func TestAnInstantlyOutageHoldsTheCRMWriterNotBack(t *testing.T) {
	t.Parallel()
	crmWriterBesideAHeldStopper(t, sandbox.Fault{DownFor: 5 * time.Minute}, "down")
}

// So does an Instantly that answers, but each call a second later: the stopper's
// workers wait for its answers, not on the cores.
func TestASlowInstantlyHoldsTheCRMWriterNotBack(t *testing.T) {
	t.Parallel()
	crmWriterBesideAHeldStopper(t, sandbox.Fault{Latency: time.Second}, "answering in a second")
}

// crmWriterBesideAHeldStopper runs the stopper (four workers) and the CRM writer with
// Instantly's routes faulted, holds the stopper with Instantly's replies, and then
// wants the CRM writer done with Smartlead's replies at once.
func crmWriterBesideAHeldStopper(t *testing.T, fault sandbox.Fault, instantly string) {
	p := startPipeline(t)
	p.env.Config.Consumers = map[string]config.ConsumerTuning{stream.Stopper: {Workers: 4}}
	for _, r := range sandbox.RoutesOf("instantly") {
		p.sb.SetFault(r, fault)
	}
	p.start(stream.Stopper, stopper.Run)
	p.start(stream.CRMWriter, crmwriter.Run)

	p.postInstantlyReplies(80, "outage") // far more than the 16 that make the stopper behind
	stopperC, err := p.conn.JS.Consumer(context.Background(), stream.Events, stream.Stopper)
	if err != nil {
		t.Fatal(err)
	}
	// Held: in its workers' hands (a slow Instantly; a down one's wait at the breaker,
	// off the workers), and more waiting than the 16 that make it behind.
	eventually(t, time.Minute, "the stopper holding Instantly's replies", func() bool {
		info, err := stopperC.Info(context.Background())
		return err == nil && info.NumAckPending >= 4 && uint64(info.NumAckPending)+info.NumPending > 16
	})
	if fault.Latency > 0 {
		// The CRM writer confirms Instantly's replies at Instantly too, a second each:
		// once it is done with them, what it does next is Smartlead's alone. (Deferred,
		// its eight workers would take minutes.)
		crmC, err := p.conn.JS.Consumer(context.Background(), stream.Events, stream.CRMWriter)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "the CRM writer done with Instantly's replies", func() bool {
			info, err := crmC.Info(context.Background())
			return err == nil && info.NumPending == 0 && info.NumAckPending == 0
		})
	}
	// The fault goes on: long enough for precedence to have read it (a second of its
	// workers held by Instantly, and a second more).
	time.Sleep(2500 * time.Millisecond)

	// Deferred, the CRM writer's eight workers would take an event each every 5 s: 40
	// replies in 20 s and more.
	ids := p.postSmartleadReplies(77120, 40, "outage")
	began := time.Now()
	eventually(t, 10*time.Second, "the CRM writer done with Smartlead's replies", p.completedBy(stream.CRMWriter, ids))
	t.Logf("the CRM writer completed %d Smartlead replies in %v with Instantly %s", len(ids), time.Since(began).Round(time.Millisecond), instantly)
}

// An Instantly outage must not hold up a Smartlead reply's stop: the Instantly replies
// ahead of it wait for Instantly off the stopper's workers (consumer's park), where
// each used to hold a worker for half the ack wait (measured: two Smartlead stops
// 29.5 s late behind twelve Instantly replies, four workers). Once Instantly is back,
// every one of its replies is stopped.
func TestAnInstantlyOutageHoldsNoSmartleadStop(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	p.env.Config.Consumers = map[string]config.ConsumerTuning{stream.Stopper: {Workers: 4}}
	for _, r := range sandbox.RoutesOf("instantly") {
		p.sb.SetFault(r, sandbox.Fault{DownFor: 10 * time.Minute})
	}
	p.start(stream.Stopper, stopper.Run)
	held := p.postInstantlyReplies(12, "parked")
	time.Sleep(500 * time.Millisecond) // Instantly's replies first in the stream, its breaker open
	ids := p.postSmartleadReplies(77121, 2, "parked")
	began := time.Now()
	eventually(t, 10*time.Second, "Smartlead's replies stopped with Instantly down", p.completedBy(stream.Stopper, ids))
	t.Logf("the stopper completed %d Smartlead replies %v after their post, behind %d Instantly replies", len(ids), time.Since(began).Round(time.Millisecond), len(held))
	for _, id := range held {
		if st := p.status(stream.Stopper, id).Status; st == guard.Completed {
			t.Fatalf("Instantly reply %s completed while Instantly was down", id)
		}
	}
	p.sb.ClearFaults()
	eventually(t, 2*time.Minute, "every Instantly reply stopped once Instantly is back", p.completedBy(stream.Stopper, held))
}

// postInstantlyReplies posts n Instantly replies to campaign, each of a lead of its own
// named after prefix, the sandbox holding each lead first, and returns their event ids.
func (p *pipeline) postInstantlyReplies(n int, prefix string) []string {
	var ids []string
	for i := range n {
		email := fmt.Sprintf("%s%d@northwind.example", prefix, i)
		p.sb.AddInstantlyLead(campaign, email)
		ids = append(ids, p.post(instantlyEvent("reply_received", email, campaign, fmt.Sprintf("%s-%d", prefix, i), "Can you send pricing?", time.Now()))...)
	}
	return ids
}

// postSmartleadReplies posts n signed Smartlead replies to campaign cid, each of a lead
// of its own named after prefix, the sandbox holding each first, and returns their
// event ids.
func (p *pipeline) postSmartleadReplies(cid int64, n int, prefix string) []string {
	var ids []string
	for i := range n {
		email, msgID, at := fmt.Sprintf("%s-smart%d@globex.example", prefix, i), fmt.Sprintf("<%s-%d@mail.globex.example>", prefix, i), time.Now()
		lead := p.sb.AddSmartleadReply(cid, email, msgID, "Thanks, not now.", at)
		ids = append(ids, p.postSigned("smartlead", smartleadReply(p.t, cid, lead, email, msgID, at))...)
	}
	return ids
}

// completedBy reports whether consumer has completed every event of ids.
func (p *pipeline) completedBy(consumer string, ids []string) func() bool {
	return func() bool {
		for _, id := range ids {
			if p.status(consumer, id).Status != guard.Completed {
				return false
			}
		}
		return true
	}
}
