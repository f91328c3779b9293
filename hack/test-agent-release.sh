#!/usr/bin/env bash
# Runs TestAgentRelease (test/live/fleet): the live fleet's control plane
# with provider-helm, one workload cluster, and the cluster agent installed
# there by the relay's Release of the chart ./hack/release.sh pushed, as
# docs/cluster-agent.md#a-release-with-every-cluster describes. Builds
# provider-helm first (bin/control-plane/provider-helm; about 5 minutes
# cold), which nothing else here needs: CI does not run it
# (docs/testing.md).
#
#   ./hack/test-agent-release.sh
#
# The processes' logs are in _output/live-fleet/. Needs root or
# unprivileged user namespaces, as ./hack/test-fleet.sh does.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}/test/live"

go vet ./fleet/...
FLEET_AGENT_RELEASE=1 exec go test -count=1 -timeout=30m -v -run '^TestAgentRelease$' "$@" ./fleet
