package bench

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/stream"
)

const (
	e2eCampaign = "3c6e0b8a-9c0b-4f1e-8b2a-7d5e4f3a2b1c"
	// The bare path's subjects: types no Exacto subscription takes.
	bareReceived = "events.bench.bare.bare.received"
	bareStopped  = "events.bench.bare.bare.stopped"
	// receivedHeader carries the bare handler's receipt time (Unix ns).
	receivedHeader = "Bench-Received"
)

func e2eLead(i int) string { return fmt.Sprintf("lead%06d@bench.example", i) }

// replyBody is an Instantly reply_received webhook of lead i, unique by its email_id.
func replyBody(i int, at time.Time) []byte {
	b, _ := json.Marshal(map[string]any{
		"timestamp": at.UTC().Format("2006-01-02T15:04:05.000Z"), "event_type": "reply_received",
		"workspace": "9f1c2d3e-4b5a-6c7d-8e9f-0a1b2c3d4e5f", "campaign_id": e2eCampaign, "campaign_name": "Founders Q4",
		"lead_email": e2eLead(i), "email_account": "alex@getoutbound.example", "step": 2, "email_id": fmt.Sprintf("em-%06d", i),
		"reply_subject": "Re: onboarding", "reply_text": "Thanks, this looks interesting. Could you send pricing?",
	})
	return b
}

// openLoad is what an open-loop run of requests did.
type openLoad struct {
	sent     int
	took     time.Duration // first to last request sent
	late     time.Duration // the most a request was sent after its slot
	failed   int64
	p50, p99 time.Duration // request to answer
}

// openLoop sends each body once to url at rate per second, each on its own schedule
// whatever the answers to the earlier ones (open loop), and waits for every answer.
// Connections are bounded (512) and so is each request (30 s).
func openLoop(url string, bodies [][]byte, header http.Header, rate int) openLoad {
	tr := &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 512}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	defer tr.CloseIdleConnections()
	lat := make([]time.Duration, len(bodies))
	var failed atomic.Int64
	var wg sync.WaitGroup
	interval := time.Second / time.Duration(rate)
	r := openLoad{sent: len(bodies)}
	start := time.Now()
	for i, body := range bodies {
		slot := start.Add(time.Duration(i) * interval)
		if d := time.Until(slot); d > 0 {
			time.Sleep(d)
		} else {
			r.late = max(r.late, -d)
		}
		wg.Go(func() {
			status, took, err := send(client, url, body, header)
			if err != nil {
				failed.Add(1)
				return
			}
			if status != 200 {
				failed.Add(1)
			}
			lat[i] = took
		})
	}
	r.took = time.Since(start)
	wg.Wait()
	r.failed = failed.Load()
	r.p50, r.p99 = percentile(lat, 50), percentile(lat, 99)
	return r
}

// e2eRun is one path measured: the load, then each event from receipt to its derived
// event stored.
type e2eRun struct {
	load openLoad
	lat  []time.Duration // receipt to derived event stored, per event
	// lat split at the event stored: receipt to stored (the gateway's part) and stored
	// to the derived event stored (the consumer's).
	toStored, fromStored []time.Duration
	stopped              int
	first, last          time.Time // first receipt, last derived event stored
	backlogEnd           uint64    // events stored and not yet acked by the consumer when sending ended
	backlogPeak          uint64
	drained              time.Duration // from the end of sending until the last derived event
}

func (r e2eRun) rate() float64 { return float64(r.stopped) / r.last.Sub(r.first).Seconds() }

// backlog is what consumer durable has not acked yet: stored and not delivered, or
// delivered and not acked.
func backlog(ctx context.Context, js jetstream.JetStream, durable string) uint64 {
	c, err := js.Consumer(ctx, stream.Events, durable)
	if err != nil {
		return 0
	}
	info, err := c.Info(ctx)
	if err != nil {
		return 0
	}
	return info.NumPending + uint64(info.NumAckPending)
}

