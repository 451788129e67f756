# karpenter-scaleway-em
#
#   make build   static bin/em-imager and bin/karpenter-scaleway-em (em-imager embedded)
#   make test    unit, integration and end-to-end suites (builds the test tools into bin/ once)
#   make bench   performance figures (em-imager vs curl|xz|dd, scale test)
#   make licenses  the licence of every Go module built with, from the module cache
#   make demo    the whole provider against the simulated Scaleway world
#   make image   the container images as OCI layouts in bin/image (no Docker engine; build/ociimage)
#   make image-push REGISTRY=ghcr.io/me   push them
#   make smoke-live  read-only checks of a real Scaleway account (credentials from the environment; not in make test)
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

.PHONY: all build image image-push test bench demo e2e tools deps vet fmt-check tidy-check clean chart-crds docs catalog-snapshot licenses smoke-live

all: build

## ---- build ---------------------------------------------------------------

build: $(BIN)/em-imager $(BIN)/karpenter-scaleway-em

$(BIN)/em-imager: FORCE
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $@ ./imager/cmd/em-imager

$(BIN)/karpenter-scaleway-em: $(BIN)/em-imager FORCE
	@if [ -d controller/cmd/karpenter-scaleway-em ]; then \
		cp $(BIN)/em-imager controller/imagerbin/em-imager && \
		CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $@ ./controller/cmd/karpenter-scaleway-em; \
	else echo "controller not built yet (controller/cmd/karpenter-scaleway-em missing)"; fi

FORCE:

# The two container images (controller with em-imager embedded; em-imager), linux/amd64 and
# linux/arm64, as OCI layouts and archives in bin/image, built by build/ociimage without a
# container engine. Tagged with the chart's appVersion unless IMAGE_VERSION is set; REGISTRY
# (default: the chart's, ghcr.io/karpenter-scaleway-em) names them. SOURCE_DATE_EPOCH defaults to
# the commit's time, so a commit always gives the same digests.
IMAGE_OUT ?= bin/image
IMAGE_FLAGS = -out $(IMAGE_OUT)$(if $(IMAGE_VERSION), -version $(IMAGE_VERSION))$(if $(REGISTRY), -registry $(REGISTRY))
image: deps
	$(GO) run ./build/ociimage/cmd/ociimage build $(IMAGE_FLAGS)

# Push both images to REGISTRY (e.g. ghcr.io/me) with the credentials of docker/podman/crane login.
image-push: image
	@test -n "$(REGISTRY)" || { echo "image-push needs REGISTRY=<registry>/<namespace>, e.g. REGISTRY=ghcr.io/karpenter-scaleway-em"; exit 1; }
	$(GO) run ./build/ociimage/cmd/ociimage push -out $(IMAGE_OUT) -registry $(REGISTRY)

## ---- checks --------------------------------------------------------------

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

tidy-check:
	@cp go.mod /tmp/go.mod.bak; cp go.sum /tmp/go.sum.bak; $(GO) mod tidy; \
	 if ! diff -q go.mod /tmp/go.mod.bak >/dev/null || ! diff -q go.sum /tmp/go.sum.bak >/dev/null; then \
	   cp /tmp/go.mod.bak go.mod; cp /tmp/go.sum.bak go.sum; echo "go mod tidy is not clean"; exit 1; fi

## ---- test ----------------------------------------------------------------

# Debian packages the tests use (xz and zstd build real Talos-like images; sgdisk
# cross-checks the GPT images; mtools and fsck.fat the metal-iso FAT partition; binutils the test UKIs;
# qemu-user runs the images' other-arch binaries; losetup, partx, mkfs.ext4 and unshare set up the real loop
# devices em-imager's tests write, as root; blkid, wipefs, sfdisk, mkswap, mkfs.vfat and mkfs.xfs lay out and check
# the disks --wipe-other-disks erases) and make image uses (ca-certificates' certificates go into the images).
deps:
	@missing=""; for c in xz:xz-utils zstd:zstd curl:curl sgdisk:gdisk mtype:mtools fsck.fat:dosfstools objdump:binutils \
		qemu-aarch64:qemu-user qemu-x86_64:qemu-user losetup:mount partx:util-linux unshare:util-linux mkfs.ext4:e2fsprogs \
		blkid:util-linux wipefs:util-linux mkswap:util-linux sfdisk:fdisk mkfs.vfat:dosfstools mkfs.xfs:xfsprogs; do \
		command -v $${c%%:*} >/dev/null || missing="$$missing $${c##*:}"; done; \
	[ -d /usr/share/ca-certificates/mozilla ] || missing="$$missing ca-certificates"; \
	missing=$$(printf '%s\n' $$missing | sort -u | xargs); \
	if [ -n "$$missing" ]; then echo "installing $$missing"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) >/dev/null; fi

