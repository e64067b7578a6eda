# agentmesh — build, code generation, checks and tests.
#
# `make help` lists the targets (from their `## ` comments) and the variables
# you can set on the command line (`make test PKGS=./pkg/...`; the environment
# does not set them).
#
# CI (.ci/run) runs: make tools, make lint, make generate-check, make tidy-check, make test.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

MODULE := github.com/agentmesh/agentmesh

# ---------------------------------------------------------------------------
# Pinned tools: the one place their versions are written. `make tools` installs
# each into $(TOOLBIN) unless a binary of exactly that version is there already.
# ---------------------------------------------------------------------------
BUF                := github.com/bufbuild/buf/cmd/buf@v1.75.0
PROTOC_GEN_GO      := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC := google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
GRPCURL            := github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4
GOTESTSUM          := gotest.tools/gotestsum@v1.13.0
STATICCHECK        := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# REST/JSON from the proto's google.api.http annotations (the gateway
# handlers in pkg/api) and its OpenAPI document; the same version as the
# grpc-gateway runtime module in go.mod.
PROTOC_GEN_GATEWAY := github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@v2.30.0
PROTOC_GEN_OPENAPI := github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2@v2.30.0

# What `generate`, `generate-check` and `lint` need (and CI installs).
GEN_TOOLS := $(BUF) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC) $(PROTOC_GEN_GATEWAY) $(PROTOC_GEN_OPENAPI)

GOBIN_DEFAULT := $(or $(shell go env GOBIN),$(shell go env GOPATH)/bin)
## TOOLBIN: where the pinned tools go (default: go env GOBIN, else GOPATH/bin)
TOOLBIN = $(GOBIN_DEFAULT)
## VERSION: version stamped into the binaries
VERSION = $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
## PKGS: packages `make test` runs
PKGS = ./...
## TESTFLAGS: extra `go test` flags, e.g. TESTFLAGS=-v or TESTFLAGS='-run TestE2E'
TESTFLAGS =
## BENCH_ARGS: load generator flags, e.g. BENCH_ARGS='-n 5000 -c 100 -store both' (see `go run ./services/cmd/ambench -h`)
BENCH_ARGS =
## DEV_ARGS: extra arguments of `agentmesh dev`
DEV_ARGS =
## IMAGE: image `make image` builds (the one docker-compose.yml and deploy/k8s use)
IMAGE = agentmesh:dev

# The local plugins of buf.gen.yaml resolve through PATH: the pinned ones come first.
TOOLPATH := $(TOOLBIN):$(PATH)
LDFLAGS := -X $(MODULE)/services/app.Version=$(VERSION) -X main.version=$(VERSION)
# The agent child, started once per task, is static and without gRPC's
# x/net/trace: 16 MiB instead of 21, no dynamic loader or libc to start,
# ~1 ms less CPU and ~15% less memory per child. The server stays a cgo
# binary: a static one answered the API with a ~50% higher p99 under load
# (docs/benchmarks.md, 2026-11-23). The child links no gRPC at all: it
# uses pkg/api's messages, never its services, and `make generate` tags
# the generated service stubs (*_grpc.pb.go) !$(NOGRPC_TAG), so the
# child's start skips gRPC's package initialisation (docs/benchmarks.md,
# "The agent child without gRPC"). The Dockerfile builds the same way.
NOGRPC_TAG := agentmesh_nogrpc
AGENT_BUILD := CGO_ENABLED=0 go build -tags grpcnotrace,$(NOGRPC_TAG)

# install_tools SPEC...: `go install` each module/cmd@version whose binary in
# $(TOOLBIN) is missing or reports another module version (`go version -m`).
define install_tools
	@mkdir -p "$(TOOLBIN)"; \
	for spec in $(1); do \
	  pkg="$${spec%@*}"; want="$${spec##*@}"; bin="$(TOOLBIN)/$${pkg##*/}"; \
	  have="$$( { go version -m "$$bin" 2>/dev/null || true; } | awk '$$1 == "mod" { print $$3; exit }')"; \
	  if [ "$$have" = "$$want" ]; then \
	    echo "tools: $${pkg##*/} $$want already in $(TOOLBIN)"; \
	  else \
	    echo "tools: go install $$spec (found: $${have:-none}) into $(TOOLBIN)"; \
	    GOBIN="$(TOOLBIN)" go install "$$spec"; \
	  fi; \
	done
endef

.PHONY: help
help: ## list the targets and variables
	@echo "usage: make TARGET [VAR=value ...]"
	@echo
	@echo "targets:"
	@awk 'BEGIN { FS = ":.*## " } /^[a-zA-Z0-9_-]+:.*## / { printf "  %-16s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)
	@echo
	@echo "variables:"
	@awk '/^## [A-Z_]+: / { name = $$2; sub(/:$$/, "", name); sub(/^## [A-Z_]+: /, ""); printf "  %-16s %s\n", name, $$0 }' $(MAKEFILE_LIST)

