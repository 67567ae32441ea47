package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/platform/sandbox"
	"exacto.dev/pkg/providers/instantly"
	"exacto.dev/pkg/stream"
)

func simulateCmd() *cobra.Command {
	var file, gateway, natsURL, sandboxURL, admin, endpoint, tenant, configFile string
	var drain time.Duration
	cmd := &cobra.Command{
		Use:   "simulate --scenario FILE",
		Short: "Replay a campaign's event map against a running Exacto and check its invariants",
		Long: `Replay a scenario (a YAML file of contacts, a story of events and faults: duplicates,
reorderings, delays, timeouts after commit, outages) against a running Exacto and its
sandbox of the platforms, wait until the consumers have drained, and report each
invariant as HELD or BROKEN with the events or contacts that broke it:

  1. every delivery is eventually answered 200 (retried like a provider would)
  2. every replied or unsubscribed contact is stopped at the platform exactly once
     (an unsubscribed or bounced one may be stopped by its block alone: then its lead
     is not active)
  3. every replied contact has exactly one CRM note, the note of its reply, and no
     other contact has one
  4. every reply's note has an owner, or the reply is counted as without one
     (exacto_replies_without_owner_total, read from the admin address's /metrics)
  5. every unsubscribed or bounced contact is on the suppression list
  6. nothing is stored twice: each delivered event is in the stream once
  7. the live projections equal a rebuild from the stream

The exit code is 0 when every invariant held, 1 otherwise.`,
		Example: "  exacto simulate --scenario deployments/scenarios/noisy-campaign.yaml",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			sc, err := loadScenario(file)
			if err != nil {
				return err
			}
			cfg, cfgErr := config.LoadPartial(configFile, os.Getenv)
			if err := sc.target(cfg, cfgErr, endpoint, tenant); err != nil {
				return err
			}
			js, closeConn, err := dial(natsURL)
			if err != nil {
				return err
			}
			defer closeConn()
			sim := &simulation{sc: sc, gateway: strings.TrimRight(gateway, "/"), sandbox: strings.TrimRight(sandboxURL, "/"),
				admin: strings.TrimRight(admin, "/"), js: js, out: cmd.OutOrStdout(), drain: drain}
			if err := sim.preflight(cmd.Context(), cfg); err != nil {
				return err
			}
			return sim.run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&file, "scenario", "", "scenario YAML file (required)")
	cmd.Flags().StringVar(&gateway, "gateway", "http://127.0.0.1:8080", "gateway of the deployment")
	cmd.Flags().StringVar(&natsURL, "nats-url", nats.DefaultURL, "NATS of the deployment")
	cmd.Flags().StringVar(&sandboxURL, "sandbox", "http://127.0.0.1:8082", "sandbox of the platforms")
	cmd.Flags().StringVar(&admin, "admin", "http://127.0.0.1:8081", "admin address of the deployment (its /metrics count replies without an owner)")
	cmd.Flags().DurationVar(&drain, "drain-timeout", 2*time.Minute, "how long to wait for the consumers to drain")
	cmd.Flags().StringVar(&endpoint, "endpoint", "", "the Instantly endpoint to post to, instead of the scenario's: its tenant, path token and secret from the config")
	cmd.Flags().StringVar(&tenant, "tenant", "", "the tenant whose invariants are checked, instead of the scenario's (default: the endpoint's in the config)")
	cmd.Flags().StringVar(&configFile, "config", "", "the deployment's config (default ./exacto.yaml, else the built-in demo)")
	cmd.MarkFlagRequired("scenario")
	return cmd
}

type simulation struct {
	sc                      *scenario
	gateway, sandbox, admin string
	// unowned are the replied contacts whose note has no owner (checkNotes).
	unowned []string
	js      jetstream.JetStream
	out     io.Writer
	drain   time.Duration
	client  http.Client
}

