// Package console is the operator console on the admin address: event search with
// each event's status in every consumer, the dead-letter queue with replay and
// discard, the quarantine of deliveries the gateway could not turn into events with
// replay, the reconciliation diff queue with approve and reject, and a live overview.
//
// It is server-rendered HTML (html/template, embedded; no build step, no script): every
// page works without JavaScript, and the overview refreshes itself with a meta refresh.
//
// Access: the console is served only when config console.token or console.users is
// set. A request authenticates with "Authorization: Bearer <token>", with basic auth
// (a console user), or with the session cookie a browser gets by signing in on the
// login page every page shows a browser without credentials (token, or user and
// password; failed sign-ins, by any means, limited per client address) or by opening any page once with
// ?token=<token> (the console then redirects to the same page without it, so the token
// stays out of the history). Credentials are compared as SHA-256 digests in
// constant time. Every POST carries a CSRF token bound to the credential it came with
// (an HMAC of the session, the basic-auth user or the bearer token under a key made at
// start-up), and a cross-origin Origin header is refused. Pages never show a secret:
// the config's tokens, keys and passwords are never handed to a template, and
// html/template escapes every value the events carry.
package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/dlq"
	"exacto.dev/pkg/forwarded"
	"exacto.dev/pkg/quarantine"
	"exacto.dev/pkg/reconcile"
)

// Prefix is where Mount serves the console.
const Prefix = "/console/"

// ErrNotConfigured is New's answer when the config names neither a console token nor
// a console user: the console is then not served.
var ErrNotConfigured = errors.New("console: no console.token or console.users configured; not served")

// DiffQueue is what the console needs of the reconciler's diff queue
// (*reconcile.Queue).
type DiffQueue interface {
	List(ctx context.Context, f reconcile.Filter) ([]reconcile.Finding, error)
	Decide(ctx context.Context, tenant, id string, approve bool, who, why string) (reconcile.Finding, error)
}

// Options are the console's dependencies.
type Options struct {
	JS     jetstream.JetStream
	Config *config.Config
	// Metrics is the admin address's handler serving GET /metrics (the admin mux
	// itself will do); the overview reads the gateway's counters from it in process.
	// Nil: those figures show as unknown.
	Metrics http.Handler
	// Breakers reports the circuit breakers' states by dependency (BreakerStates
	// builds one from consumer.Breakers); nil shows them as unknown.
	Breakers func() map[string]string
	// Diffs is the diff queue; nil opens reconcile's over js.
	Diffs DiffQueue
	Log   *slog.Logger
	// SearchDepth is how many of the most recent events a search reads (default 5000).
	SearchDepth int
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Sample, when set, samples the overview's hour (backlogs, ages, dead letters)
	// every 30 s until it ends; without it only the overview's own renders sample.
	Sample context.Context
}

