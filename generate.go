//go:build generate

// Run `go generate -tags generate` to regenerate the input type's deepcopy
// methods and its CRD in package/input, and the cluster agent's manifests in
// deploy/cluster-agent/ from its Helm chart, charts/cluster-agent. The
// controller-gen tool is built from tools/go.mod; chartrender is a module of
// its own, tools/chartrender, run in its directory (-C).
package main

//go:generate go run -modfile=tools/go.mod sigs.k8s.io/controller-tools/cmd/controller-gen object:headerFile=hack/boilerplate.go.txt paths=./input/...
//go:generate go run -modfile=tools/go.mod sigs.k8s.io/controller-tools/cmd/controller-gen crd:crdVersions=v1 paths=./input/... output:artifacts:config=package/input
//go:generate go run -C tools/chartrender . -root ../..