func (s *simulation) run(ctx context.Context) error {
	sc := s.sc
	r := newRand(sc)
	ds := sc.deliveries(r, storyStart(time.Now()))
	dups := 0
	for _, d := range ds {
		if d.dup {
			dups++
		}
	}
	fmt.Fprintf(s.out, "scenario %s: %d contacts, %d deliveries (%d duplicates) to %s\n", sc.Name, sc.Contacts, len(ds), dups, s.hookURL())

	emails := make([]string, sc.Contacts)
	for i := range emails {
		emails[i] = sc.email(i)
	}
	// The sandbox's faults were cleared by the preflight, which runs first.
	if err := s.control(ctx, http.MethodPost, sandbox.ControlLeads, sandbox.ControlLeadsRequest{Campaign: sc.Campaign, Emails: emails}); err != nil {
		return err
	}
	if t := sc.Faults.Timeouts; t != nil {
		err := s.control(ctx, http.MethodPost, sandbox.ControlFaults, sandbox.ControlFaultRequest{Route: t.Route,
			Fault: sandbox.ControlFault{TimeoutAfterCommit: "30s", Count: t.Count}})
		if err != nil {
			return err
		}
		fmt.Fprintf(s.out, "fault: the next %d requests to %s time out after their commit\n", t.Count, t.Route)
	}

	unownedBefore, unownedErr := s.unownedCount(ctx)
	began := time.Now()
	outageAt := -1
	if o := sc.Faults.Outage; o != nil {
		outageAt = int(o.At * float64(len(ds)))
	}
	for i, d := range ds {
		if i == outageAt {
			o := sc.Faults.Outage
			err := s.control(ctx, http.MethodPost, sandbox.ControlFaults, sandbox.ControlFaultRequest{Route: o.Dependency,
				Fault: sandbox.ControlFault{DownFor: o.For.String()}})
			if err != nil {
				return err
			}
			fmt.Fprintf(s.out, "fault: %s is down for %s from delivery %d\n", o.Dependency, o.For, i+1)
		}
		if dl := sc.Faults.Delay.Duration; dl > 0 {
			if err := sleepCtx(ctx, time.Duration(r.Int64N(int64(dl)+1))); err != nil {
				return err
			}
		}
		s.deliver(ctx, d)
		if i == 0 && d.status/100 == 4 && d.status != http.StatusTooManyRequests {
			return fmt.Errorf("the gateway refused the first delivery: %d %s: nothing more sent%s", d.status, d.err, refusalHint(d.status))
		}
	}
	fmt.Fprintf(s.out, "sent %d deliveries in %s; waiting for the consumers to drain\n", len(ds), time.Since(began).Round(time.Millisecond))
	if o := sc.Faults.Outage; o != nil && outageAt >= len(ds) {
		fmt.Fprintf(s.out, "note: the outage of %s was never started (at %g is past the last delivery)\n", o.Dependency, o.At)
	}
	waited, err := s.waitDrained(ctx)
	if err != nil {
		fmt.Fprintf(s.out, "warning: %v; checking anyway\n", err)
	} else {
		fmt.Fprintf(s.out, "drained in %s\n", waited.Round(time.Millisecond))
	}
	// Timeouts not used up should not outlive the run.
	_ = s.control(ctx, http.MethodDelete, sandbox.ControlFaults, nil)

	results := []result{
		s.checkDelivered(ds),
		s.checkStopped(ctx),
		s.checkNotes(ctx, ds),
		s.checkOwners(ctx, unownedBefore, unownedErr),
		s.checkSuppressed(ctx),
		s.checkStoredOnce(ctx, ds),
		s.checkProjections(ctx),
	}
	broken := 0
	for _, res := range results {
		verdict := "HELD  "
		if len(res.broken) > 0 {
			verdict = "BROKEN"
			broken++
		}
		fmt.Fprintf(s.out, "%s  %s\n", verdict, res.name)
		for i, b := range res.broken {
			if i == 10 {
				fmt.Fprintf(s.out, "          … and %d more\n", len(res.broken)-10)
				break
			}
			fmt.Fprintf(s.out, "          %s\n", b)
		}
	}
	if broken > 0 {
		return fmt.Errorf("%d of %d invariants broken", broken, len(results))
	}
	fmt.Fprintf(s.out, "all %d invariants held\n", len(results))
	return nil
}

