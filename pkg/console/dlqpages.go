package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"exacto.dev/pkg/dlq"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/guard"
)

func dlqFilterFor(env envelope.Envelope) dlq.Filter {
	return dlq.Filter{Tenant: env.Tenant, Provider: env.Provider, Type: env.Type, All: true}
}

// subjectToken keeps a filter field usable as one subject token (or a type's dotted
// tokens): anything else selects nothing rather than widening the filter.
func subjectToken(s string, dots bool) (string, bool) {
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || (dots && r == '.')
		if !ok {
			return "", false
		}
	}
	return s, true
}

type dlqData struct {
	Filter  url.Values
	Letters []dlq.Letter
	Summary dlq.Summary
	SLO     time.Duration
}

func (c *console) dlqList(w http.ResponseWriter, r *http.Request, u who) {
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	q := r.URL.Query()
	var f dlq.Filter
	var bad []string
	for _, p := range []struct {
		name string
		dst  *string
		dots bool
	}{{"consumer", &f.Consumer, false}, {"tenant", &f.Tenant, false}, {"provider", &f.Provider, false}, {"type", &f.Type, true}, {"class", &f.Class, false}} {
		v := strings.TrimSpace(q.Get(p.name))
		if v == "" {
			continue
		}
		if tok, ok := subjectToken(v, p.dots); ok {
			*p.dst = tok
		} else {
			bad = append(bad, p.name)
		}
	}
	for _, p := range []struct {
		name string
		dst  *time.Duration
	}{{"older", &f.OlderThan}, {"newer", &f.NewerThan}} {
		if v := strings.TrimSpace(q.Get(p.name)); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				bad = append(bad, p.name)
				continue
			}
			*p.dst = d
		}
	}
	f.All = q.Get("all") != ""
	d := dlqData{Filter: q, SLO: c.cfg.DLQ.SLO}
	v := view{Title: "Dead letters", Nav: "dlq", Data: &d}
	var err error
	if len(bad) > 0 {
		// A filter value that is not valid lists nothing rather than a wider list.
		v.Error = "nothing listed: filter values that are not valid: " + strings.Join(bad, ", ") + " (names are letters, digits, - and _; durations look like 15m or 2h)"
	} else if d.Letters, err = c.dlq.List(ctx, f); err != nil {
		v.Error = "listing the DLQ: " + err.Error()
	}
	if d.Summary, err = c.dlq.Summarize(ctx); err != nil && v.Error == "" {
		v.Error = "summary: " + err.Error()
	}
	c.render(w, http.StatusOK, "dlq", u, v)
}

type letterData struct {
	Letter dlq.Letter
	Stale  string // why a replay would be refused now ("" when fresh)
	EventT time.Time
	// Now is the consumer's status of the event now: what the actions achieved.
	Now string
}

func (c *console) getLetter(ctx context.Context, w http.ResponseWriter, r *http.Request, u who) (dlq.Letter, bool) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		c.render(w, http.StatusNotFound, "error", u, view{Title: "Dead letter", Nav: "dlq", Error: "not a dead letter id"})
		return dlq.Letter{}, false
	}
	l, err := c.dlq.Get(ctx, seq)
	if err != nil {
		c.render(w, http.StatusNotFound, "error", u, view{Title: "Dead letter", Nav: "dlq", Error: err.Error()})
		return l, false
	}
	return l, true
}

func (c *console) letter(w http.ResponseWriter, r *http.Request, u who) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	l, ok := c.getLetter(ctx, w, r, u)
	if !ok {
		return
	}
	d := letterData{Letter: l, EventT: l.EventTime()}
	if err := c.dlq.Fresh(l); err != nil {
		d.Stale = err.Error()
	}
	if p, err := c.dlq.Preview(ctx, l, false); err == nil {
		d.Now = cmp.Or(p.Guard, guard.Received)
	}
	v := view{Title: fmt.Sprintf("Dead letter %d", l.Seq), Nav: "dlq", Data: d}
	v.Notice, v.Error = c.notices(r)
	c.render(w, http.StatusOK, "letter", u, v)
}

// back redirects to letter seq's page with the result of an action.
func (c *console) back(w http.ResponseWriter, r *http.Request, seq uint64, key, msg string) {
	page := fmt.Sprintf("%sdlq/%d", Prefix, seq)
	http.Redirect(w, r, page+"?"+c.withNotice(page, nil, key, msg).Encode(), http.StatusSeeOther)
}

func (c *console) replay(w http.ResponseWriter, r *http.Request, u who) {
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	l, ok := c.getLetter(ctx, w, r, u)
	if !ok {
		return
	}
	why := strings.TrimSpace(r.PostForm.Get("why"))
	force := r.PostForm.Get("force") != ""
	by, err := decider(r, u)
	if err != nil {
		c.back(w, r, l.Seq, "err", "replay refused: "+err.Error())
		return
	}
	a, err := c.dlq.Replay(ctx, l, by, why, force)
	if err != nil {
		msg := "replay refused: " + err.Error()
		if errors.Is(err, dlq.ErrStale) && !force {
			msg += " — tick “force” to replay it anyway"
		}
		c.back(w, r, l.Seq, "err", msg)
		return
	}
	c.log.Info("console replay", "dead_letter", l.Seq, "consumer", l.Consumer, "event", l.EventID, "by", by, "why", why, "result", a.Result)
	msg := "replayed: the event was sent back to " + l.Consumer + "; its status is on the event page"
	if a.Result != dlq.SentBack {
		msg = "nothing to replay: " + a.ResultText()
	}
	c.back(w, r, l.Seq, "done", msg)
}

func (c *console) discard(w http.ResponseWriter, r *http.Request, u who) {
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	l, ok := c.getLetter(ctx, w, r, u)
	if !ok {
		return
	}
	why := strings.TrimSpace(r.PostForm.Get("why"))
	by, err := decider(r, u)
	if err != nil {
		c.back(w, r, l.Seq, "err", "discard refused: "+err.Error())
		return
	}
	if _, err := c.dlq.Discard(ctx, l, by, why); err != nil {
		c.back(w, r, l.Seq, "err", "discard refused: "+err.Error())
		return
	}
	c.log.Info("console discard", "dead_letter", l.Seq, "consumer", l.Consumer, "event", l.EventID, "by", by, "why", why)
	c.back(w, r, l.Seq, "done", "discarded")
}
