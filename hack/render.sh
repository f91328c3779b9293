#!/usr/bin/env bash
# Render a fixture with the real `crossplane composition render`, against this
# function.
#
#   ./hack/render.sh                     # example/: the fleet, counted in whole nodes
#   ./hack/render.sh example/observed    # the same fleet, with cluster-agent reports
#   ./hack/render.sh e2e/testdata/retain -r   # flags go to crossplane composition render
#   ./hack/render.sh -r                  # example/, with the function's results
#
# It builds bin/function and, the first time, the crossplane CLI
# (bin/crossplane, hack/build-crossplane.sh) and Crossplane core
# (bin/control-plane/crossplane, hack/build-control-plane.sh): many minutes
# cold (the README's "The first command's cost"). Without Docker the CLI renders by running core's render engine, the
# binary given as --crossplane-binary. It starts the function with --insecure
# on a free loopback port, waits until the port accepts connections, renders
# the fixture, and prints the rendered YAML on stdout. The function is stopped
# however the script ends; its log goes to stderr if the render fails.
#
# A fixture is a directory holding required-resources/ (the InferenceClusters,
# ModelReplicas and ModelCaches the function requires) and optionally
# observed-resources/ (the XR's observed composed resources), xr.yaml,
# composition.yaml and functions.yaml. The last three default to example/'s.
#
# Timestamps: fixtures are written against a fixed clock, 2026-10-20T20:06:00Z
# (e2e/internal/freshen.Clock). The function judges an observation's freshness
# (observedAt against observationMaxAge) by its own wall clock, and the CLI's
# render has no way to set a function's clock. So the fixture is copied into a
# temporary directory first, with every observedAt and lastTransitionTime
# moved by (now - fixture clock): an observation 30s old at the fixture clock
# is 30s old when rendered. The files in the repository are never changed.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The fixture directory, relative to the current directory, else to the
# repository's root; example/ when the first argument is a flag, or absent.
fixture="${root}/example"
if [[ $# -gt 0 && "$1" != -* ]]; then
  fixture="$1"
  shift
fi
if [[ ! -d "${fixture}" && -d "${root}/${fixture}" ]]; then
  fixture="${root}/${fixture}"
fi
if [[ ! -d "${fixture}/required-resources" ]]; then
  echo "render.sh: ${fixture} is not a fixture: it has no required-resources/ directory" >&2
  exit 2
fi
fixture="$(cd "${fixture}" && pwd)"
cd "${root}"

./hack/build-crossplane.sh
./hack/build-control-plane.sh crossplane
go build -buildvcs=false -o bin/function .

work="$(mktemp -d)"
fn_pid=""
cleanup() {
  if [[ -n "${fn_pid}" ]]; then
    kill "${fn_pid}" 2>/dev/null || true
    wait "${fn_pid}" 2>/dev/null || true
  fi
  rm -rf "${work}"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# listening PORT succeeds when something accepts connections on the port.
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The port the Development runtime expects, unless something else has it.
port=""
for p in 9443 $(seq 9444 9643); do
  if ! listening "${p}"; then
    port="${p}"
    break
  fi
done
if [[ -z "${port}" ]]; then
  echo "render.sh: no free port in 9443-9643 on 127.0.0.1" >&2
  exit 1
fi

bin/function --insecure --debug --address="127.0.0.1:${port}" --metrics-address= 2>"${work}/function.log" >&2 &
fn_pid=$!

for _ in $(seq 1 300); do
  if ! kill -0 "${fn_pid}" 2>/dev/null; then
    echo "render.sh: the function exited before it listened on 127.0.0.1:${port}:" >&2
    cat "${work}/function.log" >&2
    exit 1
  fi
  listening "${port}" && break
  sleep 0.1
done
if ! listening "${port}"; then
  echo "render.sh: the function did not listen on 127.0.0.1:${port} within 30s" >&2
  exit 1
fi

go run ./e2e/cmd/prepare-fixture "${fixture}" example "${work}/fixture" >"${work}/args"
args=()
while IFS= read -r a; do args+=("${a}"); done <"${work}/args"

if ! bin/crossplane "${args[@]}" \
  --crossplane-binary=bin/control-plane/crossplane \
  -a render.crossplane.io/runtime=Development \
  -a "render.crossplane.io/runtime-development-target=127.0.0.1:${port}" \
  "$@"; then
  echo "render.sh: crossplane composition render failed; the function's log:" >&2
  cat "${work}/function.log" >&2
  exit 1
fi
