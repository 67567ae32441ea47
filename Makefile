# Exacto: `make run` starts the whole pipeline on an embedded NATS server; `make test`
# runs every test that runs here, plus vet and gofmt checks.
GO      ?= go
# Every package of every module in go.work.
PKGS    := exacto.dev/...
BIN     := bin/exacto

STATICCHECK := bin/staticcheck
NATSCLI     := bin/nats

.PHONY: run build test test-deps vet lint fmt-check bench chaos clean

build:
	$(GO) build -o $(BIN) ./services/exacto

run: build
	./$(BIN) up

# Test artifacts (the console's screenshots) go to TEST_OUTPUT.
TEST_OUTPUT ?= $(CURDIR)/.exacto/test-output

test: test-deps fmt-check vet lint $(NATSCLI)
	EXACTO_TEST_OUTPUT=$(TEST_OUTPUT) EXACTO_TEST_NATS_CLI=$(CURDIR)/$(NATSCLI) $(GO) test -count=1 -timeout 20m $(PKGS)

# chromium and strace, through apt-get when missing (scripts/test-deps says what else to do).
test-deps:
	@./scripts/test-deps

vet:
	$(GO) vet $(PKGS)

# staticcheck comes from the Go module proxy, pinned, into bin/.
$(STATICCHECK):
	GOBIN=$(CURDIR)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2

# The stock nats CLI, which the end-to-end tests use to inspect the embedded server.
$(NATSCLI):
	GOBIN=$(CURDIR)/bin $(GO) install github.com/nats-io/natscli/nats@v0.5.0

lint: $(STATICCHECK)
	./$(STATICCHECK) $(PKGS)

fmt-check:
	@out=$$(gofmt -l pkg services tests); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# `make bench`: every benchmark of tests/bench once (-benchtime 1x: each sizes itself,
# EXACTO_BENCH_* in tests/bench say how), then one table of the BENCH| rows they print:
# each figure beside its baseline measured in the same run on the same machine, and
# figure/baseline. Speed is never asserted; a benchmark fails only when something is
# lost or refused. The raw output stays in BENCHLOG (printed on failure).
BENCHLOG ?= $(CURDIR)/.exacto/bench.log

bench:
	@mkdir -p $(dir $(BENCHLOG)); start=$$(date +%s); \
	( cd tests && $(GO) test -count=1 -run '^$$' -bench . -benchtime 1x -timeout 25m ./bench/... ) > $(BENCHLOG) 2>&1; rc=$$?; \
	grep -E '^(--- FAIL|FAIL|ok|panic:)' $(BENCHLOG); \
	printf '\n%-9s %-52s %12s %12s %7s  %s\n' section what figure baseline ratio note; \
	for s in gateway commit fsync requests e2e consumers replay memory privacy; do \
		grep "^BENCH|$$s|" $(BENCHLOG) | awk -F'|' '{printf "%-9s %-52s %12s %12s %7s  %s\n", $$2, $$3, $$4, $$5, $$6, $$7}'; \
	done; \
	printf '\nmachine: %s cores%s, %s, %s, %s; make bench took %ss; raw output in %s\n' "$$(nproc)" \
		"$$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2)" \
		"$$(awk '/^MemTotal/ {printf "%.0f GiB", $$2/1048576}' /proc/meminfo 2>/dev/null)" \
		"$$($(GO) env GOVERSION)" "$$(date -u +%Y-%m-%dT%H:%MZ)" "$$(( $$(date +%s) - start ))" $(BENCHLOG); \
	if [ $$rc -ne 0 ]; then echo; grep -v '^BENCH|' $(BENCHLOG) | tail -80; exit $$rc; fi

# `make chaos`: every fault scenario at full size (EXACTO_CHAOS=full: a storm of 10,000
# replies, a 60 s HubSpot outage, 10,000 forged signatures, crash points, a killed
# cluster leader…), its table, then every fuzz target for FUZZTIME.
chaos: $(NATSCLI)
	@log=$$(mktemp); trap 'rm -f $$log' EXIT; \
	EXACTO_CHAOS=full EXACTO_TEST_NATS_CLI=$(CURDIR)/$(NATSCLI) $(GO) test -count=1 -timeout 90m -v \
		-run 'TestChaos|TestClusterLeader|TestEmbeddedRestartUnderLoad|TestCatalogue' exacto.dev/tests > $$log 2>&1; rc=$$?; \
	grep -E '^(--- FAIL|FAIL|ok)' $$log; \
	printf '\n%-34s %8s %9s %7s %5s %11s %10s\n' scenario sent expected seen lost duplicated p99; \
	grep '^CHAOS|' $$log | awk -F'|' '{printf "%-34s %8s %9s %7s %5s %11s %10s\n", $$2, $$3, $$4, $$5, $$6, $$7, $$8}'; \
	if [ $$rc -ne 0 ]; then grep -B2 -A20 -- '--- FAIL' $$log | head -80; exit $$rc; fi
	$(MAKE) fuzz

clean:
	rm -rf bin .exacto

# --- chaos-fuzz ---------------------------------------------------------------------
# `make fuzz` runs every Fuzz target of the workspace, FUZZTIME each (`make fuzz
# FUZZTIME=5s` for a quick pass). Seed corpora live in each package's testdata/fuzz/
# (plain `go test` runs them as seeds); a failing input found here is written there too.
# Go 1.26's fuzz coordinator can end a duration-bounded run with a bare "context
# deadline exceeded" and no failing input (go.dev/issue/75804, fixed in Go 1.27): that
# is reported and not counted as a failure; any run that writes a failing input is.
FUZZTIME ?= 60s

.PHONY: fuzz
fuzz:
	@set -e; start=$$(date +%s); n=0; races=0; log=$$(mktemp); trap 'rm -f $$log' EXIT; \
	for line in $$($(GO) list -f '{{.ImportPath}}={{.Dir}}' $(PKGS)); do \
		pkg=$${line%%=*}; dir=$${line#*=}; \
		grep -qs '^func Fuzz' $$dir/*_test.go || continue; \
		for name in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			echo "== $$pkg $$name ($(FUZZTIME))"; n=$$((n+1)); \
			if $(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) $$pkg >$$log 2>&1; then \
				tail -n 2 $$log; \
			elif grep -q 'context deadline exceeded' $$log && ! grep -q 'Failing input written' $$log; then \
				tail -n 6 $$log; races=$$((races+1)); \
				echo "fuzz: $$name ended on the -fuzztime deadline race (go.dev/issue/75804), no failing input"; \
			else \
				cat $$log; echo "fuzz: $$pkg $$name FAILED"; exit 1; \
			fi; \
		done; \
	done; \
	echo "fuzz: $$n targets, $(FUZZTIME) each, all passed ($$races ended on the deadline race), $$(( $$(date +%s) - start ))s in all"
