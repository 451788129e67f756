# karpenter-scaleway-em: `make help` lists the targets (the "## " comment after each target).
#
# Every tool comes from the Go module proxy or Debian packages; bin/ is reused across runs.

SHELL := /bin/bash
export GOTOOLCHAIN := local
ROOT := $(CURDIR)
BIN := $(ROOT)/bin
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/version.Version=$(VERSION) \
	-X sigs.k8s.io/karpenter/pkg/operator.Version=$(VERSION)
GOTEST_FLAGS ?= -count=1 -timeout 45m

# Test assets: envtest finds kube-apiserver and etcd through KUBEBUILDER_ASSETS.
export KUBEBUILDER_ASSETS := $(BIN)
export TEST_ASSET_KUBE_APISERVER := $(BIN)/kube-apiserver
export TEST_ASSET_ETCD := $(BIN)/etcd
export TEST_ASSET_KUBE_SCHEDULER := $(BIN)/kube-scheduler
export TEST_ASSET_VERSITYGW := $(BIN)/versitygw
export TEST_ASSET_EM_IMAGER := $(BIN)/em-imager
# A world test that fails keeps its controller's whole log here (test/world: StartController).
export TEST_FAILURE_LOGS ?= $(BIN)/test-failures

.PHONY: all help build imager-binaries image image-push test test-fast fuzz bench bench-nodes demo world conformance soak e2e tools lint deps image-deps vet fmt-check tidy-check clean chart-crds chart-package docs dashboards catalog-snapshot licenses smoke-live

all: build

help: ## this list
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  make %-17s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

## ---- build ---------------------------------------------------------------

build: $(BIN)/em-imager $(BIN)/karpenter-scaleway-em ## static bin/em-imager and bin/karpenter-scaleway-em (em-imager embedded)

$(BIN)/em-imager: FORCE
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $@ ./imager/cmd/em-imager

$(BIN)/karpenter-scaleway-em: $(BIN)/em-imager FORCE
	@if [ -d controller/cmd/karpenter-scaleway-em ]; then \
		cp $(BIN)/em-imager controller/imagerbin/em-imager && \
		CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $@ ./controller/cmd/karpenter-scaleway-em; \
	else echo "controller not built yet (controller/cmd/karpenter-scaleway-em missing)"; fi

FORCE:

# em-imager for both server architectures, static: publish uploads them into the bucket
# (<prefix>/tools/em-imager-linux-<arch>) for operators in a rescue shell (imager/README.md).
imager-binaries: $(BIN)/em-imager-linux-amd64 $(BIN)/em-imager-linux-arm64 ## bin/em-imager-linux-{amd64,arm64}, for `em-imager publish --imager-binary`

$(BIN)/em-imager-linux-%: FORCE
	@mkdir -p $(BIN)
	CGO_ENABLED=0 GOOS=linux GOARCH=$* $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $@ ./imager/cmd/em-imager

# The two container images (controller with em-imager embedded; em-imager), linux/amd64 and
# linux/arm64, as OCI layouts and archives in bin/image, built by build/ociimage without a
# container engine. Tagged with the chart's appVersion unless IMAGE_VERSION is set; REGISTRY
# (default: the chart's, ghcr.io/karpenter-scaleway-em) names them. SOURCE_DATE_EPOCH defaults to
# the commit's time, so a commit always gives the same digests.
IMAGE_OUT ?= bin/image
# It also writes bin/image/context, what the top-level Dockerfile and Dockerfile.imager copy (docs/install.md).
# CA_CERTS names another directory of *.crt files than Debian's /usr/share/ca-certificates/mozilla.
IMAGE_FLAGS = -out $(IMAGE_OUT)$(if $(IMAGE_VERSION), -version $(IMAGE_VERSION))$(if $(REGISTRY), -registry $(REGISTRY))$(if $(CA_CERTS), -ca-certs $(CA_CERTS))
image: image-deps ## the container images as OCI layouts and archives in bin/image (no Docker engine)
	$(GO) run ./build/ociimage/cmd/ociimage build $(IMAGE_FLAGS)

