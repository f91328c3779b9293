//go:build tools

// Package tools pins the command-line tools this project builds from the Go
// module proxy. It is a module of its own so that the function's go.mod stays
// small. The crossplane CLI has a module of its own, tools/crossplane-cli.
//
// go.mod raises controller-gen's k8s.io modules from v0.37.0 to v0.37.2, the
// release every other module here builds with, so that CI compiles them once.
package tools

import (
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
