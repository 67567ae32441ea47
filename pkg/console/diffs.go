package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"exacto.dev/pkg/reconcile"
)

type diffData struct {
	Filter   url.Values
	Findings []reconcile.Finding
}

func (c *console) diffList(w http.ResponseWriter, r *http.Request, u who) {
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	q := r.URL.Query()
	f := reconcile.Filter{Kind: strings.TrimSpace(q.Get("kind")), Status: strings.TrimSpace(q.Get("status"))}
	v := view{Title: "Reconciliation diffs", Nav: "diffs"}
	if t := strings.TrimSpace(q.Get("tenant")); t != "" {
		if tok, ok := subjectToken(t, false); ok {
			f.Tenant = tok
		} else {
			v.Error = "ignored a tenant that is not valid"
		}
	}
	if !q.Has("status") {
		f.Status = reconcile.StatusOpen
		q.Set("status", reconcile.StatusOpen)
	}
	d := diffData{Filter: q}
	found, err := c.diffs.List(ctx, f)
	if err != nil {
		v.Error = "diff queue: " + err.Error()
	}
	d.Findings = found
	v.Data = d
	done, failed := c.notices(r)
	v.Notice, v.Error = done, firstNonEmpty(v.Error, failed)
	c.render(w, http.StatusOK, "diffs", u, v)
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func (c *console) decide(w http.ResponseWriter, r *http.Request, u who) {
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	tenant, id := r.PathValue("tenant"), r.PathValue("id")
	var approve bool
	switch r.PostForm.Get("decision") {
	case "approve":
		approve = true
	case "reject":
	default:
		c.render(w, http.StatusBadRequest, "error", u, view{Title: "Diffs", Nav: "diffs", Error: "decision must be approve or reject"})
		return
	}
	why := strings.TrimSpace(r.PostForm.Get("why"))
	dest := Prefix + "diffs?"
	by, err := decider(r, u)
	if err != nil {
		http.Redirect(w, r, dest+c.withNotice(Prefix+"diffs", nil, "err", "decision refused: "+err.Error()).Encode(), http.StatusSeeOther)
		return
	}
	f, err := c.diffs.Decide(ctx, tenant, id, approve, by, why)
	if err != nil {
		http.Redirect(w, r, dest+c.withNotice(Prefix+"diffs", nil, "err", "decision refused: "+err.Error()).Encode(), http.StatusSeeOther)
		return
	}
	c.log.Info("console diff decision", "tenant", tenant, "finding", id, "approve", approve, "by", by, "why", why)
	msg := "finding " + id + " " + f.Status
	if f.Event != "" {
		msg += "; repair event " + f.Event
	}
	http.Redirect(w, r, dest+c.withNotice(Prefix+"diffs", url.Values{"status": {""}}, "done", msg).Encode(), http.StatusSeeOther)
}
