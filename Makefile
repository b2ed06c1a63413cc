# upgradekit's entry points. `make test` is the command the README gives and
# the one CI runs.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

STATICCHECK_VERSION ?= v0.8.2
FUZZTIME ?= 10s
BENCH ?= .
BENCHTIME ?= 1s
# Every Go module in the tree: the root (the pure library: diff, drift,
# strategy, amiselect, nodeexec) plus the modules that keep their
# dependencies out of it: the Cluster API runtime side (strategy/capi), the
# simulator, the harnesses, nodeexec/drain and nodeexec/nodepod, the
# examples, adapters (amiselect/aws, karpenter) and tools (hack/...). Each
# is vetted, linted and tidied on its own go.mod (ARCHITECTURE.md,
# "Modules"): GOWORK=off here, so a module that misses a requirement fails
# as it would for a user.
export GOWORK := off
MODULES := $(shell find . -name go.mod -not -path './.git/*' -printf '%h\n' | sort)
# The modules go.work lists (the root and the modules split off it):
# `make test` runs their tests in one `go test` through go.work, so the
# longest packages of every module share the machine as they did in one
# module; TestTheWorkspaceBuildsWhatEachModuleBuilds shows the workspace
# selects, for every package their tests build, the versions each module's
# own go.mod selects. The other modules (adapters and tools with
# dependencies of their own) are tested each on its own go.mod.
WORK_MODULES := $(shell sed -n 's|^[[:space:]]*\(\.[^[:space:]]*\)$$|\1|p' go.work)
OTHER_MODULES := $(filter-out $(WORK_MODULES),$(MODULES))
# The binaries the project ships (the upgrader and inplace-extension
# images' binaries) are built with this toolchain, newer than go.mod's
# `go 1.26.0` floor: the go command fetches it through the module proxy
# (GOTOOLCHAIN). Library users keep building with any Go >= 1.26.0; the
# Dockerfiles' build stages set the same version (a test holds them to it).
SHIPPED_GOTOOLCHAIN ?= go1.27.3
SHIPPED := examples/upgrader examples/inplace-extension
BIN ?= bin

.PHONY: test unit e2e e2e-scale e2e-node node-assets upgrader-staging lint bench fuzz-smoke envtest-assets capi-inplace-oracle capi-managers clusterctl demo binaries vulndb vulncheck

# The Kubernetes versions the real-node scenarios (harness/kubeadmnode) run: the
# newest minor Cluster API v1.14 supports and the next.
# The real-node upgrades (FROM>TO, comma-separated): the last minor pair
# Cluster API v1.14 supports and the newest one.
NODE_UPGRADES ?= v1.35.4>v1.36.3,v1.36.3>v1.37.2
NODE_VERSIONS = $(shell printf '%s\n' '$(NODE_UPGRADES)' | tr ',>' '\n\n' | sort -u)
CONTAINERD_VERSION ?= v2.4.2
NODE_RUN ?= .

## envtest-assets: build (once, then cached) kube-apiserver + etcd from the Go module proxy.
envtest-assets:
	@hack/envtest-assets.sh

## capi-inplace-oracle: build (once per CAPI version, then cached) CAPI's own in-place comparison as a test oracle.
capi-inplace-oracle:
	@hack/capi-inplace-oracle.sh

## capi-managers: build (once per CAPI version, then cached) CAPI's core, kubeadm bootstrap and control plane managers.
capi-managers:
	@hack/capi-managers.sh

## clusterctl: build (once per CAPI version, then cached) CAPI's clusterctl and a local repository of CAPI's providers.
clusterctl:
	@hack/clusterctl.sh