// target points sc at the endpoint given (else the scenario's) as the config has it:
// its tenant, path token and secret, so that a scenario written for the demo runs
// against a deployment's own config. A tenant given must be the endpoint's.
func (sc *scenario) target(cfg *config.Config, cfgErr error, endpoint, tenant string) error {
	if endpoint != "" {
		sc.Endpoint = endpoint
	}
	var t *config.Tenant
	var e *config.Endpoint
	if cfgErr == nil {
		t, e = cfg.Endpoint(sc.Endpoint)
	}
	switch {
	case e != nil && e.Provider != "instantly":
		return fmt.Errorf("endpoint %s is a %s endpoint: a scenario posts Instantly's webhooks (give --endpoint with an Instantly one: %s)", e.ID, e.Provider, strings.Join(instantlyEndpoints(cfg), ", "))
	case e != nil && tenant != "" && tenant != t.ID:
		return fmt.Errorf("--tenant %s: endpoint %s is tenant %s's", tenant, e.ID, t.ID)
	case e != nil && e.Unresolved() != nil:
		return fmt.Errorf("endpoint %s: %w", e.ID, e.Unresolved())
	case e != nil:
		sc.Tenant, sc.PathToken = t.ID, e.PathToken.Value
		if sc.Secret == "" && len(e.Secrets) > 0 {
			sc.Secret = e.Secrets[0].Value
		}
	case endpoint != "" && cfgErr != nil:
		return fmt.Errorf("--endpoint %s: %w", endpoint, cfgErr)
	case endpoint != "":
		return fmt.Errorf("--endpoint %s: no such endpoint in %s (its Instantly endpoints: %s)", endpoint, cfg.Source, strings.Join(instantlyEndpoints(cfg), ", "))
	}
	if tenant != "" {
		sc.Tenant = tenant
	}
	return nil
}

// instantlyEndpoints lists the config's Instantly endpoints ("none" when it has none).
func instantlyEndpoints(cfg *config.Config) []string {
	var ids []string
	if cfg != nil {
		for _, t := range cfg.Tenants {
			for _, e := range t.Endpoints {
				if e.Provider == "instantly" {
					ids = append(ids, e.ID+" (tenant "+t.ID+")")
				}
			}
		}
	}
	if len(ids) == 0 {
		return []string{"none"}
	}
	return ids
}

// preflight asks the gateway and the sandbox once before a delivery is sent, and says
// what is wrong instead of sending hundreds of deliveries that will all be refused; it
// clears the sandbox's faults for the run.
func (s *simulation) preflight(ctx context.Context, cfg *config.Config) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// A GET is no delivery: the gateway answers 405 at an endpoint that exists with
	// that path token, 404 otherwise, and stores nothing.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.hookURL(), nil)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("no gateway answers at %s (%v): is exacto up running? (--gateway)", s.gateway, err)
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusMethodNotAllowed:
	case http.StatusNotFound:
		return fmt.Errorf("the gateway at %s has no endpoint %q with the path token the scenario uses (404): give --endpoint with the deployment's Instantly endpoint (in %s: %s), and --config if the gateway runs another config",
			s.gateway, s.sc.Endpoint, cfgSource(cfg), strings.Join(instantlyEndpoints(cfg), ", "))
	default:
		return fmt.Errorf("the gateway at %s answered %d to a GET of the endpoint's URL: not an Exacto gateway? (--gateway)", s.gateway, resp.StatusCode)
	}
	if err := s.control(ctx, http.MethodDelete, sandbox.ControlFaults, nil); err != nil {
		return fmt.Errorf("the sandbox of the platforms at %s: %w (--sandbox: exacto up prints its address)", s.sandbox, err)
	}
	return nil
}

func cfgSource(cfg *config.Config) string {
	if cfg == nil {
		return "the config (it did not load)"
	}
	return cfg.Source
}

func (s *simulation) hookURL() string {
	return s.gateway + "/hooks/" + url.PathEscape(s.sc.Endpoint) + "/" + url.PathEscape(s.sc.PathToken)
}