# What make image needs beyond Go (go.mod's version or newer), the Go module proxy and git (for the revision label;
# optional): only the certificates it puts into the images, Debian's ca-certificates, installed when missing unless
# CA_CERTS names other ones. Not deps: the tests' packages have nothing to do with an image (docs/install.md says so,
# and build/ociimage's TestMakeImageInstallsOnlyCACertificates checks both).
IMAGE_PACKAGES := ca-certificates
image-deps: ## install what make image needs beyond Go: Debian's ca-certificates
	@if [ -z "$(CA_CERTS)" ] && [ ! -d /usr/share/ca-certificates/mozilla ]; then echo "installing $(IMAGE_PACKAGES)"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(IMAGE_PACKAGES)) >/dev/null; fi

# Push both images to REGISTRY (e.g. ghcr.io/me) with the credentials of docker/podman/crane login.
image-push: image ## push both images: make image-push REGISTRY=ghcr.io/me
	@test -n "$(REGISTRY)" || { echo "image-push needs REGISTRY=<registry>/<namespace>, e.g. REGISTRY=ghcr.io/karpenter-scaleway-em"; exit 1; }
	$(GO) run ./build/ociimage/cmd/ociimage push -out $(IMAGE_OUT) -registry $(REGISTRY)

## ---- checks --------------------------------------------------------------

vet: ## go vet ./...
	$(GO) vet ./...

fmt-check: ## fail on files gofmt would change
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# golangci-lint with .golangci.yml (gocyclo, errorlint, staticcheck, revive, misspell, nolintlint, ...);
# built into bin/ from test/tools/golangci-lint. .ci/run runs it before `make test`.
lint: $(BIN)/golangci-lint ## the lint gate (.golangci.yml)
	$(BIN)/golangci-lint run ./...

tidy-check: ## fail when go mod tidy would change go.mod or go.sum
	@cp go.mod /tmp/go.mod.bak; cp go.sum /tmp/go.sum.bak; $(GO) mod tidy; \
	 if ! diff -q go.mod /tmp/go.mod.bak >/dev/null || ! diff -q go.sum /tmp/go.sum.bak >/dev/null; then \
	   cp /tmp/go.mod.bak go.mod; cp /tmp/go.sum.bak go.sum; echo "go mod tidy is not clean"; exit 1; fi

## ---- test ----------------------------------------------------------------

# Debian packages the tests use (xz and zstd build real Talos-like images; sgdisk
# cross-checks the GPT images; mtools and fsck.fat the metal-iso FAT partition; binutils the test UKIs;
# qemu-user runs the images' other-arch binaries; losetup, partx, mkfs.ext4 and unshare set up the real loop
# devices em-imager's tests write, as root; mkfs.xfs, mkfs.vfat, mkswap and sfdisk make the earlier installs
# imager/diskprobe must recognise and lay out the disks --wipe-other-disks erases, blkid and wipefs check them; tmux is
# the real terminal em-imager's terminal tests type into; prometheus gives promtool, which checks and unit-tests the
# chart's alerts, and the Prometheus that scrapes the controller in test/monitoring; kubectl runs the token cleanup line
# docs/security.md gives and the docs-as-tests; ssh and jq run imager/README.md's rescue walkthrough in test/docs;
# buildah builds the top-level Dockerfiles in build/ociimage's test, daemonless) and make image uses
# (ca-certificates' certificates go into the images).
deps: ## install the Debian packages the tests use
	@missing=""; for c in xz:xz-utils zstd:zstd curl:curl sgdisk:gdisk mtype:mtools fsck.fat:dosfstools objdump:binutils \
		qemu-aarch64:qemu-user qemu-x86_64:qemu-user losetup:mount partx:util-linux unshare:util-linux mkfs.ext4:e2fsprogs \
		mkfs.xfs:xfsprogs mkfs.vfat:dosfstools mkswap:util-linux sfdisk:fdisk blkid:util-linux wipefs:util-linux \
		tmux:tmux sha256sum:coreutils ssh:openssh-client jq:jq prometheus:prometheus promtool:prometheus \
		kubectl:kubernetes-client buildah:buildah; do \
		command -v $${c%%:*} >/dev/null || missing="$$missing $${c##*:}"; done; \
	[ -d /usr/share/ca-certificates/mozilla ] || missing="$$missing ca-certificates"; \
	missing=$$(printf '%s\n' $$missing | sort -u | xargs); \
	if [ -n "$$missing" ]; then echo "installing $$missing"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) >/dev/null; fi

