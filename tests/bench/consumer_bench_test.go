package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/classify"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/stream"
	classifier "exacto.dev/services/classifier/handler"
)

func publishReplies(b *testing.B, conn *broker.Conn, n int) {
	for i := range n {
		env := envelope.Envelope{SpecVersion: "1.0", ID: envelope.ID("bench", "instantly", fmt.Sprint(i)), Type: envelope.TypeReplyReceived,
			Tenant: "bench", Provider: "instantly", Endpoint: "ep", Time: time.Now(),
			Data: envelope.Data{ProviderType: "reply_received", Contact: &envelope.Contact{Email: fmt.Sprintf("lead%d@example.com", i)},
				Message: &envelope.Message{Text: "Thanks, this looks interesting. Could you send pricing?"}}}
		data, _ := json.Marshal(env)
		msg := &nats.Msg{Subject: env.StreamSubject(), Data: data, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, env.ID)
		if _, err := conn.JS.PublishMsgAsync(msg); err != nil {
			b.Fatal(err)
		}
	}
	<-conn.JS.PublishAsyncComplete()
}

// drain runs the framework with handle over n stored events and times it.
func drain(b *testing.B, conn *broker.Conn, sub stream.Subscription, n int, handle func(*broker.Conn) consumer.Handler) time.Duration {
	var done atomic.Int64
	h := handle(conn)
	nc, err := conn.Dial("bench")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(stopped)
		consumer.Run(ctx, consumer.Options{NC: nc, Sub: sub, Workers: 8, Handle: func(ctx context.Context, ev consumer.Event) error {
			err := h(ctx, ev)
			done.Add(1)
			return err
		}})
	}()
	for done.Load() < int64(n) {
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	cancel()
	<-stopped
	return elapsed
}

// rawDrain is the baseline: a bare JetStream consumer acking each event.
func rawDrain(b *testing.B, conn *broker.Conn, n int) time.Duration {
	ctx := context.Background()
	c, err := conn.JS.CreateOrUpdateConsumer(ctx, stream.Events, jetstream.ConsumerConfig{Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "events.>"})
	if err != nil {
		b.Fatal(err)
	}
	var done atomic.Int64
	start := time.Now()
	cc, err := c.Consume(func(m jetstream.Msg) { m.DoubleAck(ctx); done.Add(1) })
	if err != nil {
		b.Fatal(err)
	}
	for done.Load() < int64(n) {
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	cc.Stop()
	return elapsed
}

// BenchmarkConsumers drains the same stored events through a bare JetStream consumer
// (baseline), the framework with a handler that does nothing, and the classifier
// service (which also publishes each classification), in one process.
func BenchmarkConsumers(b *testing.B) {
	n := max(b.N, 2000)
	conn := brokertest.Start(b, "")
	publishReplies(b, conn, n)
	b.ResetTimer()
	raw := rawDrain(b, conn, n)
	noop := stream.Subscription{Durable: "noop", Subjects: []string{"events.*.*.reply.received"}, AckWait: 30 * time.Second, MaxDeliver: 5, BackoffBase: time.Second, BackoffMax: time.Minute, MaxAckPending: 1000}
	framework := drain(b, conn, noop, n, func(*broker.Conn) consumer.Handler {
		return func(context.Context, consumer.Event) error { return nil }
	})
	cls, _ := stream.SubscriptionOf(stream.Classifier)
	classify := drain(b, conn, cls, n, func(c *broker.Conn) consumer.Handler {
		d, err := consumer.NewDeriver(context.Background(), c.JS)
		if err != nil {
			b.Fatal(err)
		}
		return classifier.New(d, classify.New())
	})
	b.StopTimer()
	rate := func(d time.Duration) float64 { return float64(n) / d.Seconds() }
	b.ReportMetric(rate(raw), "raw_events/s")
	b.ReportMetric(rate(framework), "framework_events/s")
	b.ReportMetric(rate(classify), "classifier_events/s")
	fmt.Fprintf(os.Stderr, "\n%-36s %12s %8s\n", fmt.Sprintf("consumers, n=%d, 8 workers", n), "events/s", "ratio")
	fmt.Fprintf(os.Stderr, "%-36s %12.0f %8.2f\n", "bare JetStream consume+ack (baseline)", rate(raw), 1.0)
	fmt.Fprintf(os.Stderr, "%-36s %12.0f %8.2f\n", "framework, no-op handler", rate(framework), rate(framework)/rate(raw))
	fmt.Fprintf(os.Stderr, "%-36s %12.0f %8.2f\n", "classifier (classify + publish)", rate(classify), rate(classify)/rate(raw))
}
