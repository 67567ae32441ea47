package console

import (
	"context"
	"fmt"
	"html/template"
	"math"
	"strings"
	"sync"
	"time"

	"exacto.dev/pkg/dlq"
)

// The overview's hour: one sample of every consumer's backlog and oldest age and of the
// open dead letters every sampleEvery, sampleKept kept (in this process's memory: a
// restart starts the hour over).
const (
	sampleEvery = 30 * time.Second
	sampleKept  = int(time.Hour / sampleEvery)
)

// sample is the overview's numbers at one moment.
type sample struct {
	at       time.Time
	backlog  map[string]float64 // by consumer: waiting + in flight
	oldest   map[string]float64 // by consumer: seconds since the oldest unacknowledged
	dlqOpen  float64
	dlqAgeSe float64 // seconds since the oldest open dead letter's last attempt
}

// hour keeps the last hour of samples.
type hour struct {
	mu      sync.Mutex
	samples []sample
}

// add keeps s, unless the last sample is younger than sampleEvery (the overview
// refreshing every 10 s adds no more than the sampler).
func (h *hour) add(s sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.samples); n > 0 && s.at.Sub(h.samples[n-1].at) < sampleEvery {
		return
	}
	h.samples = append(h.samples, s)
	if len(h.samples) > sampleKept {
		h.samples = h.samples[len(h.samples)-sampleKept:]
	}
}

// series is one number of every sample of the last hour before now.
func (h *hour) series(now time.Time, of func(sample) float64) []point {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []point
	for _, s := range h.samples {
		if now.Sub(s.at) <= time.Hour {
			out = append(out, point{s.at, of(s)})
		}
	}
	return out
}

type point struct {
	at time.Time
	v  float64
}

// sampleOf is the numbers the overview charts, from its queues and dead letters.
func sampleOf(at time.Time, queues []queue, d dlq.Summary) sample {
	s := sample{at: at, backlog: map[string]float64{}, oldest: map[string]float64{}, dlqOpen: float64(d.Open), dlqAgeSe: d.Oldest.Seconds()}
	for _, q := range queues {
		if q.Err == "" {
			s.backlog[q.Consumer] += float64(q.Pending + q.AckPending)
			s.oldest[q.Consumer] = max(s.oldest[q.Consumer], q.OldestAge.Seconds())
		}
	}
	return s
}

// sampleNow reads the numbers the overview charts.
func (c *console) sampleNow(ctx context.Context) sample {
	d, _ := c.dlq.Summarize(ctx)
	return sampleOf(c.o.Now(), c.queues(ctx), d)
}

// sampling adds a sample every sampleEvery until ctx ends (exacto up's console).
func (c *console) sampling(ctx context.Context) {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		c.hour.add(c.sampleNow(ctx))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Charts are inline SVG drawn here: no script, nothing fetched (the console's CSP).
const (
	chartW, chartH = 160, 36
)

// chart opens an SVG chart labelled label (for screen readers).
func chart(label string) *strings.Builder {
	b := &strings.Builder{}
	fmt.Fprintf(b, `<svg class="chart" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`, chartW, chartH+12, chartW, chartH+12, template.HTMLEscapeString(label))
	return b
}

// caption writes text under a chart and closes it.
func caption(b *strings.Builder, text string) {
	fmt.Fprintf(b, `<text x="0" y="%d" font-size="10" fill="#667">%s</text></svg>`, chartH+11, text)
}

// bars draws counts per minute as bars, oldest left, with the highest labelled.
func bars(counts []int, label string) template.HTML {
	hi := 0
	for _, n := range counts {
		hi = max(hi, n)
	}
	b := chart(label)
	w := float64(chartW) / float64(max(len(counts), 1))
	for i, n := range counts {
		h := 0.0
		if hi > 0 {
			h = float64(n) / float64(hi) * chartH
		}
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#3b6fd8"><title>%d</title></rect>`, float64(i)*w+1, chartH-h, w-2, math.Max(h, 0.5), n)
	}
	caption(b, fmt.Sprintf("max %d/min", hi))
	return template.HTML(b.String())
}

// line draws points over the last hour before now as a line, with limit (when above 0)
// as a dashed red line: what a number is held against (the dead letters' SLO).
func line(points []point, now time.Time, limit float64, unit string, label string) template.HTML {
	hi := limit
	for _, p := range points {
		hi = max(hi, p.v)
	}
	b := chart(label)
	x := func(t time.Time) float64 { return float64(chartW) * (1 - now.Sub(t).Seconds()/time.Hour.Seconds()) }
	y := func(v float64) float64 {
		if hi <= 0 {
			return chartH
		}
		return chartH - v/hi*(chartH-2)
	}
	if limit > 0 {
		fmt.Fprintf(b, `<line x1="0" x2="%d" y1="%.1f" y2="%.1f" stroke="#c0392b" stroke-dasharray="4 3"><title>limit %s</title></line>`, chartW, y(limit), y(limit), fmtValue(limit, unit))
	}
	if len(points) > 0 {
		var pts []string
		for _, p := range points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.at), y(p.v)))
		}
		if len(points) == 1 {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(points[0].at)-2, y(points[0].v)))
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="#3b6fd8" stroke-width="1.5"/>`, strings.Join(pts, " "))
	}
	last := "no sample yet"
	if len(points) > 0 {
		last = "now " + fmtValue(points[len(points)-1].v, unit)
	}
	caption(b, last+" · max "+fmtValue(hi, unit)+" · last hour")
	return template.HTML(b.String())
}

// fmtValue says v in its unit: a count, or seconds as an age.
func fmtValue(v float64, unit string) string {
	if unit == "s" {
		return roundAge(time.Duration(v * float64(time.Second)))
	}
	return fmt.Sprintf("%.0f", v)
}
