package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"exacto.dev/pkg/quarantine"
)

type quarantineData struct {
	Filter  url.Values
	Entries []quarantine.Entry
}

func (c *console) quarantineList(w http.ResponseWriter, r *http.Request, u who) {
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	q := r.URL.Query()
	f := quarantine.Filter{Tenant: strings.TrimSpace(q.Get("tenant")), Endpoint: strings.TrimSpace(q.Get("endpoint")),
		Reason: strings.TrimSpace(q.Get("reason")), All: q.Get("all") != ""}
	d := quarantineData{Filter: q}
	v := view{Title: "Quarantine", Nav: "quarantine", Data: &d}
	var err error
	if d.Entries, err = c.quarantine.List(ctx, f); err != nil {
		// A filter value that is not an id lists nothing rather than a wider list.
		v.Error = "nothing listed: " + err.Error()
	}
	c.render(w, http.StatusOK, "quarantine", u, v)
}

// excerptBytes is how much of a kept body its page shows.
const excerptBytes = 4 << 10

type quarantinedData struct {
	Entry   quarantine.Entry
	Headers []kv
	Excerpt string // the body's first bytes, as text
	More    int    // bytes of the body not shown
	Planned []quarantine.Planned
	Refused string // why a replay now would be refused
	Fresh   int    // events a replay now would store
}

func (c *console) getQuarantined(ctx context.Context, w http.ResponseWriter, r *http.Request, u who) (quarantine.Entry, bool) {
	e, err := c.quarantine.Get(ctx, r.PathValue("id"))
	if err != nil {
		c.render(w, http.StatusNotFound, "error", u, view{Title: "Quarantined delivery", Nav: "quarantine", Error: err.Error()})
		return e, false
	}
	return e, true
}

func (c *console) quarantined(w http.ResponseWriter, r *http.Request, u who) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	e, ok := c.getQuarantined(ctx, w, r, u)
	if !ok {
		return
	}
	d := quarantinedData{Entry: e}
	for name, vs := range e.Header {
		d.Headers = append(d.Headers, kv{name, strings.Join(vs, ", ")})
	}
	slices.SortFunc(d.Headers, func(a, b kv) int { return strings.Compare(a.Key, b.Key) })
	shown := e.Body[:min(len(e.Body), excerptBytes)]
	d.Excerpt, d.More = strings.ToValidUTF8(string(shown), "\uFFFD"), len(e.Body)-len(shown)
	planned, refused, err := c.quarantine.Preview(ctx, c.cfg, e)
	switch {
	case err != nil:
		d.Refused = "unknown: " + err.Error()
	case refused != nil:
		d.Refused = refused.Error()
	}
	d.Planned = planned
	for _, p := range planned {
		if !p.Stored {
			d.Fresh++
		}
	}
	v := view{Title: "Quarantined delivery " + e.ID, Nav: "quarantine", Data: d}
	v.Notice, v.Error = c.notices(r)
	c.render(w, http.StatusOK, "quarantined", u, v)
}

func (c *console) quarantineReplay(w http.ResponseWriter, r *http.Request, u who) {
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	e, ok := c.getQuarantined(ctx, w, r, u)
	if !ok {
		return
	}
	back := func(key, msg string) {
		page := Prefix + "quarantine/" + e.ID
		http.Redirect(w, r, page+"?"+c.withNotice(page, nil, key, msg).Encode(), http.StatusSeeOther)
	}
	why := strings.TrimSpace(r.PostForm.Get("why"))
	by, err := decider(r, u)
	if err != nil {
		back("err", "replay refused: "+err.Error())
		return
	}
	a, err := c.quarantine.Replay(ctx, c.cfg, e, by, why)
	if err != nil {
		back("err", "replay refused: "+err.Error())
		return
	}
	c.log.Info("console quarantine replay", "quarantine_id", e.ID, "by", by, "why", why, "stored", a.Stored, "duplicates", a.Duplicates)
	back("done", fmt.Sprintf("replayed: %d events stored, %d already stored", a.Stored, a.Duplicates))
}
