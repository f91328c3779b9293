package main

import (
	"testing"

	"github.com/alecthomas/kong"

	"github.com/modelplaneai/fleet-scheduler/internal/testkit/clitest"
)

// TestVersionFlag: --version prints the binary's name, version and
// revision, and exits 0.
func TestVersionFlag(t *testing.T) {
	clitest.Version(t, "fleet-scheduler-relay", func(opts ...kong.Option) (*kong.Kong, error) { return parser(&CLI{}, opts...) })
}