// BreakerStates reads b's state for each dependency named.
func BreakerStates(b *consumer.Breakers, deps ...string) func() map[string]string {
	return func() map[string]string {
		out := make(map[string]string, len(deps))
		for _, d := range deps {
			out[d] = b.State(d).String()
		}
		return out
	}
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

type console struct {
	o   Options
	js  jetstream.JetStream
	cfg *config.Config
	// proxies are trusted_proxies: whose X-Forwarded-For and -Proto are believed.
	proxies forwarded.Trusted
	dlq     *dlq.Queue
	// quarantine keeps the verified deliveries the gateway could not turn into events;
	// replays run under this process's config.
	quarantine *quarantine.Store
	diffs      DiffQueue
	log        *slog.Logger
	pages      map[string]*template.Template
	token      [32]byte // SHA-256 of the bearer token; zero when none
	hasTok     bool
	users      map[string][32]byte
	key        [32]byte // CSRF and session key, made at start-up
	mu         sync.Mutex
	session    map[string]session
	failed     map[string][]time.Time // failed sign-ins of the last loginWindow, by client address
	hour       hour                   // the overview's last hour of samples
}

type session struct {
	user    string
	shared  bool // opened with the shared token: names nobody
	expires time.Time
}

const (
	cookieName = "exacto_console"
	sessionTTL = 12 * time.Hour
	maxSession = 1000
)

// New builds the console's handler, which serves paths under Prefix. It returns
// ErrNotConfigured when the config protects no console.
func New(o Options) (http.Handler, error) {
	if o.Config == nil || o.JS == nil {
		return nil, errors.New("console: Config and JS are required")
	}
	cc := o.Config.Console
	if cc.Token.Value == "" && len(cc.Users) == 0 {
		return nil, ErrNotConfigured
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.SearchDepth <= 0 {
		o.SearchDepth = 5000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	c := &console{o: o, js: o.JS, cfg: o.Config, proxies: o.Config.Proxies(), log: o.Log, users: map[string][32]byte{}, session: map[string]session{}, failed: map[string][]time.Time{}}
	if cc.Token.Value != "" {
		c.token, c.hasTok = sha256.Sum256([]byte(cc.Token.Value)), true
	}
	for name, pw := range cc.Users {
		if name == "" || pw.Value == "" {
			return nil, fmt.Errorf("console: user %q has no password", name)
		}
		c.users[name] = sha256.Sum256([]byte(pw.Value))
	}
	if _, err := rand.Read(c.key[:]); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q, err := dlq.New(ctx, o.JS, o.Config.DLQ)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	c.dlq = q
	if c.quarantine, err = quarantine.New(ctx, o.JS); err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	c.diffs = o.Diffs
	if c.diffs == nil {
		rq, err := reconcile.OpenQueue(ctx, o.JS)
		if err != nil {
			return nil, fmt.Errorf("console: %w", err)
		}
		d, err := consumer.NewDeriver(ctx, o.JS)
		if err != nil {
			return nil, fmt.Errorf("console: %w", err)
		}
		rq.Publish, rq.Fresh = d.Publish, o.Config.DLQ.Fresh
		c.diffs = rq
	}
	if c.pages, err = parsePages(); err != nil {
		return nil, err
	}
	if o.Sample != nil {
		go c.sampling(o.Sample)
	}

	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET "+Prefix+"static/", http.StripPrefix(Prefix+"static/", http.FileServerFS(static)))
	mux.HandleFunc("POST "+Prefix+"login", c.login)
	mux.Handle("GET "+Prefix+"{$}", c.auth(c.overview))
	mux.Handle("GET "+Prefix+"events", c.auth(c.search))
	mux.Handle("GET "+Prefix+"events/{id}", c.auth(c.event))
	mux.Handle("GET "+Prefix+"dlq", c.auth(c.dlqList))
	mux.Handle("GET "+Prefix+"dlq/{seq}", c.auth(c.letter))
	mux.Handle("POST "+Prefix+"dlq/{seq}/replay", c.auth(c.post(c.replay)))
	mux.Handle("POST "+Prefix+"dlq/{seq}/discard", c.auth(c.post(c.discard)))
	mux.Handle("GET "+Prefix+"rejected", c.auth(c.rejected))
	mux.Handle("GET "+Prefix+"quarantine", c.auth(c.quarantineList))
	mux.Handle("GET "+Prefix+"quarantine/{id}", c.auth(c.quarantined))
	mux.Handle("POST "+Prefix+"quarantine/{id}/replay", c.auth(c.post(c.quarantineReplay)))
	mux.Handle("GET "+Prefix+"diffs", c.auth(c.diffList))
	mux.Handle("POST "+Prefix+"diffs/{tenant}/{id}", c.auth(c.post(c.decide)))
	mux.Handle(Prefix, c.auth(func(w http.ResponseWriter, r *http.Request, _ who) {
		c.fail(w, r, http.StatusNotFound, "no such page")
	}))
	return headers(mux), nil
}

// Mount serves h under Prefix on mux (and redirects /console to it); a nil h (the
// console not configured) mounts nothing.
func Mount(mux *http.ServeMux, h http.Handler) {
	if h == nil {
		return
	}
	mux.Handle(Prefix, h)
	mux.Handle("GET /console", http.RedirectHandler(Prefix, http.StatusMovedPermanently))
}

// headers sets what every answer carries: no caching, no framing, no script, a
// referrer only to the console itself (a page's URL may hold a search; a same-origin
// form then carries its own Origin, where no-referrer makes browsers send "null").
func headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// who is the authenticated operator: name is recorded in DLQ and diff decisions;
// binding is what the CSRF token is bound to. shared: the shared console token (a
// bearer or a session it opened), which names nobody: each decision then says who.
type who struct {
	name    string
	binding string
	shared  bool
}

// maxName bounds the name an operator of the shared token gives, in characters.
const maxName = 64

// decider is who a decision posted by u is recorded as: a console user's name, or for
// the shared token the name the form gives (field "by"), marked as given by the token.
// It refuses a decision without who or why (the form's "why"), by dlq.NeedWhoWhy, as
// every replay, discard and diff decision needs both.
func decider(r *http.Request, u who) (string, error) {
	by := u.name
	if u.shared {
		by = strings.TrimSpace(r.PostForm.Get("by"))
	}
	if err := dlq.NeedWhoWhy(by, r.PostForm.Get("why")); err != nil {
		if u.shared && errors.Is(err, dlq.ErrNoWho) {
			return "", fmt.Errorf("%w: signed in with the shared console token, give your name", err)
		}
		return "", err
	}
	if !u.shared {
		return by, nil
	}
	if utf8.RuneCountInString(by) > maxName || strings.ContainsFunc(by, unicode.IsControl) {
		return "", fmt.Errorf("a name is at most %d characters, with no control character", maxName)
	}
	return by + " (console token)", nil
}

type page func(w http.ResponseWriter, r *http.Request, u who)

func digestEq(a [32]byte, v string) bool {
	d := sha256.Sum256([]byte(v))
	return subtle.ConstantTimeCompare(a[:], d[:]) == 1
}

// authenticate returns the operator of r, if its credentials hold.
func (c *console) authenticate(r *http.Request) (who, bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		if tok, ok := strings.CutPrefix(h, "Bearer "); ok {
			if c.hasTok && digestEq(c.token, strings.TrimSpace(tok)) {
				return who{name: "console", binding: "bearer", shared: true}, true
			}
			return who{}, false
		}
		if user, pw, ok := r.BasicAuth(); ok {
			// Every user's digest is compared, so the time does not tell which exist.
			match := ""
			for name, d := range c.users {
				if digestEq(d, pw) && subtle.ConstantTimeCompare([]byte(name), []byte(user)) == 1 {
					match = name
				}
			}
			if match != "" {
				return who{name: match, binding: "basic:" + match}, true
			}
			return who{}, false
		}
	}
	if ck, err := r.Cookie(cookieName); err == nil && ck.Value != "" {
		sid := sha256.Sum256([]byte(ck.Value))
		key := base64.RawURLEncoding.EncodeToString(sid[:])
		c.mu.Lock()
		s, ok := c.session[key]
		if ok && c.o.Now().After(s.expires) {
			delete(c.session, key)
			ok = false
		}
		c.mu.Unlock()
		if ok {
			return who{name: s.user, binding: "session:" + key, shared: s.shared}, true
		}
	}
	return who{}, false
}

// tokenLink turns a valid ?token= (the link `exacto up` prints) into a session cookie
// and redirects to the same URL without the token. It reports whether it answered.
func (c *console) tokenLink(w http.ResponseWriter, r *http.Request) bool {
	tok := c.linkToken(r)
	if tok == "" || r.Method != http.MethodGet || !c.hasTok || !digestEq(c.token, tok) {
		return false
	}
	c.startSession(w, r, "console", true)
	q := r.URL.Query()
	q.Del("token")
	u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
	http.Redirect(w, r, u.String(), http.StatusSeeOther)
	return true
}

// linkToken is the ?token= of a link followed from the console or opened directly (a
// terminal, the address bar). Another site's page is not heard, where the browser says
// it is another's (Sec-Fetch-Site: https and localhost origins): its links and images
// would otherwise sign a browser in, or spend its address's failed sign-ins.
func (c *console) linkToken(r *http.Request) string {
	if !c.sameOrigin(r) {
		return ""
	}
	return r.URL.Query().Get("token")
}

// startSession gives the browser a session cookie for user.
func (c *console) startSession(w http.ResponseWriter, r *http.Request, user string, shared bool) {
	raw := make([]byte, 32)
	rand.Read(raw)
	value := base64.RawURLEncoding.EncodeToString(raw)
	sid := sha256.Sum256([]byte(value))
	now := c.o.Now()
	c.mu.Lock()
	for k, s := range c.session {
		if now.After(s.expires) {
			delete(c.session, k)
		}
	}
	if len(c.session) >= maxSession {
		for k := range c.session { // drop one at random rather than grow without bound
			delete(c.session, k)
			break
		}
	}
	c.session[base64.RawURLEncoding.EncodeToString(sid[:])] = session{user: user, shared: shared, expires: now.Add(sessionTTL)}
	c.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: value, Path: Prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: c.proxies.Scheme(r) == "https", MaxAge: int(sessionTTL / time.Second)})
}

