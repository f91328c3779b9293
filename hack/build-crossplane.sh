#!/usr/bin/env bash
# Build the crossplane CLI into bin/crossplane from its wrapper module,
# tools/crossplane-cli, which pins its version and its dependencies' (see
# that go.mod for why they are the ones Crossplane core is built with here).
# Skips the build when bin/crossplane was already built from that go.mod and
# go.sum with this Go toolchain.
#
# The CLI's `composition render` also needs Crossplane core, whose render
# engine it runs (--crossplane-binary): `./hack/build-control-plane.sh
# crossplane` builds it into bin/control-plane/crossplane, and
# hack/render.sh and e2e/ run both scripts. `xpkg build` and `xpkg push`
# need the CLI only.
#
# Needs only Go and the Go module proxy. The first build takes many minutes
# (the README's "The first command's cost" measures it).
#
# A wrapper module of its own, not tools/go.mod: tools/go.mod pins
# controller-tools, whose newer k8s.io modules would win minimal version
# selection and break the CLI's controller-runtime. And not `go install
# ...@version`, which asks the proxy for the module's version list, which some
# proxies refuse.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${root}/bin/crossplane"
stamp="${root}/bin/.crossplane.stamp"
wrapper="${root}/tools/crossplane-cli"
module=github.com/crossplane/cli/v2

# Builds here must not see a go.work, and must not edit the wrapper's go.mod.
export GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false"

version="$(cd "${wrapper}" && go list -m -f '{{.Version}}' "${module}")"
want="${module}@${version} $(cat "${wrapper}/go.mod" "${wrapper}/go.sum" | sha256sum | cut -c1-16) $(go env GOVERSION) $(go env GOOS)/$(go env GOARCH)"

if [[ -x "${out}" && -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]]; then
  echo "bin/crossplane is current (${module}@${version})" >&2
  exit 0
fi

echo "Building bin/crossplane from ${module}@${version} (tools/crossplane-cli/go.mod); the first build takes many minutes..." >&2
started=${SECONDS}
mkdir -p "${root}/bin"
tmp="$(mktemp "${root}/bin/.crossplane.XXXXXX")"
trap 'rm -f "${tmp}"' EXIT
(cd "${wrapper}" && go build -trimpath \
  -ldflags "-s -w -X=github.com/crossplane/crossplane-runtime/v2/pkg/version.version=${version}" \
  -o "${tmp}" "${module}/cmd/crossplane")
mv -f "${tmp}" "${out}"
echo "${want}" > "${stamp}"
echo "Built bin/crossplane ($("${out}" version --client 2>/dev/null || echo "${version}")) in $((SECONDS - started))s" >&2
