// Command prepare-fixture copies a render fixture into a directory of its own,
// shifting its timestamps so that they are as old, relative to now, as the
// fixture says, and prints the `crossplane composition render` arguments for
// it, one a line (hack/render.sh adds --crossplane-binary). hack/render.sh
// runs it; see package freshen for the fixture layout.
//
//	go run ./e2e/cmd/prepare-fixture <fixture-dir> <example-dir> <out-dir>
package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/modelplaneai/fleet-scheduler/e2e/internal/freshen"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: prepare-fixture <fixture-dir> <example-dir> <out-dir>")
		os.Exit(2)
	}
	p, err := freshen.Prepare(os.Args[1], os.Args[2], os.Args[3], time.Now())
	if err != nil {
		fmt.Fprintf(os.Stderr, "prepare-fixture: %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	if _, err := os.Stdout.WriteString(strings.Join(p.Args(), "\n") + "\n"); err != nil {
		os.Exit(1)
	}
}