test: deps fmt-check vet build tools
	$(GO) test $(GOTEST_FLAGS) ./...

# em-imager: builds (once, cached in .cache/imager-bench) a 1.4 GiB Talos-like image, compresses it like
# Talos, serves it over loopback and prints MB/s vs curl|xz|dd, curl|zstd|dd and dd, plus peak RSS.
bench: deps build tools
	$(GO) run ./imager/bench -imager $(BIN)/em-imager -cache $(ROOT)/.cache/imager-bench
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./imager/...
	$(GO) test -run '^$$' -bench Scale -benchtime 1x -timeout 30m ./test/e2e/
	$(GO) test -run '^$$' -bench . -benchmem ./catalog/

# Every module the project builds or tests with and its licence (github.com/google/licenseclassifier/v2 on
# the module cache); exits 1 when one has none. test/licenses runs the same audit, and the check that no
# file here carries another author's copyright or licence, in `make test`.
licenses:
	$(GO) run ./test/licenses/cmd/licenses

# Read-only checks of a real Scaleway account for the API shapes the provider relies on (offers per zone, servers
# by the cluster's tag, IAM SSH keys); orders nothing. Never part of `make test`: it needs credentials, from the
# environment only (SCW_ACCESS_KEY, SCW_SECRET_KEY, SCW_DEFAULT_PROJECT_ID; CLUSTER_NAME to check its servers).
# SMOKE_FLAGS='-zones fr-par-2' narrows it. See docs/troubleshooting.md.
smoke-live:
	$(GO) run ./test/live/cmd/smoke-live $(SMOKE_FLAGS)

# Regenerate the embedded EM offer snapshot from the recorded API exchanges (catalog/snapshot/README.md).
catalog-snapshot:
	$(GO) generate ./catalog/

# The whole provider against the simulated world (test/demo); DEMO_PROFILE=realistic for Scaleway-like delays.
demo: deps build tools
	$(GO) build -o $(BIN)/demo ./test/demo/cmd/demo
	$(BIN)/demo

# The end-to-end suite alone (it also runs in `make test`).
e2e: deps build tools
	$(GO) test -count=1 -timeout 30m -v ./test/e2e/

## ---- charts and docs -----------------------------------------------------

# chart-crds copies the provider's CRD and Karpenter core's CRDs (from the
# pinned module in the module cache) into the CRD chart and the controller
# chart's crds/ (test/chart checks they stay in sync).
KARPENTER_CRDS = $(shell $(GO) list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)/pkg/apis/crds
CHART_CRD_DIRS := charts/karpenter-scaleway-em-crd/templates charts/karpenter-scaleway-em/crds
chart-crds:
	@test -d "$(KARPENTER_CRDS)" || { echo "sigs.k8s.io/karpenter not in the module cache: run go mod download"; exit 1; }
	@for d in $(CHART_CRD_DIRS); do \
		mkdir -p $$d && rm -f $$d/*.yaml && \
		install -m 0644 controller/apis/crds/*.yaml $(KARPENTER_CRDS)/*.yaml $$d/ && echo "synced $$d"; done

# docs regenerates docs/nodeclass-reference.md from the NodeClass CRD's schema
# (test/chart checks the committed file is current).
docs:
	$(GO) run ./test/chart/crdref/cmd/gen-crdref -crd controller/apis/crds/karpenter-scaleway-em.io_scalewayelasticmetalnodeclasses.yaml -out docs/nodeclass-reference.md

clean:
	rm -rf $(BIN)

include test/tools/tools.mk
