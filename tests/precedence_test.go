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

	const held = 80 // Instantly's replies: far more than the 16 that make the stopper behind
	for i := range held {
		email := fmt.Sprintf("outage%d@northwind.example", i)
		p.sb.AddInstantlyLead(campaign, email)
		p.post(instantlyEvent("reply_received", email, campaign, fmt.Sprint("out-", i), "Can you send pricing?", time.Now()))
	}
	stopperC, err := p.conn.JS.Consumer(context.Background(), stream.Events, stream.Stopper)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the stopper's workers held with Instantly's replies waiting", func() bool {
		info, err := stopperC.Info(context.Background())
		return err == nil && info.NumAckPending >= 4 && info.NumPending > 16
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
	const cid = 77120
	var ids []string
	for i := range 40 {
		email, msgID, at := fmt.Sprintf("smart%d@globex.example", i), fmt.Sprintf("<outage-%d@mail.globex.example>", i), time.Now()
		lead := p.sb.AddSmartleadReply(cid, email, msgID, "Thanks, not now.", at)
		ids = append(ids, p.postSigned("smartlead", smartleadReply(t, cid, lead, email, msgID, at))...)
	}
	began := time.Now()
	eventually(t, 10*time.Second, "the CRM writer done with Smartlead's replies", func() bool {
		for _, id := range ids {
			if p.status(stream.CRMWriter, id).Status != guard.Completed {
				return false
			}
		}
		return true
	})
	t.Logf("the CRM writer completed %d Smartlead replies in %v with Instantly %s", len(ids), time.Since(began).Round(time.Millisecond), instantly)
}