// loginData is the login page's: which credentials the console takes, where to go next.
type loginData struct {
	Token, Users bool
	Next, User   string
}

// loginPage answers a browser without credentials with the login form (401: the
// answer is still a refusal), instead of a bare 401 or a basic-auth dialog.
func (c *console) loginPage(w http.ResponseWriter, r *http.Request, status int, next, user, msg string) {
	c.render(w, status, "login", who{binding: "login"}, view{Title: "Sign in", Error: msg,
		Data: loginData{Token: c.hasTok, Users: len(c.users) > 0, Next: next, User: user}})
}

// wantsPage says whether r is a browser asking for a page (it is shown the login
// form) rather than a client of the API (it gets a plain 401 and how to authenticate).
func wantsPage(r *http.Request) bool {
	return r.Method == http.MethodGet && r.Header.Get("Authorization") == "" && strings.Contains(r.Header.Get("Accept"), "text/html")
}

// safeNext is where a login goes on to: a console path, else the overview.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return Prefix
	}
	return next
}

// Failed sign-ins are limited per client address — the form, ?token=, a bearer token
// and basic auth alike — so a token or password is not guessed at the console's pace,
// and one client's guesses do not lock out another (behind a proxy of trusted_proxies
// the client's address is the one the proxy forwards).
const (
	loginFailures = 20
	loginWindow   = time.Minute
	loginClients  = 10000 // addresses remembered at most
)

