#!/usr/bin/env bash
# Builds every artefact of a release from this checkout and pushes it to an
# OCI registry, no Docker needed (docs/production.md#release):
#
#   MODELPLANE_APIS=/tmp/modelplane/apis ./hack/release.sh registry.example.com/acme v0.1.0
#
# pushes, under REGISTRY:
#   fleet-scheduler:VERSION         the function's package (amd64 and arm64)
#   fleet-scheduler-relay:VERSION   the relay's package (amd64 and arm64)
#   cluster-agent:VERSION           the cluster agent's image (amd64 and arm64)
#   charts/cluster-agent:X.Y.Z      its Helm chart, VERSION without the v,
#                                    defaulting to that image
#   modelplane:MODELPLANE_VERSION-fleet-scheduler-VERSION
#                                    Modelplane's Configuration rebuilt with
#                                    the two Functions
#                                    (./hack/build-modelplane-configuration.sh)
#
# and prints each reference. Credentials come from the Docker config
# ($DOCKER_CONFIG/config.json or ~/.docker/config.json; Helm's registry
# config first for the chart), as `docker login` writes it.
#
# Environment:
#   MODELPLANE_APIS     Modelplane's apis/ directory at MODELPLANE_VERSION (required)
#   MODELPLANE_VERSION  the Modelplane release it is rebuilt from (default v0.3.1)
#   INPUT               fleet-scheduler's step input in the rebuilt
#                       Configuration (see build-modelplane-configuration.sh)
#   ARCHS               architectures to build (default "amd64 arm64")
#   OUTPUT_DIR          output directory (default _output)
#   CROSSPLANE          crossplane CLI (default bin/crossplane, built if absent)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if [ $# -ne 2 ]; then
	echo "usage: MODELPLANE_APIS=DIR $0 REGISTRY VERSION" >&2
	exit 2
fi
registry=${1%/} version=$2
case "$version" in v[0-9]*.[0-9]*.[0-9]*) ;; *)
	echo "$0: VERSION $version is not a semantic version (vX.Y.Z)" >&2
	exit 2
	;;
esac
: "${MODELPLANE_APIS:?set MODELPLANE_APIS to Modelplane\'s apis/ directory}"
modelplane_version=${MODELPLANE_VERSION:-v0.3.1}
out=${OUTPUT_DIR:-_output}
case "$out" in /*) ;; *) out="$root/$out" ;; esac
export OUTPUT_DIR=$out
crossplane=${CROSSPLANE:-$root/bin/crossplane}
if [ ! -x "$crossplane" ]; then
	hack/build-crossplane.sh
	crossplane=$root/bin/crossplane
fi
export CROSSPLANE=$crossplane

pushed=()

# Every artefact is built before the first is pushed (but the chart, which
# push-chart packages as it pushes), so that one that cannot be built
# leaves nothing pushed. The Configuration first: it fails fast on an
# apis/ that is not Modelplane's.
configuration="$registry/modelplane:$modelplane_version-fleet-scheduler-$version"
hack/build-modelplane-configuration.sh "$registry" "$version" "$out/xpkg/modelplane.xpkg"
hack/build-xpkg.sh
hack/build-cluster-agent-image.sh

hack/push-xpkg.sh "$registry/fleet-scheduler:$version"
pushed+=("$registry/fleet-scheduler:$version")
PACKAGE=fleet-scheduler-relay hack/push-xpkg.sh "$registry/fleet-scheduler-relay:$version"
pushed+=("$registry/fleet-scheduler-relay:$version")

"$out/bin/build-index" --layout="$out/image/cluster-agent" --push="$registry/cluster-agent:$version"
pushed+=("$registry/cluster-agent:$version")

# The chart's version is the release's without its v (Helm's tags are the
# chart's version).
chart=$(go run -C tools/chartrender ./cmd/push-chart --chart="$root/charts/cluster-agent" \
	--version="$version" --image="$registry/cluster-agent" --to="$registry/charts" --output="$out/chart")
pushed+=("${chart#push-chart: }")

"$crossplane" xpkg push -f "$out/xpkg/modelplane.xpkg" "$configuration"
pushed+=("$configuration")

echo "release: pushed"
printf '  %s\n' "${pushed[@]}"
