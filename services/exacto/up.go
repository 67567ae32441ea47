package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/console"
	"exacto.dev/pkg/service"
	"exacto.dev/services/gateway/server"
)

func upCmd() *cobra.Command {
	var cfgPath string
	var logText bool
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the whole pipeline in one process on an embedded NATS server",
		Long: `Run the whole pipeline in one process: an embedded nats-server with JetStream
(its store under EXACTO_DATA_DIR, listening on EXACTO_NATS_LISTEN), the webhook
gateway and the admin server. With EXACTO_NATS_URL it uses that server or cluster
instead and starts none.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(cmd.Context(), cfgPath, logText, true)
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "config file (default ./exacto.yaml, else the built-in demo)")
	cmd.Flags().BoolVar(&logText, "log-text", false, "log as text instead of JSON")
	return cmd
}

func gatewayCmd() *cobra.Command {
	var cfgPath string
	var logText bool
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Run the webhook gateway alone, against EXACTO_NATS_URL",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(cmd.Context(), cfgPath, logText, false)
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "config file (default ./exacto.yaml, else the built-in demo)")
	cmd.Flags().BoolVar(&logText, "log-text", false, "log as text instead of JSON")
	return cmd
}

// run starts the configured parts and blocks until SIGINT or SIGTERM.
func run(ctx context.Context, cfgPath string, logText, embed bool) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	env, err := service.Start(ctx, service.Options{Name: "exacto", ConfigPath: cfgPath, LogText: logText, Embed: embed})
	if err != nil {
		return err
	}
	// Ctrl-C or SIGTERM: say what is drained, and when it is done (after env.Close).
	stopping := make(chan time.Time, 1)
	signalled := context.AfterFunc(ctx, func() {
		fmt.Fprintln(os.Stderr, drainNotice(embed, env.Conn.Embedded != nil))
		stopping <- time.Now()
	})
	defer func() {
		if !signalled() { // stopped by a signal, not by an error
			fmt.Fprintf(os.Stderr, "exacto: stopped in %v; events not handled yet wait in the stream for the next start\n", time.Since(<-stopping).Round(time.Millisecond))
		}
	}()
	defer env.Close()
	if !embed { // `exacto gateway`: the gateway alone
		return server.Serve(ctx, env, env.Part())
	}
	// `exacto up`: the gateway and every worker; the first to fail stops them all.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The DLQ's gauges and the operator console.
	if err := console.Operations(ctx, env); err != nil {
		return err
	}
	checkpoints, err := env.Checkpoints(ctx) // the index writer's, as the workers'
	if err != nil {
		return err
	}
	errs := make(chan error, len(workers)+1)
	var wg sync.WaitGroup
	gatewayUp := env.Part()
	ups := map[string]func(){}
	for name := range workers { // every part registered before any starts
		ups[name] = env.Part()
	}
	for name, run := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx, env, ups[name]); err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("worker %s: %w", name, err)
				cancel()
			}
		}()
	}
	err = server.RunWith(ctx, server.Options{Config: env.Config, JS: env.Conn.JS, Log: env.Log, Commit: env.Commit, Checkpoints: checkpoints, StoreDir: env.StoreDir()}, func(addr string) {
		banner(env, addr)
		gatewayUp()
	})
	cancel()
	wg.Wait()
	select {
	case werr := <-errs:
		return werr
	default:
		return err
	}
}

// drainNotice says what stopping waits for: the gateway alone (`exacto gateway`) or
// every part too (`exacto up`), and an embedded NATS when there is one.
func drainNotice(allParts, embeddedNATS bool) string {
	msg := "exacto: stopping: the gateway answers the requests in hand and takes no new ones"
	if allParts {
		msg += "; the workers (" + strings.Join(runnable(), ", ") + ") finish the attempts in hand"
	}
	if embeddedNATS {
		msg += "; then the store is synced and the embedded NATS shut down"
	}
	return msg
}

// banner prints where to point providers.
func banner(env *service.Env, httpAddr string) {
	cfg, conn, adminAddr := env.Config, env.Conn, env.AdminAddr
	w := os.Stdout
	fmt.Fprintf(w, "exacto is up (config: %s)\n", cfg.Source)
	if conn.Embedded != nil {
		dir, _ := filepath.Abs(cfg.DataDir)
		sync := "sync always (fsync before every acknowledgement)"
		if cfg.NATS.Sync != "always" {
			sync = "sync every " + cfg.NATS.Sync + " (acknowledged events of the last interval can be lost on a crash)"
		}
		fmt.Fprintf(w, "  embedded NATS  nats://%s  store %s, %s\n", conn.Embedded.Addr(), dir, sync)
	} else {
		fmt.Fprintf(w, "  NATS           %s\n", cfg.NATS.URL)
	}
	fmt.Fprintf(w, "  admin          http://%s  (/healthz /readyz /metrics)\n", adminAddr)
	switch {
	case cfg.Source == "built-in demo":
		fmt.Fprintf(w, "  console        http://%s/console/?token=%s\n", adminAddr, cfg.Console.Token.Value)
	case cfg.Console.Token.Value != "" || len(cfg.Console.Users) > 0:
		fmt.Fprintf(w, "  console        http://%s/console/\n", adminAddr)
	}
	fmt.Fprintf(w, "  workers        %s\n", strings.Join(runnable(), ", "))
	if env.Sandbox != nil {
		fmt.Fprintf(w, "  sandbox        %s  (Instantly, Smartlead and HubSpot for tenants without accounts)\n", env.Sandbox.URL)
	}
	fmt.Fprintf(w, "  point providers at:\n")
	demo := cfg.Source == "built-in demo"
	for _, t := range cfg.Tenants {
		for _, e := range t.Endpoints {
			url := fmt.Sprintf("http://%s/hooks/%s/%s", httpAddr, e.ID, e.PathToken.Value)
			if !demo {
				url = fmt.Sprintf("http://%s/hooks/%s/<path_token>", httpAddr, e.ID)
			}
			if e.PublicURL != "" && !demo {
				url = e.PublicURL
			}
			fmt.Fprintf(w, "    %-10s %-10s %s\n", t.ID, e.Provider, url)
		}
	}
	natsURL := cfg.NATS.URL
	if conn.Embedded != nil {
		natsURL = fmt.Sprintf("nats://%s", conn.Embedded.Addr())
	}
	sandboxURL := ""
	if env.Sandbox != nil {
		sandboxURL = env.Sandbox.URL
	}
	exe, _ := os.Executable()
	wd, _ := os.Getwd()
	natsCLI, natsHow := natsCLIFor(exe, wd, exec.LookPath)
	fmt.Fprint(w, tryIt(cfg, invokedAs(), httpAddr, sandboxURL, natsURL, natsCLI, natsHow))
	if demo {
		fmt.Fprintf(w, "  (demo config: its secrets are public; write exacto.yaml for real traffic)\n")
	}
}

// tryIt is the banner's commands, as they run from where exacto was started, in
// another terminal (without this one's EXACTO_ variables): a webhook to the config's
// first endpoint, then the stream it landed in.
func tryIt(cfg *config.Config, self, httpAddr, sandboxURL, natsURL, natsCLI, natsHow string) string {
	var e *config.Endpoint
	for i := range cfg.Tenants {
		if len(cfg.Tenants[i].Endpoints) > 0 {
			e = &cfg.Tenants[i].Endpoints[0]
			break
		}
	}
	if e == nil {
		return ""
	}
	flags := ""
	if cfg.Source != "built-in demo" && cfg.Source != config.DefaultFile {
		flags += " --config " + shellQuote(cfg.Source)
	}
	// Where this process listens may come from its environment: said, not assumed.
	if _, set := os.LookupEnv("EXACTO_HTTP_ADDR"); set || httpAddr != dialable(cfg.HTTPAddr) {
		flags += " --gateway http://" + httpAddr
	}
	_, addrSet := os.LookupEnv("EXACTO_SANDBOX_ADDR")
	if _, urlSet := os.LookupEnv("EXACTO_SANDBOX_URL"); sandboxURL != "" && (addrSet || urlSet || sandboxURL != "http://"+dialable(cfg.SandboxAddr)) {
		flags += " --sandbox " + sandboxURL
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  try it (another terminal, this directory):\n    %s send --endpoint %s%s\n", self, e.ID, flags)
	if natsCLI != "" {
		fmt.Fprintf(&b, "    %s --server %s stream info EXACTO_EVENTS\n", natsCLI, natsURL)
	} else {
		fmt.Fprintf(&b, "    (to look at the stream with the stock nats CLI: %s --server %s stream info EXACTO_EVENTS)\n", natsHow, natsURL)
	}
	showFlag := ""
	if natsURL != nats.DefaultURL {
		showFlag = " --nats-url " + natsURL
	}
	fmt.Fprintf(&b, "    (then %s events show ID%s, with an id it answered: the event, its arrivals, its status in every worker)\n", self, showFlag)
	return b.String()
}

// invokedAs is how to run this binary again from the working directory: as it was
// started (./bin/exacto under make run, exacto from PATH), or through go run.
func invokedAs() string {
	self := os.Args[0]
	switch {
	case strings.Contains(self, "go-build"):
		return "go run ./services/exacto"
	case filepath.IsAbs(self):
		if wd, err := os.Getwd(); err == nil {
			return fromWD(wd, self)
		}
	}
	return shellQuote(self)
}

// natsCLIFor is the nats CLI as the banner can name it from wd for the binary exe:
// beside exe (make bin/nats puts it beside bin/exacto), or in wd's bin/ (go run from a
// checkout), else one on PATH; else "" and how to get it — make in the checkout exe
// was built in or wd is, else go install.
func natsCLIFor(exe, wd string, lookPath func(string) (string, error)) (cli, howTo string) {
	var checkouts []string
	if exe != "" {
		if st, err := os.Stat(filepath.Join(filepath.Dir(exe), "nats")); err == nil && !st.IsDir() {
			return fromWD(wd, filepath.Join(filepath.Dir(exe), "nats")), ""
		}
		if filepath.Base(filepath.Dir(exe)) == "bin" {
			checkouts = append(checkouts, filepath.Dir(filepath.Dir(exe)))
		}
	}
	checkouts = append(checkouts, wd)
	for _, c := range checkouts {
		if st, err := os.Stat(filepath.Join(c, "bin", "nats")); err == nil && !st.IsDir() {
			return fromWD(wd, filepath.Join(c, "bin", "nats")), ""
		}
	}
	if _, err := lookPath("nats"); err == nil {
		return "nats", ""
	}
	for _, c := range checkouts {
		if _, err := os.Stat(filepath.Join(c, "Makefile")); err == nil {
			make := "make -C " + fromWD(wd, c) + " bin/nats"
			if c == wd {
				make = "make bin/nats"
			}
			return "", make + ", then " + fromWD(wd, filepath.Join(c, "bin", "nats"))
		}
	}
	return "", "go install github.com/nats-io/natscli/nats@" + natsCLIVersion + ", then nats"
}

// natsCLIVersion is the nats CLI the Makefile's bin/nats installs.
const natsCLIVersion = "v0.5.0"

// fromWD names path as a command run from wd can: relative below wd, else absolute.
func fromWD(wd, path string) string {
	if rel, err := filepath.Rel(wd, path); err == nil && !strings.HasPrefix(rel, "..") {
		return shellQuote("./" + rel)
	}
	return shellQuote(path)
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:=@", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