empty :=
space := $(empty) $(empty)
FAST_SLOW_PKGS := build/ociimage imager/cli imager/decompress
# The fast tier: every package whose test binary links none of the starters of
# a simulated world, an API server, an S3 server or loop devices (test/testenv,
# test/world, test/e2e/harness, imager/loopdev), read from go list's dependencies
# rather than kept by hand, minus FAST_SLOW_PKGS, whose unit tests alone take minutes.
FAST_PKGS = $(GO) list -test -f '{{.ImportPath}} {{join .Deps " "}}' ./... | grep '\.test ' | \
	grep -v -E '/(test/testenv|test/world|test/e2e/harness|imager/loopdev)(\.test)?( |$$)' | sed 's/\.test .*//' | \
	grep -v -E '/($(subst $(space),|,$(FAST_SLOW_PKGS)))$$'
test-fast: ## unit tests of the packages that start no world, API server, S3 server or loop device: the inner loop
	$(GO) test -count=1 -timeout 10m $$($(FAST_PKGS))

# make test's schedule: three go test runs side by side, so the wall time is the longest of them rather than the sum.
# - test/e2e/slowdelivery waits 16 minutes by design (a delivery that outlasts Karpenter's registration timeout on
#   the real clock), alone;
# - test/e2e, TEST_E2E_PARALLEL worlds at a time, each with a controller process; then every fuzz target for a few
#   seconds (make fuzz), while the other two runs finish;
# - the rest, TEST_P packages at a time, the longest first (go test starts them in the order given: TEST_LONGEST is
#   ordered by the wall time each took in a full run), each with up to TEST_PARALLEL of its parallel tests at once.
# A world test mostly waits on simulated delays (a cloudprovider test uses about a quarter of a core), so a 2-core
# machine runs more of them than it has cores. The side runs print their output when the rest is done.
TEST_BESIDE := test/e2e/slowdelivery test/e2e
TEST_LONGEST := controller/cloudprovider build/ociimage test/soak imager/cli test/chart test/docs test/e2e/canary \
	test/conformance/cmd/conformance test/testenv test/monitoring test/sim/machine test/sim/talosapi imager/publish \
	controller/breaker controller/spare controller/scaleway controller/nodeclass test/sim/scwsim test/world/cmd/world
TEST_P ?= 3
TEST_PARALLEL ?= 4
TEST_E2E_PARALLEL ?= 2
TEST_REST = $(GO) list -f '{{.Dir}}' ./... | sed 's|^$(ROOT)/||' | grep -v -x -E '$(subst $(space),|,$(TEST_LONGEST) $(TEST_BESIDE))' | sed 's|^|./|'
test: deps fmt-check vet build tools ## unit, integration and end-to-end suites (what CI runs), and every fuzz target for a few seconds
	@$(GO) test $(GOTEST_FLAGS) ./test/e2e/slowdelivery/ > $(BIN)/test-slowdelivery.log 2>&1 & slow=$$!; \
	{ $(GO) test $(GOTEST_FLAGS) -parallel $(TEST_E2E_PARALLEL) ./test/e2e/ > $(BIN)/test-e2e.log 2>&1; echo $$? > $(BIN)/test-e2e.rc; \
	  $(MAKE) --no-print-directory fuzz FUZZTIME=3s > $(BIN)/test-fuzz.log 2>&1; } & side=$$!; \
	trap 'kill $$slow $$side 2>/dev/null' INT TERM; \
	$(GO) test $(GOTEST_FLAGS) -p $(TEST_P) -parallel $(TEST_PARALLEL) $(addprefix ./,$(TEST_LONGEST)) $$($(TEST_REST)); rest=$$?; \
	wait $$side; fuzzrc=$$?; e2erc=$$(cat $(BIN)/test-e2e.rc); cat $(BIN)/test-e2e.log $(BIN)/test-fuzz.log; \
	wait $$slow; slowrc=$$?; cat $(BIN)/test-slowdelivery.log; \
	[ $$rest -eq 0 ] && [ $$e2erc -eq 0 ] && [ $$fuzzrc -eq 0 ] && [ $$slowrc -eq 0 ]

