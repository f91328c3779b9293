# Sourced by the scripts that build into the output directory
# (build-xpkg.sh, build-cluster-agent-image.sh): moves to the repository's
# root and sets root, archs (ARCHS, default "amd64 arm64") and out
# (OUTPUT_DIR, default _output, relative to the root unless absolute).
# shellcheck shell=bash disable=SC2034 # The sourcing script reads them.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

archs=${ARCHS:-amd64 arm64}
out=${OUTPUT_DIR:-_output}
case "$out" in /*) ;; *) out="$root/$out" ;; esac
