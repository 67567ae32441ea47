// Package bench measures Exacto beside baselines run in the same process, on the same
// machine, in the same run. Every benchmark prints its rows as lines
//
//	BENCH|section|what|figure|baseline|ratio|note
//
// on stdout, which `make bench` gathers into one table. Speed is never asserted: a
// benchmark fails only when something is lost or refused.
package bench

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/broker"
	"exacto.dev/pkg/broker/brokertest"
	"exacto.dev/pkg/stream"
)

// send posts body with header to url and reads the whole answer: its status and how
// long it took, or the error of a request that got none.
func send(client *http.Client, url string, body []byte, header http.Header) (status int, took time.Duration, err error) {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	for k, v := range header {
		req.Header[k] = v
	}
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, time.Since(t0), nil
}

// row prints one line of the table. figure and baseline are already formatted; ratio
// is figure/baseline (0: none).
func row(section, what, figure, baseline string, ratio float64, note string) {
	r := ""
	switch {
	case ratio == 0:
	case ratio < 10:
		r = fmt.Sprintf("%.3f", ratio)
	case ratio < 1000:
		r = fmt.Sprintf("%.1f", ratio)
	default:
		r = fmt.Sprintf("%.0f", ratio)
	}
	clean := func(s string) string { return strings.ReplaceAll(s, "|", "/") }
	fmt.Printf("BENCH|%s|%s|%s|%s|%s|%s\n", clean(section), clean(what), clean(figure), clean(baseline), r, clean(note))
}

// rateRow is a row of two rates (per second).
func rateRow(section, what string, figure, baseline float64, note string) {
	row(section, what, fmt.Sprintf("%.0f", figure), fmt.Sprintf("%.0f", baseline), figure/baseline, note)
}

// latencyRow is a row of two latencies.
func latencyRow(section, what string, figure, baseline time.Duration, note string) {
	row(section, what, ms(figure), ms(baseline), float64(figure)/float64(baseline), note)
}

// ms formats d in milliseconds (seconds past 10 s).
func ms(d time.Duration) string {
	if d >= 10*time.Second {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
}

// percentile is the p-th percentile (0..100) of lat, which it sorts.
func percentile(lat []time.Duration, p int) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	return lat[min(len(lat)-1, len(lat)*p/100)]
}

// top names the k keys of m with the largest values, largest first (ties by key), each
// with its value as format (a %s and a verb for the value) writes them.
func top[V int | float64](m map[string]V, k int, format string) string {
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), strings.Compare(a, b)) })
	var parts []string
	for _, key := range keys[:min(k, len(keys))] {
		parts = append(parts, fmt.Sprintf(format, key, m[key]))
	}
	return strings.Join(parts, ", ")
}

// envInt is the positive integer in environment variable name, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// startBroker starts an embedded server on a temporary store with sync ("always", or a
// flush interval such as nats-server's default 2m), declares Exacto's topology and
// connects; both stop when the benchmark ends. brokertest.Start is the same with
// "always" only.
func startBroker(b *testing.B, sync string) *broker.Conn {
	b.Helper()
	o := broker.Options{Listen: "127.0.0.1:-1", DataDir: b.TempDir(), Sync: sync}
	if sync == serverSync { // nats-server fsyncs each stored message itself
		o.Sync, o.ServerSync = "always", true
	}
	conn, err := broker.Open("", o, b.Name())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(conn.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := stream.Ensure(ctx, conn.JS, brokertest.Topology); err != nil {
		b.Fatal(err)
	}
	return conn
}
