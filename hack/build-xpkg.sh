#!/usr/bin/env bash
# Builds fleet-scheduler's Crossplane packages without a Docker engine, the
# function's and the relay's (cmd/relay):
#
#   1. each binary, static (CGO_ENABLED=0), for each architecture;
#   2. its runtime image, from scratch, with tools/image (go-containerregistry):
#      /function as entrypoint, port 9443, user nonroot (65532);
#   3. the package: `crossplane xpkg build` of package/ (crossplane.yaml and the
#      Input CRD in package/input/), or of cmd/relay/package/ for the relay,
#      with that image embedded.
#
# Output (gitignored):
#   _output/bin/linux_<arch>/function     the function binary
#   _output/bin/linux_<arch>/relay        the relay binary
#   _output/image/runtime-<arch>.tar      the function's runtime image tarball
#   _output/image/relay-runtime-<arch>.tar
#   _output/xpkg/fleet-scheduler-<arch>.xpkg
#   _output/xpkg/fleet-scheduler-relay-<arch>.xpkg
#
# Environment:
#   ARCHS              architectures to build (default "amd64 arm64")
#   OUTPUT_DIR         output directory (default _output)
#   CROSSPLANE         crossplane CLI (default bin/crossplane, built if absent)
#   SOURCE_DATE_EPOCH  image creation time (default: the HEAD commit's time)
#
# Push the results with ./hack/push-xpkg.sh REGISTRY/REPOSITORY:vX.Y.Z (and
# PACKAGE=fleet-scheduler-relay for the relay's).
set -euo pipefail

# shellcheck source=hack/output-dir.sh
. "$(dirname "$0")/output-dir.sh"
crossplane=${CROSSPLANE:-$root/bin/crossplane}

if [ ! -x "$crossplane" ]; then
	hack/build-crossplane.sh
	crossplane=$root/bin/crossplane
fi

if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || echo 0)
fi
export SOURCE_DATE_EPOCH
revision=$(git rev-parse HEAD 2>/dev/null || true)

mkdir -p "$out/bin" "$out/image" "$out/xpkg"
go build -C tools/image -o "$out/bin/build-image" ./cmd/build-image

for arch in $archs; do
	bin="$out/bin/linux_$arch/function"
	img="$out/image/runtime-$arch.tar"
	pkg="$out/xpkg/fleet-scheduler-$arch.xpkg"

	# -s -w drops the symbol table and DWARF (66 MB -> 47 MB, a 32 MB -> 15 MB
	# layer); panics and profiles still name functions and lines.
	CGO_ENABLED=0 GOOS=linux GOARCH="$arch" go build -trimpath -ldflags="-s -w" -o "$bin" .
	"$out/bin/build-image" --binary="$bin" --arch="$arch" --output="$img" \
		--tag="fleet-scheduler-runtime:$arch" \
		--source=https://github.com/modelplaneai/fleet-scheduler --revision="$revision"
	"$crossplane" xpkg build --package-root=package --embed-runtime-image-tarball="$img" -o "$pkg"
	echo "build-xpkg: $pkg ($(du -h "$pkg" | cut -f1))"

	bin="$out/bin/linux_$arch/relay"
	img="$out/image/relay-runtime-$arch.tar"
	pkg="$out/xpkg/fleet-scheduler-relay-$arch.xpkg"
	CGO_ENABLED=0 GOOS=linux GOARCH="$arch" go build -trimpath -ldflags="-s -w" -o "$bin" ./cmd/relay
	"$out/bin/build-image" --binary="$bin" --arch="$arch" --output="$img" \
		--tag="fleet-scheduler-relay-runtime:$arch" \
		--source=https://github.com/modelplaneai/fleet-scheduler --revision="$revision"
	"$crossplane" xpkg build --package-root=cmd/relay/package --embed-runtime-image-tarball="$img" -o "$pkg"
	echo "build-xpkg: $pkg ($(du -h "$pkg" | cut -f1))"
done
