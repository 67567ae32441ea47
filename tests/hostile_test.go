package tests

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/providers/stripe"
	"exacto.dev/pkg/stream"
	"exacto.dev/services/gateway/server"
)

// Slow and hostile clients: slow headers and slow bodies (slowloris), unsigned bodies
// over the limit and a burst of deliveries with invalid signatures, all at once, while
// valid deliveries go on: the gateway cuts every slow connection off at its read
// limits, refuses the unsigned bodies (401: read up to the quarantine's cap, verified,
// kept nowhere), keeps answering the valid deliveries, stores every one and nothing
// else, and the valid traffic's p99 is reported.
func TestChaosHostileClients(t *testing.T) {
	t.Parallel()
	valid, invalid, slow, big := size(200, 2000), size(1000, 10000), size(30, 200), size(10, 50)
	p := startPipeline(t)
	p.mu.Lock()
	base := p.gwURL
	p.mu.Unlock()
	url := base + "/hooks/stripe/tok-stripe-0123456789"
	host := strings.TrimPrefix(base, "http://")
	client := &http.Client{Timeout: 30 * time.Second}
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[string]map[int]int{}
	count := func(kind string, status int) {
		mu.Lock()
		defer mu.Unlock()
		if statuses[kind] == nil {
			statuses[kind] = map[int]int{}
		}
		statuses[kind][status]++
	}
	now := time.Now()
	// Slowloris: connections that send their headers, or their body, a byte at a time and
	// never finish, each held until the gateway cuts it off (a 4xx answer, or the
	// connection closed) or well past the production server's limit on reading headers
	// (ReadHeaderTimeout) or a whole request (ReadTimeout).
	gw, err := server.New(context.Background(), server.Options{Config: p.env.Config, JS: p.conn.JS})
	if err != nil {
		t.Fatal(err)
	}
	limits := gw.HTTPServer("")
	gw.Close()
	var opened sync.WaitGroup
	var cutMu sync.Mutex
	var cutBeforeValidEnded, validEnded = 0, false
	for i := range slow {
		wg.Add(1)
		opened.Add(1)
		go func() {
			defer wg.Done()
			kind, limit := "slow headers", limits.ReadHeaderTimeout
			request := fmt.Sprintf("POST /hooks/stripe/tok-stripe-0123456789 HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nX-Slow: ", host)
			if i%2 == 1 {
				kind, limit = "slow body", limits.ReadTimeout
				request = fmt.Sprintf("POST /hooks/stripe/tok-stripe-0123456789 HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{", host)
			}
			c, err := net.DialTimeout("tcp", host, 5*time.Second)
			if err != nil {
				opened.Done()
				count(kind, -1)
				return
			}
			defer c.Close()
			_, err = c.Write([]byte(request))
			opened.Done()
			if err != nil {
				count(kind, -1)
				return
			}
			// The gateway's answer, if any, then its close.
			cut := make(chan int, 1)
			go func() {
				answer, _ := io.ReadAll(io.LimitReader(c, 512))
				status := 0 // closed without an answer
				if code, ok := strings.CutPrefix(string(answer), "HTTP/1.1 "); ok && len(code) >= 3 {
					status, _ = strconv.Atoi(code[:3])
				}
				cut <- status
			}()
			hold := time.NewTimer(limit + 15*time.Second)
			defer hold.Stop()
			tick := time.NewTicker(250 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case status := <-cut:
					cutMu.Lock()
					if !validEnded {
						cutBeforeValidEnded++
					}
					cutMu.Unlock()
					count(kind, status)
					return
				case <-hold.C:
					count(kind, -2) // never cut off
					return
				case <-tick.C:
					c.Write([]byte("x")) // a closed connection is seen by the reader
				}
			}
		}()
	}
	opened.Wait() // every slow connection is open before the valid traffic starts
	// Unsigned bodies over the limit (within the quarantine's cap: read and verified).
	for range big {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Post(url, "application/json", strings.NewReader(`{"id":"`+strings.Repeat("x", 2<<20)+`"}`))
			if err != nil {
				count("big", -1)
				return
			}
			resp.Body.Close()
			count("big", resp.StatusCode)
		}()
	}
	// A burst of deliveries signed with the wrong secret.
	work := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				body := fmt.Sprintf(`{"id":"evt_forged_%06d","object":"event","type":"customer.updated","created":%d,"data":{"object":{"id":"cus_f%d","object":"customer","email":"forged%d@example.com"}}}`, i, now.Unix(), i, i)
				h, b, _ := stripe.Spec.Sign(http.MethodPost, url, []byte(body), "whsec_not_the_secret", now)
				req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(string(b)))
				req.Header = h
				resp, err := client.Do(req)
				if err != nil {
					count("invalid", -1)
					continue
				}
				resp.Body.Close()
				count("invalid", resp.StatusCode)
			}
		}()
	}
	go func() {
		for i := range invalid {
			work <- i
		}
		close(work)
	}()
	// Meanwhile, the valid traffic, measured.
	var lat []time.Duration
	for i := range valid {
		req := stripeDelivery(t, url, i, now)
		began := time.Now()
		resp, err := client.Do(req)
		took := time.Since(began)
		if err != nil {
			t.Fatalf("a valid delivery failed under attack: %v", err)
		}
		resp.Body.Close()
		count("valid", resp.StatusCode)
		lat = append(lat, took)
	}
	cutMu.Lock()
	validEnded = true
	t.Logf("%d of %d slow connections cut off while the valid traffic went on", cutBeforeValidEnded, slow)
	cutMu.Unlock()
	wg.Wait()
	stored := storedIDs(t, p.conn.JS)
	t.Logf("answers: %v (slow ones: 0 closed without an answer, -2 never cut off)", statuses)
	for kind, want := range map[string]int{"slow headers": (slow + 1) / 2, "slow body": slow / 2} {
		cut := 0
		for status, k := range statuses[kind] {
			if status == 0 || (status >= 400 && status < 500) {
				cut += k
			}
		}
		if cut != want {
			t.Errorf("%s: %d of %d connections cut off by the gateway (answers %v)", kind, cut, want, statuses[kind])
		}
	}
	lost := valid - statuses["valid"][200]
	extra := len(stored) - statuses["valid"][200] // anything stored besides the valid ones
	if statuses["invalid"][401] != invalid || statuses["big"][401] != big {
		t.Errorf("hostile answers: %v (want %d × 401, %d × 401)", statuses, invalid, big)
	}
	if n := brokertest.Count(t, p.conn, stream.Events); int(n) != valid {
		t.Errorf("the stream holds %d events, want the %d valid ones", n, valid)
	}
	if n := brokertest.Count(t, p.conn, stream.Quarantine); n != 0 {
		t.Errorf("the quarantine keeps %d unsigned deliveries", n)
	}
	row(t, "hostile clients", valid+invalid+slow+big, valid, statuses["valid"][200], lost, extra, p99(lat))
}

