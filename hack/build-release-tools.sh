#!/usr/bin/env bash
# Builds, and throws away, what ./hack/release.sh builds besides the
# function's packages: the cluster agent (its own module), tools/image's
# two commands and tools/chartrender's push-chart. Run before
# ./hack/release.sh where the Go module proxy cannot be reached later (the
# live test runs the release where only loopback exists): the modules are
# then in the module cache and the packages in the build cache.
set -euo pipefail

cd "$(dirname "$0")/.."
CGO_ENABLED=0 go build -C cmd/cluster-agent -trimpath -o /dev/null .
go build -C tools/image -o /dev/null ./cmd/build-image
go build -C tools/image -o /dev/null ./cmd/build-index
go build -C tools/chartrender -o /dev/null ./cmd/push-chart
