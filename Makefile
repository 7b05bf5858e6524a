# Converge — developer entry points. `make help` lists them.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
BIN := $(CURDIR)/bin
export PATH := $(BIN):$(PATH)

CONTROLLER_GEN := $(BIN)/controller-gen
GOLANGCI_LINT := $(BIN)/golangci-lint
HELM := $(BIN)/helm
KUBECTL := $(BIN)/kubectl

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/converge-dev/converge/internal/version.Version=$(VERSION)
# Build tags of the converge binary (also in the Dockerfile and
# internal/replicas.BuildTags): no kustomize Go-plugin loader, whose "plugin"
# import makes a cgo build export every symbol and keeps ~20 MB more of the
# binary resident.
GOTAGS := kustomize_disable_go_plugin_support
IMG ?= converge:$(VERSION)
# Test flags: `make test TESTFLAGS=-v` or `make test PKG=./internal/localcp/...`
PKG ?= ./...
TESTFLAGS ?=
FUZZTIME ?= 10s
# Every fuzz target, as PACKAGE:TARGET (test/fuzztargets checks that none is missing).
FUZZ_TARGETS = ./internal/gitops/render:FuzzConfinedRead ./internal/gitops/render:FuzzConfinedRender \
	./internal/gitops/render:FuzzDecode ./internal/sqlengine:FuzzValidateIdentifier ./internal/sqlengine:FuzzQuote \
	./internal/sqlengine:FuzzIdentifierOnServers ./internal/sqlengine:FuzzQuoteOnServers \
	./internal/dhcp:FuzzHandle ./internal/bmc/ipmi:FuzzDecodePacket ./internal/bmc/ipmi:FuzzServer

# The packages `make mutate` measures: those of docs/testing.md's mutation
# table whose tests need no control plane (`make mutate MUTATE_PKGS=./internal/expr`
# for one).
MUTATE_PKGS ?= ./internal/webhook/gitops ./internal/webhook/bmc ./internal/webhook/dhcp ./internal/webhook/lb \
	./internal/webhook/machine ./internal/webhook/pki ./internal/webhook/sql ./internal/webhook/upgrade \
	./internal/webhook/workloads ./internal/expr ./internal/gitops/render ./internal/gitops/artifact
MUTATE_TIMEOUT ?= 2m

.DEFAULT_GOAL := help

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Run

.PHONY: up
up: tools build ## Run Converge locally: a real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok) plus the manager.
	$(BIN)/converge up

.PHONY: build
build: ## Build the converge binary into bin/.
	go build -tags "$(GOTAGS)" -ldflags "$(LDFLAGS)" -o $(BIN)/converge ./cmd/converge

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code, CRDs, RBAC, webhook manifests and the chart's copies of them (and examples/kitchen's own).
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths="./api/..."
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd:generateEmbeddedObjectMeta=true webhook \
		paths="./api/..." paths="./internal/..." \
		output:crd:artifacts:config=config/crd/bases \
		output:rbac:artifacts:config=config/rbac \
		output:webhook:artifacts:config=config/webhook
	$(CONTROLLER_GEN) rbac:roleName=dhcp-agent-role paths="./internal/controller/dhcpagent/..." \
		output:rbac:artifacts:config=config/rbac/dhcp-agent
	$(CONTROLLER_GEN) rbac:roleName=machine-agent-role paths="./internal/machineagent/..." \
		output:rbac:artifacts:config=config/rbac/machineagent
	hack/sync-chart.sh
	cd examples/kitchen && $(CONTROLLER_GEN) object:headerFile=../../hack/boilerplate.go.txt paths="./api/..." && \
		$(CONTROLLER_GEN) rbac:roleName=kitchen-manager crd webhook paths="./..." \
		output:crd:artifacts:config=config/crd \
		output:rbac:artifacts:config=config/rbac \
		output:webhook:artifacts:config=config/webhook

