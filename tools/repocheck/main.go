// Command repocheck checks what the compiler and the linters cannot: that
// docs/layout.md, the depguard rules of .golangci.yml and the code agree;
// that the function's root files use each other one way; that every
// citation of the specification resolves to a heading of docs/spec.md and
// none cites a document users cannot open; and that no sentence of the
// README or the specification runs over 60 words.
//
//	(cd tools && go run ./repocheck ..)
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/modelplaneai/fleet-scheduler/tools/internal/repotool"
)

func main() {
	flag.Usage = func() {
		_, _ = fmt.Fprintln(flag.CommandLine.Output(), "usage: repocheck [REPOSITORY]")
	}
	flag.Parse()
	root, err := repotool.Root()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	problems, err := check(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "repocheck:", err)
		os.Exit(2)
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "repocheck: %d problems\n", len(problems))
		os.Exit(1)
	}
}

// check runs every check on the repository at root, and returns what it
// found wrong, each naming the file to mend.
func check(root string) ([]string, error) {
	var problems []string
	for _, c := range []func(string) ([]string, error){checkLayout, checkLinks, checkSpecReferences, checkSentences} {
		p, err := c(root)
		if err != nil {
			return nil, err
		}
		problems = append(problems, p...)
	}
	return problems, nil
}
