# Exacto: `make run` starts the whole pipeline on an embedded NATS server; `make test`
# runs every test that runs here, plus vet and gofmt checks.
GO      ?= go
MODULES := pkg services/exacto services/gateway tests
BIN     := bin/exacto

.PHONY: run build test vet fmt-check bench fuzz-seed clean

build:
	$(GO) build -o $(BIN) ./services/exacto

run: build
	./$(BIN) up

test: fmt-check vet
	@for m in $(MODULES); do \
		echo "== go test $$m"; \
		(cd $$m && $(GO) test -count=1 -timeout 20m ./...) || exit 1; \
	done

vet:
	@for m in $(MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done

fmt-check:
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

bench:
	cd tests && $(GO) test -run '^$$' -bench . -benchtime 3s -timeout 30m ./bench/...

clean:
	rm -rf bin .exacto
