# karpenter-scaleway-em
#
#   make build   static bin/em-imager and bin/karpenter-scaleway-em (em-imager embedded)
#   make test    unit, integration and end-to-end suites (builds the test tools into bin/ once)
#   make bench   performance figures (em-imager vs curl|xz|dd, scale test)
#   make demo    the whole provider against the simulated Scaleway world
#
# Every tool comes from the Go module proxy or Debian packages; bin/ is reused across runs.

SHELL := /bin/bash
export GOTOOLCHAIN := local
ROOT := $(CURDIR)
BIN := $(ROOT)/bin
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/version.Version=$(VERSION)
GOTEST_FLAGS ?= -count=1 -timeout 45m

# Test assets: envtest finds kube-apiserver and etcd through KUBEBUILDER_ASSETS.
export KUBEBUILDER_ASSETS := $(BIN)
export TEST_ASSET_KUBE_APISERVER := $(BIN)/kube-apiserver
export TEST_ASSET_ETCD := $(BIN)/etcd
export TEST_ASSET_KUBE_SCHEDULER := $(BIN)/kube-scheduler
export TEST_ASSET_VERSITYGW := $(BIN)/versitygw
export TEST_ASSET_EM_IMAGER := $(BIN)/em-imager

.PHONY: all build test bench demo tools deps vet fmt-check tidy-check clean

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

# Debian packages the tests use (xz and zstd build real Talos-like images).
deps:
	@missing=""; for c in xz:xz-utils zstd:zstd curl:curl; do \
		command -v $${c%%:*} >/dev/null || missing="$$missing $${c##*:}"; done; \
	if [ -n "$$missing" ]; then echo "installing$$missing"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) >/dev/null; fi

test: deps fmt-check vet build tools
	$(GO) test $(GOTEST_FLAGS) ./...

bench: deps build tools
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./imager/...

demo: build tools
	@echo "demo: not available yet"; exit 1

clean:
	rm -rf $(BIN)

include test/tools/tools.mk
