# syntax=docker/dockerfile:1
# karpenter-scaleway-em controller image: the static controller binary with the
# static em-imager embedded (it uploads em-imager into each server's rescue
# system), on distroless static, non-root. Same steps as `make build`.
#
#   docker build -t karpenter-scaleway-em --build-arg VERSION=$(git describe --tags --always) .
#
# Multi-arch: docker buildx build --platform linux/amd64,linux/arm64 ... builds
# the controller for each platform; em-imager is always linux/amd64 unless
# IMAGER_ARCH says otherwise, because it runs on the servers, not in the pod.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS=linux
ARG TARGETARCH=amd64
ARG IMAGER_ARCH=amd64
ARG VERSION=dev
ENV CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-trimpath
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
# Only the packages the two binaries are built from (no tests tools, docs, charts).
COPY catalog/ catalog/
COPY controller/ controller/
COPY imager/ imager/
COPY talosgen/ talosgen/
ENV LDFLAGS="-s -w -X github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/version.Version=${VERSION}"
# em-imager first: the controller embeds controller/imagerbin/em-imager.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    GOOS=linux GOARCH=${IMAGER_ARCH} go build -ldflags "${LDFLAGS}" -o controller/imagerbin/em-imager ./imager/cmd/em-imager && \
    GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -ldflags "${LDFLAGS}" -o /out/karpenter-scaleway-em ./controller/cmd/karpenter-scaleway-em

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/karpenter-scaleway-em /karpenter-scaleway-em
# 65532 = distroless "nonroot"; the chart runs it with a read-only root filesystem.
USER 65532:65532
ENTRYPOINT ["/karpenter-scaleway-em"]
