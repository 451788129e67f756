# The controller image (em-imager embedded), the same as `make image` builds: the files, user, entrypoint and labels
# build/ociimage defines, which build/ociimage's TestBuild checks by building this file with buildah.
#
# It compiles nothing and pulls no base image: `make image` first writes bin/image/context (the static binaries for
# each platform, the base layer as rootfs.tar, the label values as build-args), the only directory .dockerignore lets
# into the build context. From the repository's top level:
#
#   make image
#   docker buildx build --platform linux/amd64,linux/arm64 $(sed 's/^/--build-arg /' bin/image/context/build-args) \
#     -t registry.example.com/team/karpenter-scaleway-em:0.1.0 .
#
# (podman or buildah: `buildah bud --platform linux/arm64 ...` the same way.) The binaries in the context are the
# ones in bin/image's images, byte for byte, so the image holds what `make image` tested.
FROM scratch
ARG TARGETARCH
ARG VERSION=dev
ARG REVISION=unknown
ARG CREATED=1970-01-01T00:00:00Z
# passwd and group naming root, nobody and nonroot (65532), nsswitch.conf, Debian's CA certificates as
# /etc/ssl/certs/ca-certificates.crt with their copyright file, /tmp (1777), /home/nonroot (owned by 65532).
ADD bin/image/context/rootfs.tar /
# The only executable; the controller embeds the linux/amd64 em-imager whatever its own platform (it runs on the
# servers).
COPY bin/image/context/linux-${TARGETARCH}/karpenter-scaleway-em /karpenter-scaleway-em
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
WORKDIR /
USER 65532:65532
LABEL org.opencontainers.image.title="karpenter-scaleway-em" \
      org.opencontainers.image.description="Karpenter cloud provider for Scaleway Elastic Metal servers running Talos Linux." \
      org.opencontainers.image.source="https://github.com/karpenter-scaleway-em/karpenter-scaleway-em" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
ENTRYPOINT ["/karpenter-scaleway-em"]
