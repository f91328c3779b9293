package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"
	"sigs.k8s.io/yaml"

	"github.com/modelplaneai/fleet-scheduler/tools/internal/repotool"
)

// modulePath is the repository's root module; the layout names its
// packages, and those of the nested modules under it, relative to it.
const modulePath = "github.com/modelplaneai/fleet-scheduler"

// testsOnly is the layout's "may import" of a package without non-test
// files.
const testsOnly = "(tests only)"

// row is one row of a layout table: a root file and the root files it
// uses, or a package and what it may import.
type row struct {
	name    string
	entries []string
	// testsOnly is a package that has tests only.
	testsOnly bool
}

// layout is docs/layout.md as read.
type layout struct {
	files    []row
	packages []row
}

var (
	tableRow = regexp.MustCompile("^\\| `([^`]+)` \\|.*\\|(.*)\\|\\s*$")
	ticked   = regexp.MustCompile("`([^`]+)`")
)

// parseLayout reads the layout's tables: a row whose first cell is a
// backticked name ending in .go is a root file, any other a package.
func parseLayout(text string) layout {
	var l layout
	for line := range strings.SplitSeq(text, "\n") {
		m := tableRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		r := row{name: m[1]}
		last := strings.TrimSpace(m[2])
		if last == testsOnly {
			r.testsOnly = true
		} else {
			for _, t := range ticked.FindAllStringSubmatch(last, -1) {
				r.entries = append(r.entries, t[1])
			}
		}
		if strings.HasSuffix(r.name, ".go") {
			l.files = append(l.files, r)
		} else {
			l.packages = append(l.packages, r)
		}
	}
	return l
}

// fullPath is an entry of the layout as an import path: a name without a
// host is a package of this repository.
func fullPath(entry string) string {
	if entry == "." {
		return modulePath
	}
	if strings.Contains(strings.Split(entry, "/")[0], ".") {
		return entry
	}
	return modulePath + "/" + entry
}

// ruleName is the depguard rule of a package.
func ruleName(pkg string) string {
	if pkg == "." {
		return "function"
	}
	return strings.ReplaceAll(pkg, "/", "_")
}

// ruleFiles are the files a package's rule applies to.
func ruleFiles(pkg string) []string {
	if pkg == "." {
		return []string{"${base-path}/*.go", "!$test"}
	}
	return []string{"${base-path}/" + pkg + "/*.go", "!$test"}
}

// rule is a depguard rule of .golangci.yml.
type rule struct {
	ListMode string   `json:"list-mode"`
	Files    []string `json:"files"`
	Allow    []string `json:"allow"`
}

// depguardRules are the depguard rules of a golangci-lint configuration.
func depguardRules(config []byte) (map[string]rule, error) {
	var c struct {
		Linters struct {
			Settings struct {
				Depguard struct {
					Rules map[string]rule `json:"rules"`
				} `json:"depguard"`
			} `json:"settings"`
		} `json:"linters"`
	}
	if err := yaml.Unmarshal(config, &c); err != nil {
		return nil, fmt.Errorf("cannot read .golangci.yml: %w", err)
	}
	return c.Linters.Settings.Depguard.Rules, nil
}

// pkg is a Go package of the repository: its path relative to modulePath,
// its non-test files and their imports, and whether it has tests.
type pkg struct {
	rel     string
	files   []string
	imports []string
	tests   bool
}

// goModules are the directories of the repository's modules that hold Go
// code, relative to root.
func goModules(root string) ([]string, error) {
	out, err := exec.CommandContext(context.Background(), "git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard", "*go.mod").Output()
	if err != nil {
		return nil, fmt.Errorf("cannot list the repository's modules: %w", err)
	}
	var mods []string
	for f := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		dir := filepath.Dir(f)
		if slices.Contains(mods, dir) {
			continue // listed once per stage while a merge is unresolved
		}
		if hasGo, err := holdsGo(filepath.Join(root, dir)); err != nil {
			return nil, err
		} else if hasGo {
			mods = append(mods, dir)
		}
	}
	sort.Strings(mods)
	return mods, nil
}