// countSubject is how many messages of subject EXACTO_EVENTS holds.
func countSubject(ctx context.Context, js jetstream.JetStream, subject string) uint64 {
	s, err := js.Stream(ctx, stream.Events)
	if err != nil {
		return 0
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0
	}
	return info.State.Subjects[subject]
}

// e2eMeasure runs the open-loop load against url, watching the consumer's backlog, then
// waits (at most drainFor) until every derived event is stored on derivedSubject.
func e2eMeasure(js jetstream.JetStream, url string, header http.Header, bodies [][]byte, rate int,
	durable, derivedSubject string, drainFor time.Duration) e2eRun {
	ctx := context.Background()
	var r e2eRun
	var peak atomic.Uint64
	watching := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-watching:
				return
			case <-t.C:
				if n := backlog(ctx, js, durable); n > peak.Load() {
					peak.Store(n)
				}
			}
		}
	}()
	r.load = openLoop(url, bodies, header, rate)
	sendEnd := time.Now()
	r.backlogEnd = backlog(ctx, js, durable)
	close(watching)
	<-watched
	r.backlogPeak = max(peak.Load(), r.backlogEnd)
	want := uint64(len(bodies)) - uint64(r.load.failed)
	for deadline := time.Now().Add(drainFor); countSubject(ctx, js, derivedSubject) < want && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	r.drained = time.Since(sendEnd)
	return r
}

// readAll calls each for every message on filters of EXACTO_EVENTS, in order, until n
// are read (at most a minute).
func readAll(b *testing.B, js jetstream.JetStream, n int, each func(jetstream.Msg), filters ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := js.OrderedConsumer(ctx, stream.Events, jetstream.OrderedConsumerConfig{FilterSubjects: filters})
	if err != nil {
		b.Fatal(err)
	}
	for got := 0; got < n; {
		batch, err := c.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		for m := range batch.Messages() {
			each(m)
			got++
		}
		if ctx.Err() != nil {
			b.Fatalf("read %d of %d messages in a minute", got, n)
		}
	}
}

// runExacto is the measured path: `exacto up` as users run it (startUp: the built-in
// demo config, an embedded server fsyncing as fsync says, every consumer — the index
// writer, classifier, stopper, crmwriter, suppressor, projector, reconciler — and the
// platform sandbox in the process), each reply's lead enrolled and its reply held at
// the sandbox first, so every consumer does its real work. Receipt is the envelope's
// receivedat (the gateway's clock once the delivery is verified and parsed); stopped is
// the JetStream timestamp of the stored sequence.stopped: one process, one clock.
// platformLatency, when not 0, is how long the sandbox's Instantly takes to answer
// each call (its latency fault), as a real platform's API does.
func runExacto(b *testing.B, fsync string, n, rate int, drainFor, platformLatency time.Duration) e2eRun {
	u := startUp(b, []string{"EXACTO_NATS_SYNC=" + fsync})
	defer u.stop()
	bodies := fsyncBodies(b, u.addr(3), 0, n)
	if platformLatency > 0 && !sandboxControl(b, u.addr(3), sandbox.ControlFaults,
		sandbox.ControlFaultRequest{Route: "instantly", Fault: sandbox.ControlFault{Latency: platformLatency.String()}}) {
		b.FailNow()
	}
	js := u.js(b)
	url := "http://" + u.addr(0) + "/hooks/instantly/demo-instantly-token"
	header := http.Header{"Content-Type": {"application/json"}, "X-Exacto-Secret": {"demo-instantly-secret"}}
	stoppedSubject := stream.EventSubject("demo", "instantly", envelope.TypeSequenceStopped)
	r := e2eMeasure(js, url, header, bodies, rate, stream.Stopper, stoppedSubject, drainFor)

	ctx := context.Background()
	received, stored := map[string]time.Time{}, map[string]time.Time{}
	replySubject := stream.EventSubject("demo", "instantly", envelope.TypeReplyReceived)
	replies := int(countSubject(ctx, js, replySubject))
	stops := int(countSubject(ctx, js, stoppedSubject))
	readAll(b, js, replies+stops, func(m jetstream.Msg) {
		var env envelope.Envelope
		if err := json.Unmarshal(m.Data(), &env); err != nil {
			b.Fatal(err)
		}
		md, err := m.Metadata()
		if err != nil {
			b.Fatal(err)
		}
		switch env.Type {
		case envelope.TypeReplyReceived:
			received[env.ID], stored[env.ID] = env.ReceivedAt, md.Timestamp
			if r.first.IsZero() || env.ReceivedAt.Before(r.first) {
				r.first = env.ReceivedAt
			}
		case envelope.TypeSequenceStopped:
			from, ok := received[env.Data.Cause]
			if !ok {
				b.Fatalf("sequence.stopped %s: cause %s not read before it", env.ID, env.Data.Cause)
			}
			r.lat = append(r.lat, md.Timestamp.Sub(from))
			r.toStored = append(r.toStored, stored[env.Data.Cause].Sub(from))
			r.fromStored = append(r.fromStored, md.Timestamp.Sub(stored[env.Data.Cause]))
			r.stopped++
			if md.Timestamp.After(r.last) {
				r.last = md.Timestamp
			}
		}
	}, replySubject, stoppedSubject)
	return r
}