.PHONY: tools
tools: ## install buf and the protoc plugins of buf.gen.yaml (pinned) into TOOLBIN if missing
	$(call install_tools,$(GEN_TOOLS))

.PHONY: tools-extra
tools-extra: ## also install grpcurl, gotestsum and staticcheck (pinned)
	$(call install_tools,$(GRPCURL) $(GOTESTSUM) $(STATICCHECK))

.PHONY: generate
generate: tools ## regenerate pkg/api and the OpenAPI document from proto/ with buf (buf.gen.yaml, clean: true)
	PATH="$(TOOLPATH)" buf generate
	@# The gRPC service stubs and the REST gateway handlers stay out of a
	@# build tagged $(NOGRPC_TAG): the agent child uses the messages only
	@# (AGENT_BUILD).
	@for f in $$(find pkg/api -name '*_grpc.pb.go' -o -name '*.pb.gw.go' | sort); do \
	  sed -i '1i //go:build !$(NOGRPC_TAG)\n' "$$f"; \
	done

# What `make generate` writes (and generate-check compares with the commit).
GENERATED := pkg/api proto services/router/rest/openapi

.PHONY: generate-check
generate-check: generate ## fail if regenerating changes pkg/api, the OpenAPI document or proto (stale generated code)
	@if ! git diff --exit-code --stat -- $(GENERATED); then \
	  echo "generate-check: regenerated code differs from the committed code: run 'make generate' and commit" >&2; \
	  exit 1; \
	fi
	@untracked="$$(git ls-files --others --exclude-standard -- $(GENERATED))"; \
	if [ -n "$$untracked" ]; then \
	  echo "generate-check: untracked generated files:" >&2; echo "$$untracked" >&2; \
	  exit 1; \
	fi
	@echo "generate-check: generated code is up to date"

.PHONY: lint
lint: tools ## gofmt (generated code included), go vet and buf lint
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then \
	  echo "lint: gofmt -l found unformatted files (run gofmt -w):" >&2; echo "$$unformatted" >&2; \
	  exit 1; \
	fi
	go vet ./...
	PATH="$(TOOLPATH)" buf lint
	@echo "lint: clean"

.PHONY: staticcheck
staticcheck: ## run staticcheck (pinned; CI runs it)
	$(call install_tools,$(STATICCHECK))
	"$(TOOLBIN)/staticcheck" ./...

.PHONY: tidy-check
tidy-check: ## fail if `go mod tidy` would change go.mod or go.sum
	@if ! go mod tidy -diff; then \
	  echo "tidy-check: go.mod/go.sum are not tidy: run 'go mod tidy' and commit" >&2; \
	  exit 1; \
	fi
	@echo "tidy-check: go.mod and go.sum are tidy"

.PHONY: test
test: ## run every test with the race detector (CI=true: a test that finds no Postgres fails)
	go test -race -count=1 -timeout 30m $(TESTFLAGS) $(PKGS)

.PHONY: bench
bench: build ## build, then run the load generator (BENCH_ARGS) against bin/agentmesh, and the scheduler alone (go test -bench Dispatch, ambench -sched); figures go in docs/benchmarks.md. With the defaults it ends with 10,000 tasks in flight on a 10 s model (issue 32): that phase alone takes ~5 min on 2 cores (each answer then needs a child); BENCH_ARGS='-inflight 1000' for a quicker run
	go run ./services/cmd/ambench $(BENCH_ARGS)

.PHONY: bench-scheduler
bench-scheduler: ## the scheduler alone (real NATS and store; an acking consumer for executors); AGENTMESH_BENCH_DEPTH=100000 adds the deep-queue case
	go test -run '^$$' -bench 'Dispatch|SlotFree|ModelMemory|StateCeiling' -benchtime 5000x -timeout 30m ./services/scheduler/

.PHONY: screenshots
screenshots: ## take the dashboard's pictures into docs/images (headless Chromium against a stack with a few tasks)
	AGENTMESH_UI_SCREENSHOTS=$(CURDIR)/docs/images go test -count=1 -timeout 15m -run TestScreenshots ./services/router/ui/

.PHONY: dev
dev: ## run everything in one process: embedded NATS + store, scripted model, gRPC API on :7400
	go run ./services/cmd/agentmesh dev $(DEV_ARGS)

.PHONY: build
build: ## build bin/agentmesh, bin/agentmesh-agent (the agent child) and bin/amctl (-trimpath, version VERSION)
	@mkdir -p bin
	go build -trimpath -ldflags "$(LDFLAGS)" -o bin/ ./services/cmd/agentmesh ./services/cmd/amctl
	$(AGENT_BUILD) -trimpath -ldflags "$(LDFLAGS)" -o bin/ ./services/cmd/agentmesh-agent

.PHONY: image
image: ## build the container image IMAGE (needs a Docker engine)
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

.PHONY: clean
clean: ## remove bin/ and the test cache
	rm -rf bin
	go clean -testcache
