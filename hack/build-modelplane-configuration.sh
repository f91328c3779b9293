#!/usr/bin/env bash
# Builds this project's rebuild of Modelplane's Configuration package: the
# Modelplane release's own apis/ (every XRD and Composition it ships), with
# four files replaced by this project's, and the two Functions added as
# dependencies. Installed by pointing the existing Configuration `modelplane`
# at it (docs/production.md#install-over-modelplanes-configuration), it
# replaces nothing else: the package manager keeps every XRD, CRD and XR,
# and re-applies these very objects on every Lock change and resync, where
# `kubectl apply`'d changes were reverted.
#
#   git clone --branch v0.3.1 https://github.com/modelplaneai/modelplane /tmp/modelplane
#   MODELPLANE_APIS=/tmp/modelplane/apis \
#     ./hack/build-modelplane-configuration.sh ghcr.io/acme v0.1.0 _output/xpkg/modelplane.xpkg
#
# Arguments:
#   FUNCTIONS  where fleet-scheduler and fleet-scheduler-relay are pushed
#              (FUNCTIONS/fleet-scheduler:VERSION, as ./hack/push-xpkg.sh
#              pushes them)
#   VERSION    their version
#   OUTPUT     the .xpkg file to write
#
# The four files replaced:
#   inferenceclusters/definition.yaml   deploy/inferenceclusters.yaml (the
#                                        agent's report fields)
#   modeldeployments/composition.yaml   example/composition.yaml (fleet-scheduler)
#   inferenceclusters/composition.yaml  deploy/relay/ (v0.3's step, then the relay)
#   modelreplicas/composition.yaml      deploy/relay/ (v0.3's step, then the relay)
#
# The Compositions name each Function as Crossplane's package manager names
# a dependency it installs: the package's repository path as a DNS label
# (FUNCTIONS=ghcr.io/acme gives acme-fleet-scheduler), so that resolving
# this package's dependencies installs exactly the Functions its steps call.
#
# Environment:
#   MODELPLANE_APIS  Modelplane's apis/ directory at the release you run
#                    (required)
#   INPUT            a file holding fleet-scheduler's step input, a
#                    scheduler.fn.modelplane.ai/v1beta1 Input (optional; the
#                    defaults otherwise). The relay's steps in the ModelReplica
#                    and InferenceCluster Compositions get the same, so that
#                    both read one observationMaxAge, and the relay reads
#                    agentRelease there (docs/cluster-agent.md#a-release-with-every-cluster).
#                    A Composition edited after install is put back by the
#                    package manager: set it here.
#   CROSSPLANE       crossplane CLI (default bin/crossplane, built if absent)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -ne 3 ]; then
	echo "usage: MODELPLANE_APIS=DIR $0 FUNCTIONS VERSION OUTPUT" >&2
	exit 2
fi
functions=${1%/} version=$2 output=$3
apis=${MODELPLANE_APIS:?set MODELPLANE_APIS to Modelplane\'s apis/ directory}
for f in inferenceclusters/definition.yaml modeldeployments/composition.yaml \
	inferenceclusters/composition.yaml modelreplicas/composition.yaml; do
	if [ ! -f "$apis/$f" ]; then
		echo "$0: $apis/$f does not exist: MODELPLANE_APIS must be Modelplane's apis/ directory" >&2
		exit 1
	fi
done
case "$version" in v[0-9]*) ;; *)
	echo "$0: VERSION $version is not a semantic version (vX.Y.Z)" >&2
	exit 2
	;;
esac
if [ -n "${INPUT:-}" ]; then
	if [ ! -f "$INPUT" ] || ! grep -q '^apiVersion: scheduler.fn.modelplane.ai/v1beta1$' "$INPUT" || ! grep -q '^kind: Input$' "$INPUT"; then
		echo "$0: INPUT $INPUT is not a file holding a scheduler.fn.modelplane.ai/v1beta1 Input" >&2
		exit 2
	fi
fi
crossplane=${CROSSPLANE:-$root/bin/crossplane}
if [ ! -x "$crossplane" ]; then
	"$root/hack/build-crossplane.sh"
	crossplane=$root/bin/crossplane
fi

