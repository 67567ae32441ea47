package tests

import (
	"bytes"
	"errors"
	"fmt"
	"io"
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

	"go.yaml.in/yaml/v3"

	"exacto.dev/pkg/stream"
)

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
