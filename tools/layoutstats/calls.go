package main

import (
	"errors"
	"fmt"
	"go/token"
	"go/types"
	"path/filepath"
	"slices"

	"golang.org/x/tools/go/packages"
	"golang.org/x/tools/go/ssa"
	"golang.org/x/tools/go/ssa/ssautil"
)

// calls is what a RunFunction call reaches.
type calls struct {
	functions int
	calls     int
	climbs    []string // as "caller (package file) -> callee (package file)"
}

// site is a call counted: its caller, where it stands, its callee, each
// function as its origin.
type site struct {
	caller *ssa.Function
	pos    token.Pos
	callee *ssa.Function
}

// climbs follows the static calls from the root package's
// (*Function).RunFunction through the repository's functions, as the
// command's doc comment says. root are the root module's packages.
func climbs(root []*packages.Package, byPath map[string]*pkg) (calls, error) {
	var c calls
	prog, ssaPkgs := ssautil.Packages(root, ssa.InstantiateGenerics)
	var entry *ssa.Function
	for i, p := range ssaPkgs {
		if p == nil {
			continue
		}
		p.Build()
		if q, ok := byPath[root[i].PkgPath]; ok && q.rel == "." {
			entry = runFunction(prog, p)
		}
	}
	if entry == nil {
		return c, errors.New("the root package has no (*Function).RunFunction")
	}
	// where is a function's package and file: nil for none of the
	// repository's.
	where := func(fn *ssa.Function) (*pkg, string) {
		fn = origin(fn)
		if fn.Pkg == nil || !fn.Pos().IsValid() {
			return nil, ""
		}
		return byPath[fn.Pkg.Pkg.Path()], filepath.Base(prog.Fset.Position(fn.Pos()).Filename)
	}
	seenFn, seenSite := map[*ssa.Function]bool{entry: true}, map[site]bool{}
	for queue := []*ssa.Function{entry}; len(queue) > 0; queue = queue[1:] {
		fn := queue[0]
		from, fromFile := where(fn)
		for _, call := range staticCalls(fn) {
			callee := call.Common().StaticCallee()
			to, toFile := where(callee)
			if to == nil {
				continue
			}
			if !seenFn[callee] {
				seenFn[callee] = true
				queue = append(queue, callee)
			}
			s := site{origin(fn), call.Pos(), origin(callee)}
			if seenSite[s] {
				continue // another instance of the same generic call
			}
			seenSite[s] = true
			c.calls++
			if to.layer > from.layer || to == from && to.files.index[toFile] < from.files.index[fromFile] {
				c.climbs = append(c.climbs, fmt.Sprintf("%s (%s %s) -> %s (%s %s)", name(fn), from.rel, fromFile, name(callee), to.rel, toFile))
			}
		}
	}
	origins := map[*ssa.Function]bool{}
	for fn := range seenFn {
		origins[origin(fn)] = true
	}
	c.functions = len(origins)
	slices.Sort(c.climbs)
	return c, nil
}

// runFunction is a package's (*Function).RunFunction, or nil.
func runFunction(prog *ssa.Program, p *ssa.Package) *ssa.Function {
	t, ok := p.Members["Function"].(*ssa.Type)
	if !ok {
		return nil
	}
	sel := prog.MethodSets.MethodSet(types.NewPointer(t.Type())).Lookup(t.Object().Pkg(), "RunFunction")
	if sel == nil {
		return nil
	}
	return prog.MethodValue(sel)
}

// staticCalls are a function's calls whose callee is known without running
// it.
func staticCalls(fn *ssa.Function) []ssa.CallInstruction {
	var out []ssa.CallInstruction
	for _, b := range fn.Blocks {
		for _, instr := range b.Instrs {
			if call, ok := instr.(ssa.CallInstruction); ok && call.Common().StaticCallee() != nil {
				out = append(out, call)
			}
		}
	}
	return out
}

// origin is the generic function an instance is of, or the function.
func origin(fn *ssa.Function) *ssa.Function {
	if o := fn.Origin(); o != nil {
		return o
	}
	return fn
}

// name is a function's origin, named within its package.
func name(fn *ssa.Function) string {
	fn = origin(fn)
	return fn.RelString(fn.Pkg.Pkg)
}
