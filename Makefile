# higgs — build, test, lint, generate, bench.
GO ?= go
PKGS := ./...

.PHONY: all build run test hostile sdk-test lint generate wire-check bench fuzz

all: build

build:
	$(GO) build -o bin/higgsd ./cmd/higgsd
	$(GO) build -o bin/higgs-verify ./cmd/higgs-verify

# Serve the bundled demo model with its DFlash drafter on 127.0.0.1:8000.
run:
	$(GO) run ./cmd/higgsd

# The whole suite: vet, every test (the hostile-client suite last, to show its counts), the race detector on the domain and ports, a stale-wire check, and the
# official Anthropic and OpenAI SDKs against a real higgsd.
test: lint wire-check
	$(GO) test -count=1 -timeout 30m $$($(GO) list $(PKGS) | grep -v /app/hostile$$)
	$(MAKE) --no-print-directory hostile
	$(GO) test -count=1 -race ./domain/... ./ports/...
	$(MAKE) --no-print-directory sdk-test

# The hostile-client suite against the real wiring over the fake engine; run in local directory mode
# so that its line of counts ("hostile: N cases, N right status, N 5xx, N crashes, N leaks") is printed.
hostile:
	cd app/hostile && $(GO) test -count=1 -timeout 5m

# The official Anthropic and OpenAI TypeScript SDKs (pinned in tests/*-sdk/package-lock.json) drive a real higgsd
# serving the bundled demo. They need node and `npm ci --prefix tests/anthropic-sdk` and `--prefix tests/openai-sdk`,
# which .ci/run does (and there, with HIGGS_SDK_TESTS=required, their absence fails the run); elsewhere each is
# skipped with a message.
SDK_TESTS := anthropic-sdk:messages.test.mjs:@anthropic-ai/sdk openai-sdk:openai.test.mjs:openai

sdk-test:
	@$(GO) build -o bin/higgsd ./cmd/higgsd
	@for t in $(SDK_TESTS); do \
	  dir=$${t%%:*}; rest=$${t#*:}; file=$${rest%%:*}; pkg=$${rest#*:}; \
	  if ! command -v node >/dev/null 2>&1 || [ ! -d tests/$$dir/node_modules/$$pkg ]; then \
	    if [ "$$HIGGS_SDK_TESTS" = required ]; then \
	      echo "sdk-test: node and tests/$$dir/node_modules are required: npm ci --prefix tests/$$dir"; exit 1; fi; \
	    echo "sdk-test: SKIPPED: tests/$$dir needs node and 'npm ci --prefix tests/$$dir' (.ci/run does both)"; \
	    continue; fi; \
	  (cd tests/$$dir && HIGGSD=bin/higgsd node --test --test-concurrency=1 $$file) || exit 1; \
	done

lint:
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

generate:
	$(GO) tool wire gen ./cmd/higgsd ./cmd/higgs-verify

# Fails when a committed wire_gen.go is not what wire would generate now.
wire-check:
	@$(GO) tool wire diff ./cmd/higgsd ./cmd/higgs-verify >/tmp/wire-diff.$$$$ 2>&1; rc=$$?; \
	  if [ $$rc -ne 0 ]; then cat /tmp/wire-diff.$$$$; rm -f /tmp/wire-diff.$$$$; echo "wire_gen.go is stale: run make generate"; exit 1; fi; \
	  rm -f /tmp/wire-diff.$$$$

bench:
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...
