#!/usr/bin/env bash
# Runs the live tests (test/live): Crossplane core reconciling the example
# ModelDeployment through this function, served over mTLS, against a real
# kube-apiserver and etcd (and kube-controller-manager's garbage collector),
# all built from Go source and run on loopback in network and PID namespaces
# of the test's own. No Docker, no kind, no kubelet.
#
#   ./hack/test-live.sh            # build what is not current, check, test
#   ./hack/test-live.sh -run XRD   # extra flags go to `go test`
#
# The first run builds the control plane into bin/control-plane/ (see
# hack/build-control-plane.sh: many minutes, Kubernetes most of it); later runs
# reuse it. The processes' logs, the kubeconfig and, when a test fails, the
# objects as it ended are in _output/live/.
#
# Also checks that test/live and the control plane's wrapper modules are tidy
# and that test/live is vet clean. Needs root or unprivileged user namespaces.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

./hack/build-control-plane.sh --check
(cd test/live && go mod tidy -diff && go vet ./...)

cd test/live
exec go test -count=1 -timeout=45m -v "$@" .
