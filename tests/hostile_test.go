package tests

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/providers/stripe"
	"exacto.dev/pkg/stream"
)

// Slow and hostile clients: slow bodies (slowloris), bodies over the limit and a burst
// of deliveries with invalid signatures, all at once, while valid deliveries go on: the
// gateway keeps answering them, stores every one and nothing else, and the valid
// traffic's p99 is reported.
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
	// Slowloris: connections that send a body one byte at a time.
	for range slow {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", host, 5*time.Second)
			if err != nil {
				count("slow", -1)
				return
			}
			defer c.Close()
			fmt.Fprintf(c, "POST /hooks/stripe/tok-stripe-0123456789 HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n", host)
			for range 15 {
				if _, err := c.Write([]byte("{")); err != nil {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			count("slow", 0) // held its connection open for 3 s
		}()
	}
	// Bodies over the limit.
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
	wg.Wait()
	stored := storedIDs(t, p.conn.JS)
	t.Logf("answers: %v", statuses)
	lost := valid - statuses["valid"][200]
	extra := len(stored) - statuses["valid"][200] // anything stored besides the valid ones
	if statuses["invalid"][401] != invalid || statuses["big"][413] != big {
		t.Errorf("hostile answers: %v (want %d × 401, %d × 413)", statuses, invalid, big)
	}
	if n := brokertest.Count(t, p.conn, stream.Events); int(n) != valid {
		t.Errorf("the stream holds %d events, want the %d valid ones", n, valid)
	}
	row(t, "hostile clients", valid+invalid+slow+big, valid, statuses["valid"][200], lost, extra, p99(lat))
}
