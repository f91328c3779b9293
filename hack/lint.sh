#!/usr/bin/env bash
# Lints every Go module of the repository with golangci-lint, at the version
# pinned below, installed from the Go module proxy into bin/ on first use.
#
#   ./hack/lint.sh            # lint
#   ./hack/lint.sh --fix      # extra flags go to `golangci-lint run`
#
# Configuration: .golangci.yml (every linter on; each one off says why; one
# depguard rule per package, as docs/layout.md lists them).
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

# Every module of the repository that holds Go code: a module's ./... stops
# at a nested go.mod, so each is linted on its own. The wrapper modules of
# test/live/controlplane hold none.
status=0
while IFS= read -r mod; do
  mod="$(dirname "${mod}")"
  if [[ -z "$(cd "${root}" && git ls-files --cached --others --exclude-standard -- "${mod}/*.go" | head -n 1)" ]]; then
    continue
  fi
  echo "==> golangci-lint run (${mod})" >&2
  (cd "${root}/${mod}" && "${bin}" run --allow-parallel-runners --config "${root}/.golangci.yml" "$@" ./...) || status=1
done < <(cd "${root}" && git ls-files --cached --others --exclude-standard '*go.mod' | sort)
exit "${status}"
