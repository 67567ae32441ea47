package tests

import (
	"bytes"
	"context"
	"flag"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/console"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/stream"
	crmwriter "exacto.dev/services/crmwriter/handler"
)

// chromiumPath is Debian's chromium, which .ci/run installs.
const chromiumPath = "/usr/bin/chromium"

// screenshotDir is where the console test's screenshots go: the test's artifact
// directory with `go test -artifacts`, else EXACTO_TEST_OUTPUT, else
// $TMPDIR/exacto-console-screenshots (kept after the test).
func screenshotDir(t *testing.T) string {
	t.Helper()
	if f := flag.Lookup("test.artifacts"); f != nil && f.Value.String() == "true" {
		return t.ArtifactDir()
	}
	dir := os.Getenv("EXACTO_TEST_OUTPUT")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "exacto-console-screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// consoleToken is the browser tests' console token.
const consoleToken = "console-token-for-the-browser-test"

// consoleServer serves p's console on loopback, behind consoleToken.
func consoleServer(t *testing.T, p *pipeline) *httptest.Server {
	t.Helper()
	cfg := *p.env.Config
	cfg.Console = config.Console{Token: config.Secret{Ref: "env:EXACTO_CONSOLE_TOKEN", Value: consoleToken}}
	// No Metrics handler: installing one would replace the global meter provider other
	// tests of this package read (pkg/console's own tests cover reading /metrics), so
	// the gateway's counters show as "not in this process" here.
	h, err := console.New(console.Options{JS: p.conn.JS, Config: &cfg, Log: p.env.Log})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	console.Mount(mux, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// browser is a headless Chromium for one test, with its steps, texts and screenshots.
type browser struct {
	t   *testing.T
	ctx context.Context
	dir string
}

// openBrowser starts Debian's chromium (headless, 1400 x 1000) for the test's length.
func openBrowser(t *testing.T) *browser {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("%s is missing (%v): the console test needs Debian's chromium; make test installs it (scripts/test-deps)", chromiumPath, err)
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	)
	t.Cleanup(cancelAlloc)
	br, cancelBrowser := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(br); err != nil { // starts the browser, with no deadline
		t.Fatalf("starting %s: %v", chromiumPath, err)
	}
	// The session's whole length: pages wait for consumers, which share the machine
	// with every other test of the package.
	ctx, cancel := context.WithTimeout(br, 4*time.Minute)
	t.Cleanup(cancel)
	return &browser{t: t, ctx: ctx, dir: screenshotDir(t)}
}

// shot saves a screenshot of the whole page as name.png.
func (b *browser) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n")) || len(png) < 1024 {
		b.t.Fatalf("screenshot %s is not a page's PNG (%d bytes)", name, len(png))
	}
	path := filepath.Join(b.dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
}

// do runs steps, failing the test with where the browser was.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		loc, _ := chromedp.Run(b.ctx, chromedp.Location())
		b.t.Fatalf("%s (at %s): %v", what, loc, err)
	}
}

