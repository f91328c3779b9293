// Package repotool is what the repository's checks and measures
// (tools/repocheck, tools/layoutstats) share: the repository they are run
// on, and which files of a package use which.
package repotool

import (
	"flag"
	"go/ast"
	"go/types"
	"maps"
	"path/filepath"
	"slices"

	"golang.org/x/tools/go/packages"
)

// Root is the repository the command line names in its one argument, the
// current directory without one, as an absolute path. flag.Parse must have
// run.
func Root() (string, error) {
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	return filepath.Abs(root)
}

// FileUses are the other files of the package p whose declarations its file
// f, named name, uses, by name and sorted: a package-level name, a method or
// a struct field.
func FileUses(p *packages.Package, f *ast.File, name string) []string {
	uses := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		id, ok := n.(*ast.Ident)
		if !ok {
			return true
		}
		obj := p.TypesInfo.Uses[id]
		if obj == nil || obj.Pkg() != p.Types || obj.Parent() != p.Types.Scope() && !isMember(obj) {
			return true
		}
		if other := filepath.Base(p.Fset.Position(obj.Pos()).Filename); other != name {
			uses[other] = true
		}
		return true
	})
	return slices.Sorted(maps.Keys(uses))
}

// isMember is whether an object is a method or a field: declared in a
// file, though not at package scope.
func isMember(obj types.Object) bool {
	switch o := obj.(type) {
	case *types.Func:
		return o.Signature().Recv() != nil
	case *types.Var:
		return o.IsField()
	}
	return false
}