// holdsGo is whether a module's directory tree holds a Go file of its own
// (not of a nested module).
func holdsGo(dir string) (bool, error) {
	found := false
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || found {
			return err
		}
		if d.IsDir() && path != dir {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil || d.Name() == "testdata" {
				return filepath.SkipDir
			}
		}
		found = !d.IsDir() && strings.HasSuffix(path, ".go")
		return nil
	})
	return found, err
}

// loadPackages lists the packages of every module, with their imports.
func loadPackages(root string, modules []string) ([]pkg, error) {
	var out []pkg
	for _, m := range modules {
		cfg := &packages.Config{Dir: filepath.Join(root, m), Mode: packages.NeedName | packages.NeedFiles | packages.NeedImports, Tests: true}
		pkgs, err := packages.Load(cfg, "./...")
		if err != nil {
			return nil, fmt.Errorf("cannot list the packages of module %s: %w", m, err)
		}
		byPath := map[string]*pkg{}
		for _, p := range pkgs {
			if len(p.Errors) > 0 {
				return nil, fmt.Errorf("cannot list package %s: %w", p.PkgPath, p.Errors[0])
			}
			path := strings.TrimSuffix(strings.TrimSuffix(p.PkgPath, "_test"), ".test")
			rel := strings.TrimPrefix(strings.TrimPrefix(path, modulePath), "/")
			if rel == "" {
				rel = "."
			}
			q, ok := byPath[rel]
			if !ok {
				q = &pkg{rel: rel}
				byPath[rel] = q
			}
			switch {
			case strings.HasSuffix(p.ID, ".test"):
				// The test main of a package: no file of its own.
			case strings.Contains(p.ID, "["):
				// The package compiled with its tests, or its external tests.
				q.tests = true
			default:
				q.files = append(q.files, p.GoFiles...)
				for imp := range p.Imports {
					q.imports = append(q.imports, imp)
				}
				q.tests = q.tests || strings.HasSuffix(p.PkgPath, "_test")
			}
		}
		for _, q := range byPath {
			sort.Strings(q.imports)
			out = append(out, *q)
		}
	}
	slices.SortFunc(out, func(a, b pkg) int { return strings.Compare(a.rel, b.rel) })
	return out, nil
}

// isStd is whether an import path is of the standard library.
func isStd(path string) bool { return !strings.Contains(strings.Split(path, "/")[0], ".") }

// allows is whether an allow entry (an import path prefix, as depguard
// reads it) admits an import, at a path element's boundary.
func allows(entry, imp string) bool {
	return imp == entry || strings.HasPrefix(imp, entry+"/")
}

// checkLayout holds the layout's tables against the code and the lint's
// rules.
func checkLayout(root string) ([]string, error) {
	text, err := os.ReadFile(filepath.Join(root, "docs", "layout.md"))
	if err != nil {
		return nil, fmt.Errorf("cannot read the layout: %w", err)
	}
	config, err := os.ReadFile(filepath.Join(root, ".golangci.yml"))
	if err != nil {
		return nil, fmt.Errorf("cannot read the lint's configuration: %w", err)
	}
	rules, err := depguardRules(config)
	if err != nil {
		return nil, err
	}
	modules, err := goModules(root)
	if err != nil {
		return nil, err
	}
	pkgs, err := loadPackages(root, modules)
	if err != nil {
		return nil, err
	}
	l := parseLayout(string(text))
	problems := comparePackages(l, rules, pkgs)
	ties, err := rootTies(root)
	if err != nil {
		return nil, err
	}
	return append(problems, compareRootFiles(l, ties)...), nil
}