// A flood against one URL (issue 16: anyone holding one unsigned URL stored 2,000
// unique events at 224/s): a gateway whose endpoints take 100 deliveries a second
// answers the flood 429 with Retry-After past its burst, stores no more of it than the
// limit lets through, and meanwhile takes every legitimate delivery to another endpoint
// of the tenant, each stored once; their p99 is the row's.
func TestChaosFlood(t *testing.T) {
	t.Parallel()
	floods, legit := size(2000, 20000), size(100, 1000)
	p := startPipeline(t)
	p.env.Config.Gateway.RateLimit.Endpoint.Rate = 100
	p.env.Config.Gateway.RateLimit.Burst = time.Second
	base := p.gateway() // a replica with those limits
	client := &http.Client{Timeout: 30 * time.Second}
	floodURL, legitURL := base+"/hooks/instantly/tok-instantly-0123456789", base+"/hooks/stripe/tok-stripe-0123456789"
	now := time.Now()
	var mu sync.Mutex
	answers := map[int]int{}
	retryAfter := 0
	work := make(chan int)
	var wg sync.WaitGroup
	began := time.Now()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				body := instantlyEvent("reply_received", fmt.Sprintf("flood%d@attacker.example", i), "flood", fmt.Sprint("em-flood-", i), "buy now", now)
				resp, err := client.Post(floodURL, "application/json", bytes.NewReader(body))
				if err != nil {
					continue
				}
				resp.Body.Close()
				mu.Lock()
				answers[resp.StatusCode]++
				if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "" {
					retryAfter++
				}
				mu.Unlock()
			}
		}()
	}
	go func() {
		for i := range floods {
			work <- i
		}
		close(work)
	}()
	// The flood's own length bounds what it may store: the legitimate sender, paced,
	// may outlast it.
	flooding := make(chan time.Duration, 1)
	go func() { wg.Wait(); flooding <- time.Since(began) }()
	var lat []time.Duration
	ok := 0
	// The legitimate sender keeps within its endpoint's own limit (the burst, then 80 a
	// second): at full size, as fast as it could go, it met that limit itself.
	pace := time.NewTicker(time.Second / 80)
	defer pace.Stop()
	for i := range legit {
		if i >= 80 {
			<-pace.C
		}
		req := stripeDelivery(t, legitURL, i, now)
		at := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("a legitimate delivery failed during the flood: %v", err)
		}
		resp.Body.Close()
		lat = append(lat, time.Since(at))
		if resp.StatusCode == http.StatusOK {
			ok++
		} else {
			t.Errorf("legitimate delivery %d during the flood: %d", i, resp.StatusCode)
		}
	}
	took := <-flooding
	duplicated := 0
	for _, n := range storedIDs(t, p.conn.JS) {
		duplicated += n - 1
	}
	flooded, legitStored := storedOn(t, p.conn.JS, "events.acme.instantly.>"), storedOn(t, p.conn.JS, "events.acme.stripe.>")
	limit := int(100*took.Seconds()) + 100 // the rate for as long as the flood lasted, and the burst
	t.Logf("flood: %d sent in %v, answers %v (%d with Retry-After), %d stored (at most %d)", floods, took.Round(time.Millisecond), answers, retryAfter, flooded, limit)
	if answers[http.StatusTooManyRequests] == 0 || retryAfter != answers[http.StatusTooManyRequests] || flooded > limit || answers[http.StatusOK] != flooded {
		t.Errorf("the flood: answers %v, %d with Retry-After, %d stored; want 429s with Retry-After and at most %d stored", answers, retryAfter, flooded, limit)
	}
	row(t, "flood against one endpoint", floods+legit, legit, legitStored, legit-ok, duplicated, p99(lat))
}

// storedOn is how many events EXACTO_EVENTS holds on subjects matching filter.
func storedOn(t *testing.T, js jetstream.JetStream, filter string) int {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, stream.Events)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, k := range info.State.Subjects {
		n += int(k)
	}
	return n
}
