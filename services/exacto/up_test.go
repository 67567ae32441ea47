package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The banner's nats CLI is found beside the binary (make bin/nats puts it there),
// named as a command from the working directory runs it, wherever that is; else on
// PATH; else the banner says how to get it: make in the checkout the binary was built
// in, or go install.
func TestNatsCLIIsNamedFromTheWorkingDirectory(t *testing.T) {
	repo, elsewhere := t.TempDir(), t.TempDir()
	exe := filepath.Join(repo, "bin", "exacto")
	os.MkdirAll(filepath.Dir(exe), 0o755)
	none := func(string) (string, error) { return "", exec.ErrNotFound }
	onPath := func(string) (string, error) { return "/usr/bin/nats", nil }
	check := func(name, wd string, look func(string) (string, error), wantCLI, wantHow string) {
		t.Helper()
		if cli, how := natsCLIFor(exe, wd, look); cli != wantCLI || how != wantHow {
			t.Errorf("%s: %q, %q; want %q, %q", name, cli, how, wantCLI, wantHow)
		}
	}
	check("nowhere, no checkout", repo, none, "", "go install github.com/nats-io/natscli/nats@"+natsCLIVersion+", then nats")
	os.WriteFile(filepath.Join(repo, "Makefile"), []byte("bin/nats:\n"), 0o644)
	check("from the checkout", repo, none, "", "make bin/nats, then ./bin/nats")
	check("from elsewhere", elsewhere, none, "", "make -C "+repo+" bin/nats, then "+filepath.Join(repo, "bin", "nats"))
	check("on PATH", elsewhere, onPath, "nats", "")
	os.WriteFile(filepath.Join(repo, "bin", "nats"), []byte("#!/bin/sh\n"), 0o755)
	check("beside, from the checkout", repo, onPath, "./bin/nats", "")
	check("beside, from elsewhere", elsewhere, none, filepath.Join(repo, "bin", "nats"), "")
	check("beside, from below the checkout", filepath.Dir(exe), none, "./nats", "")
	// go run from a checkout: the binary in a build cache, the CLI in the checkout's bin/.
	tmpExe := filepath.Join(elsewhere, "go-build123", "exe", "exacto")
	if cli, how := natsCLIFor(tmpExe, repo, none); cli != "./bin/nats" || how != "" {
		t.Errorf("go run, bin/nats built: %q, %q", cli, how)
	}
	os.Remove(filepath.Join(repo, "bin", "nats"))
	if cli, how := natsCLIFor(tmpExe, repo, none); cli != "" || how != "make bin/nats, then ./bin/nats" {
		t.Errorf("go run, bin/nats not built: %q, %q", cli, how)
	}
	// The version said is the one the Makefile installs.
	mk, err := os.ReadFile("../../Makefile")
	if err != nil || !strings.Contains(string(mk), "natscli/nats@"+natsCLIVersion) {
		t.Errorf("the Makefile does not install nats %s (%v)", natsCLIVersion, err)
	}
}