# dns_label names a package as Crossplane's package manager names a
# dependency it installs (crossplane-runtime's xpkg.ToDNSLabel of the
# reference's repository path): lower-case letters and digits kept, '.', '/',
# ':' and '-' as '-' (but as the first, 63rd or last character), cut at 63,
# '-' trimmed from both ends.
dns_label() {
	local s=$1 cut="" i c
	for ((i = 0; i < ${#s}; i++)); do
		c=${s:i:1}
		case "$c" in
		[a-z0-9]) cut+=$c ;;
		. | / | : | -) if ((i != 0 && i != 62 && i != ${#s} - 1)); then cut+=-; fi ;;
		esac
		((i == 62)) && break
	done
	cut=${cut##-}
	cut=${cut%%-}
	echo "$cut"
}

# The repository path is the reference without its registry host (the part
# before the first '/', when it has a '.' or ':' or is localhost).
repository() {
	local first=${1%%/*}
	case "$first" in *.* | *:* | localhost) echo "${1#*/}" ;; *) echo "$1" ;; esac
}
scheduler=$(dns_label "$(repository "$functions/fleet-scheduler")")
relay=$(dns_label "$(repository "$functions/fleet-scheduler-relay")")

pkg=$(mktemp -d)
trap 'rm -rf "$pkg"' EXIT
cp -R "$apis" "$pkg/apis"
cp "$root/deploy/inferenceclusters.yaml" "$pkg/apis/inferenceclusters/definition.yaml"
# The functionRef names, and only those (a line `name: fleet-scheduler` or
# `name: fleet-scheduler-relay`), become the names the package manager gives.
rename() {
	sed -e "s|^\([[:space:]]*name:\) fleet-scheduler-relay\$|\1 $relay|" \
		-e "s|^\([[:space:]]*name:\) fleet-scheduler\$|\1 $scheduler|" "$1" >"$2"
}
# with_input writes a Composition whose last step's input is the file's
# last block ("    input:" and the lines below it) with that input
# replaced by INPUT's, if set.
with_input() {
	if [ -z "${INPUT:-}" ]; then
		cat "$1"
		return
	fi
	if ! grep -q '^    input:$' "$1" || sed '1,/^    input:$/d' "$1" | grep -q -v -E '^(      |$)'; then
		echo "$0: $1 does not end with its last step's input" >&2
		return 1
	fi
	sed '/^    input:$/q' "$1"
	sed -e '/^#/d' -e '/^---$/d' -e 's/^/      /' "$INPUT"
}
with_input "$root/example/composition.yaml" >"$pkg/modeldeployments.yaml"
with_input "$root/deploy/relay/modelreplicas-composition.yaml" >"$pkg/modelreplicas.yaml"
with_input "$root/deploy/relay/inferenceclusters-composition.yaml" >"$pkg/inferenceclusters.yaml"
rename "$pkg/modeldeployments.yaml" "$pkg/apis/modeldeployments/composition.yaml"
rename "$pkg/inferenceclusters.yaml" "$pkg/apis/inferenceclusters/composition.yaml"
rename "$pkg/modelreplicas.yaml" "$pkg/apis/modelreplicas/composition.yaml"
rm "$pkg/modeldeployments.yaml" "$pkg/inferenceclusters.yaml" "$pkg/modelreplicas.yaml"
for f in modeldeployments inferenceclusters modelreplicas; do
	if ! grep -q "name: \($scheduler\|$relay\)\$" "$pkg/apis/$f/composition.yaml"; then
		echo "$0: the $f Composition names neither $scheduler nor $relay after renaming" >&2
		exit 1
	fi
done

# Modelplane's own functions and providers are not listed: this package
# replaces the Modelplane package already installed, whose dependencies
# stay installed (the package manager never removes a dependency), and
# their versions in the published package are digests that this script
# cannot read. provider-kubernetes is listed as Modelplane lists it (the
# same package: another source would be a second Provider owning the same
# CRDs), since the relay needs it.
cat >"$pkg/crossplane.yaml" <<EOF
# Modelplane's Configuration, rebuilt by fleet-scheduler's
# hack/build-modelplane-configuration.sh: Modelplane's apis/ with the
# InferenceCluster XRD extended by the cluster agent's report fields, the
# ModelDeployment Composition calling fleet-scheduler, and the
# InferenceCluster and ModelReplica Compositions calling its relay.
apiVersion: meta.pkg.crossplane.io/v1
kind: Configuration
metadata:
  name: modelplane
  annotations:
    meta.crossplane.io/source: github.com/modelplaneai/fleet-scheduler
    meta.crossplane.io/description: |
      Modelplane's APIs, with fleet-scheduler placing ModelDeployments by
      the free devices each cluster agent reports.
spec:
  crossplane:
    version: ">=v2.3.0"
  dependsOn:
  - apiVersion: pkg.crossplane.io/v1
    kind: Function
    package: $functions/fleet-scheduler
    version: "$version"
  - apiVersion: pkg.crossplane.io/v1
    kind: Function
    package: $functions/fleet-scheduler-relay
    version: "$version"
  - apiVersion: pkg.crossplane.io/v1
    kind: Provider
    package: xpkg.upbound.io/upbound/provider-kubernetes
    version: v1.3.0
EOF

mkdir -p "$(dirname "$output")"
"$crossplane" xpkg build --package-root="$pkg" --examples-root="$pkg/examples" -o "$output"
echo "build-modelplane-configuration: $output (Functions $scheduler and $relay)"