// bareStamped is the baseline's gateway: read the body, publish it with a Nats-Msg-Id
// and the receipt time, wait for the PubAck, answer 200.
func bareStamped(js jetstream.JetStream) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		received := time.Now()
		sum := sha256.Sum256(body)
		msg := &nats.Msg{Subject: bareReceived, Data: body, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, hex.EncodeToString(sum[:16]))
		msg.Header.Set(receivedHeader, strconv.FormatInt(received.UnixNano(), 10))
		if _, err := js.PublishMsg(r.Context(), msg); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if err := stream.Durable(r.Context(), js, stream.Events); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(200)
	})
}

// bareConsumer is the baseline's stopper: a durable consumer whose two workers publish
// one derived event per event, wait for its PubAck (and its sync, where the process
// syncs the store), and double-ack: no guard, no lease, no platform call. It runs until
// ctx ends.
func bareConsumer(ctx context.Context, b *testing.B, js jetstream.JetStream) (stop func()) {
	c, err := js.CreateOrUpdateConsumer(ctx, stream.Events, jetstream.ConsumerConfig{Durable: "bare", AckPolicy: jetstream.AckExplicitPolicy,
		FilterSubject: bareReceived, AckWait: 30 * time.Second, MaxAckPending: 1000})
	if err != nil {
		b.Fatal(err)
	}
	work := make(chan jetstream.Msg)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for m := range work {
				msg := &nats.Msg{Subject: bareStopped, Data: m.Data(), Header: nats.Header{}}
				msg.Header.Set(jetstream.MsgIDHeader, "stopped-"+m.Headers().Get(jetstream.MsgIDHeader))
				msg.Header.Set(receivedHeader, m.Headers().Get(receivedHeader))
				if _, err := js.PublishMsg(ctx, msg); err != nil {
					m.Nak()
					continue
				}
				if err := stream.Durable(ctx, js, stream.Events); err != nil {
					m.Nak()
					continue
				}
				m.DoubleAck(ctx)
			}
		})
	}
	cc, err := c.Consume(func(m jetstream.Msg) { work <- m })
	if err != nil {
		b.Fatal(err)
	}
	return func() { cc.Stop(); <-cc.Closed(); close(work); wg.Wait() }
}

