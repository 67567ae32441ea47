package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// view is what every page's template gets.
type view struct {
	Title   string
	Nav     string // the menu entry to highlight
	User    string
	Shared  bool // signed in with the shared token: forms ask who decides
	CSRF    string
	Refresh int // seconds; 0: no meta refresh
	Notice  string
	Error   string
	Now     time.Time
	Data    any
}

var funcs = template.FuncMap{
	"list": func(s ...string) []string { return s },
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return roundAge(now.Sub(t)) + " ago"
	},
	"age": roundAge,
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"pretty": func(raw json.RawMessage) string {
		var b bytes.Buffer
		if json.Indent(&b, raw, "", "  ") != nil {
			return string(raw)
		}
		return b.String()
	},
	"linkIDs": linkIDs,
	"bars":    bars,
	"statusClass": func(s string) string {
		switch s {
		case "completed", "approved", "applied", "closed", "replayed", "ok":
			return "ok"
		case "dead_letter", "open", "retryable_failed", "failed", "rejected", "half-open":
			return "warn"
		case "processing", "received":
			return "busy"
		}
		return "muted"
	},
}

// eventIDs are envelope ids in free text (a finding's where, found and repair).
var eventIDs = regexp.MustCompile(`\bev_[0-9a-f]{32}\b`)

// linkIDs is text, escaped, with each envelope id in it a link to its event's page.
func linkIDs(text string) template.HTML {
	var b strings.Builder
	last := 0
	for _, m := range eventIDs.FindAllStringIndex(text, -1) {
		b.WriteString(template.HTMLEscapeString(text[last:m[0]]))
		id := text[m[0]:m[1]]
		b.WriteString(`<a href="/console/events/` + id + `"><code>` + id + `</code></a>`)
		last = m[1]
	}
	b.WriteString(template.HTMLEscapeString(text[last:]))
	return template.HTML(b.String())
}

func roundAge(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

// parsePages parses each page with the layout.
func parsePages() (map[string]*template.Template, error) {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if base == "layout" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("console template %s: %w", n, err)
		}
		pages[base] = t
	}
	return pages, nil
}

// render writes page name with data, or a plain 500 if the template fails (never half
// a page).
func (c *console) render(w http.ResponseWriter, status int, name string, u who, v view) {
	v.User, v.Shared, v.CSRF, v.Now = u.name, u.shared, c.csrf(u), c.o.Now()
	var b bytes.Buffer
	if err := c.pages[name].Execute(&b, v); err != nil {
		c.log.Error("console template", "page", name, "err", err)
		http.Error(w, "500 the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// fail answers an error page (without the operator's details: the request may not be
// authenticated).
func (c *console) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	c.render(w, status, "error", who{binding: "error"}, view{Title: http.StatusText(status), Error: msg})
}
