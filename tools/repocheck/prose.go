package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// maxWords is the longest sentence the README and the specification may
// have.
const maxWords = 60

var (
	htmlComment = regexp.MustCompile(`(?s)<!--.*?-->`)
	// sentenceEnd ends a sentence: a full stop, question or exclamation
	// mark, then a space or the end of the line.
	sentenceEnd = regexp.MustCompile(`[.!?]["')\]]*(\s|$)`)
)

// sentences are a Markdown document's sentences, outside code blocks,
// tables, headings and comments: a blank line, a list item or a heading
// also ends one.
func sentences(text string) []string {
	text = htmlComment.ReplaceAllString(text, "\n\n")
	var out []string
	var para []string
	flush := func() {
		joined := strings.Join(para, " ")
		para = nil
		for _, s := range splitSentences(joined) {
			if strings.TrimSpace(s) != "" {
				out = append(out, strings.TrimSpace(s))
			}
		}
	}
	fenced := false
	for line := range strings.SplitSeq(text, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "```"):
			flush()
			fenced = !fenced
		case fenced:
		case trimmed == "", strings.HasPrefix(trimmed, "#"), strings.HasPrefix(trimmed, "|"):
			flush()
		case listItem.MatchString(trimmed):
			flush()
			para = append(para, listItem.ReplaceAllString(trimmed, ""))
		default:
			para = append(para, trimmed)
		}
	}
	flush()
	return out
}

// listItem is the marker of a list item, which starts a sentence.
var listItem = regexp.MustCompile(`^([-*]|\d+\.)\s+`)

func splitSentences(text string) []string {
	var out []string
	for {
		loc := sentenceEnd.FindStringIndex(text)
		if loc == nil {
			return append(out, text)
		}
		out = append(out, text[:loc[1]])
		text = text[loc[1]:]
	}
}

// checkSentences finds every sentence over maxWords words in the README
// and the specification.
func checkSentences(root string) ([]string, error) {
	var problems []string
	for _, f := range []string{"README.md", specPath} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, fmt.Errorf("cannot read %s: %w", f, err)
		}
		for _, s := range sentences(string(b)) {
			if n := len(strings.Fields(s)); n > maxWords {
				start := strings.Join(strings.Fields(s)[:12], " ")
				problems = append(problems, fmt.Sprintf("%s: a sentence of %d words, over %d: %q...", f, n, maxWords, start))
			}
		}
	}
	return problems, nil
}

func sortStrings(s []string) { sort.Strings(s) }
