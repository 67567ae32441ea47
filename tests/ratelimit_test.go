package tests

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/platform/accounts"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/platform/smartlead"
	smartleadhooks "exacto.dev/pkg/providers/smartlead"
	"exacto.dev/pkg/ratelimit"
	"exacto.dev/pkg/service"
	"exacto.dev/pkg/stream"
	stopper "exacto.dev/services/stopper/handler"
)

// timeScale runs Smartlead's documented limits this many times faster: an hour is 10 s,
// a minute 167 ms, 2 s 5.6 ms.
const timeScale = 360

// clientMargin widens each window the clients pace to, beyond the pacer's own headroom
// (10%, 200 ms of Smartlead's 2 s): on a faster clock that headroom is 0.6 ms, less
// than a loaded 2-core machine may delay a request between its turn and its arrival,
// which no pacer sees (25 ms and 60 ms were not always enough on a loaded machine).
// Wider windows cost little time here: the hourly limit (1,000 per 10 s scaled) paces
// the run, not the 2 s or minute ones. The sandbox enforces the scaled limits exactly.
const clientMargin = 100 * time.Millisecond

// smartleadRoutes are every Smartlead route of the sandbox.
var smartleadRoutes = []string{sandbox.RouteSmartleadPause, sandbox.RouteSmartleadUnsubscribe, sandbox.RouteSmartleadUnsubscribeAll,
	sandbox.RouteSmartleadLeadByEmail, sandbox.RouteSmartleadCampaignLeads, sandbox.RouteSmartleadHistory, sandbox.RouteSmartleadCampaignList}

// 1,000 Smartlead replies arrive at once, handled by two replicas of the stopper, each
// with its own clients, pacing one API key through the shared limit bucket. The sandbox
// enforces Smartlead's documented limits — 10 requests per 2 s, 60 per minute, 1,000
// per hour, per key — on a clock 360 times faster, and the clients are given the same
// scaled limits (each window clientMargin longer). Every reply is confirmed at Smartlead (its message history), its lead
// paused, the pause confirmed; and no 429 is ever answered: counted at the sandbox, no
// scaled minute holds more than 60 calls, no 2 s more than 10, no hour more than 1,000.
func TestThousandSmartleadRepliesStayUnderTheLimit(t *testing.T) {
	t.Parallel()
	const replies = 1000
	p := startPipeline(t)
	scaled := make([]ratelimit.Rate, len(smartlead.Rates))
	paced := make([]ratelimit.Rate, len(smartlead.Rates))
	for i, r := range smartlead.Rates {
		scaled[i] = ratelimit.Rate{N: r.N, Per: r.Per / timeScale}
		paced[i] = ratelimit.Rate{N: r.N, Per: scaled[i].Per + clientMargin}
	}
	p.sb.SetRateLimit("smartlead", scaled...)
	limits, err := p.conn.JS.KeyValue(t.Context(), stream.RateLimits)
	if err != nil {
		t.Fatal(err)
	}
	// Eight workers a replica: the pacing across replicas is what is tested, and on a
	// clock 360 times faster every extra caller racing for a freed slot adds to the delay
	// between a call's turn and its arrival that the margin must cover.
	if p.env.Config.Consumers == nil {
		p.env.Config.Consumers = map[string]config.ConsumerTuning{}
	}
	p.env.Config.Consumers[stream.Stopper] = config.ConsumerTuning{Workers: 8}
	for i := range 2 {
		// A replica as another process has it: its own clients, sharing only the bucket.
		env := &service.Env{Config: p.env.Config, Conn: p.conn, Log: p.env.Log,
			Platforms: accounts.New(p.env.Config, p.sb.URL, accounts.Pacing{Limits: limits, Sandbox: map[string][]ratelimit.Rate{"smartlead": paced}})}
		p.startIn(env, fmt.Sprint(stream.Stopper, i), stopper.Run)
	}

	const cid = 91812
	base := time.Now().Add(-time.Minute)
	bodies := make([][]byte, replies)
	for i := range replies {
		email, msgID, at := fmt.Sprintf("lead%04d@globex.example", i), fmt.Sprintf("<reply-%04d@mail.globex.example>", i), base.Add(time.Duration(i)*time.Millisecond)
		lead := p.sb.AddSmartleadReply(cid, email, msgID, "Thanks, not now.", at) // Smartlead holds it before its webhook
		bodies[i] = smartleadReply(t, cid, lead, email, msgID, at)
	}
	sent := time.Now()
	var wg sync.WaitGroup
	ids := make([]string, replies)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < replies; i += 8 {
				ids[i] = p.postSigned("smartlead", bodies[i])[0]
			}
		})
	}
	wg.Wait()
	settledWithin(t, p.conn.JS, stream.Stopper, 5*time.Minute)
	took := time.Since(sent)

	if n := len(p.read(stream.Events, "events.*.smartlead.sequence.stopped")); n != replies {
		t.Fatalf("%d sequences stopped for %d replies", n, replies)
	}
	if dl := p.deadLetters(stream.Stopper); len(dl) != 0 {
		t.Fatalf("%d dead letters, the first: %v", len(dl), dl[0])
	}
	paused := 0
	for i := range replies {
		lead := p.sb.SmartleadLeadID(fmt.Sprintf("lead%04d@globex.example", i))
		if m, _ := p.sb.SmartleadLeadState(cid, lead); m.Status == "PAUSED" {
			paused++
		}
	}
	if paused != replies {
		t.Fatalf("%d of %d leads paused", paused, replies)
	}
	if n := p.sb.RateLimited("smartlead"); n != 0 {
		t.Fatalf("Smartlead answered %d requests 429", n)
	}
	var times []time.Time
	byRoute := map[string]int{}
	for _, r := range smartleadRoutes {
		times = append(times, p.sb.RequestTimes(r)...)
		if n := p.sb.Requests(r); n > 0 {
			byRoute[r] = n
		}
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	for i, r := range smartlead.Rates {
		if most := mostWithin(times, scaled[i].Per); most > r.N {
			t.Fatalf("%d Smartlead calls within a scaled %v, the limit is %d", most, r.Per, r.N)
		} else {
			t.Logf("at most %d calls in any scaled %v (limit %d)", most, r.Per, r.N)
		}
	}
	t.Logf("%d replies, %d Smartlead calls (%.1f a reply: %v), handled in %v (%v on Smartlead's clock)",
		replies, len(times), float64(len(times))/replies, byRoute, took.Round(time.Millisecond), (took * timeScale).Round(time.Minute))
}

// mostWithin is the most of the sorted times any window of d holds.
func mostWithin(times []time.Time, d time.Duration) int {
	most, j := 0, 0
	for i := range times {
		for times[i].Sub(times[j]) >= d {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// smartleadReply is an EMAIL_REPLY webhook body of lead in campaign cid.
func smartleadReply(t *testing.T, cid, lead int64, email, msgID string, at time.Time) []byte {
	t.Helper()
	b, err := smartleadhooks.Sample("EMAIL_REPLY", at)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["campaign_id"], m["sl_email_lead_id"], m["to_email"], m["sl_lead_email"] = cid, fmt.Sprint(lead), email, email
	reply := m["reply_message"].(map[string]any)
	reply["message_id"], reply["text"] = msgID, "Thanks, not now."
	out, _ := json.Marshal(m)
	return out
}