// text is the visible text of the first element sel matches.
func (b *browser) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// The console case in a real headless Chromium: a reply HubSpot rejects is
// dead-lettered; an operator logs in with the token, finds the event by its id and by
// the contact's e-mail, sees it dead-lettered in the crmwriter, opens the DLQ and the
// letter, replays it with a why once the cause is fixed, and sees it completed on the
// event page; then opens a quarantined delivery. Every page is screenshotted.
func TestConsoleInChromium(t *testing.T) {
	p := startPipeline(t)
	p.sb.SetNoteWriteFault(sandbox.Fault{Status: 400})
	p.start(stream.CRMWriter, crmwriter.Run)
	const contact = "dora@northwind.example"
	id := p.post(instantlyEvent("reply_received", contact, campaign, "em-console-1", "Sounds good <b>call me</b>", time.Now()))[0]
	eventually(t, 30*time.Second, id+" dead-lettered", func() bool { return p.status(stream.CRMWriter, id).Status == guard.DeadLetter })

	srv := consoleServer(t, p)
	token := consoleToken

	b := openBrowser(t)
	ctx, do, text, shot := b.ctx, b.do, b.text, b.shot

	// Log in once with the token: the console sets its cookie and drops the token.
	do("overview", chromedp.Navigate(srv.URL+"/console/?token="+url.QueryEscape(token)), chromedp.WaitVisible(chromedp.CSS("h1")))
	if loc, _ := chromedp.Run(ctx, chromedp.Location()); strings.Contains(loc, token) {
		t.Fatalf("the token stayed in the URL: %s", loc)
	}
	if h1 := text("h1"); h1 != "Overview" {
		t.Fatalf("overview heading %q", h1)
	}
	if body := text("main"); !strings.Contains(body, "crmwriter") || !strings.Contains(body, "open dead letters") {
		t.Fatalf("overview:\n%s", body)
	}
	shot("01-overview")

	// Search by envelope id, through the header's search form.
	do("search by id",
		chromedp.SetValue(chromedp.CSS(`header input[name="q"]`), id),
		chromedp.Submit(chromedp.CSS(`header form.search`)),
		chromedp.WaitVisible(chromedp.CSS("#results")))
	if r := text("#results"); !strings.Contains(r, id) || !strings.Contains(r, contact) {
		t.Fatalf("search by id:\n%s", r)
	}
	shot("02-search-by-id")

	// Search by the contact's e-mail.
	do("search by e-mail", chromedp.Navigate(srv.URL+"/console/events?q="+url.QueryEscape(contact)), chromedp.WaitVisible(chromedp.CSS("#results")))
	if r := text("#results"); !strings.Contains(r, id) {
		t.Fatalf("search by e-mail:\n%s", r)
	}
	shot("03-search-by-email")

	// The event: dead-lettered in the crmwriter, with HubSpot's error; the reply's
	// markup is shown as text.
	do("event page", chromedp.Click(chromedp.CSS(`#results a[href="/console/events/`+id+`"]`)), chromedp.WaitVisible(chromedp.CSS("#consumers")))
	if row := text(`tr[data-consumer="crmwriter"]`); !strings.Contains(row, "dead_letter") || !strings.Contains(row, "400") {
		t.Fatalf("crmwriter row on the event page: %s", row)
	}
	if msg := text("dd.message"); !strings.Contains(msg, "<b>call me</b>") {
		t.Fatalf("the reply text is not shown as text: %q", msg)
	}
	shot("04-event-dead-lettered")

	// The DLQ, then the letter.
	do("dlq", chromedp.Click(chromedp.CSS(`header nav a[href="/console/dlq"]`)), chromedp.WaitVisible(chromedp.CSS("#letters")))
	if r := text("#letters"); !strings.Contains(r, "crmwriter") || !strings.Contains(r, "sdr-team") || !strings.Contains(r, "permanent") {
		t.Fatalf("dlq list:\n%s", r)
	}
	shot("05-dlq")
	do("letter", chromedp.Click(chromedp.CSS(`#letters a`)), chromedp.WaitVisible(chromedp.CSS("#replay-form")))
	if s := text("#letter-status"); s != "open" {
		t.Fatalf("letter status %q", s)
	}
	if ev := text("#event-link"); ev != id {
		t.Fatalf("letter's event %q", ev)
	}
	shot("06-dead-letter")
	letterURL, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}

	// The cause is fixed; replay, saying who (the shared token names nobody) and why.
	p.sb.ClearFaults()
	do("replay",
		chromedp.SetValue(chromedp.CSS("#replay-by"), "ana"),
		chromedp.SetValue(chromedp.CSS("#replay-why"), "HubSpot property fixed"),
		chromedp.Click(chromedp.CSS("#replay")),
		chromedp.WaitVisible(chromedp.CSS("#notice")))
	if n := text("#notice"); !strings.Contains(n, "replayed") {
		t.Fatalf("after the replay: %s", n)
	}
	if s := text("#letter-status"); s != "replayed" {
		t.Fatalf("letter status after the replay %q", s)
	}
	if hist := text("#history"); !strings.Contains(hist, "HubSpot property fixed") || !strings.Contains(hist, "ana (console token)") || !strings.Contains(hist, "sent back") {
		t.Fatalf("history: %s", hist)
	}
	shot("07-replayed")

	// The event page shows it completed in the crmwriter.
	do("event after the replay", chromedp.Click(chromedp.CSS("#event-link")), chromedp.WaitVisible(chromedp.CSS("#consumers")))
	deadline := time.Now().Add(30 * time.Second)
	for {
		row := text(`tr[data-consumer="crmwriter"]`)
		if strings.Contains(row, "completed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the event page never showed it completed in crmwriter: %s", row)
		}
		time.Sleep(300 * time.Millisecond)
		do("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#consumers")))
	}
	// Its history of attempts: the dead-lettered attempt, then the replay's.
	for deadline := time.Now().Add(10 * time.Second); ; {
		a := text("#attempts")
		if strings.Contains(a, "dead_letter") && strings.Contains(a, "completed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the event's history of attempts: %s", a)
		}
		time.Sleep(300 * time.Millisecond)
		do("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#attempts")))
	}
	shot("08-event-completed")
	// The letter says what the replay achieved: the event completed in the crmwriter.
	do("the letter again", chromedp.Navigate(letterURL), chromedp.WaitVisible(chromedp.CSS("#event-now")))
	if now := text("#event-now"); now != "completed" {
		t.Fatalf("the letter's event now: %q", now)
	}
	shot("08b-letter-after-replay")

	// The diff queue renders (empty here: no reconciliation ran).
	do("diffs", chromedp.Click(chromedp.CSS(`header nav a[href="/console/diffs"]`)), chromedp.WaitVisible(chromedp.CSS("h1")))
	if h1 := text("h1"); h1 != "Reconciliation diffs" {
		t.Fatalf("diffs heading %q", h1)
	}
	shot("09-diffs")
	if n := len(p.notesFor(id)); n != 1 {
		t.Fatalf("%d HubSpot notes after the replay", n)
	}

	// A delivery its parser refuses is quarantined; the Quarantine page lists it and its
	// page shows why, its headers and its body as text.
	p.mu.Lock()
	hook := p.gwURL + "/hooks/instantly/tok-instantly-0123456789"
	p.mu.Unlock()
	resp, err := http.Post(hook, "application/json", strings.NewReader(`{"event_type":"reply_received","reply_text":"<b>truncated`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("the unparseable delivery: %d", resp.StatusCode)
	}
	do("quarantine", chromedp.Click(chromedp.CSS(`header nav a[href="/console/quarantine"]`)), chromedp.WaitVisible(chromedp.CSS("#quarantined")))
	if r := text("#quarantined"); !strings.Contains(r, "malformed_body") || !strings.Contains(r, "instantly") || !strings.Contains(r, "open") {
		t.Fatalf("quarantine list:\n%s", r)
	}
	shot("10-quarantine")
	do("quarantined delivery", chromedp.Click(chromedp.CSS(`#quarantined a`)), chromedp.WaitVisible(chromedp.CSS("#replay-form")))
	if b := text("#body"); !strings.Contains(b, `"reply_text":"<b>truncated`) {
		t.Fatalf("the body is not shown as text: %q", b)
	}
	if v := text("#replay-verdict"); !strings.Contains(v, "would be refused: still refused: malformed_body") {
		t.Fatalf("replay verdict: %q", v)
	}
	shot("11-quarantined")
}
