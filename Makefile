# Exacto: `make run` starts the whole pipeline on an embedded NATS server; `make test`
# runs every test that runs here, plus vet and gofmt checks.
GO      ?= go
# Every package of every module in go.work.
PKGS    := exacto.dev/...
BIN     := bin/exacto

STATICCHECK := bin/staticcheck
NATSCLI     := bin/nats

.PHONY: run build test vet lint fmt-check bench clean

build:
	$(GO) build -o $(BIN) ./services/exacto

run: build
	./$(BIN) up

test: fmt-check vet lint $(NATSCLI)
	EXACTO_TEST_NATS_CLI=$(CURDIR)/$(NATSCLI) $(GO) test -count=1 -timeout 20m $(PKGS)

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

bench:
	cd tests && $(GO) test -run '^$$' -bench . -benchtime 3s -timeout 30m ./bench/...

clean:
	rm -rf bin .exacto
