#!/usr/bin/env bash
# Builds the control plane the live tests (test/live) run, from Go source, into
# bin/control-plane/:
#
#   etcd                     go.etcd.io/etcd/server/v3                      (test/live/controlplane/etcd)
#   kube-apiserver           k8s.io/kubernetes/cmd/kube-apiserver           (test/live/controlplane/kubernetes)
#   kube-controller-manager  k8s.io/kubernetes/cmd/kube-controller-manager  (test/live/controlplane/kubernetes)
#   kube-scheduler           k8s.io/kubernetes/cmd/kube-scheduler           (test/live/controlplane/kubernetes)
#   crossplane               Crossplane core, cmd/crossplane                (test/live/controlplane/crossplane)
#   provider-kubernetes      provider-kubernetes, cmd/provider              (test/live/controlplane/provider-kubernetes)
#   kwok                     sigs.k8s.io/kwok/cmd/kwok                      (test/live/controlplane/kwok)
#   provider-helm            provider-helm, cmd/provider                    (test/live/controlplane/provider-helm)
#
# provider-helm is built only when named (./hack/test-agent-release.sh does):
# no test in CI runs it, and its cold build takes about 5 minutes.
#
# Each comes from a wrapper module of its own, which pins the version and
# keeps these dependencies out of every other module. A binary is rebuilt only
# when its wrapper's go.mod or go.sum, or the Go toolchain, changed since it
# was built (bin/control-plane/.<name>.stamp). The three Kubernetes binaries
# are built in one `go build`, with the same -trimpath as every other build of
# k8s.io/kubernetes here (sim/calibrate's), so that they share compiled
# packages. Needs only Go and the Go module proxy; the first build takes a
# long time (Kubernetes most of it).
#
#   ./hack/build-control-plane.sh            # build what is not current
#   ./hack/build-control-plane.sh --check    # also: each wrapper's go.mod is tidy
#   ./hack/build-control-plane.sh etcd kube-apiserver   # only these (the agent's tests need no more)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${root}/bin/control-plane"
wrappers="${root}/test/live/controlplane"

# The wrappers' go.mod and go.sum are the truth: never edit them while building.
export GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false"

check=false
if [[ "${1:-}" == "--check" ]]; then
  check=true
  shift
fi
# The binaries to build: those named, or every one.
only=("$@")

