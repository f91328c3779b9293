#!/usr/bin/env bash
# Runs the cluster agent's tests: its module's unit tests (cmd/cluster-agent),
# then the agent's binary against a real
# kube-apiserver and etcd (test/live/agent): installed from
# deploy/cluster-agent/ as it ships, as its ServiceAccount, through changes,
# bad objects and faults (the API server killed, leadership handed over, a
# watch that stalls), in network and PID namespaces of the test's own.
#
#   ./hack/test-agent.sh              # build what is not current, check, test
#   ./hack/test-agent.sh -run Agent   # extra flags go to the live `go test`
#
# The control plane's etcd and kube-apiserver come from bin/control-plane/
# (./hack/build-control-plane.sh; ./hack/test-live.sh builds them too). The
# processes' logs and the kubeconfigs are in _output/agent/.
#
# Also checks that cmd/cluster-agent is tidy and vet clean. Needs root or
# unprivileged user namespaces.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

# Built with the environment's flags, as test/live is (go's defaults; in
# .ci/run -trimpath and static, as the image is): the unit tests, the live
# test and the binary it runs share one build of the module's dependencies
# with ./hack/test-live.sh's.
(cd cmd/cluster-agent && go mod tidy -diff && go vet ./... && go test -count=1 ./...)
./hack/build-control-plane.sh etcd kube-apiserver

cd test/live
exec go test -count=1 -timeout=20m -v "$@" ./agent
