// Command layoutstats measures the structure of a repository's Go code, so
// that docs/layout.md can give figures anyone can measure again:
//
//	(cd tools && go run ./layoutstats ..)
//
// It reads every module of the repository (each go.mod below it, but under
// testdata, vendor or a directory whose name starts with "." or "_"; the
// root module first) and their packages with non-test files, and prints:
//
// The import graph. Its nodes are the repository's packages, its arrows the
// imports of one by another. A package's layer is the length of the longest
// path of arrows from it down to a package that imports no other of the
// repository: 0 for such a leaf. Every arrow runs down, from a higher layer
// to a lower one.
//
// The binaries. For each package -bin names (a path relative to the
// repository), the packages `go list -deps` lists for it in its module, all
// and not of the standard library, with CGO_ENABLED=0 as the binaries are
// built.
//
// Within each package, the files. File A has an arrow to file B when A uses
// something B declares: a package-level name, a method or a struct field
// (the rule tools/repocheck holds the root files to). Arrows in cycles are
// those inside a strongly connected component of more than one file. The
// package's file order reads top to bottom, users above what they use:
// the components in topological order, a component above those it uses,
// and among those ready to be placed the one whose first file name sorts
// first; inside a component, the order of its files with the fewest arrows
// pointing up (to a file above), the first such order by file name where
// several tie. An arrow that points up runs back up; only arrows in cycles
// can, and their count is the least any order of the files allows.
//
// A call's climbs. From the root package's (*Function).RunFunction, the
// static calls (go/ssa's StaticCallee: calls of a named function or method,
// not through an interface or a function value) are followed through the
// repository's functions; each call site and callee reached counts once,
// a generic function's instances as their origin. A call climbs back up
// when its callee's package is in a higher layer than its caller's, or in
// the same package its callee's file is above its caller's in the file
// order.
//
// Duplicated blocks are not measured here.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/modelplaneai/fleet-scheduler/tools/internal/repotool"
)

func main() {
	bins := flag.String("bin", ".,./cmd/relay,./cmd/cluster-agent", "the binaries' packages, comma-separated, relative to the repository")
	verbose := flag.Bool("v", false, "list every import, every file arrow that runs back up and every call that climbs")
	flag.Usage = func() {
		_, _ = fmt.Fprintln(flag.CommandLine.Output(), "usage: layoutstats [-bin PKGS] [-v] [REPOSITORY]")
		flag.PrintDefaults()
	}
	flag.Parse()
	root, err := repotool.Root()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	r, err := measure(root, strings.Split(*bins, ","))
	if err != nil {
		fmt.Fprintln(os.Stderr, "layoutstats:", err)
		os.Exit(2)
	}
	r.print(os.Stdout, *verbose)
}

// print writes the report as text, one figure a line.
func (r *report) print(w io.Writer, verbose bool) {
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(w, format+"\n", args...) }
	p("import graph: %d packages, %d arrows, %d layers", len(r.packages), r.arrows, r.layers)
	for l := r.layers - 1; l >= 0; l-- {
		names := make([]string, 0, len(r.packages))
		for _, q := range r.packages {
			if q.layer == l {
				names = append(names, q.rel)
			}
		}
		p("  layer %d: %s", l, strings.Join(names, " "))
	}
	if verbose {
		for _, q := range r.packages {
			for _, imp := range q.imports {
				p("  %s -> %s", q.rel, imp)
			}
		}
	}
	for _, b := range r.binaries {
		p("binary %s: go list -deps %d packages, %d not of the standard library", b.name, b.all, b.nonStd)
	}
	var files, arrows, cyclic, up int
	for _, q := range r.packages {
		files += len(q.files.order)
		arrows += q.files.arrows
		cyclic += q.files.cyclic
		up += len(q.files.up)
	}
	p("file arrows: %d files, %d arrows, %d in cycles, %d run back up", files, arrows, cyclic, up)
	for _, q := range r.packages {
		if q.files.arrows == 0 {
			continue
		}
		p("  %s: %d files, %d arrows, %d in cycles, %d run back up", q.rel, len(q.files.order), q.files.arrows, q.files.cyclic, len(q.files.up))
		if verbose {
			p("    order: %s", strings.Join(q.files.order, " "))
			for _, a := range q.files.up {
				p("    up: %s", a)
			}
		}
	}
	p("RunFunction: %d functions, %d calls, %d climb back up", r.calls.functions, r.calls.calls, len(r.calls.climbs))
	if verbose {
		for _, c := range r.calls.climbs {
			p("  climb: %s", c)
		}
	}
}
