package tests

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

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
		Context    string            `yaml:"context"`
		Dockerfile string            `yaml:"dockerfile"`
		Args       map[string]string `yaml:"args"`
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
			if s.Build.Dockerfile != "" && s.Build.Dockerfile != "Dockerfile" {
				fail("%s: built from %s, not the one Dockerfile", name, s.Build.Dockerfile)
			}
			if s.Build.Args["SERVICE"] != name {
				fail("%s: built with SERVICE=%s", name, s.Build.Args["SERVICE"])
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
