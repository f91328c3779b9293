package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// specPath is the project's specification, which code and docs cite.
const specPath = "docs/spec.md"

var (
	heading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	// specRef is a citation of a section of the specification, from
	// anywhere: docs/spec.md#anchor, or spec.md#anchor in a link.
	specRef = regexp.MustCompile(`spec\.md#([A-Za-z0-9_-]+)`)
	// localRef is a link within the specification itself.
	localRef = regexp.MustCompile(`\]\(#([A-Za-z0-9_-]+)\)`)
	// unopenable cites the upstream document the project is built from,
	// which its users cannot open: its file name in capitals, or a numbered
	// section of it. The name is spelt in parts so that this checker does
	// not cite it itself.
	unopenable = regexp.MustCompile(upstreamName + `|(?i:\b` + upstreamName + `\s+(section\s+)?\d)`)
)

// upstreamName is the upstream document's name, as citations spell it.
const upstreamName = "CON" + "TRACT"

// slug is a heading's anchor as GitHub makes it: lower case, spaces to
// hyphens, and every other character but letters, digits, hyphens and
// underscores dropped.
func slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// anchors are the anchors of a Markdown document's headings, outside code
// blocks, a repeated one numbered as GitHub numbers it.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	count := map[string]int{}
	fenced := false
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		m := heading.FindStringSubmatch(line)
		if fenced || m == nil {
			continue
		}
		s := slug(m[1])
		if n := count[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		count[s]++
	}
	return out
}

// trackedTextFiles are the repository's files, committed or not, that are
// not ignored and hold no NUL byte.
func trackedTextFiles(root string) (map[string][]byte, error) {
	out, err := exec.CommandContext(context.Background(), "git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard", "-z").Output()
	if err != nil {
		return nil, fmt.Errorf("cannot list the repository's files: %w", err)
	}
	files := map[string][]byte{}
	for f := range strings.SplitSeq(strings.TrimRight(string(out), "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join(root, f))
		if os.IsNotExist(err) {
			continue // deleted, not yet committed
		}
		if err != nil {
			return nil, fmt.Errorf("cannot read %s: %w", f, err)
		}
		if !bytes.Contains(b, []byte{0}) {
			files[f] = b
		}
	}
	return files, nil
}

// checkSpecReferences finds every citation of the specification that
// resolves to none of its headings, and every citation of the upstream specification.
func checkSpecReferences(root string) ([]string, error) {
	files, err := trackedTextFiles(root)
	if err != nil {
		return nil, err
	}
	spec, ok := files[specPath]
	if !ok {
		return []string{specPath + ": missing: code and docs cite it"}, nil
	}
	valid := anchors(string(spec))
	var problems []string
	for _, name := range sortedKeys(files) {
		if strings.HasPrefix(name, "tools/repocheck/") {
			continue // its tests cite on purpose what does not resolve
		}
		for i, line := range strings.Split(string(files[name]), "\n") {
			refs := specRef.FindAllStringSubmatch(line, -1)
			if name == specPath {
				refs = append(refs, localRef.FindAllStringSubmatch(line, -1)...)
			}
			for _, m := range refs {
				if !valid[m[1]] {
					problems = append(problems, fmt.Sprintf("%s:%d: cites %s#%s, which is no heading of it", name, i+1, specPath, m[1]))
				}
			}
			if unopenable.MatchString(line) {
				problems = append(problems, fmt.Sprintf("%s:%d: cites the upstream specification, which users cannot open; cite %s#<section>", name, i+1, specPath))
			}
		}
	}
	return problems, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sortStrings(keys)
	return keys
}