// runBare is the baseline: the same load on the same kind of server through the bare
// handler and the bare consumer.
func runBare(b *testing.B, fsync string, n, rate int, drainFor time.Duration) e2eRun {
	conn := startBroker(b, fsync)
	ctx := context.Background()
	stop := bareConsumer(ctx, b, conn.JS)
	defer stop()
	srv := httptest.NewServer(bareStamped(conn.JS))
	defer srv.Close()
	at := time.Now()
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = replyBody(i, at.Add(time.Duration(i)*time.Millisecond))
	}
	r := e2eMeasure(conn.JS, srv.URL, http.Header{"Content-Type": {"application/json"}}, bodies, rate, "bare", bareStopped, drainFor)
	received, stops := int(countSubject(ctx, conn.JS, bareReceived)), int(countSubject(ctx, conn.JS, bareStopped))
	stored := map[string]time.Time{} // by Nats-Msg-Id
	readAll(b, conn.JS, received+stops, func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			b.Fatal(err)
		}
		id := m.Headers().Get(jetstream.MsgIDHeader)
		if m.Subject() == bareReceived {
			stored[id] = md.Timestamp
			return
		}
		ns, err := strconv.ParseInt(m.Headers().Get(receivedHeader), 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		from, at := time.Unix(0, ns), stored[strings.TrimPrefix(id, "stopped-")]
		if at.IsZero() {
			b.Fatalf("%s: its event not read before it", id)
		}
		if r.first.IsZero() || from.Before(r.first) {
			r.first = from
		}
		r.lat = append(r.lat, md.Timestamp.Sub(from))
		r.toStored, r.fromStored = append(r.toStored, at.Sub(from)), append(r.fromStored, md.Timestamp.Sub(at))
		r.stopped++
		if md.Timestamp.After(r.last) {
			r.last = md.Timestamp
		}
	}, bareReceived, bareStopped)
	return r
}

