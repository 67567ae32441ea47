package console

import (
	"bufio"
	"context"
	"errors"
	"html/template"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/dlq"
	"exacto.dev/pkg/quarantine"
	"exacto.dev/pkg/stream"
)

// window is how many minutes the overview's rates cover; scanCap bounds the events it
// reads for them.
const (
	window  = 15
	scanCap = 100000
)

type rate struct {
	Tenant, Provider, Type string
	PerMinute              [window]int // [0] the oldest minute, [window-1] the current one
	LastMinute, Last5      int
	Total                  int
}

type queue struct {
	Consumer, Durable, Stream string
	Pending, AckPending       uint64
	Redelivered               int
	OldestAge                 time.Duration
	Paused                    bool
	Err                       string
	// Backlog and Age chart the last hour (the overview's, not consumers' replays).
	Backlog, Age template.HTML
}

// Minutes are r's counts per minute, oldest first.
func (r rate) Minutes() []int { return r.PerMinute[:] }

type overviewData struct {
	Rates      []rate
	RateErr    string
	Capped     bool
	Stored     uint64
	Counters   []counter
	CounterErr string
	Queues     []queue
	Breakers   []kv
	DLQ        dlq.Summary
	DLQErr     string
	// Quarantined counts the open quarantined deliveries.
	Quarantined   int
	QuarantineErr string
	SLO           time.Duration
	OverSLO       bool
	// DLQAge charts the oldest open dead letter's age over the hour against the SLO,
	// DLQOpen how many were open.
	DLQAge, DLQOpen template.HTML
}

type counter struct {
	Name, Help string
	Value      float64
	Known      bool
}

type kv struct{ Key, Value string }

func (c *console) overview(w http.ResponseWriter, r *http.Request, u who) {
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	d := overviewData{SLO: c.cfg.DLQ.SLO}
	var err error
	if d.Rates, d.Stored, d.Capped, err = c.rates(ctx); err != nil {
		d.RateErr = err.Error()
	}
	d.Counters, err = c.counters()
	if err != nil {
		d.CounterErr = err.Error()
	}
	d.Queues = c.queues(ctx)
	if c.o.Breakers == nil {
		d.Breakers = []kv{{"every dependency", "unknown"}}
	} else {
		for dep, st := range c.o.Breakers() {
			d.Breakers = append(d.Breakers, kv{dep, st})
		}
		slices.SortFunc(d.Breakers, func(a, b kv) int { return strings.Compare(a.Key, b.Key) })
		if len(d.Breakers) == 0 {
			d.Breakers = []kv{{"no dependency called yet", "closed"}}
		}
	}
	if d.DLQ, err = c.dlq.Summarize(ctx); err != nil {
		d.DLQErr = err.Error()
	}
	d.OverSLO = d.DLQ.Open > 0 && d.SLO > 0 && d.DLQ.Oldest > d.SLO
	// This render is a sample of the hour too (at most one every sampleEvery).
	now := c.o.Now()
	c.hour.add(sampleOf(now, d.Queues, d.DLQ))
	for i := range d.Queues {
		q := &d.Queues[i]
		if sub, ok := stream.SubscriptionOf(q.Consumer); q.Err != "" || !ok || sub.Durable != q.Durable {
			continue // a consumer's replays are charted with it
		}
		name := q.Consumer
		q.Backlog = line(c.hour.series(now, func(s sample) float64 { return s.backlog[name] }), now, 0, "", name+" backlog over the last hour")
		q.Age = line(c.hour.series(now, func(s sample) float64 { return s.oldest[name] }), now, 0, "s", name+" oldest unacknowledged over the last hour")
	}
	d.DLQAge = line(c.hour.series(now, func(s sample) float64 { return s.dlqAgeSe }), now, d.SLO.Seconds(), "s", "oldest open dead letter against the SLO, last hour")
	d.DLQOpen = line(c.hour.series(now, func(s sample) float64 { return s.dlqOpen }), now, 0, "", "open dead letters, last hour")
	if open, err := c.quarantine.List(ctx, quarantine.Filter{}); err != nil {
		d.QuarantineErr = err.Error()
	} else {
		d.Quarantined = len(open)
	}
	c.render(w, http.StatusOK, "overview", u, view{Title: "Overview", Nav: "overview", Refresh: 10, Data: d})
}

