// Package clitest checks what the repository's binaries share on their
// command lines: --version, which each answers with internal/buildinfo.
package clitest

import (
	"bytes"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/modelplaneai/fleet-scheduler/internal/buildinfo"
)

// exit stops a parse where os.Exit would have ended the process.
type exit struct{}

// Version checks that a binary's command line, built by parser with the
// options given, answers --version with its name, version and revision
// and exits 0, before any other flag is checked.
func Version(t *testing.T, name string, parser func(opts ...kong.Option) (*kong.Kong, error)) {
	t.Helper()
	var out bytes.Buffer
	exited := -1
	k, err := parser(kong.Writers(&out, &out), kong.Exit(func(code int) {
		exited = code
		panic(exit{})
	}))
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if r := recover(); r != nil && r != (exit{}) {
				panic(r)
			}
		}()
		_, err = k.Parse([]string{"--version"})
	}()
	if want := buildinfo.Line(name) + "\n"; err != nil || exited != 0 || out.String() != want {
		t.Errorf("%s --version: exit %d, error %v, printed %q; want exit 0 and %q", name, exited, err, out.String(), want)
	}
}
