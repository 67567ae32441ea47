package tests

import (
	"encoding/json"
	"fmt"
	"os"
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
