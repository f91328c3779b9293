//go:build tools

// Package tools pins the command-line tools this project builds from the Go
// module proxy. It is a module of its own so that the function's go.mod stays
// small.
package tools

import (
	_ "github.com/crossplane/crossplane/v2/cmd/crank"
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