## test: the whole suite with the race detector, against a real kube-apiserver + etcd,
## CAPI's own in-place comparison (hack/capi-inplace-oracle.sh), CAPI's own
## managers (hack/capi-managers.sh), CAPI's clusterctl (hack/clusterctl.sh) and
## a kubectl for the kubectl plugin test (hack/kubectl.sh).
## UPGRADEKIT_REQUIRE_ENVTEST=1: a test that needs the API server fails
## instead of skipping when it cannot have one.
test:
	@assets="$$(hack/envtest-assets.sh)"; \
	oracle="$$(hack/capi-inplace-oracle.sh)"; \
	managers="$$(hack/capi-managers.sh)"; \
	clusterctl="$$(hack/clusterctl.sh)"; \
	kubectl="$$(hack/kubectl.sh)/kubectl"; \
	export KUBEBUILDER_ASSETS="$$assets" UPGRADEKIT_REQUIRE_ENVTEST=1 UPGRADEKIT_CAPI_ORACLE="$$oracle" UPGRADEKIT_CAPI_MANAGERS="$$managers" UPGRADEKIT_CLUSTERCTL="$$clusterctl" UPGRADEKIT_KUBECTL="$$kubectl"; \
	echo "== go test -race (go.work: $(WORK_MODULES))"; \
	GOWORK="$(CURDIR)/go.work" go test -race -count=1 -timeout 30m $(patsubst %,%/...,$(WORK_MODULES)); \
	for m in $(OTHER_MODULES); do \
	  echo "== go test -race $$m/..."; \
	  (cd "$$m" && go test -race -count=1 -timeout 30m ./...); \
	done

## e2e: only the scenarios Cluster API's own controllers drive (harness/clusterapi and
## examples/inplace-extension's TestClusterAPI*) and its clusterctl installs
## (TestClusterctl*), with their wall times; they are part of `make test` too.
e2e:
	@assets="$$(hack/envtest-assets.sh)"; \
	managers="$$(hack/capi-managers.sh)"; \
	clusterctl="$$(hack/clusterctl.sh)"; \
	log="$$(mktemp)"; rc=0; \
	GOWORK="$(CURDIR)/go.work" KUBEBUILDER_ASSETS="$$assets" UPGRADEKIT_REQUIRE_ENVTEST=1 UPGRADEKIT_CAPI_MANAGERS="$$managers" UPGRADEKIT_CLUSTERCTL="$$clusterctl" \
	  go test -race -count=1 -v -run 'ClusterAPI|Managers|Clusterctl' ./harness/clusterapi/ ./examples/inplace-extension/ >"$$log" 2>&1 || rc=$$?; \
	grep -E '^(--- |ok|FAIL)|(in|machines [a-z]+ in) [0-9.]+m?s$$' "$$log" || true; \
	if [[ $$rc -ne 0 ]]; then tail -n 200 "$$log"; fi; \
	rm -f "$$log"; exit $$rc

## e2e-scale: examples/inplace-extension's TestScaleInPlace (build tag scale): a
## KubeadmControlPlane (5) and a MachineDeployment (100) updated in place under Cluster
## API's managers, the extension as its own process; prints the line BENCHMARKS.md keeps
## (wall time, the extension's CPU and peak memory, hook latency p50/p99). Not part of
## `make test`: about 5 minutes on 2 cores. UPGRADEKIT_SCALE_MACHINES,
## UPGRADEKIT_SCALE_CONTROL_PLANES and UPGRADEKIT_SCALE_MAX_UNAVAILABLE change its size.
e2e-scale:
	@assets="$$(hack/envtest-assets.sh)"; \
	managers="$$(hack/capi-managers.sh)"; \
	cd examples && KUBEBUILDER_ASSETS="$$assets" UPGRADEKIT_REQUIRE_ENVTEST=1 UPGRADEKIT_CAPI_MANAGERS="$$managers" \
	  go test -tags scale -count=1 -timeout 120m -v -run '^TestScaleInPlace$$' ./inplace-extension/

## node-assets: build (once per version, then cached) what a real kubeadm node needs, from the Go module proxy.
node-assets:
	@for v in $(NODE_VERSIONS); do hack/node-assets.sh "$$v" >/dev/null || exit 1; done
	@hack/containerd-assets.sh $(CONTAINERD_VERSION) >/dev/null

## upgrader-staging: fill UPGRADER_STAGING (examples/upgrader/staging/, what the upgrader
## image's bundle target copies to /staging) with hack/bundle.sh's bundle for BUNDLE_VERSION,
## BUNDLE_ARCH (amd64|arm64), BUNDLE_CONTAINERD and BUNDLE_CNI=1; replaces what an earlier
## bundle put there. The bundle's SHA256SUMS is the extension's checksums file for the version.
upgrader-staging:
	@[[ -n "$${BUNDLE_VERSION:-}" ]] || { echo "usage: make upgrader-staging BUNDLE_VERSION=v1.X.Y [BUNDLE_ARCH=arm64] [BUNDLE_CONTAINERD=v2.X.Y] [BUNDLE_CNI=1]" >&2; exit 2; }; \
	dir="$$(hack/bundle.sh -- "$$BUNDLE_VERSION" "$${BUNDLE_ARCH:-amd64}")"; \
	staging="$${UPGRADER_STAGING:-examples/upgrader/staging}"; \
	mkdir -p -- "$$staging"; \
	rm -rf -- "$$staging/kubernetes" "$$staging/etcd" "$$staging/containerd" "$$staging/cni-plugins"; \
	cp -a -- "$$dir/staging/." "$$staging/"; \
	echo "$$staging: $$(grep '^KUBERNETES_VERSION=\|^ARCH=\|^SKIP_STEPS=' "$$dir/bundle.env" | tr '\n' ' ')checksums $$dir/SHA256SUMS"