.PHONY: images
images: ## Build the QemuMachine test image (Debian cloud kernel + busybox initramfs) into the image cache ($$CONVERGE_IMAGE_CACHE or ~/.cache/converge/images).
	go run ./hack/images

.PHONY: verify
verify: $(CONTROLLER_GEN) ## Regenerate everything and fail if that changed the tree (generated files out of date).
	hack/verify.sh

.PHONY: fmt
fmt: ## Format the code.
	gofmt -s -w $$(git ls-files -co --exclude-standard '*.go')

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run gofmt, go vet and golangci-lint (config: .golangci.yml).
	@out=$$(gofmt -s -l $$(git ls-files -co --exclude-standard '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	$(GOLANGCI_LINT) run ./...
	cd examples/kitchen && go vet ./... && $(GOLANGCI_LINT) run --config ../../.golangci.yml ./...

##@ Test

.PHONY: test
test: tools verify lint build ## Run every test: verify, lint, unit tests and the control-plane suites (builds tools if missing).
	CONVERGE_BIN_DIR=$(BIN) CONVERGE_EXE=$(BIN)/converge go test -race -count=1 -timeout 30m $(TESTFLAGS) $(PKG)
	cd examples/kitchen && CONVERGE_BIN_DIR=$(BIN) go test -race -count=1 -timeout 10m $(TESTFLAGS) ./...

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 10s): the confined render file system first (.ci/run calls it). The *OnServers targets fuzz real PostgreSQL and MariaDB.
	@for t in $(FUZZ_TARGETS); do \
		dir=$${t%%:*}; name=$${t#*:}; \
		echo "fuzz: $$name ($$dir, $(FUZZTIME))"; \
		go test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) $$dir || exit 1; \
	done

.PHONY: mutate
mutate: ## Mutation-test MUTATE_PKGS with hack/mutate (hours on 2 cores): survivors and timeouts as found, then one summary line per package with the commit, for docs/testing.md.
	@commit=$$(git rev-parse --short HEAD); \
	if [ -n "$$(git status --porcelain -- $(MUTATE_PKGS))" ]; then commit="$$commit+uncommitted changes"; fi; \
	go build -o $(BIN)/mutate ./hack/mutate; \
	summary=(); \
	for p in $(MUTATE_PKGS); do \
		echo "mutate: $$p"; \
		line=$$(CONVERGE_SKIP_ENVTEST=1 $(BIN)/mutate -pkg $$p -timeout $(MUTATE_TIMEOUT) | tee /dev/stderr | tail -n 1) || exit 1; \
		summary+=("$$line on $$commit"); \
	done; \
	echo; printf '%s\n' "$${summary[@]}"

.PHONY: test-unit
test-unit: ## Run only the tests that need no control plane.
	CONVERGE_SKIP_ENVTEST=1 go test -count=1 $(TESTFLAGS) $(PKG)

.PHONY: bench
bench: tools build ## Run every benchmark in turn (~15-25 min on 2 cores) and print one table compared with bench/README.md's baseline.
	bench/all.sh

.PHONY: bench-up
bench-up: tools build ## Only the start-up, memory and envtest benchmark (bench/up.sh).
	bench/up.sh

##@ Build dependencies

.PHONY: tools
tools: ## Build the control-plane binaries and dev tools into bin/ (cached outside the clone; ~11 min cold, seconds warm).
	hack/build-tools.sh

$(CONTROLLER_GEN) $(GOLANGCI_LINT) $(HELM) $(KUBECTL):
	hack/build-tools.sh $(notdir $@)

##@ Packaging

.PHONY: docker-build
docker-build: ## Build the manager image (needs a Docker engine).
	docker build --build-arg VERSION=$(VERSION) -t $(IMG) .

.PHONY: helm-lint
helm-lint: $(HELM) ## Lint and render the Helm chart.
	$(HELM) lint charts/converge
	$(HELM) template converge charts/converge --namespace converge-system >/dev/null