# Every Go fuzz target (func FuzzX in a _test.go file) fuzzed for FUZZTIME, one
# after the other; `go test ./...` already runs their seed corpora. A crash
# stops the run and leaves the input in the package's testdata/fuzz/FuzzX/:
# fix the code and commit the input as a seed.
FUZZTIME ?= 1m
fuzz: ## fuzz every target for FUZZTIME each (default 1m): make fuzz FUZZTIME=10m
	@for f in $$(grep -rl --include='*_test.go' '^func Fuzz' $(ROOT)/imager $(ROOT)/controller $(ROOT)/talosgen $(ROOT)/test | sort); do \
		d=$$(dirname $$f); for t in $$(grep -o '^func Fuzz[A-Za-z0-9_]*' $$f | cut -d' ' -f2); do \
			echo "fuzz $${d#$(ROOT)/} $$t for $(FUZZTIME)"; \
			run="$(GO) test -run '^$$' -fuzz '^$$t\$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ."; \
			(cd $$d && eval "$$run" >/tmp/fuzz-$$t.log 2>&1) && continue; \
			if grep -q 'context deadline exceeded' /tmp/fuzz-$$t.log && ! grep -q 'Failing input written' /tmp/fuzz-$$t.log; then \
				echo "fuzz $$t: Go's coordinator timed out with no failing input (a toolchain race at the deadline): once more"; \
				(cd $$d && eval "$$run" >/tmp/fuzz-$$t.log 2>&1) && continue; \
			fi; \
			tail -30 /tmp/fuzz-$$t.log; exit 1; \
		done; done; echo "fuzz: every target ran for $(FUZZTIME)"

# em-imager: builds (once, cached in .cache/imager-bench) a 1.4 GiB Talos-like image, compresses it like
# Talos, serves it over loopback and prints MB/s vs curl|xz|dd, curl|zstd|dd and dd, plus peak RSS.
bench: deps build tools bench-nodes ## performance figures (em-imager vs curl|xz|dd, node times, API calls at scale, catalogue)
	$(GO) run ./imager/bench -imager $(BIN)/em-imager -cache $(ROOT)/.cache/imager-bench
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./imager/...
	$(GO) test -run '^$$' -bench . -benchmem ./catalog/

# Per node, realistic profile: time to Ready on a new server and on a spare, split into Scaleway's delivery and
# reboots, the node's boot and the provider's overhead, with the API calls per server (about 20 minutes of real
# time; BENCH_SCALE=0.1 runs the simulator 10x faster, about 4 minutes, and scales Scaleway's share back), for
# each kexec mode of BENCH_KEXEC (default on,off,refused) in its own world at the same time, one table at the end; then
# 50 NodeClaims at once (test profile): all Ready, orders == NodeClaims, controller peak RSS.
bench-nodes: deps build tools ## node times (new server, spare), overhead, API calls per server; 50 NodeClaims at once
	$(GO) test -run '^$$' -bench RealisticNodeTimes -benchtime 1x -timeout 90m ./test/e2e/
	$(GO) test -run '^$$' -bench Scale50NodeClaims -benchtime 1x -timeout 60m ./test/e2e/