## e2e-node: the real-node scenarios (harness/kubeadmnode, build tag realnode): kubeadm
## nodes of containerd, kubelet and static pods in Linux namespaces, upgraded by the
## project's upgrader, for each of NODE_UPGRADES. Needs root and Debian's containerd and runc.
e2e-node:
	@assets=""; for v in $(NODE_VERSIONS); do 	  dir="$$(hack/node-assets.sh "$$v")" || exit 1; assets="$$assets$${assets:+,}$$v=$$dir"; 	done; 	containerd="$$(hack/containerd-assets.sh $(CONTAINERD_VERSION))" || exit 1; 	cd harness && UPGRADEKIT_NODE_ASSETS="$$assets" UPGRADEKIT_NODE_UPGRADES='$(NODE_UPGRADES)' UPGRADEKIT_CONTAINERD_ASSETS="$$containerd" 	  go test -tags realnode -count=1 -timeout 90m -v -run '$(NODE_RUN)' ./kubeadmnode/

## unit: fast tests only, no build of anything first (tests that need a real kube-apiserver,
## Cluster API's managers or its in-place comparison skip, saying so).
unit:
	@for m in $(MODULES); do (cd "$$m" && UPGRADEKIT_SKIP_ENVTEST=1 go test ./...); done

## lint: gofmt, go vet (also of the files behind the realnode and scale build tags), staticcheck (pinned), go.mod tidiness.
lint:
	@bad="$$(gofmt -l $$(git ls-files '*.go'))"; \
	if [[ -n "$$bad" ]]; then echo "gofmt needed:"; echo "$$bad"; exit 1; fi
	@for m in $(MODULES); do \
	  echo "== lint $$m"; \
	  (cd "$$m" && go vet ./... && go vet -tags realnode,scale ./... && go run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./... && go mod tidy -diff); \
	done

## bench: every benchmark, peers side by side (see BENCHMARKS.md).
bench:
	@for m in $(MODULES); do (cd "$$m" && go test -run='^$$' -bench='$(BENCH)' -benchtime=$(BENCHTIME) -benchmem ./...); done

## fuzz-smoke: each fuzz target for FUZZTIME (default 10s).
fuzz-smoke:
	@hack/fuzz-smoke.sh $(FUZZTIME)

## binaries: the shipped binaries, static, built with SHIPPED_GOTOOLCHAIN into BIN (default bin/).
binaries:
	@mkdir -p $(BIN)
	@for p in $(SHIPPED); do \
	  echo "== GOTOOLCHAIN=$(SHIPPED_GOTOOLCHAIN) go build ./$$p"; \
	  out="$$(realpath -m "$(BIN)")/$${p##*/}"; \
	  (cd "$${p%/*}" && GOTOOLCHAIN=$(SHIPPED_GOTOOLCHAIN) CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$$out" "./$${p##*/}"); \
	done

## vulndb: build (once per version, then cached) the offline vulnerability database and govulncheck.
vulndb:
	@VULNCHECK_GOTOOLCHAIN=$(SHIPPED_GOTOOLCHAIN) hack/vulndb.sh

## vulncheck: govulncheck against the offline database: every module in source mode
## with SHIPPED_GOTOOLCHAIN, and the shipped binaries in binary mode; fails on a
## reachable vulnerability hack/vulncheck-allow.txt does not allow.
vulncheck: binaries
	@VULNCHECK_GOTOOLCHAIN=$(SHIPPED_GOTOOLCHAIN) hack/vulncheck.sh $(addprefix $(BIN)/,$(notdir $(SHIPPED)))

## demo: the main demo.
demo:
	cd examples && go run ./simulate