// rates counts the events stored in the last window minutes by tenant, provider and
// type, minute by minute (by the time JetStream stored them).
func (c *console) rates(ctx context.Context) ([]rate, uint64, bool, error) {
	st, err := c.js.Stream(ctx, stream.Events)
	if err != nil {
		return nil, 0, false, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, 0, false, err
	}
	now := c.o.Now()
	from := now.Truncate(time.Minute).Add(-(window - 1) * time.Minute)
	if info.State.Msgs == 0 || info.State.LastTime.Before(from) {
		return nil, info.State.Msgs, false, nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &from, HeadersOnly: true})
	if err != nil {
		return nil, 0, false, err
	}
	byKey := map[string]*rate{}
	seen, capped := 0, false
	for !capped {
		ci, err := cons.Info(ctx)
		if err != nil {
			return nil, 0, false, err
		}
		if ci.NumPending == 0 {
			break
		}
		batch, err := cons.FetchNoWait(1000)
		if err != nil {
			return nil, 0, false, err
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			md, err := msg.Metadata()
			if err != nil {
				return nil, 0, false, err
			}
			if md.Sequence.Stream > info.State.LastSeq {
				capped = true // newer than the snapshot: done
				continue
			}
			if seen++; seen >= scanCap {
				capped = true
			}
			parts := strings.SplitN(msg.Subject(), ".", 4)
			if len(parts) < 4 {
				continue
			}
			i := int(md.Timestamp.Sub(from) / time.Minute)
			if i < 0 || i >= window {
				continue
			}
			key := parts[1] + "\x00" + parts[2] + "\x00" + parts[3]
			rt := byKey[key]
			if rt == nil {
				rt = &rate{Tenant: parts[1], Provider: parts[2], Type: parts[3]}
				byKey[key] = rt
			}
			rt.PerMinute[i]++
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, 0, false, err
		}
		if n == 0 {
			break
		}
	}
	out := make([]rate, 0, len(byKey))
	for _, rt := range byKey {
		for i, n := range rt.PerMinute {
			rt.Total += n
			if i >= window-5 {
				rt.Last5 += n
			}
		}
		rt.LastMinute = rt.PerMinute[window-1]
		out = append(out, *rt)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Total != out[j].Total {
			return out[i].Total > out[j].Total
		}
		return out[i].Tenant+out[i].Provider+out[i].Type < out[j].Tenant+out[j].Provider+out[j].Type
	})
	return out, info.State.Msgs, seen >= scanCap, nil
}

// gatewayCounters are the gateway's counters the overview shows, by their
// Prometheus family name (without the _total suffix the exporter adds).
var gatewayCounters = []struct{ name, help string }{
	{"exacto_gateway_events_received", "events received in verified deliveries (duplicates included)"},
	{"exacto_gateway_duplicates", "duplicates caught: answered 200, not stored again"},
	{"exacto_gateway_invalid_signatures", "deliveries with an invalid signature, secret or timestamp"},
	{"exacto_gateway_rejections", "deliveries refused, every reason"},
}

// counters reads the gateway's counters from the admin /metrics handler in process
// (totals since the process started; every label summed).
func (c *console) counters() ([]counter, error) {
	out := make([]counter, len(gatewayCounters))
	for i, g := range gatewayCounters {
		out[i] = counter{Name: g.name, Help: g.help}
	}
	if c.o.Metrics == nil {
		return out, errors.New("no metrics handler given to the console")
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "text/plain")
	c.o.Metrics.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return out, errors.New("/metrics answered " + strconv.Itoa(rec.Code))
	}
	sc := bufio.NewScanner(rec.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "exacto_gateway_") {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		if i := strings.IndexByte(name, '{'); i >= 0 {
			// Labels may hold spaces: the value is after the closing brace.
			end := strings.LastIndexByte(line, '}')
			if end < 0 {
				continue
			}
			name, rest = line[:i], strings.TrimSpace(line[end+1:])
		}
		name = strings.TrimSuffix(name, "_total")
		val, _, _ := strings.Cut(strings.TrimSpace(rest), " ")
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		for i := range out {
			if out[i].Name == name {
				out[i].Value += v
				out[i].Known = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return out, err
	}
	gateway := false
	for _, c := range out {
		gateway = gateway || c.Known
	}
	if !gateway {
		// No gateway series at all: the gateway runs in another process (the console
		// runs in the reconciler of a split deployment), or has had no delivery yet.
		// Either way a 0 here would be a guess.
		return out, errNoGateway
	}
	for i := range out { // the gateway runs here: a counter never incremented is zero
		out[i].Known = true
	}
	return out, nil
}

// errNoGateway explains the gateway counters shown as not in this process.
var errNoGateway = errors.New("this process's /metrics has no gateway counter: the gateway runs in another process " +
	"(a split deployment: read them on its /metrics or in Prometheus), or has had no delivery since it started")

// queues reads every durable consumer's backlog: events waiting, delivered but not
// acknowledged, and the age of the oldest not yet acknowledged.
func (c *console) queues(ctx context.Context) []queue {
	var out []queue
	for _, sub := range stream.Subscriptions {
		for _, s := range []stream.Subscription{sub, sub.Replays()} {
			q := queue{Consumer: s.Name(), Durable: s.Durable, Stream: s.StreamName()}
			cons, err := c.js.Consumer(ctx, s.StreamName(), s.Durable)
			if err != nil {
				if errors.Is(err, jetstream.ErrConsumerNotFound) {
					if s.Durable != sub.Durable {
						continue // no replay ever: not worth a row
					}
					q.Err = "not bound yet"
				} else {
					q.Err = err.Error()
				}
				out = append(out, q)
				continue
			}
			ci, err := cons.Info(ctx)
			if err != nil {
				q.Err = err.Error()
				out = append(out, q)
				continue
			}
			q.Pending, q.AckPending, q.Redelivered, q.Paused = ci.NumPending, uint64(ci.NumAckPending), ci.NumRedelivered, ci.Paused
			if q.Pending+q.AckPending > 0 {
				q.OldestAge = c.oldest(ctx, s, ci.AckFloor.Stream+1)
			}
			out = append(out, q)
		}
	}
	return out
}

// oldest is the age of the first message at or after seq on s's subjects.
func (c *console) oldest(ctx context.Context, s stream.Subscription, seq uint64) time.Duration {
	st, err := c.js.Stream(ctx, s.StreamName())
	if err != nil {
		return 0
	}
	var first time.Time
	for _, subj := range s.Subjects {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if err != nil {
			continue
		}
		if first.IsZero() || m.Time.Before(first) {
			first = m.Time
		}
	}
	if first.IsZero() {
		return 0
	}
	return c.o.Now().Sub(first)
}
