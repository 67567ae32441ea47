package admin

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestReadyFollowsChecks(t *testing.T) {
	var down atomic.Bool
	srv := httptest.NewServer(Mux(nil, map[string]Check{"jetstream": func(context.Context) error {
		if down.Load() {
			return errors.New("nats: no servers available")
		}
		return nil
	}}))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if s, _ := get("/readyz"); s != 200 {
		t.Fatalf("ready: %d", s)
	}
	down.Store(true)
	if s, b := get("/readyz"); s != 503 || !strings.Contains(b, "jetstream") {
		t.Fatalf("not ready: %d %s", s, b)
	}
	if s, _ := get("/healthz"); s != 200 {
		t.Fatalf("alive while not ready: %d", s)
	}
}

// The admin address answers by IP address, localhost or a configured name, and
// refuses any other Host (issue 16: /metrics answered any Host, as to a page whose
// name an attacker points at 127.0.0.1).
func TestHostsRefusesOtherNames(t *testing.T) {
	srv := httptest.NewServer(Hosts([]string{"console.example.com", "metrics.example.com.:9090"}, Mux(nil, nil)))
	defer srv.Close()
	for host, want := range map[string]int{
		"":                         http.StatusOK, // the test server's own 127.0.0.1:port
		"localhost:8081":           http.StatusOK,
		"LOCALHOST":                http.StatusOK,
		"[::1]:8081":               http.StatusOK,
		"10.2.3.4:8081":            http.StatusOK,
		"console.example.com":      http.StatusOK,
		"Console.Example.com.:443": http.StatusOK,
		"evil.example":             http.StatusMisdirectedRequest,
		"evil.example:8081":        http.StatusMisdirectedRequest,
		"console.example.com.evil": http.StatusMisdirectedRequest,
		"metrics.example.com":      http.StatusOK, // configured with a port and the root's dot
	} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/healthz", nil)
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %q: %d %s, want %d", host, resp.StatusCode, body, want)
		}
	}
}
