//go:build generate

// Run `go generate -tags generate` to regenerate the input type's deepcopy
// methods and its CRD in package/input. The tool is built from tools/go.mod.
package main

//go:generate go run -modfile=tools/go.mod sigs.k8s.io/controller-tools/cmd/controller-gen object:headerFile=hack/boilerplate.go.txt paths=./input/...
//go:generate go run -modfile=tools/go.mod sigs.k8s.io/controller-tools/cmd/controller-gen crd:crdVersions=v1 paths=./input/... output:artifacts:config=package/input
