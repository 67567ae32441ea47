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
