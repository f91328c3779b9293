#!/usr/bin/env bash
# Runs the tests of what ships (the test/ module):
#
#   test/xpkg     ./hack/release.sh for both architectures against a
#                 registry on loopback; every artefact pulled back and
#                 checked: the function packages' meta, Input CRD and runtime
#                 images, the agent's image, its chart, the Configuration
#   test/mtls     the function started from its runtime image serves
#                 RunFunction over mutual TLS only
#   test/schemas  ModelReplicas (hand-made and as ./hack/render.sh renders
#                 example/) against Modelplane's XRDs, `crossplane resource validate`
#
# Also checks that test/ and tools/image (modules of their own) are tidy and
# vet clean. Extra flags go to `go test`, e.g. ./hack/test-package.sh -run Mutual
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

./hack/build-crossplane.sh

for mod in test tools/image; do
  (cd "${mod}" && go mod tidy -diff && go vet ./...)
done
(cd tools/image && go test -count=1 ./...)

cd test
exec go test -count=1 -timeout=30m -v "$@" ./...
