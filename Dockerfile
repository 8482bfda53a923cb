# nsgate container images. docs/docker.md explains each target, how to
# build with no registry in reach, and the flags a container needs to run
# `nsgate run`; docs/podman.md covers nsgate as Podman's network helper.
#
# Targets (podman build --target NAME / docker build --target NAME):
#   nsgate    (the default, last) static binary built from source on an
#             empty base; runs as uid 65532; needs a Go toolchain image
#   prebuilt  the same image from binaries built on the host (make build
#             → bin/nsgate and bin/nsgate-init); needs no base image at all
#   worker    headless Chromium behind `nsgate guard`, on a base image that
#             has Chromium installed (see docs/docker.md)
#
# Build arguments:
#   GO_IMAGE     Go toolchain image of the build stage
#   VERSION      version stamped into the binary (nsgate version)
#   BIN_STAGE    where the worker's nsgate comes from: nsgate or prebuilt
#   WORKER_BASE  the worker's base image (Debian 12 with chromium installed)

ARG GO_IMAGE=golang:1.26-bookworm
ARG BIN_STAGE=nsgate
ARG WORKER_BASE=localhost/chromium-base:latest

# ---- prebuilt: the final image from a binary built on the host, for
# builds without a Go toolchain image (offline machines, CI).
#   make build && docker build --target prebuilt -t nsgate .
# It comes first: Docker's legacy builder (no BuildKit, as in Debian 12's
# docker.io 20.10) builds every stage up to the target, so a stage placed
# before this one would be built too, and the build stage pulls GO_IMAGE.
# The price: with the legacy builder the other targets need bin/nsgate
# too (BuildKit and podman build skip the stages a target does not use).
# nsgate-init is the sandbox's init; nsgate starts it from beside itself
# when both come from one build (docs/design.md, "Process model").
FROM scratch AS prebuilt
COPY bin/nsgate bin/nsgate-init /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/nsgate"]
CMD ["version"]

# ---- build: a static, cgo-free binary (the sandbox needs CGO_ENABLED=0:
# capabilities are dropped on every thread at once).
FROM ${GO_IMAGE} AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-trimpath
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# One build stamp, a hash of the sources, in both binaries (as make build).
RUN stamp=$(find . -name '*.go' | LC_ALL=C sort | xargs cat go.mod go.sum | sha256sum | cut -c1-16) \
 && ldflags="-s -w -X main.version=${VERSION} -X github.com/nsgate/nsgate/sandbox.buildStamp=${stamp}" \
 && go build -ldflags "$ldflags" -o /out/nsgate ./cmd/nsgate \
 && go build -ldflags "$ldflags" -o /out/nsgate-init ./cmd/nsgate-init \
 && /out/nsgate version

# ---- worker: Chromium whose every exec and syscall passes nsgate guard;
# its network is nsgate too when Podman runs it with nsgate as slirp4netns.
# docs/chromium.md says why each relaxation is there.
FROM ${BIN_STAGE} AS bin
FROM ${WORKER_BASE} AS worker
COPY --from=bin /usr/local/bin/nsgate /usr/local/bin/nsgate-init /usr/local/bin/
USER 65532:65532
ENV HOME=/tmp
ENTRYPOINT ["/usr/local/bin/nsgate", "guard", "--allow-unix", \
  "--exec-allow", "/usr/lib/chromium/chrome_crashpad_handler", "--", \
  "/usr/lib/chromium/chromium", "--headless", "--disable-gpu", "--no-first-run", \
  "--disable-background-networking", "--disable-component-update", "--disable-sync", \
  "--user-data-dir=/tmp/chromium", "--no-sandbox"]
CMD ["--dump-dom", "about:blank"]

# ---- nsgate: the default target, built from source.
FROM scratch AS nsgate
COPY --from=build /out/nsgate /out/nsgate-init /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/nsgate"]
CMD ["version"]