// deliver posts d, retrying what is not a 200 as a provider would (bounded). The
// sandbox, standing in for Instantly, is told first what the event says happened (a
// provider's retry, d.dup, happened already), as the real platform would hold it when
// its webhook fires: the consumers confirm unsigned events there.
func (s *simulation) deliver(ctx context.Context, d *delivery) {
	if !d.dup {
		if err := s.control(ctx, http.MethodPost, sandbox.ControlHappened, sandbox.ControlHappenedRequest{Provider: "instantly", Body: d.body}); err != nil {
			fmt.Fprintf(s.out, "warning: delivery %d: the sandbox was not told what happened: %v\n", d.n, err)
		}
	}
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		d.status, d.err, d.ids = s.post(ctx, d.body)
		// A provider retries what may succeed later: no answer, 408, 429 and 5xx.
		retry := d.status == 0 || d.status == http.StatusRequestTimeout || d.status == http.StatusTooManyRequests || d.status >= 500
		if !retry || attempt == 6 || ctx.Err() != nil {
			return
		}
		if sleepCtx(ctx, backoff) != nil {
			return
		}
		backoff = min(2*backoff, 3*time.Second)
	}
}

func (s *simulation) post(ctx context.Context, body []byte) (int, string, []string) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.hookURL(), bytes.NewReader(body))
	if err != nil {
		return 0, err.Error(), nil
	}
	h, _, _ := instantly.Sign(http.MethodPost, req.URL.String(), body, s.sc.Secret, time.Now())
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err.Error(), nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var ans struct {
		IDs []string `json:"ids"`
	}
	_ = json.Unmarshal(data, &ans)
	return resp.StatusCode, strings.TrimSpace(string(data)), ans.IDs
}

// refusalHint says what a refused delivery usually means.
func refusalHint(status int) string {
	if status == http.StatusUnauthorized {
		return " (the scenario's secret is not the endpoint's: give --config with the gateway's config, or secret: in the scenario)"
	}
	return ""
}

// control calls the sandbox's control API.
func (s *simulation) control(ctx context.Context, method, path string, body any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.sandbox+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("sandbox at %s: %w", s.sandbox, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("sandbox %s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(data)))
	}
	return nil
}

// state is what the platforms hold for email; with notes, how many HubSpot notes carry
// each of those external ids (envelope ids).
func (s *simulation) state(ctx context.Context, email string, notes ...string) (sandbox.ControlStateAnswer, error) {
	var a sandbox.ControlStateAnswer
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	q := url.Values{"email": {email}, "note": notes}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.sandbox+sandbox.ControlState+"?"+q.Encode(), nil)
	if err != nil {
		return a, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return a, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return a, fmt.Errorf("sandbox state: %d", resp.StatusCode)
	}
	return a, json.NewDecoder(resp.Body).Decode(&a)
}

// drained are the consumers whose work the invariants look at.
var drained = []string{stream.Classifier, stream.Stopper, stream.CRMWriter, stream.Suppressor, stream.Projector}

// waitDrained waits until the consumers have nothing pending nor unacknowledged, twice
// in a row.
func (s *simulation) waitDrained(ctx context.Context) (time.Duration, error) {
	began := time.Now()
	deadline := began.Add(s.drain)
	quiet := 0
	last := ""
	for {
		busy, err := s.busy(ctx)
		switch {
		case err != nil:
			last = err.Error()
			quiet = 0
		case busy == "":
			quiet++
		default:
			last = busy
			quiet = 0
		}
		if quiet >= 3 {
			return time.Since(began), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the consumers did not drain within %s (%s)", s.drain, last)
		}
		if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

func (s *simulation) busy(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var busy []string
	for _, name := range drained {
		c, err := s.js.Consumer(ctx, stream.Events, name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		if err != nil {
			return "", err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return "", err
		}
		if info.NumPending > 0 || info.NumAckPending > 0 {
			busy = append(busy, fmt.Sprintf("%s: %d pending, %d unacknowledged", name, info.NumPending, info.NumAckPending))
		}
	}
	return strings.Join(busy, "; "), nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