# build WRAPPER NAME PACKAGE LDFLAGS builds the tool PACKAGE of the wrapper
# module test/live/controlplane/WRAPPER into bin/control-plane/NAME.
build() {
  local wrapper="$1" name="$2" pkg="$3" ldflags="$4"
  if [[ ${#only[@]} -gt 0 && " ${only[*]} " != *" ${name} "* ]]; then
    return
  fi
  local dir="${wrappers}/${wrapper}" bin="${out}/${name}" stamp="${out}/.${name}.stamp"
  local want
  want="${pkg} $(cat "${dir}/go.mod" "${dir}/go.sum" | sha256sum | cut -c1-16) $(go env GOVERSION) $(go env GOOS)/$(go env GOARCH)"
  if [[ -n "${ldflags}" ]]; then
    want+=" $(sha256sum <<<"${ldflags}" | cut -c1-16)"
  fi
  if [[ -x "${bin}" && -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]]; then
    echo "bin/control-plane/${name} is current" >&2
    return
  fi
  echo "Building bin/control-plane/${name} from ${pkg} (test/live/controlplane/${wrapper}/go.mod)..." >&2
  local started=${SECONDS}
  mkdir -p "${out}"
  local tmp
  tmp="$(mktemp "${out}/.${name}.XXXXXX")"
  # -s -w: no symbol table or DWARF; these are test fixtures, not debugged here.
  if ! (cd "${dir}" && go build -trimpath -ldflags "-s -w ${ldflags}" -o "${tmp}" "${pkg}"); then
    rm -f "${tmp}"
    return 1
  fi
  mv -f "${tmp}" "${bin}"
  echo "${want}" > "${stamp}"
  echo "Built bin/control-plane/${name} in $((SECONDS - started))s" >&2
}

# build_all WRAPPER LDFLAGS NAME=PACKAGE... builds the tools of one wrapper
# that are not current in one `go build`, so that their shared packages are
# compiled once, and links each into bin/control-plane/NAME (the package's
# last path element).
build_all() {
  local wrapper="$1" ldflags="$2"
  shift 2
  local dir="${wrappers}/${wrapper}" sum names=() pkgs=()
  sum="$(cat "${dir}/go.mod" "${dir}/go.sum" | sha256sum | cut -c1-16) $(go env GOVERSION) $(go env GOOS)/$(go env GOARCH)"
  local spec name pkg
  for spec in "$@"; do
    name="${spec%%=*}" pkg="${spec#*=}"
    if [[ ${#only[@]} -gt 0 && " ${only[*]} " != *" ${name} "* ]]; then
      continue
    fi
    if [[ -x "${out}/${name}" && -f "${out}/.${name}.stamp" && "$(cat "${out}/.${name}.stamp")" == "${pkg} ${sum}" ]]; then
      echo "bin/control-plane/${name} is current" >&2
      continue
    fi
    names+=("${name}") pkgs+=("${pkg}")
  done
  if [[ ${#pkgs[@]} -eq 0 ]]; then
    return
  fi
  echo "Building ${names[*]} into bin/control-plane/ in one go build (test/live/controlplane/${wrapper}/go.mod)..." >&2
  local started=${SECONDS} tmp
  mkdir -p "${out}"
  tmp="$(mktemp -d "${out}/.${wrapper}.XXXXXX")"
  # -s -w: no symbol table or DWARF; these are test fixtures, not debugged here.
  if ! (cd "${dir}" && go build -trimpath -ldflags "-s -w ${ldflags}" -o "${tmp}/" "${pkgs[@]}"); then
    rm -rf "${tmp}"
    return 1
  fi
  local i
  for i in "${!names[@]}"; do
    mv -f "${tmp}/${names[$i]}" "${out}/${names[$i]}"
    echo "${pkgs[$i]} ${sum}" > "${out}/.${names[$i]}.stamp"
  done
  rm -rf "${tmp}"
  echo "Built ${names[*]} in $((SECONDS - started))s" >&2
}

# version WRAPPER MODULE prints the version of MODULE that WRAPPER requires.
version() {
  (cd "${wrappers}/$1" && go list -m -f '{{.Version}}' "$2")
}

if ${check}; then
  # A wrapper holds no Go code, only its go.mod's tool directives: tidy is
  # all there is to check (go vet would find no package to vet).
  for wrapper in etcd kubernetes crossplane provider-kubernetes kwok provider-helm; do
    (cd "${wrappers}/${wrapper}" && go mod tidy -diff)
  done
fi

build etcd etcd go.etcd.io/etcd/server/v3 ""

# The apiserver reports this version (discovery, /version) and derives its
# emulation version from it; a plain `go build` would say v0.0.0-master.
k8s="$(version kubernetes k8s.io/kubernetes)"
k8s_minor="$(cut -d. -f2 <<<"${k8s}")"
k8s_ldflags="-X k8s.io/component-base/version.gitVersion=${k8s} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${k8s_minor}"
build_all kubernetes "${k8s_ldflags}" \
  kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
  kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
  kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler

# Crossplane checks packages' spec.crossplane.version against its own.
xp="$(version crossplane github.com/crossplane/crossplane/v2)"
build crossplane crossplane github.com/crossplane/crossplane/v2/cmd/crossplane \
  "-X github.com/crossplane/crossplane-runtime/v2/pkg/version.version=${xp}"

# The control plane's provider for the live fleet test (test/live/fleet).
build provider-kubernetes provider-kubernetes github.com/crossplane-contrib/provider-kubernetes/cmd/provider ""

# The kubelet of the live fleet's GPU pool nodes (test/live/fleet); its
# own k8s.io v0.36.1, so its own build.
build kwok kwok sigs.k8s.io/kwok/cmd/kwok ""

# The control plane's provider-helm for the agent's Release
# (./hack/test-agent-release.sh), only when named. Like provider-kubernetes
# it serves controller-runtime's metrics on :8080, which no flag of either
# changes, and the live tests run every process in one network namespace:
# its default is linked to a free loopback port instead.
if [[ " ${only[*]:-} " == *" provider-helm "* ]]; then
  build provider-helm provider-helm github.com/crossplane-contrib/provider-helm/cmd/provider \
    "-X sigs.k8s.io/controller-runtime/pkg/metrics/server.DefaultBindAddress=127.0.0.1:0"
fi