// proxyFailures are the failed sign-ins a trusted proxy's clients may make together in
// a loginWindow: a backstop, since a proxy that passes X-Forwarded-For on as the client
// wrote it (rather than appending the address it saw) lets a guesser name a new
// client each time. Its price: a flood of failures through one proxy refuses that
// proxy's sign-ins for the rest of the minute (sessions open keep working), where
// before every client behind it shared a client's count of 20.
const proxyFailures = 10 * loginFailures

// failureCounts are the counts a sign-in of r's counts in, with their limits: its
// client's (an IPv6 client's /64, which one host holds whole), and through a proxy
// that proxy's too.
func (c *console) failureCounts(r *http.Request) map[string]int {
	client := c.proxies.Client(r)
	counts := map[string]int{clientKey(client): loginFailures}
	if peer := forwarded.Peer(r); peer != client {
		counts[viaKey+peer] = proxyFailures
	}
	return counts
}

// viaKey begins a proxy's count.
const viaKey = "via "

// clientKey is what a client's failures are counted by: its address, an IPv6 one's /64.
func clientKey(addr string) string {
	if a, err := netip.ParseAddr(addr); err == nil && a.Is6() && !a.Is4In6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return addr
}

// limited says whether r's client, or the proxy it came through, failed to sign in as
// often as it may in the last loginWindow.
func (c *console) limited(r *http.Request) bool {
	now := c.o.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	over := false
	for who, limit := range c.failureCounts(r) {
		c.failed[who] = slices.DeleteFunc(c.failed[who], func(t time.Time) bool { return now.Sub(t) > loginWindow })
		if len(c.failed[who]) == 0 {
			delete(c.failed, who)
		}
		over = over || len(c.failed[who]) >= limit
	}
	return over
}

// failedSignIn counts a failed sign-in of r's client (and proxy).
func (c *console) failedSignIn(r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for who := range c.failureCounts(r) {
		if _, known := c.failed[who]; !known && len(c.failed) >= loginClients {
			for k := range c.failed { // forget a client at random rather than grow without bound
				if !strings.HasPrefix(k, viaKey) {
					delete(c.failed, k)
					break
				}
			}
		}
		c.failed[who] = append(c.failed[who], c.o.Now())
	}
}

