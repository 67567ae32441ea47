package tests

// The deployments under deployments/ and the Dockerfiles under services/ parse, and name
// only images built here (or pinned upstream ones), ports the services really listen
// on, environment variables the code reads (or that the mounted config references), and
// metrics the code exports. What "really" means is read from the sources, so a new
// variable or metric counts as soon as the code has it. Each checker also runs once on a
// broken copy, to show it can fail.

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/stream"
)

// deployFacts is what the sources say exists.
type deployFacts struct {
	root     string
	services []string        // services/<name> with a main.go
	env      map[string]bool // "EXACTO_…" and "OTEL_…" string literals of the code
	metrics  map[string]bool // "exacto_…" string literals of the code
	// Exacto's ports, from its default addresses; NATS's, from nats-server's defaults
	// (the cluster port is checked against the routes that use it).
	httpPort, adminPort, listenPort, sandboxPort int
	natsClient, natsMonitor, natsCluster         int
}

// Images not built here: upstream images, pinned.
var upstreamImages = []*regexp.Regexp{
	regexp.MustCompile(`^nats:2\.\d+\.\d+-alpine$`),
}

func loadDeployFacts(t *testing.T) *deployFacts {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	f := &deployFacts{root: root, env: map[string]bool{}, metrics: map[string]bool{},
		natsClient: server.DEFAULT_PORT, natsMonitor: server.DEFAULT_HTTP_PORT, natsCluster: 6222}
	dirs, err := os.ReadDir(filepath.Join(root, "services"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(root, "services", d.Name(), "main.go")); err == nil {
			f.services = append(f.services, d.Name())
		}
	}
	envRE := regexp.MustCompile(`"((?:EXACTO|OTEL)_[A-Z0-9_]+)"`)
	metricRE := regexp.MustCompile(`"(exacto_[a-z0-9_]+)"`)
	for _, dir := range []string{"pkg", "services"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			src, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range envRE.FindAllSubmatch(src, -1) {
				f.env[string(m[1])] = true
			}
			for _, m := range metricRE.FindAllSubmatch(src, -1) {
				f.metrics[string(m[1])] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	port := func(addr string) int {
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(p)
		return n
	}
	f.httpPort, f.adminPort = port(config.DefaultHTTPAddr), port(config.DefaultAdminAddr)
	f.listenPort, f.sandboxPort = port(config.DefaultListen), port(config.DefaultSandbox)
	if len(f.services) < 8 || !f.env["EXACTO_NATS_URL"] || !f.env["EXACTO_CONFIG"] {
		t.Fatalf("sources not read: services %v, env %v", f.services, f.env)
	}
	return f
}

// ports a container of service svc may name: what the process listens on.
func (f *deployFacts) ports(svc string) map[int]bool {
	switch svc {
	case "nats":
		return map[int]bool{f.natsClient: true, f.natsCluster: true, f.natsMonitor: true}
	case "gateway":
		return map[int]bool{f.httpPort: true, f.adminPort: true}
	case "exacto": // `exacto up`: webhooks, admin, the embedded NATS, the sandbox
		return map[int]bool{f.httpPort: true, f.adminPort: true, f.listenPort: true, f.sandboxPort: true}
	}
	return map[int]bool{f.adminPort: true}
}

// graceFor is the least time service svc needs between SIGTERM and SIGKILL: a consumer
// finishes the events it holds, each bounded by its ack wait.
func graceFor(svc string) time.Duration {
	g := 45 * time.Second
	if s, ok := stream.SubscriptionOf(svc); ok {
		g = max(g, s.AckWait+15*time.Second)
	}
	return g
}

func (f *deployFacts) isService(name string) bool { return slices.Contains(f.services, name) }

// image checks an image name: exacto/<svc>[:tag] built by the Dockerfile with
// SERVICE=<svc>, or a pinned upstream one.
func (f *deployFacts) image(image, svc string) error {
	name, _, _ := strings.Cut(image, ":")
	if strings.HasPrefix(name, "exacto/") {
		built := strings.TrimPrefix(name, "exacto/")
		if !f.isService(built) {
			return fmt.Errorf("image %s: no services/%s/main.go for the Dockerfile to build", image, built)
		}
		if svc != "" && built != svc {
			return fmt.Errorf("image %s runs in %s", image, svc)
		}
		return nil
	}
	for _, re := range upstreamImages {
		if re.MatchString(image) {
			return nil
		}
	}
	return fmt.Errorf("image %s is neither built here nor a pinned upstream image", image)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// parseEnvFile reads KEY=VALUE lines (comments and blanks skipped).
func parseEnvFile(data []byte) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok || !regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`).MatchString(k) {
			return nil, fmt.Errorf("line %d: want NAME=value", n)
		}
		out[k] = v
	}
	return out, sc.Err()
}

// configRefs are the env: references of a config file.
func configRefs(data []byte) map[string]bool {
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`env:([A-Za-z_][A-Za-z0-9_]*)`).FindAllSubmatch(data, -1) {
		out[string(m[1])] = true
	}
	return out
}

// checkConfig parses a mounted config with the environment its containers get; it must
// load without error or warning.
func checkConfig(name string, data []byte, env map[string]string) []string {
	cfg, err := config.Parse(data, name, func(k string) string { return env[k] })
	if err != nil {
		return []string{fmt.Sprintf("config %s: %v", name, err)}
	}
	var out []string
	for _, w := range cfg.Warnings {
		out = append(out, "config "+w)
	}
	return out
}

// ---- NATS

func checkNATSConf(f *deployFacts, file string, cluster bool) []string {
	o, err := server.ProcessConfigFile(file)
	if err != nil {
		return []string{err.Error()}
	}
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	if !o.JetStream || o.StoreDir == "" {
		fail("JetStream is not enabled on a store dir")
	}
	if !o.SyncAlways {
		fail("sync_interval is not always: acknowledged events could be lost on power loss")
	}
	if o.Port != f.natsClient || o.Port != f.listenPort {
		fail("client port %d: Exacto expects %d", o.Port, f.listenPort)
	}
	if o.HTTPPort != f.natsMonitor {
		fail("monitoring port %d, want %d", o.HTTPPort, f.natsMonitor)
	}
	if o.ServerName == "" || strings.HasPrefix(o.ServerName, "$") {
		fail("server_name %q", o.ServerName)
	}
	if cluster {
		if o.Cluster.Port != f.natsCluster || len(o.Routes) != 3 {
			fail("cluster port %d with %d routes: want %d and 3", o.Cluster.Port, len(o.Routes), f.natsCluster)
		}
		for _, r := range o.Routes {
			if r.Port() != strconv.Itoa(o.Cluster.Port) {
				fail("route %s is not on the cluster port %d", r, o.Cluster.Port)
			}
		}
	} else if o.Cluster.Port != 0 {
		fail("a single server with a cluster block")
	}
	return bad
}

func TestDeploymentsNATS(t *testing.T) {
	f := loadDeployFacts(t)
	t.Setenv("NODE", "n1")
	for file, cluster := range map[string]bool{"single.conf": false, "cluster-node.conf": true} {
		for _, p := range checkNATSConf(f, filepath.Join(f.root, "deployments/nats", file), cluster) {
			t.Errorf("deployments/nats/%s: %s", file, p)
		}
	}
}

func TestDeploymentsCheckersFail(t *testing.T) {
	f := loadDeployFacts(t)
	mutate := func(t *testing.T, data []byte, old, new string) []byte {
		t.Helper()
		if !bytes.Contains(data, []byte(old)) {
			t.Fatalf("no %q to break", old)
		}
		return bytes.Replace(data, []byte(old), []byte(new), 1)
	}
	expect := func(t *testing.T, problems []string, want string) {
		t.Helper()
		for _, p := range problems {
			if strings.Contains(p, want) {
				return
			}
		}
		t.Errorf("want a problem with %q, got %q", want, problems)
	}
	t.Run("dockerfile", func(t *testing.T) {
		good, err := os.ReadFile(filepath.Join(f.root, "Dockerfile"))
		if err != nil {
			t.Fatal(err)
		}
		if p := checkDockerfile(f, "classifier", good); len(p) > 0 {
			t.Fatalf("good Dockerfile: %v", p)
		}
		expect(t, checkDockerfile(f, "classifier", mutate(t, good, "USER 65532:65532", "USER root")), "runs as root")
		expect(t, checkDockerfile(f, "classifier", mutate(t, good, "ENV CGO_ENABLED=0", "ENV CGO_ENABLED=1")), "CGO_ENABLED=0")
		expect(t, checkDockerfile(f, "classifier", mutate(t, good, "EXPOSE 8081", "EXPOSE 8080 8081")), "EXPOSE 8080")
		expect(t, checkDockerfile(f, "classifier", mutate(t, good, "FROM gcr.io/distroless/static-debian12:nonroot", "FROM debian:12")), "final FROM")
		expect(t, checkDockerfile(f, "classifier", mutate(t, good, `ENTRYPOINT ["/usr/local/bin/service"]`, `ENTRYPOINT ["/bin/sh"]`)), "ENTRYPOINT")
		expect(t, checkDockerfile(f, "classifier", mutate(t, good, `ENTRYPOINT ["/usr/local/bin/service"]`, "ENTRYPOINT [\"/usr/local/bin/service\"]\nCMD [\"up\"]")), "CMD")
		expect(t, checkDockerfile(f, "stopper", mutate(t, good, `"./services/${SERVICE}"`, "./services/classifier")), "does not go build ./services/stopper")
		expect(t, checkDockerfile(f, "stopper", mutate(t, good, "ARG SERVICE=exacto\n", "")), "not a build argument")
		expect(t, checkDockerfile(f, "stopper", mutate(t, good, "golang:1.26.8 AS build\nARG SERVICE\n", "golang:1.26.8 AS build\n")), "does not declare ARG SERVICE")
	})
	t.Run("nats", func(t *testing.T) {
		good, err := os.ReadFile(filepath.Join(f.root, "deployments/nats/single.conf"))
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "bad.conf")
		os.WriteFile(file, mutate(t, good, "\n  sync_interval: always", "\n  sync_interval: 2m"), 0o600)
		expect(t, checkNATSConf(f, file, false), "sync_interval is not always")
		os.WriteFile(file, mutate(t, good, "http: 0.0.0.0:8222", "http: 0.0.0.0:8223"), 0o600)
		expect(t, checkNATSConf(f, file, false), "monitoring port 8223")
	})
	t.Run("compose", func(t *testing.T) {
		dir := filepath.Join(f.root, "deployments/compose")
		good, err := os.ReadFile(filepath.Join(dir, "compose.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if p := checkCompose(f, dir, good); len(p) > 0 {
			t.Fatalf("good compose.yaml: %v", p)
		}
		expect(t, checkCompose(f, dir, mutate(t, good, "image: nats:2.15.2-alpine", "image: nats:latest")), "neither built here")
		expect(t, checkCompose(f, dir, mutate(t, good, "args: {SERVICE: stopper}", "args: {SERVICE: classifier}")), "stopper: built with SERVICE=classifier")
		expect(t, checkCompose(f, dir, mutate(t, good, "args: {SERVICE: stopper}", "dockerfile: services/stopper/Dockerfile")), "stopper: built from services/stopper/Dockerfile")
		expect(t, checkCompose(f, dir, mutate(t, good, `ports: ["127.0.0.1:8091:8081"]`, `ports: ["127.0.0.1:8091:8080"]`)), "classifier: port 127.0.0.1:8091:8080")
		expect(t, checkCompose(f, dir, mutate(t, good, "EXACTO_LOG_FORMAT: json", "EXACTO_LOG_FORMATE: json")), "env EXACTO_LOG_FORMATE")
		expect(t, checkCompose(f, dir, mutate(t, good, "env_file: [exacto.env]", "env_file: []")), "environment variable ACME_")
		expect(t, checkCompose(f, dir, mutate(t, good, "  stopper:\n", "  stoper:\n")), "service stopper has no container")
		expect(t, checkCompose(f, dir, mutate(t, good, "stop_grace_period: 75s", "stop_grace_period: 45s")), "crmwriter: stop_grace_period")
		expect(t, checkCompose(f, dir, mutate(t, good, "    environment:\n", "    enviroment:\n")), "enviroment")
	})
	t.Run("kubernetes", func(t *testing.T) {
		dir := filepath.Join(f.root, "deployments/k8s")
		broken := func(file, old, new string) func(string) ([]byte, error) {
			return func(name string) ([]byte, error) {
				data, err := os.ReadFile(filepath.Join(dir, name))
				if name == file && err == nil {
					data = mutate(t, data, old, new)
				}
				return data, err
			}
		}
		if p := checkKustomize(f, broken("", "", ""), "nats"); len(p) > 0 {
			t.Fatalf("good kustomization: %v", p)
		}
		expect(t, checkKustomize(f, broken("classifier.yaml", "path: /readyz", "path: /ready"), "nats"), "readiness probe")
		expect(t, checkKustomize(f, broken("classifier.yaml", "name: EXACTO_LOG_FORMAT", "name: EXACTO_LOGFORMAT"), "nats"), "env EXACTO_LOGFORMAT")
		expect(t, checkKustomize(f, broken("stopper.yaml", "name: exacto_consumer_pending", "name: exacto_consumer_backlog"), "nats"), "exacto_consumer_backlog")
		expect(t, checkKustomize(f, broken("stopper.yaml", "kind: PodDisruptionBudget", "kind: Secret"), "nats"), "no PodDisruptionBudget")
		expect(t, checkKustomize(f, broken("gateway.yaml", "containerPort: 8080", "containerPort: 9090"), "nats"), "containerPort 9090")
		expect(t, checkKustomize(f, broken("crmwriter.yaml", "terminationGracePeriodSeconds: 75", "terminationGracePeriodSeconds: 45"), "nats"), "crmwriter: terminationGracePeriodSeconds")
		expect(t, checkKustomize(f, broken("kustomization.yaml", "  - reconciler.yaml\n", "  - reconciler.yml\n"), "nats"), "resource reconciler.yml")
		expect(t, checkKustomize(f, broken("secrets.env.example", "ACME_STRIPE_SECRET=\n", ""), "nats"), "ACME_STRIPE_SECRET is not set")
		expect(t, checkKustomize(f, broken("exacto.yaml", "provider: stripe", "provider: paypal"), "nats"), "unknown provider")
		expect(t, checkKustomize(f, broken("", "", ""), "nats-cluster"), "EXACTO_NATS_URL")
	})
	t.Run("helm", func(t *testing.T) {
		good, err := os.ReadFile(filepath.Join(f.root, "deployments/helm/nats-values.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if _, p := checkNATSValues(f, good, 3); len(p) > 0 {
			t.Fatalf("good values: %v", p)
		}
		_, p := checkNATSValues(f, mutate(t, good, "\n      sync_interval: always", "\n      sync_interval: 2m"), 3)
		expect(t, p, "sync_interval")
		_, p = checkNATSValues(f, good, 5)
		expect(t, p, "3 NATS servers for streams of 5 replicas")
	})
}
