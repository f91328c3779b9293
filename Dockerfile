# syntax=docker/dockerfile:1

# The runtime image of fleet-scheduler, for those who build with Docker
# (the Crossplane function template's build). This repository's own build,
# ./hack/build-xpkg.sh, needs no Docker engine and produces the equivalent
# image with tools/image; see docs/production.md.
#
# NOT TESTED HERE: the machines this project is developed and tested on have
# no Docker engine, so this file has never been built by CI. What is tested is
# the Docker-free image (entrypoint, port, user, binary) and the package
# embedding it.
#
#   docker buildx build --platform=linux/amd64,linux/arm64 -t runtime .
#   crossplane xpkg build --package-root=package --embed-runtime-image=runtime

# Keep in step with the go directive of go.mod.
ARG GO_VERSION=1.26

# Build on the build host's platform and cross-compile for the target: Go
# needs no emulation for that.
FROM --platform=${BUILDPLATFORM} golang:${GO_VERSION} AS build

WORKDIR /fn

# A static binary: the distroless static image has no libc.
ENV CGO_ENABLED=0

# Download modules in their own layer so that they are cached across builds.
RUN --mount=target=. --mount=type=cache,target=/go/pkg/mod go mod download

# Set by Docker from --platform.
ARG TARGETOS
ARG TARGETARCH

# The same flags as ./hack/build-xpkg.sh: static, no symbol table or DWARF.
RUN --mount=target=. \
    --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w" -o /function .

# distroless static, nonroot variant: no shell, no package manager, uid 65532.
FROM gcr.io/distroless/static-debian12:nonroot AS image
WORKDIR /
COPY --from=build /function /function
# gRPC with mTLS; Crossplane sets TLS_SERVER_CERTS_DIR and mounts the certs.
EXPOSE 9443
USER nonroot:nonroot
ENTRYPOINT ["/function"]