// login checks the login form's token, or user and password, and opens a session.
func (c *console) login(w http.ResponseWriter, r *http.Request) {
	if !c.readForm(w, r) {
		return
	}
	next, user := safeNext(r.PostForm.Get("next")), strings.TrimSpace(r.PostForm.Get("user"))
	if c.limited(r) {
		w.Header().Set("Retry-After", strconv.Itoa(int(loginWindow/time.Second)))
		c.loginPage(w, r, http.StatusTooManyRequests, next, user, "too many failed sign-ins in the last minute: wait a minute and try again")
		return
	}
	if tok := r.PostForm.Get("token"); tok != "" && c.hasTok && digestEq(c.token, tok) {
		c.startSession(w, r, "console", true)
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	if pw := r.PostForm.Get("password"); user != "" && pw != "" {
		match := "" // every user's digest compared, as basic auth does
		for name, d := range c.users {
			if digestEq(d, pw) && subtle.ConstantTimeCompare([]byte(name), []byte(user)) == 1 {
				match = name
			}
		}
		if match != "" {
			c.startSession(w, r, match, false)
			http.Redirect(w, r, next, http.StatusSeeOther)
			return
		}
	}
	c.failedSignIn(r)
	c.loginPage(w, r, http.StatusUnauthorized, next, user, "not signed in: wrong token, user or password")
}

func (c *console) auth(p page) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Credentials offered (a header or a ?token= link) count as a sign-in: limited,
		// and a wrong one counted.
		offered := r.Header.Get("Authorization") != "" || c.linkToken(r) != ""
		if offered && c.limited(r) {
			w.Header().Set("Retry-After", strconv.Itoa(int(loginWindow/time.Second)))
			http.Error(w, "429 too many failed sign-ins in the last minute: wait a minute", http.StatusTooManyRequests)
			return
		}
		if c.tokenLink(w, r) {
			return
		}
		u, ok := c.authenticate(r)
		if !ok && offered {
			c.failedSignIn(r)
		}
		if !ok && wantsPage(r) {
			c.loginPage(w, r, http.StatusUnauthorized, r.URL.RequestURI(), "", "")
			return
		}
		if !ok {
			if len(c.users) > 0 {
				w.Header().Set("WWW-Authenticate", `Basic realm="exacto console", charset="UTF-8"`)
			} else {
				w.Header().Set("WWW-Authenticate", `Bearer realm="exacto console"`)
			}
			http.Error(w, "401 unauthorized: the console needs its token (Authorization: Bearer, or ?token= once) or a console user", http.StatusUnauthorized)
			return
		}
		p(w, r, u)
	})
}

// csrf is the token a form of u's must carry.
func (c *console) csrf(u who) string {
	m := hmac.New(sha256.New, c.key[:])
	m.Write([]byte("csrf\x00" + u.binding))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// maxForm bounds a console form: a why and a few fields.
const maxForm = 64 << 10

// readForm reads a same-origin form of at most maxForm, answering and reporting false
// when it cannot.
func (c *console) readForm(w http.ResponseWriter, r *http.Request) bool {
	if r.ContentLength > maxForm {
		// Refused unread: a body announced past the limit and trickled in would hold
		// the connection until the read timeout.
		w.Header().Set("Connection", "close")
		c.fail(w, r, http.StatusRequestEntityTooLarge, "the form is too large")
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, http.StatusBadRequest, "unreadable form")
		return false
	}
	if !c.sameOrigin(r) {
		c.fail(w, r, http.StatusForbidden, "cross-origin request refused")
		return false
	}
	return true
}

// sameOrigin: a form posted from the console's own pages, or by a client that is no
// browser (it sends neither header). A browser's Sec-Fetch-Site says so itself (it is
// sent to https and localhost origins, and no page can set it); without it, the Origin
// must name the console: the Host asked for, a name of admin_hosts, or the
// X-Forwarded-Host of a trusted proxy (a proxy that rewrites Host to its upstream's).
// "null" is refused: the console's pages send their origin, and null is what a
// sandboxed frame or a no-referrer page elsewhere sends.
func (c *console) sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin":
		return true
	case "", "none":
	default: // cross-site, same-site (a sibling host)
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	ou, err := url.Parse(o)
	if err != nil || o == "null" || ou.Host == "" {
		return false
	}
	// A name of admin_hosts at its scheme's own port: the console behind its proxy, not
	// another site on another port of the same name.
	if ou.Host == r.Host || ou.Port() == "" && slices.ContainsFunc(c.cfg.AdminHosts, func(n string) bool { return strings.EqualFold(n, ou.Hostname()) }) {
		return true
	}
	fh := c.proxies.Host(r)
	return fh != "" && strings.EqualFold(fh, ou.Host)
}

// post guards a state change: a same-origin request carrying u's CSRF token.
func (c *console) post(p page) page {
	return func(w http.ResponseWriter, r *http.Request, u who) {
		if !c.readForm(w, r) {
			return
		}
		if got := r.PostForm.Get("csrf"); got == "" || !hmac.Equal([]byte(got), []byte(c.csrf(u))) {
			c.fail(w, r, http.StatusForbidden, "missing or wrong CSRF token: reload the page and try again")
			return
		}
		p(w, r, u)
	}
}
