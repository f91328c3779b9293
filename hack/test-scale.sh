#!/usr/bin/env bash
# Runs the scale run (TestScale in test/live/fleet, docs/scale.md): the live
# fleet with CLUSTERS workload clusters of NODES 8xH100 KWOK nodes, twice over
# under one control plane (agents reporting, and no agents: whole nodes),
# scaling ten ModelDeployments of 1, 2, 4 and 8 GPUs per replica in WAVES
# waves to 95% and 50% of the fleet's GPUs; then the same workload through
# fleetsim's simulator; and writes the report, scale.md with its chart and
# data, to OUTPUT (docs/scale/CLUSTERSxNODESxWAVES by default).
#
#   ./hack/test-scale.sh 3x4x2            # CLUSTERSxNODESxWAVES
#   ./hack/test-scale.sh 3x4x2 /tmp/out   # the report elsewhere
#
# MARGIN=N fails the run when a set's mean GPU allocation is more than N
# points from fleetsim's. It builds what ./hack/test-fleet.sh builds, and
# needs what it needs.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
size="${1:?usage: $0 CLUSTERSxNODESxWAVES [OUTPUT]}"
out="${2:-${root}/docs/scale/${size}}"
mkdir -p "${out}"
out="$(cd "${out}" && pwd)"

cd "${root}/test/live"
FLEET_SCALE="${size}" FLEET_SCALE_OUT="${out}" FLEET_SCALE_MARGIN="${MARGIN:-}" \
  exec go test -count=1 -timeout=120m -v -run '^TestScale$' ./fleet
