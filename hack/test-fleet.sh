#!/usr/bin/env bash
# Runs the live fleet (test/live/fleet): a Modelplane v0.3 control plane
# (etcd, kube-apiserver, Crossplane core, provider-kubernetes with watches,
# fleet-scheduler and the relay over mTLS, a stand-in for Modelplane's Python
# functions) and two workload clusters (kube-apiserver, kube-scheduler v1.37.2
# with DRA, kube-controller-manager, KWOK as the pool nodes' kubelet, the
# cluster agent installed with helm install of its pushed chart), every part
# built from source and run on loopback in network
# and PID namespaces of the test's own. No container runs: KWOK moves bound
# pods to Running and Ready (see docs/live-fleet.md).
#
#   ./hack/test-fleet.sh                # build what is not current, test
#   ./hack/test-fleet.sh -run 'Fleet/reports'   # extra flags go to `go test`
#
# It reuses what ./hack/test-live.sh builds (bin/control-plane/, bin/crossplane)
# and builds the function's and the relay's packages, the agent, the Helm
# CLI and the stand-in. The processes' logs and, when a test fails, the
# objects as it ended are in _output/live-fleet/.
#
# Needs root or unprivileged user namespaces.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}/test/live"

go vet ./fleet/...
exec go test -count=1 -timeout=30m -v "$@" ./fleet
