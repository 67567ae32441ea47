# Exacto: `make run` starts the whole pipeline on an embedded NATS server; `make test`
# runs every test that runs here, plus vet and gofmt checks.
GO      ?= go
MODULES := pkg services/classifier services/exacto services/gateway services/suppressor tests
BIN     := bin/exacto

STATICCHECK := bin/staticcheck
NATSCLI     := bin/nats

.PHONY: run build test vet lint fmt-check bench clean

build:
	$(GO) build -o $(BIN) ./services/exacto

run: build
	./$(BIN) up

test: fmt-check vet lint $(NATSCLI)
	@for m in $(MODULES); do \
		echo "== go test $$m"; \
		(cd $$m && EXACTO_TEST_NATS_CLI=$(CURDIR)/$(NATSCLI) $(GO) test -count=1 -timeout 20m ./...) || exit 1; \
	done

vet:
	@for m in $(MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done

# staticcheck comes from the Go module proxy, pinned, into bin/.
$(STATICCHECK):
	GOBIN=$(CURDIR)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2

# The stock nats CLI, which the end-to-end tests use to inspect the embedded server.
$(NATSCLI):
	GOBIN=$(CURDIR)/bin $(GO) install github.com/nats-io/natscli/nats@v0.5.0

lint: $(STATICCHECK)
	@for m in $(MODULES); do (cd $$m && $(CURDIR)/$(STATICCHECK) ./...) || exit 1; done

fmt-check:
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

bench:
	cd tests && $(GO) test -run '^$$' -bench . -benchtime 3s -timeout 30m ./bench/...

clean:
	rm -rf bin .exacto
