#!/usr/bin/env bash
# Pushes the packages ./hack/build-xpkg.sh built, as one multi-platform
# package, to an OCI registry:
#
#   ./hack/push-xpkg.sh xpkg.example.com/platform/fleet-scheduler:v0.1.0
#   PACKAGE=fleet-scheduler-relay ./hack/push-xpkg.sh xpkg.example.com/platform/fleet-scheduler-relay:v0.1.0
#
# The tag must be a semantic version. Credentials come from the Docker config
# ($DOCKER_CONFIG/config.json or ~/.docker/config.json, as `docker login`
# writes it), as for `crossplane xpkg push`; the CLI has no `xpkg login`.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -ne 1 ]; then
	echo "usage: $0 REGISTRY/REPOSITORY:vX.Y.Z" >&2
	exit 2
fi
out=${OUTPUT_DIR:-$root/_output}
crossplane=${CROSSPLANE:-$root/bin/crossplane}

files=()
for arch in ${ARCHS:-amd64 arm64}; do
	files+=("$out/xpkg/${PACKAGE:-fleet-scheduler}-$arch.xpkg")
done
"$crossplane" xpkg push -f "$(IFS=,; echo "${files[*]}")" "$1"
