SHELL := /bin/bash
# nsgate's build and test entry points. `make test` is what CI runs.
GO      ?= go
BIN     ?= bin/nsgate
INIT_BIN ?= $(dir $(BIN))nsgate-init
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# The build stamp: a hash of the sources, linked into nsgate and nsgate-init
# alike. nsgate starts the nsgate-init beside it only when its stamp is its
# own (package sandbox, buildStamp).
STAMP   ?= $(shell find . -name '*.go' -not -path './.git/*' | LC_ALL=C sort | xargs cat go.mod go.sum | sha256sum | cut -c1-16)
LDFLAGS := -s -w -X main.version=$(VERSION) -X github.com/nsgate/nsgate/sandbox.buildStamp=$(STAMP)
# Integration tests need namespaces; they re-execute themselves inside a
# sealed network namespace (see integration/harness_test.go).
ITEST_FLAGS ?= -count=1 -timeout 25m

.PHONY: all build test vet unit integration lab bench bench-density bench-pageload bench-tls gobench fuzz clean

all: build

# nsgate and the sandbox's init, nsgate-init (cmd/nsgate-init), which nsgate
# starts from beside itself: install the two together.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/nsgate
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(INIT_BIN) ./cmd/nsgate-init

# The test command: .ci/preflight first says what this machine lacks (as
# root it installs it), then vet, the unit tests and the integration tests
# run, with every skip a failure wherever everything can run
# (NSGATE_REQUIRE_ALL, which preflight chooses unless it is set).
test:
	@req=$$(./.ci/preflight) || exit 1; \
	NSGATE_REQUIRE_ALL=$${NSGATE_REQUIRE_ALL:-$$req} $(MAKE) --no-print-directory vet unit integration

vet:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	CGO_ENABLED=0 $(GO) vet ./...
	CGO_ENABLED=0 $(GO) vet -tags integration ./integration/

# Every unit test that skipped is listed by name and reason (from a user
# shell some need root; under NSGATE_REQUIRE_ALL=1 a missing prerequisite
# fails instead). The whole log goes to unit.log.
unit:
	@echo "unit tests (-race); the whole log goes to unit.log"
	@$(GO) test -race -count=1 -v ./... 2>&1 | tee unit.log | grep -E '^(ok|FAIL|panic|\s*--- FAIL|#|\S+\.go:[0-9]+:)' ; st=$${PIPESTATUS[0]}; \
	  skip=$$(grep -cE '^\s*--- SKIP' unit.log); \
	  echo "unit: $$(grep -cE '^\s*--- PASS' unit.log) passed, $$(grep -cE '^\s*--- FAIL' unit.log) failed, $$skip skipped"; \
	  if [ "$$skip" != 0 ]; then echo "skipped:"; grep -E -B1 '^\s*--- SKIP' unit.log | grep -vE '^(--|=== RUN.*)$$' | sed 's/^ */  /'; fi; \
	  if [ "$$st" != 0 ]; then echo "failures (with the 15 lines before each):"; grep -E -B15 '^\s*--- FAIL' unit.log; fi; \
	  exit $$st

integration:
	@echo "integration tests (NSGATE_REQUIRE_ALL=$${NSGATE_REQUIRE_ALL:-0}); the whole log goes to integration.log"
	@$(GO) test -tags integration $(ITEST_FLAGS) -v ./integration/ 2>&1 | tee integration.log | grep -E '^(=== RUN|\s*--- |PASS|FAIL|ok|panic|\s+\S+_test.go)' ; st=$${PIPESTATUS[0]}; \
	  run=$$(grep -c '^=== RUN' integration.log); pass=$$(grep -cE '^\s*--- PASS' integration.log); \
	  fail=$$(grep -cE '^\s*--- FAIL' integration.log); skip=$$(grep -cE '^\s*--- SKIP' integration.log); \
	  echo "integration: $$run tests and subtests ran: $$pass passed, $$fail failed, $$skip skipped"; \
	  if [ "$$skip" != 0 ]; then echo "skipped:"; grep -E '^\s*--- SKIP' integration.log | sed 's/^ */  /'; fi; \
	  exit $$st

lab: build
	./$(BIN) lab

bench: build
	./bench/run.sh
	$(MAKE) --no-print-directory gobench
	$(MAKE) --no-print-directory bench-pageload
	$(MAKE) --no-print-directory bench-tls

# Page load with and without nsgate for the Playwright stack, side by side
# in one run (a Go benchmark in the integration suite: sealed, and never a
# pass/fail time); docs/performance.md, "Page load: Playwright".
bench-pageload:
	$(GO) test -tags integration -count=1 -run '^$$' -bench '^BenchmarkPlaywrightPageLoad$$' -benchtime 1x -timeout 10m -v ./integration/

# The added cost of tls: terminate (with and without a credential) beside
# SNI-checked passthrough on one fake host: time to first byte of a fresh
# connection and bulk download, interleaved, plus a CPU profile of the
# terminated bulk case (a Go benchmark in the integration suite; no time
# asserted); docs/performance.md, "TLS termination".
bench-tls:
	$(GO) test -tags integration -count=1 -run '^$$' -bench '^BenchmarkTLSTermination$$' -benchtime 1x -timeout 10m -v ./integration/

# The density benchmark (bench/density): N sandboxes started at once, beside
# bare unshare, pasta and slirp4netns; docs/performance.md, "Density".
# As root it seals itself in a network namespace and runs the sandboxes as
# nsgate-test. DENSITY_FLAGS e.g. "-n 100 -cases unshare,nsgate -trace".
DENSITY_FLAGS ?=
bench-density: build
	@d=$$(mktemp -d /tmp/nsgate-density-build.XXXXXX) && \
	  CGO_ENABLED=0 $(GO) build -o $$d/density ./bench/density && \
	  CGO_ENABLED=0 $(GO) build -o $$d/connbench ./bench/connbench && \
	  CGO_ENABLED=0 $(GO) build -o $$d/gostub ./bench/gostub && \
	  $$d/density -nsgate $(BIN) -connbench $$d/connbench -gostub $$d/gostub $(DENSITY_FLAGS); st=$$?; rm -rf $$d; exit $$st

# Go benchmarks of the hot paths (policy decision, DNS, audit, L7
# classification, relay, TUN endpoint); figures in docs/performance.md.
gobench:
	$(GO) test -run '^$$' -bench . -benchmem ./policy/ ./dns/ ./audit/ ./l7/ ./relay/ ./tun/

clean:
	rm -rf bin integration.log unit.log