// comparePackages holds every package against its row and its rule.
func comparePackages(l layout, rules map[string]rule, pkgs []pkg) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	rows := map[string]row{}
	for _, r := range l.packages {
		if _, dup := rows[r.name]; dup {
			add("docs/layout.md: package %s has two rows", r.name)
		}
		rows[r.name] = r
	}
	seen := map[string]bool{}
	used := map[string]bool{"no_assertion_libraries": true}
	for _, p := range pkgs {
		seen[p.rel] = true
		r, ok := rows[p.rel]
		switch {
		case !ok:
			add("docs/layout.md: package %s has no row", p.rel)
			continue
		case len(p.files) == 0 && !r.testsOnly:
			add("docs/layout.md: package %s has tests only: its row's last cell should be %q", p.rel, testsOnly)
			continue
		case len(p.files) == 0:
			continue
		case r.testsOnly:
			add("docs/layout.md: package %s has non-test files, but its row says %q", p.rel, testsOnly)
			continue
		}
		name := ruleName(p.rel)
		used[name] = true
		want := rule{ListMode: "strict", Files: ruleFiles(p.rel), Allow: []string{"$gostd"}}
		for _, e := range r.entries {
			want.Allow = append(want.Allow, fullPath(e))
		}
		got, ok := rules[name]
		if !ok {
			add(".golangci.yml: no depguard rule %s for package %s (docs/layout.md)", name, p.rel)
		} else {
			sort.Strings(want.Allow)
			sort.Strings(got.Allow)
			if got.ListMode != want.ListMode || !slices.Equal(got.Files, want.Files) || !slices.Equal(got.Allow, want.Allow) {
				add(".golangci.yml: depguard rule %s is not docs/layout.md's row of %s: want list-mode %s, files %v, allow %v; got list-mode %s, files %v, allow %v",
					name, p.rel, want.ListMode, want.Files, want.Allow, got.ListMode, got.Files, got.Allow)
			}
		}
		problems = append(problems, compareImports(p, r)...)
	}
	for _, r := range l.packages {
		if !seen[r.name] {
			add("docs/layout.md: a row for package %s, which does not exist", r.name)
		}
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range rules {
			if !yield(n) {
				return
			}
		}
	}) {
		if !used[name] {
			add(".golangci.yml: depguard rule %s is no package's row in docs/layout.md", name)
		}
	}
	return problems
}

// compareImports holds a package's imports against its row: each allowed,
// each entry imported.
func compareImports(p pkg, r row) []string {
	var problems []string
	entryUsed := make([]bool, len(r.entries))
	for _, imp := range p.imports {
		if isStd(imp) {
			continue
		}
		ok := false
		for i, e := range r.entries {
			if allows(fullPath(e), imp) {
				ok, entryUsed[i] = true, true
			}
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("docs/layout.md: package %s imports %s, which its row does not allow", p.rel, imp))
		}
	}
	for i, e := range r.entries {
		if !entryUsed[i] {
			problems = append(problems, fmt.Sprintf("docs/layout.md: package %s may import %s, but imports nothing of it", p.rel, e))
		}
	}
	return problems
}

// rootTies are, for each non-test file of the root package, the other
// root files whose declarations it uses.
func rootTies(root string) (map[string][]string, error) {
	cfg := &packages.Config{Dir: root, Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo}
	pkgs, err := packages.Load(cfg, ".")
	if err != nil || len(pkgs) != 1 {
		return nil, fmt.Errorf("cannot load the root package: %w", err)
	}
	p := pkgs[0]
	if len(p.Errors) > 0 {
		return nil, fmt.Errorf("cannot load the root package: %w", p.Errors[0])
	}
	ties := map[string][]string{}
	for _, f := range p.Syntax {
		name := filepath.Base(p.Fset.Position(f.Pos()).Filename)
		ties[name] = repotool.FileUses(p, f, name)
	}
	return ties, nil
}

// compareRootFiles holds the root files' ties against the layout's table:
// the files it lists are the root's non-test files, each uses exactly the
// files its row names, and only files below it.
func compareRootFiles(l layout, ties map[string][]string) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	order := map[string]int{}
	for i, r := range l.files {
		order[r.name] = i
	}
	for _, r := range l.files {
		got, ok := ties[r.name]
		if !ok && r.name != "generate.go" {
			add("docs/layout.md: root file %s does not exist", r.name)
			continue
		}
		want := slices.Sorted(slices.Values(r.entries))
		if !slices.Equal(got, want) {
			add("docs/layout.md: root file %s uses %v, its row says %v", r.name, got, want)
		}
		for _, u := range got {
			if i, listed := order[u]; listed && i <= order[r.name] {
				add("docs/layout.md: root file %s uses %s, which is not below it: root files must use each other one way", r.name, u)
			}
		}
	}
	for f := range ties {
		if _, ok := order[f]; !ok {
			add("docs/layout.md: root file %s has no row", f)
		}
	}
	sort.Strings(problems)
	return problems
}