// BenchmarkEndToEnd offers Instantly reply webhooks open-loop at EXACTO_BENCH_E2E_RATE
// per second (default 500) for EXACTO_BENCH_E2E_EVENTS events (default 15000: 30 s) to
// `exacto up` running every consumer (runExacto), each reply's lead enrolled in its
// sandbox first, and measures each from the gateway's receipt to its sequence.stopped
// stored, and the stopper's backlog; then the same load through a bare publish handler
// and a bare consumer that publishes a derived event (baseline; each publish made
// durable as the store's sync mode says), on a server of its
// own. If the stopper cannot keep up, the rows say so (throughput, backlog) rather than
// the rate being lowered. The same again at a light load, EXACTO_BENCH_E2E_LOW_RATE per
// second (default 50) for EXACTO_BENCH_E2E_LOW_EVENTS (default 500), gives the latency
// of an event that finds no queue. Every server fsyncs before every acknowledgement
// unless EXACTO_BENCH_E2E_SYNC says otherwise (a flush interval such as 2m). Every
// event must be stopped within EXACTO_BENCH_E2E_DRAIN seconds of the end of its
// sending (default 180).
func BenchmarkEndToEnd(b *testing.B) {
	drainFor := time.Duration(envInt("EXACTO_BENCH_E2E_DRAIN", 180)) * time.Second
	fsync := cmp.Or(os.Getenv("EXACTO_BENCH_E2E_SYNC"), "always")
	for i, load := range []struct{ n, rate int }{
		{envInt("EXACTO_BENCH_E2E_EVENTS", 15000), envInt("EXACTO_BENCH_E2E_RATE", 500)},
		{envInt("EXACTO_BENCH_E2E_LOW_EVENTS", 500), envInt("EXACTO_BENCH_E2E_LOW_RATE", 50)},
	} {
		n, rate := load.n, load.rate
		ex := runExacto(b, fsync, n, rate, drainFor, 0)
		base := runBare(b, fsync, n, rate, drainFor)
		sent := func(r e2eRun) string {
			return fmt.Sprintf("%.0f/s (at most %v late)", float64(r.load.sent)/r.load.took.Seconds(), r.load.late.Round(time.Millisecond))
		}
		latencyRow("e2e", fmt.Sprintf("receipt to sequence.stopped p50 at %d/s", rate), percentile(ex.lat, 50), percentile(base.lat, 50),
			fmt.Sprintf("%d replies offered at %d/s, sync %s; baseline: bare publish + bare consumer publishing a derived event", n, rate, fsync))
		latencyRow("e2e", fmt.Sprintf("receipt to sequence.stopped p99 at %d/s", rate), percentile(ex.lat, 99), percentile(base.lat, 99),
			fmt.Sprintf("target <= 10; the stopper's backlog when sending ended: exacto %d (peak %d; target <= 500), bare %d (peak %d); sent at: exacto %s, bare %s",
				ex.backlogEnd, ex.backlogPeak, base.backlogEnd, base.backlogPeak, sent(ex), sent(base)))
		if i == 0 {
			rateRow("e2e", fmt.Sprintf("sequence.stopped/s at %d/s offered", rate), ex.rate(), base.rate(),
				fmt.Sprintf("first receipt to last stop; the last stop %v after sending ended (bare %v)",
					ex.drained.Round(100*time.Millisecond), base.drained.Round(100*time.Millisecond)))
			split := "the row above split at the reply stored (its JetStream timestamp; the bare path's at its event stored)"
			latencyRow("e2e", fmt.Sprintf("receipt to stored p99 at %d/s", rate), percentile(ex.toStored, 99), percentile(base.toStored, 99),
				fmt.Sprintf("%s; p50 %s vs %s", split, ms(percentile(ex.toStored, 50)), ms(percentile(base.toStored, 50))))
			latencyRow("e2e", fmt.Sprintf("stored to sequence.stopped p99 at %d/s", rate), percentile(ex.fromStored, 99), percentile(base.fromStored, 99),
				fmt.Sprintf("%s; p50 %s vs %s", split, ms(percentile(ex.fromStored, 50)), ms(percentile(base.fromStored, 50))))
			latencyRow("e2e", fmt.Sprintf("webhook answered p99 at %d/s", rate), ex.load.p99, base.load.p99,
				fmt.Sprintf("p50 %s vs %s", ms(ex.load.p50), ms(base.load.p50)))
			b.ReportMetric(float64(percentile(ex.lat, 99).Microseconds())/1000, "exacto_p99_ms")
			b.ReportMetric(float64(percentile(base.lat, 99).Microseconds())/1000, "bare_p99_ms")
		}
		for name, r := range map[string]e2eRun{"exacto": ex, "bare": base} {
			if r.load.failed > 0 {
				b.Errorf("%s at %d/s: %d of %d webhooks not answered 200", name, rate, r.load.failed, n)
			}
			if r.stopped != n {
				b.Errorf("%s at %d/s: %d of %d events derived within %v of the end of sending", name, rate, r.stopped, n, drainFor)
			}
		}
	}
	// A real platform answers in tens of milliseconds, not the sandbox's fraction of one:
	// a stop's chain is then mostly its calls, and what the p99 adds to the p50 is time
	// an event waited for a worker (one queue per consumer, docs/performance.md).
	n, rate := envInt("EXACTO_BENCH_E2E_SLOW_EVENTS", 2000), envInt("EXACTO_BENCH_E2E_SLOW_RATE", 50)
	latency := time.Duration(envInt("EXACTO_BENCH_E2E_SLOW_MS", 50)) * time.Millisecond
	slow := runExacto(b, fsync, n, rate, drainFor, latency)
	latencyRow("e2e", fmt.Sprintf("receipt to sequence.stopped p99 at %d/s, Instantly answering in %v", rate, latency),
		percentile(slow.lat, 99), percentile(slow.lat, 50),
		fmt.Sprintf("%d replies offered at %d/s, each of Instantly's calls held %v by the sandbox; baseline: the same run's p50 (the chain's own length); the stopper's backlog peak %d",
			n, rate, latency, slow.backlogPeak))
	if slow.load.failed > 0 || slow.stopped != n {
		b.Errorf("Instantly answering in %v: %d of %d webhooks not answered 200, %d stopped", latency, slow.load.failed, n, slow.stopped)
	}
}
