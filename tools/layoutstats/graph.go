package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/tools/go/packages"
)

// buildEnv is the environment of every load and listing: the binaries are
// built static, and their package counts should not depend on the machine.
func buildEnv() []string { return append(os.Environ(), "CGO_ENABLED=0") }

// report is what layoutstats measures.
type report struct {
	packages []*pkg
	arrows   int
	layers   int
	binaries []binary
	calls    calls
}

// pkg is a package of the repository.
type pkg struct {
	rel     string // relative to the root module, "." for its root
	path    string
	imports []string // the repository's packages it imports, as rel
	layer   int
	files   fileGraph
	loaded  *packages.Package
}

// binary is the size of one binary's build.
type binary struct {
	name        string
	all, nonStd int
}

// measure measures the repository at root, and the binaries named by bins.
func measure(root string, bins []string) (*report, error) {
	modules, err := findModules(root)
	if err != nil {
		return nil, err
	}
	r := &report{}
	byPath := map[string]*pkg{}
	var rootPkgs []*packages.Package
	for _, m := range modules {
		loaded, err := loadModule(root, m)
		if err != nil {
			return nil, err
		}
		for _, q := range loaded {
			byPath[q.path] = q
			r.packages = append(r.packages, q)
		}
		if m == "." {
			for _, q := range loaded {
				rootPkgs = append(rootPkgs, q.loaded)
			}
		}
	}
	slices.SortFunc(r.packages, func(a, b *pkg) int { return strings.Compare(a.rel, b.rel) })
	for _, q := range r.packages {
		for imp := range q.loaded.Imports {
			if d, ok := byPath[imp]; ok {
				q.imports = append(q.imports, d.rel)
			}
		}
		slices.Sort(q.imports)
		r.arrows += len(q.imports)
	}
	if err := layer(r.packages); err != nil {
		return nil, err
	}
	for _, q := range r.packages {
		r.layers = max(r.layers, q.layer+1)
		if q.files, err = filesOf(q.loaded); err != nil {
			return nil, err
		}
	}
	for _, b := range bins {
		n, err := countDeps(root, modules, b)
		if err != nil {
			return nil, err
		}
		r.binaries = append(r.binaries, n)
	}
	r.calls, err = climbs(rootPkgs, byPath)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// loadModule loads the packages of the module in dir (relative to root)
// that have non-test files, named relative to the root module.
func loadModule(root, dir string) ([]*pkg, error) {
	rootPath, err := modulePath(root)
	if err != nil {
		return nil, err
	}
	cfg := &packages.Config{Dir: filepath.Join(root, dir), Env: buildEnv(), Mode: packages.LoadSyntax}
	loaded, err := packages.Load(cfg, "./...")
	if err != nil {
		return nil, fmt.Errorf("cannot load the packages of module %s: %w", dir, err)
	}
	var out []*pkg
	for _, p := range loaded {
		if len(p.Errors) > 0 {
			return nil, fmt.Errorf("cannot load package %s: %w", p.PkgPath, p.Errors[0])
		}
		if len(p.GoFiles) == 0 {
			continue // tests only
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p.PkgPath, rootPath), "/")
		if rel == "" {
			rel = "."
		}
		out = append(out, &pkg{rel: rel, path: p.PkgPath, loaded: p})
	}
	return out, nil
}

// findModules are the directories, relative to root, of the modules under
// it: the root first, the others by name.
func findModules(root string) ([]string, error) {
	var mods []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root {
			n := d.Name()
			if n == "testdata" || n == "vendor" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") {
				return filepath.SkipDir
			}
		}
		if !d.IsDir() && d.Name() == "go.mod" {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			mods = append(mods, rel)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot find the modules: %w", err)
	}
	slices.Sort(mods)
	if len(mods) == 0 || mods[0] != "." {
		return nil, errors.New("no go.mod at the repository's root")
	}
	return mods, nil
}

// modulePath is the path the go.mod in dir declares.
func modulePath(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("cannot read the root module: %w", err)
	}
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", errors.New("the root go.mod declares no module")
}

// layer gives each package its layer: 0 for one that imports no package
// of the repository, else one more than the highest it imports.
func layer(pkgs []*pkg) error {
	byRel := map[string]*pkg{}
	for _, q := range pkgs {
		byRel[q.rel] = q
	}
	state := map[*pkg]int{} // 1 while on the path, 2 once its layer is known
	var visit func(q *pkg) error
	visit = func(q *pkg) error {
		switch state[q] {
		case 1:
			return fmt.Errorf("an import cycle through %s", q.rel)
		case 2:
			return nil
		}
		state[q] = 1
		q.layer = 0
		for _, imp := range q.imports {
			d := byRel[imp]
			if err := visit(d); err != nil {
				return err
			}
			q.layer = max(q.layer, d.layer+1)
		}
		state[q] = 2
		return nil
	}
	for _, q := range pkgs {
		if err := visit(q); err != nil {
			return err
		}
	}
	return nil
}

// countDeps lists a binary's packages with go list -deps, in the deepest
// module whose directory holds it.
func countDeps(root string, modules []string, bin string) (binary, error) {
	b := binary{name: bin}
	dir := filepath.Clean(bin)
	mod := "."
	for _, m := range modules {
		if m != "." && (dir == m || strings.HasPrefix(dir, m+string(filepath.Separator))) && len(m) > len(mod) {
			mod = m
		}
	}
	rel, err := filepath.Rel(mod, dir)
	if err != nil {
		return b, err
	}
	cmd := exec.CommandContext(context.Background(), "go", "list", "-deps", "-f", "{{.Standard}}", "./"+filepath.ToSlash(rel))
	cmd.Dir, cmd.Env = filepath.Join(root, mod), buildEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return b, fmt.Errorf("cannot list the packages of %s: %w: %s", bin, err, strings.TrimSpace(stderr.String()))
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		b.all++
		if line == "false" {
			b.nonStd++
		}
	}
	return b, nil
}