# Every module the project builds or tests with and its licence (github.com/google/licenseclassifier/v2 on
# the module cache); exits 1 when one has none. test/licenses runs the same audit, and the check that no
# file here carries another author's copyright or licence, in `make test`.
licenses: ## the licence of every Go module built with, from the module cache (exit 1 when one has none)
	$(GO) run ./test/licenses/cmd/licenses

# Read-only checks of a real Scaleway account for the API shapes the provider relies on (offers per zone, servers
# by the cluster's tag, IAM SSH keys); orders nothing. Never part of `make test`: it needs credentials, from the
# environment only (SCW_ACCESS_KEY, SCW_SECRET_KEY, SCW_DEFAULT_PROJECT_ID; CLUSTER_NAME to check its servers).
# SMOKE_FLAGS='-zones fr-par-2' narrows it. See docs/troubleshooting.md.
smoke-live: ## read-only checks of a real Scaleway account (credentials from the environment; not in make test)
	$(GO) run ./test/live/cmd/smoke-live $(SMOKE_FLAGS)

# Regenerate the embedded EM offer snapshot from the recorded API exchanges (catalog/snapshot/README.md).
catalog-snapshot: ## regenerate the embedded offer snapshot from the recorded API exchanges
	$(GO) generate ./catalog/

# The whole provider against the simulated world (test/demo); DEMO_PROFILE=realistic for Scaleway-like delays.
demo: deps build tools ## the whole provider against the simulated world (DEMO_PROFILE=realistic for real delays)
	$(GO) build -o $(BIN)/demo ./test/demo/cmd/demo
	$(BIN)/demo

# The simulated world with the provider and Karpenter core, kept running for kubectl or other tools (test/world/cmd/world):
# prints the kubeconfig it writes (bin/world/kubeconfig) and runs until Ctrl-C or SIGTERM; pods run on its nodes
# (kube-controller-manager + KWOK). WORLD_PROFILE (else DEMO_PROFILE) picks the delays; WORLD_FLAGS='-keep' keeps the logs.
world: deps build tools ## the simulated world with the provider, kept running: prints KUBECONFIG (WORLD_PROFILE=realistic for real delays)
	$(GO) build -o $(BIN)/run-world ./test/world/cmd/world
	$(BIN)/run-world $(WORLD_FLAGS)

# Karpenter's own regression suite (sigs.k8s.io/karpenter/test/suites/regression from the pinned module, built
# with go test -c, never copied) against make world's world, started in the background without its defaults:
# docs/conformance.md. FOCUS='<ginkgo focus>' narrows it; test/conformance/skip.txt lists the specs that cannot
# apply, with reasons. Ends with `conformance: P passed, F failed, N not applicable (total T)`.
conformance: deps build tools ## Karpenter's regression suite against the simulated world (FOCUS=StandaloneNodeClaim for a few specs)
	$(GO) build -o $(BIN)/run-world ./test/world/cmd/world
	$(GO) test -c -o $(BIN)/regression.test sigs.k8s.io/karpenter/test/suites/regression
	$(GO) build -o $(BIN)/conformance ./test/conformance/cmd/conformance
	$(BIN)/conformance -focus '$(FOCUS)' $(CONFORMANCE_FLAGS)

# Seeded chaos schedules (test/soak): each plays about a minute of pod waves, NodeClass edits, API faults and
# controller kills against the real controller on the simulated world (fast profile), then checks the money
# invariants over the simulated Scaleway's ledger. SEEDS=a-b or one seed (which replays it); SOAK_FLAGS=-v
# prints each schedule, SOAK_FLAGS='-dir /tmp/soak' keeps the logs, SOAK_FLAGS='-parallel 3' runs three schedules
# at a time (each in its own world; a schedule uses about a third of a core).
SEEDS ?= 1-10
soak: deps build tools ## seeded chaos schedules and the money invariants: make soak SEEDS=1-100 (one seed replays it)
	$(GO) build -o $(BIN)/soak ./test/soak/cmd/soak
	$(BIN)/soak -seeds $(SEEDS) $(SOAK_FLAGS)

