package tests

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

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

// checkDockerfile checks the one Dockerfile (data) as built for service svc: with
// --build-arg SERVICE=svc, which each stage sees only where it declares ARG SERVICE.
func checkDockerfile(f *deployFacts, svc string, data []byte) []string {
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	type stage struct {
		name, from string
		service    bool // declares ARG SERVICE
		lines      []dockerLine
	}
	var stages []*stage
	globalArg := false
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
			if l.cmd == "ARG" && strings.HasPrefix(l.args, "SERVICE=") {
				globalArg = true
			} else {
				fail("%s before FROM", l.cmd)
			}
			continue
		}
		s := stages[len(stages)-1]
		if l.cmd == "ARG" && (l.args == "SERVICE" || strings.HasPrefix(l.args, "SERVICE=")) {
			s.service = true
			continue
		}
		if s.service {
			l.args = serviceRef.ReplaceAllString(l.args, svc)
		} else if serviceRef.MatchString(l.args) {
			fail("%s %s: this stage does not declare ARG SERVICE, so it is empty there", l.cmd, l.args)
		}
		s.lines = append(s.lines, l)
	}
	if !globalArg {
		fail("no ARG SERVICE=<default> before the first FROM: the service is not a build argument")
	}
	if len(stages) < 2 {
		return append(bad, "not a multi-stage build")
	}
	build, final := stages[0], stages[len(stages)-1]
	if !strings.HasPrefix(build.from, "golang:1.26") {
		fail("builder FROM %s: want golang:1.26", build.from)
	}
	cgoOff, binary := false, ""
	buildRE := regexp.MustCompile(`go build .*-o (\S+) "?\./services/` + regexp.QuoteMeta(svc) + `"?(\s|$)`)
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
		case "CMD":
			// A default command would be one service's: the CLI's `up` reaches every
			// image, and a single-part binary refuses arguments.
			fail("CMD %s: the image is every service's; give the command at run time", l.args)
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

// serviceRef is the build argument as a Dockerfile line or its shell names it.
var serviceRef = regexp.MustCompile(`\$\{SERVICE\}|\$SERVICE\b`)

// TestDeploymentsDockerfiles: one Dockerfile builds every service's image, and its
// build step, run as docker runs it (sh -c, the argument in the environment), builds the
// service named and refuses a name that is none.
func TestDeploymentsDockerfiles(t *testing.T) {
	f := loadDeployFacts(t)
	data, err := os.ReadFile(filepath.Join(f.root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range f.services {
		for _, p := range checkDockerfile(f, svc, data) {
			t.Errorf("Dockerfile with SERVICE=%s: %s", svc, p)
		}
	}
	if more, _ := filepath.Glob(filepath.Join(f.root, "services", "*", "Dockerfile")); len(more) > 0 {
		t.Errorf("a recipe of its own beside the one Dockerfile: %v", more)
	}

	// The build step with a go that only says how it was called.
	var script string
	for _, l := range parseDockerfile(data) {
		if l.cmd == "RUN" && strings.Contains(l.args, "go build") {
			script = regexp.MustCompile(`--mount=\S+\s*`).ReplaceAllString(l.args, "")
		}
	}
	if script == "" {
		t.Fatal("no RUN with go build")
	}
	bin := t.TempDir()
	calls := filepath.Join(bin, "calls")
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte("#!/bin/sh\necho \"$@\" >> "+calls+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	build := func(service string) (string, error) {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Dir = f.root
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "SERVICE="+service)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, svc := range f.services {
		os.Remove(calls)
		if out, err := build(svc); err != nil {
			t.Fatalf("SERVICE=%s: %v\n%s", svc, err, out)
		}
		got, _ := os.ReadFile(calls)
		if !strings.HasSuffix(strings.TrimSpace(string(got)), "./services/"+svc) {
			t.Errorf("SERVICE=%s: go called as %q", svc, got)
		}
	}
	for _, wrong := range []string{"stoper", "", "../tests"} {
		os.Remove(calls)
		out, err := build(wrong)
		if err == nil {
			t.Errorf("SERVICE=%q built", wrong)
		}
		if want := "SERVICE=" + wrong + " is no service; one of: " + strings.Join(f.services, " "); !strings.Contains(out, want) {
			t.Errorf("SERVICE=%q: %q, want %q", wrong, out, want)
		}
		if _, err := os.Stat(calls); err == nil {
			t.Errorf("SERVICE=%q: go was called", wrong)
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

// TestOnePartBinariesRefuseArguments: the images have no default command, and a
// one-part binary given one (`docker run exacto/stopper --help`) says so and where its
// settings are listed, where it would have started with the argument unread.
func TestOnePartBinariesRefuseArguments(t *testing.T) {
	dir := t.TempDir()
	parts := []string{"gateway", "stopper", "reconciler"} // each kind of twin command
	args := []string{"build", "-o", dir + "/"}
	for _, p := range parts {
		args = append(args, "../services/"+p)
	}
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, p := range parts {
		cmd := exec.Command(filepath.Join(dir, p), "--help")
		cmd.Env = append(os.Environ(), "EXACTO_NATS_URL=nats://127.0.0.1:1") // nothing to reach, were it started
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("%s --help: %v, want exit 2\n%s", p, err, out)
		}
		m := regexp.MustCompile("`(exacto [a-z ]+) --help` lists").FindStringSubmatch(string(out))
		if m == nil || !strings.HasPrefix(string(out), p+": takes no arguments") {
			t.Errorf("%s --help said %q", p, out)
			continue
		}
		if out, err := exec.Command(exactoBin, append(strings.Fields(m[1])[1:], "--help")...).CombinedOutput(); err != nil || !strings.Contains(string(out), "EXACTO_NATS_URL") {
			t.Errorf("%s --help, as named: %v\n%s", m[1], err, out)
		}
	}
}
