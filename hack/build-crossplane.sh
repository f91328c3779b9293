#!/usr/bin/env bash
# Build the crossplane CLI into bin/crossplane, at the version tools/go.mod
# pins. Skips the build when bin/crossplane was already built for that version
# with this Go toolchain.
#
# Needs only Go and the Go module proxy. The first build takes a few minutes.
#
# Why not `go build -modfile=tools/go.mod .../cmd/crank`: tools/go.mod also
# pins controller-tools, whose newer k8s.io modules (client-go v0.37) win
# minimal version selection and break crossplane v2.2.0's controller-runtime.
# And `go install ...@version` asks the proxy for the module's version list,
# which some proxies refuse. So this builds crossplane's cmd/crank inside
# crossplane's own module, from the module cache, against crossplane's own
# go.mod and go.sum: the dependency versions its release was built with.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${root}/bin/crossplane"
stamp="${root}/bin/.crossplane.stamp"
module=github.com/crossplane/crossplane/v2

# Builds here must not see a go.work, and must not edit crossplane's go.mod.
export GOWORK=off GOFLAGS=-mod=readonly

version="$(cd "${root}/tools" && go list -m -f '{{.Version}}' "${module}")"
want="${module}@${version} $(go env GOVERSION) $(go env GOOS)/$(go env GOARCH)"

if [[ -x "${out}" && -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]]; then
  echo "bin/crossplane is current (${module}@${version})" >&2
  exit 0
fi

echo "Building bin/crossplane from ${module}@${version}; the first build takes a few minutes..." >&2
(cd "${root}/tools" && go mod download "${module}")
src="$(cd "${root}/tools" && go list -m -f '{{.Dir}}' "${module}")"

mkdir -p "${root}/bin"
tmp="$(mktemp "${root}/bin/.crossplane.XXXXXX")"
trap 'rm -f "${tmp}"' EXIT
(cd "${src}" && go build -trimpath -buildvcs=false \
  -ldflags "-s -w -X=${module}/internal/version.version=${version}" \
  -o "${tmp}" ./cmd/crank)
mv -f "${tmp}" "${out}"
echo "${want}" > "${stamp}"
echo "Built bin/crossplane ($("${out}" version --client 2>/dev/null || echo "${version}"))" >&2