# The end-to-end suite alone (it also runs in `make test`).
e2e: deps build tools ## the end-to-end suite alone
	$(GO) test -count=1 -timeout 30m -v ./test/e2e/

## ---- charts and docs -----------------------------------------------------

# chart-crds copies the provider's CRD and Karpenter core's CRDs (from the
# pinned module in the module cache) into the CRD chart and the controller
# chart's crds/ (test/chart checks they stay in sync). The controller chart's
# copies carry Helm's ownership metadata for the CRD chart's documented release
# (karpenter-scaleway-em-crd in namespace karpenter): Helm creates crds/ files
# as they are, so a CRD chart installed after the controller chart adopts them
# instead of failing on "invalid ownership metadata" (TestCRDChartAdoptsControllerChartCRDs).
KARPENTER_CRDS = $(shell $(GO) list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)/pkg/apis/crds
CHART_CRD_DIRS := charts/karpenter-scaleway-em-crd/templates charts/karpenter-scaleway-em/crds
CRD_RELEASE := karpenter-scaleway-em-crd
CRD_RELEASE_NAMESPACE := karpenter
chart-crds: ## copy the provider's and Karpenter's CRDs into both charts
	@test -d "$(KARPENTER_CRDS)" || { echo "sigs.k8s.io/karpenter not in the module cache: run go mod download"; exit 1; }
	@for d in $(CHART_CRD_DIRS); do \
		mkdir -p $$d && rm -f $$d/*.yaml && \
		install -m 0644 controller/apis/crds/*.yaml $(KARPENTER_CRDS)/*.yaml $$d/ && echo "synced $$d"; done
	@sed -i '0,/^  annotations:$$/s//  labels:\n    app.kubernetes.io\/managed-by: Helm\n  annotations:\n    meta.helm.sh\/release-name: $(CRD_RELEASE)\n    meta.helm.sh\/release-namespace: $(CRD_RELEASE_NAMESPACE)/' \
		charts/karpenter-scaleway-em/crds/*.yaml

# Both charts as archives in bin/charts (<name>-<version>.tgz from each Chart.yaml; the charts share one version),
# as `helm package` makes them (build/chartpkg, Helm's Go SDK: no helm binary needed). Push them to an OCI
# registry with `helm push bin/charts/<name>-<version>.tgz oci://<registry>/<namespace>` (docs/install.md).
CHART_OUT ?= bin/charts
chart-package: ## both charts as versioned archives in bin/charts, ready for `helm push` to an OCI registry
	$(GO) run ./build/chartpkg/cmd/chartpkg -out $(CHART_OUT) charts/karpenter-scaleway-em-crd charts/karpenter-scaleway-em

# docs regenerates what is generated from the code: docs/nodeclass-reference.md from the NodeClass CRD's
# schema, docs/settings.md from the flags and environment variables, docs/instance-type-labels.md from the
# catalogue, the chart README's values table from values.yaml's comments, and the dashboard (test/chart and
# monitoring/dashboard check they are current).
docs: dashboards ## regenerate the generated references (NodeClass, settings, labels, chart values, dashboard)
	$(GO) run ./test/chart/crdref/cmd/gen-crdref -crd controller/apis/crds/karpenter-scaleway-em.io_scalewayelasticmetalnodeclasses.yaml -out docs/nodeclass-reference.md
	$(GO) run ./test/chart/refdocs/cmd/gen-refdocs -root .

dashboards: ## regenerate the Grafana dashboard JSON the chart ships (monitoring/dashboard)
	$(GO) generate ./monitoring/...

clean: ## remove bin/ (the test tools take 15+ minutes to build again)
	rm -rf $(BIN)

include test/tools/tools.mk
