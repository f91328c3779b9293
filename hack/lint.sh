#!/usr/bin/env bash
# Lints every Go module of the repository with golangci-lint, at the version
# pinned below, installed from the Go module proxy into bin/ on first use.
#
#   ./hack/lint.sh            # lint
#   ./hack/lint.sh --fix      # extra flags go to `golangci-lint run`
#
# Configuration: .golangci.yml (every linter on; each one off says why).
set -euo pipefail

version=v2.15.0

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${root}/bin/golangci-lint"
stamp="${root}/bin/.golangci-lint.stamp"
want="${version} $(go env GOVERSION)"

if [[ ! -x "${bin}" || ! -f "${stamp}" || "$(cat "${stamp}")" != "${want}" ]]; then
  echo "Installing golangci-lint ${version} into bin/ (takes a minute or two)..." >&2
  mkdir -p "${root}/bin"
  # Outside any module, so that nothing here changes its resolution.
  (cd / && GOWORK=off GOBIN="${root}/bin" go install \
    "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@${version}")
  echo "${want}" > "${stamp}"
fi

# The function's module, then the test and tool modules nested in it (a
# module's ./... stops at a nested go.mod).
status=0
for mod in . test test/live tools/image; do
  echo "==> golangci-lint run (${mod})" >&2
  (cd "${root}/${mod}" && "${bin}" run --allow-parallel-runners --config "${root}/.golangci.yml" "$@" ./...) || status=1
done
exit "${status}"
