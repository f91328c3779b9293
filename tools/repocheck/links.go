package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"
)

// linkRule is one line of the layout's "What a binary must not link": a
// binary's package, and the packages (import path prefixes, as the layout
// names them) that none of its dependencies, direct or not, may be.
type linkRule struct {
	binary    string
	forbidden []string
}

var linkLine = regexp.MustCompile("^- `([^`]+)` links none of (.+)$")

// parseLinkRules reads the layout's link rules: list items that name a
// binary in backticks, then "links none of" and the forbidden packages,
// each in backticks.
func parseLinkRules(text string) []linkRule {
	var out []linkRule
	for line := range strings.SplitSeq(text, "\n") {
		m := linkLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		r := linkRule{binary: m[1]}
		for _, t := range ticked.FindAllStringSubmatch(m[2], -1) {
			r.forbidden = append(r.forbidden, t[1])
		}
		out = append(out, r)
	}
	return out
}

// forbiddenLinks are the dependencies of a binary that its rule forbids,
// each once, sorted.
func forbiddenLinks(r linkRule, deps []string) []string {
	var out []string
	for _, d := range deps {
		for _, f := range r.forbidden {
			if allows(fullPath(f), d) {
				out = append(out, fmt.Sprintf("docs/layout.md: %s links %s, which its rule forbids (%s)", r.binary, d, f))
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// checkLinks holds every binary of the layout's link rules to them: what
// depguard cannot, since it sees a package's own imports only.
func checkLinks(root string) ([]string, error) {
	text, err := os.ReadFile(filepath.Join(root, "docs", "layout.md"))
	if err != nil {
		return nil, fmt.Errorf("cannot read the layout: %w", err)
	}
	rules := parseLinkRules(string(text))
	if len(rules) == 0 {
		return []string{"docs/layout.md: no link rule (\"- `cmd/relay` links none of ...\") found"}, nil
	}
	var problems []string
	for _, r := range rules {
		deps, err := dependencies(root, r.binary)
		if err != nil {
			return nil, err
		}
		problems = append(problems, forbiddenLinks(r, deps)...)
	}
	return problems, nil
}

// dependencies are the import paths a package of the root module links,
// itself included.
func dependencies(root, pkg string) ([]string, error) {
	cfg := &packages.Config{Dir: root, Mode: packages.NeedName | packages.NeedImports | packages.NeedDeps}
	pkgs, err := packages.Load(cfg, "./"+pkg)
	if err != nil {
		return nil, fmt.Errorf("cannot list the dependencies of %s: %w", pkg, err)
	}
	seen := map[string]bool{}
	packages.Visit(pkgs, func(p *packages.Package) bool {
		seen[p.PkgPath] = true
		return true
	}, nil)
	for _, p := range pkgs {
		if len(p.Errors) > 0 {
			return nil, fmt.Errorf("cannot list the dependencies of %s: %w", pkg, p.Errors[0])
		}
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}
