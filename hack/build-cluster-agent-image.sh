#!/usr/bin/env bash
# Builds the cluster agent's image without a Docker engine, as
# ./hack/build-xpkg.sh builds the function's (docs/cluster-agent.md):
#
#   1. the agent binary, static (CGO_ENABLED=0), for each architecture, from
#      its own module (cmd/cluster-agent);
#   2. its image, from scratch, with tools/image (go-containerregistry):
#      /cluster-agent as entrypoint, ports 8080 (metrics) and 8081 (health),
#      user nonroot (65532), one image tarball per architecture;
#   3. one multi-platform image (an OCI image index) of them, as an OCI image
#      layout directory.
#
# Output (gitignored):
#   _output/bin/linux_<arch>/cluster-agent          the agent binary
#   _output/image/cluster-agent-<arch>.tar          its image, one architecture
#   _output/image/cluster-agent/                    the multi-platform image (OCI layout)
#
# Environment:
#   ARCHS              architectures to build (default "amd64 arm64")
#   OUTPUT_DIR         output directory (default _output)
#   SOURCE_DATE_EPOCH  image creation time (default: the HEAD commit's time)
#   PUSH               if set, an image reference to push the multi-platform
#                      image to, e.g. xpkg.upbound.io/modelplane/cluster-agent:v0.1.0
#                      (credentials from the Docker config, ~/.docker/config.json)
set -euo pipefail

# shellcheck source=hack/output-dir.sh
. "$(dirname "$0")/output-dir.sh"

if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || echo 0)
fi
export SOURCE_DATE_EPOCH
revision=$(git rev-parse HEAD 2>/dev/null || true)

mkdir -p "$out/bin" "$out/image"
go build -C tools/image -o "$out/bin/build-image" ./cmd/build-image
go build -C tools/image -o "$out/bin/build-index" ./cmd/build-index

tarballs=()
for arch in $archs; do
	bin="$out/bin/linux_$arch/cluster-agent"
	img="$out/image/cluster-agent-$arch.tar"
	CGO_ENABLED=0 GOOS=linux GOARCH="$arch" go build -C cmd/cluster-agent -trimpath -ldflags="-s -w" -o "$bin" .
	"$out/bin/build-image" --binary="$bin" --arch="$arch" --output="$img" \
		--entrypoint=/cluster-agent --port=8080/tcp --port=8081/tcp \
		--title=cluster-agent --tag="cluster-agent:$arch" \
		--source=https://github.com/modelplaneai/fleet-scheduler --revision="$revision"
	tarballs+=("--tarball=$img")
done
"$out/bin/build-index" "${tarballs[@]}" --output="$out/image/cluster-agent"

if [ -n "${PUSH:-}" ]; then
	"$out/bin/build-index" --layout="$out/image/cluster-agent" --push="$PUSH"
fi
