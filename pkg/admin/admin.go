// Package admin serves the admin address: /healthz (the process is alive), /readyz
// (every dependency answers) and /metrics.
package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Check is one readiness dependency; it returns nil when ready.
type Check func(ctx context.Context) error

// Mux returns the admin routes. Other parts (the console) add theirs to it.
func Mux(metrics http.Handler, checks map[string]Check) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		status, failed := http.StatusOK, map[string]string{}
		for name, check := range checks {
			if err := check(ctx); err != nil {
				status, failed[name] = http.StatusServiceUnavailable, err.Error()
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if status == http.StatusOK {
			w.Write([]byte(`{"status":"ready"}` + "\n"))
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"status": "not_ready", "failed": failed})
	})
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	return mux
}

// Hosts answers only requests addressed to the admin address by an IP literal,
// "localhost", or one of names (config admin_hosts: the console's name behind a proxy,
// a scraper's DNS name); any other Host is refused 421. A page on another site whose
// name an attacker points at 127.0.0.1 (DNS rebinding) would otherwise read /metrics
// and the console's pages from the operator's own browser.
func Hosts(names []string, next http.Handler) http.Handler {
	bare := func(host string) string { // without port, brackets or the root's trailing dot
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		return strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	}
	allowed := make([]string, len(names))
	for i, n := range names {
		allowed[i] = bare(n)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := bare(r.Host)
		// No Host at all is no browser's (an HTTP/1.0 health check): a page cannot send one.
		if _, err := netip.ParseAddr(host); host != "" && err != nil && !strings.EqualFold(host, "localhost") &&
			!slices.ContainsFunc(allowed, func(n string) bool { return strings.EqualFold(n, host) }) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusMisdirectedRequest)
			fmt.Fprintf(w, "421: the admin address answers an IP address, localhost or a name of admin_hosts, not %q\n", host)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Server wraps the mux with timeouts.
func Server(addr string, h http.Handler) *http.Server {
	return &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second}
}
