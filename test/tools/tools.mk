# Test tools, each built from its own module under test/tools/ so that their
# replace directives never touch the provider's go.mod. Built once into bin/.
#
# Included by the root Makefile (which defines ROOT, BIN and GO). Every source
# is the Go module proxy; each tool module pins its versions in go.mod/go.sum
# (its `tool` directive names the main package), so a build is reproducible
# and needs no network once the module cache is warm.
#
# A target does nothing while its binary is newer than its module files.
# Binaries are written to a temporary name first so that an interrupted build
# never leaves a half-written file that make would take as up to date.

TOOLS_DIR := $(ROOT)/test/tools
# -mod=readonly: a go.mod/go.sum that does not cover the build fails loudly
# instead of being rewritten silently. -buildvcs=false: the tool modules sit in
# this git tree, and their binaries need no VCS stamp (nor a working git).
TOOLS_GOENV := CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=local

# The Kubernetes release kube-apiserver and kube-scheduler are built from
# (must match test/tools/kubernetes/go.mod); stamped into the binaries because
# a module build has no git tree to take it from.
KUBE_VERSION := v1.35.4
KUBE_LDFLAGS := \
	-X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=35 \
	-X k8s.io/component-base/version.gitTreeState=clean

TOOLS_BINARIES := $(BIN)/versitygw $(BIN)/etcd $(BIN)/kube-apiserver $(BIN)/kube-scheduler $(BIN)/kube-controller-manager $(BIN)/kwok $(BIN)/controller-gen

.PHONY: tools $(patsubst $(BIN)/%,bin/%,$(TOOLS_BINARIES))
tools: $(TOOLS_BINARIES) ## the test tools in bin/ (kube-apiserver, etcd, kube-scheduler, kube-controller-manager, kwok, versitygw, controller-gen)

# `make bin/etcd` etc. from the repository root: the real targets are absolute.
$(patsubst $(BIN)/%,bin/%,$(TOOLS_BINARIES)): bin/%: $(BIN)/%

# tool_build builds package $(2) from module dir test/tools/$(1) into $@ with
# extra ldflags $(3).
define tool_build
	@mkdir -p $(BIN)
	@echo "building $(notdir $@) from test/tools/$(1) ($(2))"
	cd $(TOOLS_DIR)/$(1) && $(TOOLS_GOENV) $(GO) build -trimpath -ldflags '-s -w $(3)' -o $@.tmp $(2)
	@mv -f $@.tmp $@
endef

$(BIN)/versitygw: $(TOOLS_DIR)/versitygw/go.mod $(TOOLS_DIR)/versitygw/go.sum
	$(call tool_build,versitygw,github.com/versity/versitygw/cmd/versitygw,)

# kube-apiserver and kube-scheduler share one module (and most packages), so the
# second build reuses the first one's build cache.
$(BIN)/kube-apiserver: $(TOOLS_DIR)/kubernetes/go.mod $(TOOLS_DIR)/kubernetes/go.sum
	$(call tool_build,kubernetes,k8s.io/kubernetes/cmd/kube-apiserver,$(KUBE_LDFLAGS))

$(BIN)/kube-scheduler: $(TOOLS_DIR)/kubernetes/go.mod $(TOOLS_DIR)/kubernetes/go.sum
	$(call tool_build,kubernetes,k8s.io/kubernetes/cmd/kube-scheduler,$(KUBE_LDFLAGS))

$(BIN)/kube-controller-manager: $(TOOLS_DIR)/kubernetes/go.mod $(TOOLS_DIR)/kubernetes/go.sum
	$(call tool_build,kubernetes,k8s.io/kubernetes/cmd/kube-controller-manager,$(KUBE_LDFLAGS))

# KWOK wants k8s.io/* v0.36 while the provider pins v0.35: its own module, like the others.
$(BIN)/kwok: $(TOOLS_DIR)/kwok/go.mod $(TOOLS_DIR)/kwok/go.sum
	$(call tool_build,kwok,sigs.k8s.io/kwok/cmd/kwok,)

$(BIN)/etcd: $(TOOLS_DIR)/etcd/go.mod $(TOOLS_DIR)/etcd/go.sum $(TOOLS_DIR)/etcd/main.go
	$(call tool_build,etcd,.,)

$(BIN)/controller-gen: $(TOOLS_DIR)/controller-gen/go.mod $(TOOLS_DIR)/controller-gen/go.sum
	$(call tool_build,controller-gen,sigs.k8s.io/controller-tools/cmd/controller-gen,)

# The lint gate's linter (`make lint`); not a test tool, so not in `tools`.
$(BIN)/golangci-lint: $(TOOLS_DIR)/golangci-lint/go.mod $(TOOLS_DIR)/golangci-lint/go.sum
	$(call tool_build,golangci-lint,github.com/golangci/golangci-lint/v2/cmd/golangci-lint,)
