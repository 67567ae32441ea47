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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.yaml.in/yaml/v3"

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

// image checks an image name: exacto/<svc>[:tag] built by services/<svc>/Dockerfile, or
// a pinned upstream one.
func (f *deployFacts) image(image, svc string) error {
	name, _, _ := strings.Cut(image, ":")
	if strings.HasPrefix(name, "exacto/") {
		built := strings.TrimPrefix(name, "exacto/")
		if _, err := os.Stat(filepath.Join(f.root, "services", built, "Dockerfile")); err != nil {
			return fmt.Errorf("image %s: no services/%s/Dockerfile builds it", image, built)
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

// ---- Dockerfiles

type dockerLine struct{ cmd, args string }

func parseDockerfile(data []byte) []dockerLine {
	var out []dockerLine
	var cur strings.Builder
	for _, l := range strings.Split(string(data), "\n") {
		t := strings.TrimSpace(l)
		if cur.Len() == 0 && (t == "" || strings.HasPrefix(t, "#")) {
			continue
		}
		if strings.HasSuffix(t, "\\") {
			cur.WriteString(strings.TrimSuffix(t, "\\") + " ")
			continue
		}
		cur.WriteString(t)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, dockerLine{strings.ToUpper(cmd), strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

func checkDockerfile(f *deployFacts, svc string, data []byte) []string {
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	type stage struct {
		name, from string
		lines      []dockerLine
	}
	var stages []*stage
	for _, l := range parseDockerfile(data) {
		if l.cmd == "FROM" {
			fs := strings.Fields(l.args)
			s := &stage{from: fs[0]}
			if len(fs) == 3 && strings.EqualFold(fs[1], "AS") {
				s.name = fs[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			fail("%s before FROM", l.cmd)
			continue
		}
		stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, l)
	}
	if len(stages) < 2 {
		return append(bad, "not a multi-stage build")
	}
	build, final := stages[0], stages[len(stages)-1]
	if !strings.HasPrefix(build.from, "golang:1.26") {
		fail("builder FROM %s: want golang:1.26", build.from)
	}
	cgoOff, binary := false, ""
	buildRE := regexp.MustCompile(`go build .*-o (\S+) \./services/` + regexp.QuoteMeta(svc) + `(\s|$)`)
	for _, l := range build.lines {
		if (l.cmd == "ENV" || l.cmd == "ARG" || l.cmd == "RUN") && regexp.MustCompile(`\bCGO_ENABLED=0\b`).MatchString(l.args) {
			cgoOff = true
		}
		if l.cmd == "RUN" {
			if m := buildRE.FindStringSubmatch(l.args); m != nil {
				binary = m[1]
			}
		}
	}
	if !cgoOff {
		fail("builder does not set CGO_ENABLED=0: the binary would not be static")
	}
	if binary == "" {
		fail("builder does not go build ./services/%s", svc)
	}
	switch final.from {
	case "scratch", "gcr.io/distroless/static-debian12:nonroot", "gcr.io/distroless/static-debian12":
	default:
		fail("final FROM %s: want scratch or distroless static", final.from)
	}
	var user, dest string
	var entry []string
	for _, l := range final.lines {
		switch l.cmd {
		case "USER":
			user = l.args
		case "COPY":
			fs := strings.Fields(l.args)
			if len(fs) == 3 && fs[0] == "--from="+build.name && fs[1] == binary {
				dest = fs[2]
			}
		case "EXPOSE":
			for _, p := range strings.Fields(l.args) {
				n, err := strconv.Atoi(strings.TrimSuffix(p, "/tcp"))
				if err != nil || !f.ports(svc)[n] {
					fail("EXPOSE %s: %s does not listen there", p, svc)
				}
			}
		case "ENV":
			for _, kv := range strings.Fields(l.args) {
				if k, _, _ := strings.Cut(kv, "="); !f.env[k] {
					fail("ENV %s: no code reads it", k)
				}
			}
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(l.args), &entry); err != nil {
				fail("ENTRYPOINT %s: want the exec form", l.args)
			}
		}
	}
	if uid, _, _ := strings.Cut(user, ":"); user == "" || uid == "0" || uid == "root" {
		fail("final stage runs as root (USER %q)", user)
	} else if _, err := strconv.Atoi(uid); err != nil {
		fail("USER %s: want a numeric uid (runAsNonRoot can only verify those)", user)
	}
	if dest == "" {
		fail("final stage does not copy %s from the builder", binary)
	} else if len(entry) == 0 || (entry[0] != dest && entry[0] != path.Join(dest, path.Base(binary))) {
		fail("ENTRYPOINT %v does not run %s", entry, dest)
	}
	return bad
}

func TestDeploymentsDockerfiles(t *testing.T) {
	f := loadDeployFacts(t)
	for _, svc := range f.services {
		data, err := os.ReadFile(filepath.Join(f.root, "services", svc, "Dockerfile"))
		if err != nil {
			t.Errorf("%s: %v", svc, err)
			continue
		}
		for _, p := range checkDockerfile(f, svc, data) {
			t.Errorf("services/%s/Dockerfile: %s", svc, p)
		}
	}
	ignore, err := os.ReadFile(filepath.Join(f.root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	// The build context is the root: the workspace's modules must stay in it.
	for _, l := range strings.Split(string(ignore), "\n") {
		if l = strings.Trim(strings.TrimSpace(l), "/"); l == "pkg" || l == "services" || l == "tests" || strings.HasPrefix(l, "go.") {
			t.Errorf(".dockerignore leaves out %s, which the build needs", l)
		}
	}
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

// ---- compose

type composeFile struct {
	Name     string                    `yaml:"name"`
	XExacto  any                       `yaml:"x-exacto"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Command         []string          `yaml:"command"`
	Environment     map[string]string `yaml:"environment"`
	EnvFile         []string          `yaml:"env_file"`
	Ports           []string          `yaml:"ports"`
	Volumes         []string          `yaml:"volumes"`
	User            string            `yaml:"user"`
	StopGracePeriod string            `yaml:"stop_grace_period"`
	DependsOn       map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test        []string `yaml:"test"`
		Interval    string   `yaml:"interval"`
		Timeout     string   `yaml:"timeout"`
		Retries     int      `yaml:"retries"`
		StartPeriod string   `yaml:"start_period"`
	} `yaml:"healthcheck"`
	Restart     string   `yaml:"restart"`
	ReadOnly    bool     `yaml:"read_only"`
	SecurityOpt []string `yaml:"security_opt"`
	CapDrop     []string `yaml:"cap_drop"`
	Profiles    []string `yaml:"profiles"`
}

// checkCompose checks compose.yaml (data) in dir; other files are read from disk.
func checkCompose(f *deployFacts, dir string, data []byte) []string {
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	var c composeFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return []string{err.Error()}
	}
	local := func(p string) string { // a bind source or build context, relative to dir
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	for _, svc := range f.services {
		if _, ok := c.Services[svc]; !ok && svc != "exacto" {
			fail("service %s has no container", svc)
		}
	}
	for _, name := range sortedKeys(c.Services) {
		s := c.Services[name]
		if s.Build != nil {
			if ctx := local(s.Build.Context); ctx != f.root {
				fail("%s: build context %s is not the repository root", name, s.Build.Context)
			}
			if s.Build.Dockerfile != "services/"+name+"/Dockerfile" {
				fail("%s: built from %s", name, s.Build.Dockerfile)
			}
		}
		if err := f.image(s.Image, name); err != nil {
			fail("%s: %v", name, err)
		} else if strings.HasPrefix(s.Image, "exacto/") && s.Build == nil {
			fail("%s: image %s without a build", name, s.Image)
		}
		if !f.isService(name) && name != "nats" {
			fail("%s: no such service under services/", name)
		}
		for _, p := range s.Ports {
			parts := strings.Split(strings.TrimSuffix(p, "/tcp"), ":")
			n, err := strconv.Atoi(parts[len(parts)-1])
			if err != nil || !f.ports(name)[n] {
				fail("%s: port %s: the container does not listen on it", name, p)
			}
		}
		// The environment the container gets: env files, then environment.
		env := map[string]string{}
		for _, ef := range s.EnvFile {
			raw, err := os.ReadFile(local(ef))
			if err == nil {
				var kv map[string]string
				if kv, err = parseEnvFile(raw); err == nil {
					for k, v := range kv {
						env[k] = v
					}
				}
			}
			if err != nil {
				fail("%s: env_file %s: %v", name, ef, err)
			}
		}
		for k, v := range s.Environment {
			env[k] = v
		}
		mounts := map[string]string{} // target → source
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) < 2 {
				fail("%s: volume %s", name, v)
				continue
			}
			if src := parts[0]; strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
				if _, err := os.Stat(local(src)); err != nil {
					fail("%s: volume %s: %v", name, v, err)
				}
				mounts[parts[1]] = local(src)
			} else if _, ok := c.Volumes[src]; !ok {
				fail("%s: volume %s is not declared", name, src)
			}
		}
		if d, err := time.ParseDuration(s.StopGracePeriod); f.isService(name) && (err != nil || d < graceFor(name)) {
			fail("%s: stop_grace_period %q: want at least %v to drain in-flight events", name, s.StopGracePeriod, graceFor(name))
		}
		if uid, _, _ := strings.Cut(s.User, ":"); uid == "0" || uid == "root" {
			fail("%s: runs as root", name)
		}
		if name == "nats" {
			if s.Healthcheck == nil {
				fail("nats: no healthcheck for the services to wait on")
			}
			i := slices.Index(s.Command, "--config")
			if i < 0 || i+1 >= len(s.Command) {
				fail("nats: no --config")
			} else if src, ok := mounts[s.Command[i+1]]; !ok {
				fail("nats: config %s is not mounted", s.Command[i+1])
			} else {
				for _, p := range checkNATSConf(f, src, false) {
					fail("nats: %s: %s", filepath.Base(src), p)
				}
			}
			continue
		}
		// An Exacto service.
		var refs map[string]bool
		if p := env["EXACTO_CONFIG"]; p == "" {
			fail("%s: no EXACTO_CONFIG", name)
		} else if src, ok := mounts[p]; !ok {
			fail("%s: EXACTO_CONFIG %s is not mounted", name, p)
		} else if raw, err := os.ReadFile(src); err != nil {
			fail("%s: %v", name, err)
		} else {
			refs = configRefs(raw)
			for _, p := range checkConfig(filepath.Base(src), raw, env) {
				fail("%s: %s", name, p)
			}
		}
		for _, k := range sortedKeys(env) {
			if !f.env[k] && !refs[k] {
				fail("%s: env %s: neither the code nor the config reads it", name, k)
			}
		}
		if u, err := url.Parse(env["EXACTO_NATS_URL"]); err != nil || u.Scheme != "nats" || u.Port() != strconv.Itoa(f.natsClient) {
			fail("%s: EXACTO_NATS_URL %q: want nats://<nats service>:%d", name, env["EXACTO_NATS_URL"], f.natsClient)
		} else if _, ok := c.Services[u.Hostname()]; !ok {
			fail("%s: EXACTO_NATS_URL names %s, not a service", name, u.Hostname())
		} else if dep, ok := s.DependsOn[u.Hostname()]; !ok || dep.Condition != "service_healthy" {
			fail("%s: does not wait for %s to be healthy", name, u.Hostname())
		}
		for k, want := range map[string]int{"EXACTO_ADMIN_ADDR": f.adminPort, "EXACTO_HTTP_ADDR": f.httpPort} {
			v, ok := env[k]
			if !ok {
				if k == "EXACTO_ADMIN_ADDR" || name == "gateway" {
					fail("%s: no %s: the default is loopback, unreachable from outside the container", name, k)
				}
				continue
			}
			host, port, err := net.SplitHostPort(v)
			if err != nil || port != strconv.Itoa(want) || (host != "0.0.0.0" && host != "" && host != "::") || !f.ports(name)[want] {
				fail("%s: %s=%s: want 0.0.0.0:%d on a service that serves it", name, k, v, want)
			}
		}
	}
	return bad
}

func TestDeploymentsCompose(t *testing.T) {
	f := loadDeployFacts(t)
	dir := filepath.Join(f.root, "deployments/compose")
	data, err := os.ReadFile(filepath.Join(dir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range checkCompose(f, dir, data) {
		t.Errorf("compose.yaml: %s", p)
	}
	// The env file holds exactly what the config references.
	cfg, _ := os.ReadFile(filepath.Join(f.root, "deployments/config/exacto.yaml"))
	raw, _ := os.ReadFile(filepath.Join(dir, "exacto.env"))
	kv, err := parseEnvFile(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sortedKeys(kv), sortedKeys(configRefs(cfg)); !slices.Equal(got, want) {
		t.Errorf("exacto.env has %v, the config references %v", got, want)
	}
}

// ---- Kubernetes

type k8sMeta struct {
	Name        string            `yaml:"name"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type k8sSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

type k8sPort struct {
	Name          string `yaml:"name"`
	ContainerPort int    `yaml:"containerPort"`
}

type k8sContainer struct {
	Name  string    `yaml:"name"`
	Image string    `yaml:"image"`
	Ports []k8sPort `yaml:"ports"`
	Env   []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom any    `yaml:"valueFrom"`
	} `yaml:"env"`
	EnvFrom []struct {
		SecretRef *struct {
			Name string `yaml:"name"`
		} `yaml:"secretRef"`
	} `yaml:"envFrom"`
	StartupProbe   *k8sProbe `yaml:"startupProbe"`
	LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
	ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext struct {
		RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type k8sDeployment struct {
	Metadata k8sMeta `yaml:"metadata"`
	Spec     struct {
		Replicas *int        `yaml:"replicas"`
		Selector k8sSelector `yaml:"selector"`
		Template struct {
			Metadata k8sMeta `yaml:"metadata"`
			Spec     struct {
				TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
				SecurityContext               struct {
					RunAsNonRoot *bool  `yaml:"runAsNonRoot"`
					RunAsUser    *int64 `yaml:"runAsUser"`
				} `yaml:"securityContext"`
				Containers []k8sContainer `yaml:"containers"`
				Volumes    []struct {
					Name      string `yaml:"name"`
					ConfigMap *struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type k8sHPA struct {
	Metadata k8sMeta `yaml:"metadata"`
	Spec     struct {
		ScaleTargetRef struct {
			Kind string `yaml:"kind"`
			Name string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
		MinReplicas int         `yaml:"minReplicas"`
		MaxReplicas int         `yaml:"maxReplicas"`
		Metrics     []k8sMetric `yaml:"metrics"`
	} `yaml:"spec"`
}

type k8sMetric struct {
	Type     string `yaml:"type"`
	External *struct {
		Metric struct {
			Name     string      `yaml:"name"`
			Selector k8sSelector `yaml:"selector"`
		} `yaml:"metric"`
	} `yaml:"external"`
	Pods *struct {
		Metric struct {
			Name string `yaml:"name"`
		} `yaml:"metric"`
	} `yaml:"pods"`
	Resource *struct {
		Name string `yaml:"name"`
	} `yaml:"resource"`
}

type k8sPDB struct {
	Metadata k8sMeta `yaml:"metadata"`
	Spec     struct {
		MinAvailable   any         `yaml:"minAvailable"`
		MaxUnavailable any         `yaml:"maxUnavailable"`
		Selector       k8sSelector `yaml:"selector"`
	} `yaml:"spec"`
}

type k8sService struct {
	Metadata k8sMeta `yaml:"metadata"`
	Spec     struct {
		Selector map[string]string `yaml:"selector"`
		Ports    []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort any    `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type kustomization struct {
	Namespace          string   `yaml:"namespace"`
	Resources          []string `yaml:"resources"`
	ConfigMapGenerator []struct {
		Name  string   `yaml:"name"`
		Files []string `yaml:"files"`
	} `yaml:"configMapGenerator"`
	Images []struct {
		Name    string `yaml:"name"`
		NewName string `yaml:"newName"`
		NewTag  string `yaml:"newTag"`
	} `yaml:"images"`
}

// selects reports whether every label of sel is on labels.
func selects(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// checkKustomize checks the kustomization in dir, reading its files through read.
func checkKustomize(f *deployFacts, read func(name string) ([]byte, error), natsHost string) []string {
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	raw, err := read("kustomization.yaml")
	if err != nil {
		return []string{err.Error()}
	}
	var k kustomization
	if err := yaml.Unmarshal(raw, &k); err != nil {
		return []string{"kustomization.yaml: " + err.Error()}
	}
	// Every file the kustomization names exists and parses.
	deployments := map[string]k8sDeployment{}
	var hpas []k8sHPA
	var pdbs []k8sPDB
	var svcs []k8sService
	for _, file := range k.Resources {
		data, err := read(file)
		if err != nil {
			fail("resource %s: %v", file, err)
			continue
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var n yaml.Node
			if err := dec.Decode(&n); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				fail("%s: %v", file, err)
				break
			}
			var head struct {
				APIVersion string  `yaml:"apiVersion"`
				Kind       string  `yaml:"kind"`
				Metadata   k8sMeta `yaml:"metadata"`
			}
			if err := n.Decode(&head); err != nil || head.Kind == "" || head.APIVersion == "" || head.Metadata.Name == "" {
				fail("%s: an object without apiVersion, kind and name (%v)", file, err)
				continue
			}
			var derr error
			switch head.Kind {
			case "Deployment":
				var d k8sDeployment
				derr = n.Decode(&d)
				if _, dup := deployments[d.Metadata.Name]; dup {
					fail("%s: Deployment %s twice", file, d.Metadata.Name)
				}
				deployments[d.Metadata.Name] = d
			case "HorizontalPodAutoscaler":
				var h k8sHPA
				derr = n.Decode(&h)
				hpas = append(hpas, h)
			case "PodDisruptionBudget":
				var p k8sPDB
				derr = n.Decode(&p)
				pdbs = append(pdbs, p)
			case "Service":
				var s k8sService
				derr = n.Decode(&s)
				svcs = append(svcs, s)
			case "Namespace":
			default:
				fail("%s: unexpected %s %s", file, head.Kind, head.Metadata.Name)
			}
			if derr != nil {
				fail("%s: %s %s: %v", file, head.Kind, head.Metadata.Name, derr)
			}
		}
	}
	configMaps := map[string]map[string][]byte{} // generated ConfigMap → key → content
	for _, g := range k.ConfigMapGenerator {
		configMaps[g.Name] = map[string][]byte{}
		for _, file := range g.Files {
			key, src, ok := strings.Cut(file, "=")
			if !ok {
				src, key = file, path.Base(file)
			}
			data, err := read(src)
			if err != nil {
				fail("configMapGenerator %s: %v", g.Name, err)
				continue
			}
			configMaps[g.Name][key] = data
		}
	}
	images := map[string]bool{}
	for _, im := range k.Images {
		if err := f.image(im.Name, ""); err != nil {
			fail("images: %v", err)
		}
		if im.NewName != "" && !strings.HasSuffix(im.NewName, "/"+im.Name) {
			fail("images: %s renamed %s", im.Name, im.NewName)
		}
		images[im.Name] = true
	}
	secretKeys, err := func() (map[string]string, error) {
		raw, err := read("secrets.env.example")
		if err != nil {
			return nil, err
		}
		return parseEnvFile(raw)
	}()
	if err != nil {
		fail("secrets.env.example: %v", err)
	}
	for _, svc := range f.services {
		if _, ok := deployments[svc]; !ok && svc != "exacto" {
			fail("service %s has no Deployment", svc)
		}
	}
	hpaOf := map[string]k8sHPA{}
	for _, h := range hpas {
		if _, ok := deployments[h.Spec.ScaleTargetRef.Name]; !ok || h.Spec.ScaleTargetRef.Kind != "Deployment" {
			fail("HPA %s scales %s %s, not a Deployment here", h.Metadata.Name, h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name)
		}
		hpaOf[h.Spec.ScaleTargetRef.Name] = h
		if h.Spec.MinReplicas < 1 || h.Spec.MaxReplicas < h.Spec.MinReplicas {
			fail("HPA %s: replicas %d..%d", h.Metadata.Name, h.Spec.MinReplicas, h.Spec.MaxReplicas)
		}
		if len(h.Spec.Metrics) == 0 {
			fail("HPA %s: no metric", h.Metadata.Name)
		}
		for _, m := range h.Spec.Metrics {
			switch {
			case m.Type == "External" && m.External != nil:
				if !f.metrics[m.External.Metric.Name] {
					fail("HPA %s: metric %s: the code exports no such metric", h.Metadata.Name, m.External.Metric.Name)
				}
				if c := m.External.Metric.Selector.MatchLabels["consumer"]; c != h.Spec.ScaleTargetRef.Name {
					fail("HPA %s: selects consumer %q, scales %s", h.Metadata.Name, c, h.Spec.ScaleTargetRef.Name)
				}
			case m.Type == "Pods" && m.Pods != nil:
				if !f.metrics[m.Pods.Metric.Name] {
					fail("HPA %s: metric %s: the code exports no such metric", h.Metadata.Name, m.Pods.Metric.Name)
				}
			case m.Type == "Resource" && m.Resource != nil && (m.Resource.Name == "cpu" || m.Resource.Name == "memory"):
			default:
				fail("HPA %s: metric of type %s", h.Metadata.Name, m.Type)
			}
		}
	}
	for _, name := range sortedKeys(deployments) {
		d := deployments[name]
		fail := func(format string, args ...any) { fail("Deployment "+name+": "+format, args...) }
		if !f.isService(name) || name == "exacto" {
			fail("no such service under services/")
		}
		pod := d.Spec.Template.Spec
		if !selects(d.Spec.Selector.MatchLabels, d.Spec.Template.Metadata.Labels) {
			fail("its selector does not select its pods")
		}
		if p, ok := d.Spec.Template.Metadata.Annotations["prometheus.io/port"]; ok && p != strconv.Itoa(f.adminPort) {
			fail("metrics scraped on %s, served on %d", p, f.adminPort)
		}
		if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second < graceFor(name) {
			fail("terminationGracePeriodSeconds: want at least %v to drain in-flight events", graceFor(name))
		}
		if sc := pod.SecurityContext; sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
			fail("the pod does not run as a non-root uid")
		}
		_, consumer := stream.SubscriptionOf(name)
		h, scaled := hpaOf[name]
		switch {
		case scaled && d.Spec.Replicas != nil:
			fail("sets replicas although an HPA scales it (kubectl apply would undo the HPA)")
		case consumer && (!scaled || !slices.ContainsFunc(h.Spec.Metrics, func(m k8sMetric) bool {
			return m.External != nil && m.External.Metric.Name == "exacto_consumer_pending"
		})):
			fail("a consumer without an HPA on exacto_consumer_pending")
		}
		replicas := 1
		if d.Spec.Replicas != nil {
			replicas = *d.Spec.Replicas
		}
		if scaled {
			replicas = h.Spec.MinReplicas
		}
		if replicas >= 2 && !slices.ContainsFunc(pdbs, func(p k8sPDB) bool {
			return selects(p.Spec.Selector.MatchLabels, d.Spec.Template.Metadata.Labels)
		}) {
			fail("%d replicas and no PodDisruptionBudget", replicas)
		}
		if len(pod.Containers) != 1 {
			fail("%d containers, want 1", len(pod.Containers))
			continue
		}
		c := pod.Containers[0]
		if err := f.image(c.Image, name); err != nil {
			fail("%v", err)
		} else if n, _, _ := strings.Cut(c.Image, ":"); strings.HasPrefix(n, "exacto/") && !images[n] {
			fail("image %s is not in the kustomization's images", n)
		}
		named := map[string]int{}
		for _, p := range c.Ports {
			if !f.ports(name)[p.ContainerPort] {
				fail("containerPort %d: %s does not listen there", p.ContainerPort, name)
			}
			named[p.Name] = p.ContainerPort
		}
		port := func(v any) int {
			switch v := v.(type) {
			case int:
				return v
			case string:
				return named[v]
			}
			return 0
		}
		for _, pr := range []struct {
			kind, path string
			p          *k8sProbe
			required   bool
		}{{"liveness", "/healthz", c.LivenessProbe, true}, {"readiness", "/readyz", c.ReadinessProbe, true}, {"startup", "/healthz", c.StartupProbe, false}} {
			switch {
			case pr.p == nil && pr.required:
				fail("no %s probe", pr.kind)
			case pr.p == nil:
			case pr.p.HTTPGet == nil || pr.p.HTTPGet.Path != pr.path || port(pr.p.HTTPGet.Port) != f.adminPort:
				fail("%s probe: want GET %s on the admin port %d", pr.kind, pr.path, f.adminPort)
			}
		}
		if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" || c.Resources.Limits["memory"] == "" {
			fail("resources: want cpu and memory requests and a memory limit")
		}
		if sc := c.SecurityContext; sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || (sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot) {
			fail("the container may escalate privileges")
		}
		env := map[string]string{}
		for _, e := range c.Env {
			if !f.env[e.Name] {
				fail("env %s: no code reads it", e.Name)
			}
			env[e.Name] = e.Value
		}
		for _, ef := range c.EnvFrom {
			if ef.SecretRef == nil || ef.SecretRef.Name != "exacto-secrets" {
				fail("envFrom: want the Secret exacto-secrets (secrets.env.example)")
			}
			for k := range secretKeys {
				env[k] = "x-fake-" + strings.ToLower(k) + "-value" // long enough for a path token
			}
		}
		// EXACTO_CONFIG is a key of a generated ConfigMap mounted from this kustomization.
		cfgPath := env["EXACTO_CONFIG"]
		var cfgData []byte
		for _, m := range c.VolumeMounts {
			if rel, err := filepath.Rel(m.MountPath, cfgPath); err == nil && !strings.HasPrefix(rel, "..") {
				for _, v := range pod.Volumes {
					if v.Name == m.Name && v.ConfigMap != nil {
						cfgData = configMaps[v.ConfigMap.Name][rel]
					}
				}
			}
		}
		if cfgData == nil {
			fail("EXACTO_CONFIG %q is not a file of a ConfigMap the kustomization generates", cfgPath)
		} else {
			for _, p := range checkConfig(name+" "+cfgPath, cfgData, env) {
				fail("%s", p)
			}
			if got, want := sortedKeys(secretKeys), sortedKeys(configRefs(cfgData)); !slices.Equal(got, want) {
				fail("secrets.env.example has %v, the config references %v", got, want)
			}
		}
		if u, err := url.Parse(env["EXACTO_NATS_URL"]); err != nil || u.Scheme != "nats" || u.Hostname() != natsHost || u.Port() != strconv.Itoa(f.natsClient) {
			fail("EXACTO_NATS_URL %q: want nats://%s:%d (the Helm release's Service)", env["EXACTO_NATS_URL"], natsHost, f.natsClient)
		}
		for k, want := range map[string]int{"EXACTO_ADMIN_ADDR": f.adminPort, "EXACTO_HTTP_ADDR": f.httpPort} {
			v, ok := env[k]
			if !ok {
				if k == "EXACTO_ADMIN_ADDR" || name == "gateway" {
					fail("no %s: the default is loopback, unreachable by the probes", k)
				}
				continue
			}
			if host, port, err := net.SplitHostPort(v); err != nil || port != strconv.Itoa(want) || host != "0.0.0.0" || named[map[int]string{f.adminPort: "admin", f.httpPort: "http"}[want]] != want {
				fail("%s=%s: want 0.0.0.0:%d and a containerPort for it", k, v, want)
			}
		}
	}
	for _, p := range pdbs {
		if !slices.ContainsFunc(sortedKeys(deployments), func(n string) bool {
			return selects(p.Spec.Selector.MatchLabels, deployments[n].Spec.Template.Metadata.Labels)
		}) {
			fail("PodDisruptionBudget %s selects no Deployment's pods", p.Metadata.Name)
		}
		if (p.Spec.MinAvailable == nil) == (p.Spec.MaxUnavailable == nil) {
			fail("PodDisruptionBudget %s: want minAvailable or maxUnavailable", p.Metadata.Name)
		}
	}
	for _, s := range svcs {
		var d *k8sDeployment
		for _, n := range sortedKeys(deployments) {
			if dd := deployments[n]; selects(s.Spec.Selector, dd.Spec.Template.Metadata.Labels) {
				d = &dd
			}
		}
		if d == nil || len(d.Spec.Template.Spec.Containers) == 0 {
			fail("Service %s selects no Deployment's pods", s.Metadata.Name)
			continue
		}
		c := d.Spec.Template.Spec.Containers[0]
		for _, p := range s.Spec.Ports {
			if !slices.ContainsFunc(c.Ports, func(cp k8sPort) bool {
				return cp.Name == p.TargetPort || cp.ContainerPort == p.TargetPort || (p.TargetPort == nil && cp.ContainerPort == p.Port)
			}) {
				fail("Service %s: port %s targets %v, not a port of %s", s.Metadata.Name, p.Name, p.TargetPort, d.Metadata.Name)
			}
		}
	}
	// The adapter rule that serves the HPAs' external metrics.
	if raw, err := read("prometheus-adapter-values.yaml"); err != nil {
		fail("%v", err)
	} else {
		var v struct {
			Rules struct {
				External []struct {
					SeriesQuery  string `yaml:"seriesQuery"`
					MetricsQuery string `yaml:"metricsQuery"`
					Name         struct {
						As string `yaml:"as"`
					} `yaml:"name"`
				} `yaml:"external"`
			} `yaml:"rules"`
		}
		served := map[string]bool{}
		if err := yaml.Unmarshal(raw, &v); err != nil {
			fail("prometheus-adapter-values.yaml: %v", err)
		}
		for _, r := range v.Rules.External {
			series := regexp.MustCompile(`^\{?__name__="?([a-z_:][a-z0-9_:]*)|^([a-z_:][a-z0-9_:]*)`).FindStringSubmatch(r.SeriesQuery)
			name := ""
			if series != nil {
				name = series[1] + series[2]
			}
			if !f.metrics[name] {
				fail("prometheus-adapter: series %q: the code exports no such metric", r.SeriesQuery)
			}
			if !strings.Contains(r.MetricsQuery, "<<.LabelMatchers>>") {
				fail("prometheus-adapter: metricsQuery %q ignores the HPA's selector", r.MetricsQuery)
			}
			if r.Name.As != "" {
				name = r.Name.As
			}
			served[name] = true
		}
		for _, h := range hpas {
			for _, m := range h.Spec.Metrics {
				if m.External != nil && !served[m.External.Metric.Name] {
					fail("HPA %s: no adapter rule serves %s", h.Metadata.Name, m.External.Metric.Name)
				}
			}
		}
	}
	return bad
}

// natsValues is what Exacto needs of the NATS chart's values.
type natsValues struct {
	FullnameOverride string `yaml:"fullnameOverride"`
	Config           struct {
		Cluster struct {
			Enabled  bool `yaml:"enabled"`
			Replicas int  `yaml:"replicas"`
			Port     int  `yaml:"port"`
		} `yaml:"cluster"`
		JetStream struct {
			Enabled   bool `yaml:"enabled"`
			FileStore struct {
				Enabled bool `yaml:"enabled"`
				PVC     struct {
					Enabled bool   `yaml:"enabled"`
					Size    string `yaml:"size"`
				} `yaml:"pvc"`
			} `yaml:"fileStore"`
			Merge map[string]any `yaml:"merge"`
		} `yaml:"jetstream"`
		Monitor struct {
			Enabled bool `yaml:"enabled"`
			Port    int  `yaml:"port"`
		} `yaml:"monitor"`
		NATS struct {
			Port int `yaml:"port"`
		} `yaml:"nats"`
	} `yaml:"config"`
	Container struct {
		Image struct {
			Repository string `yaml:"repository"`
			Tag        string `yaml:"tag"`
		} `yaml:"image"`
	} `yaml:"container"`
}

func checkNATSValues(f *deployFacts, data []byte, exactoReplicas int) (natsValues, []string) {
	var v natsValues
	if err := yaml.Unmarshal(data, &v); err != nil {
		return v, []string{err.Error()}
	}
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	if c := v.Config.Cluster; !c.Enabled || c.Replicas < 3 || (c.Port != 0 && c.Port != f.natsCluster) {
		fail("config.cluster: want enabled, 3 replicas on port %d", f.natsCluster)
	}
	if v.Config.Cluster.Replicas < exactoReplicas {
		fail("%d NATS servers for streams of %d replicas", v.Config.Cluster.Replicas, exactoReplicas)
	}
	if js := v.Config.JetStream; !js.Enabled || !js.FileStore.Enabled || !js.FileStore.PVC.Enabled {
		fail("config.jetstream: want enabled, on a file store on a PVC")
	}
	if s, _ := v.Config.JetStream.Merge["sync_interval"].(string); s != "always" {
		fail("config.jetstream.merge.sync_interval %v: want always", v.Config.JetStream.Merge["sync_interval"])
	}
	if m := v.Config.Monitor; !m.Enabled || (m.Port != 0 && m.Port != f.natsMonitor) {
		fail("config.monitor: want enabled on %d", f.natsMonitor)
	}
	if p := v.Config.NATS.Port; p != 0 && p != f.natsClient {
		fail("config.nats.port %d, Exacto connects to %d", p, f.natsClient)
	}
	if im := v.Container.Image.Repository + ":" + v.Container.Image.Tag; f.image(im, "") != nil {
		fail("%v", f.image(im, ""))
	}
	if v.FullnameOverride == "" {
		fail("no fullnameOverride: the Service's name would depend on the release's")
	}
	return v, bad
}

func TestDeploymentsKubernetes(t *testing.T) {
	f := loadDeployFacts(t)
	dir := filepath.Join(f.root, "deployments/k8s")
	cfg, err := os.ReadFile(filepath.Join(dir, "exacto.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		NATS struct{ Replicas int } `yaml:"nats"`
	}
	if err := yaml.Unmarshal(cfg, &c); err != nil {
		t.Fatal(err)
	}
	values, err := os.ReadFile(filepath.Join(f.root, "deployments/helm/nats-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	v, bad := checkNATSValues(f, values, c.NATS.Replicas)
	for _, p := range bad {
		t.Errorf("helm/nats-values.yaml: %s", p)
	}
	read := func(name string) ([]byte, error) {
		if strings.Contains(name, "..") || filepath.IsAbs(name) {
			return nil, fmt.Errorf("%s is outside the kustomization (kustomize refuses it)", name)
		}
		return os.ReadFile(filepath.Join(dir, name))
	}
	for _, p := range checkKustomize(f, read, v.FullnameOverride) {
		t.Errorf("k8s: %s", p)
	}
}

// Every checker fails on a broken copy of a good file.
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
		good, err := os.ReadFile(filepath.Join(f.root, "services/classifier/Dockerfile"))
		if err != nil {
			t.Fatal(err)
		}
		if p := checkDockerfile(f, "classifier", good); len(p) > 0 {
			t.Fatalf("good Dockerfile: %v", p)
		}
		expect(t, checkDockerfile(f, "classifier", mutate(t, good, "USER 65532:65532", "USER root")), "runs as root")
		expect(t, checkDockerfile(f, "classifier", mutate(t, good, "ENV CGO_ENABLED=0", "ENV CGO_ENABLED=1")), "CGO_ENABLED=0")
		expect(t, checkDockerfile(f, "classifier", mutate(t, good, "EXPOSE 8081", "EXPOSE 8080")), "EXPOSE 8080")
		expect(t, checkDockerfile(f, "classifier", mutate(t, good, "FROM gcr.io/distroless/static-debian12:nonroot", "FROM debian:12")), "final FROM")
		expect(t, checkDockerfile(f, "classifier", mutate(t, good, `ENTRYPOINT ["/usr/local/bin/classifier"]`, `ENTRYPOINT ["/bin/sh"]`)), "ENTRYPOINT")
		expect(t, checkDockerfile(f, "stopper", good), "does not go build ./services/stopper")
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
