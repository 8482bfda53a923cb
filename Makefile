SHELL := /bin/bash
# nsgate's build and test entry points. `make test` is what CI runs.
GO      ?= go
BIN     ?= bin/nsgate
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
# Integration tests need namespaces; they re-execute themselves inside a
# sealed network namespace (see integration/harness_test.go).
ITEST_FLAGS ?= -count=1 -timeout 25m

.PHONY: all build test vet unit integration lab bench gobench fuzz clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/nsgate

test: vet unit integration

vet:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	CGO_ENABLED=0 $(GO) vet ./...
	CGO_ENABLED=0 $(GO) vet -tags integration ./integration/

unit:
	$(GO) test -race -count=1 ./...

integration:
	$(GO) test -tags integration $(ITEST_FLAGS) -v ./integration/ 2>&1 | tee integration.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic|\s+\S+_test.go)' ; exit $${PIPESTATUS[0]}

lab: build
	./$(BIN) lab

bench: build
	./bench/run.sh
	$(MAKE) --no-print-directory gobench

# Go benchmarks of the hot paths (policy decision, DNS, audit, L7
# classification, relay, TUN endpoint); figures in docs/performance.md.
gobench:
	$(GO) test -run '^$$' -bench . -benchmem ./policy/ ./dns/ ./audit/ ./l7/ ./relay/ ./tun/

clean:
	rm -rf bin integration.log
