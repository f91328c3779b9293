// Command relay is fleet-scheduler's relay, a Crossplane composition
// function a platform team appends to Modelplane's InferenceCluster and
// ModelReplica Compositions (docs/spec.md#the-relay): it composes the
// cluster agent's PoolObservations and ReplicaObservations in the workload
// cluster, through provider-kubernetes Objects that watch them, and
// carries their status back onto the InferenceCluster's status.gpuPools
// and the ModelReplica's PodsScheduled condition. See docs/production.md.
package main

import (
	"errors"
	"os"
	"time"

	"github.com/alecthomas/kong"

	"github.com/crossplane/function-sdk-go"

	"github.com/modelplaneai/fleet-scheduler/internal/buildinfo"
	"github.com/modelplaneai/fleet-scheduler/internal/fnflags"
)

// CLI of the relay: the Crossplane function template's flags, then its own.
type CLI struct {
	fnflags.Template `embed:""`

	Version kong.VersionFlag `help:"Print the version and exit."`

	ClockSkewMargin time.Duration `default:"5s" help:"How far past the agent's time this clock must be before PodsScheduled turns True: at least 1s more than this clock may run ahead of Crossplane's (docs/spec.md#podsscheduled)."`
	ClockOffset     time.Duration `default:"0s" help:"Added to this clock: for tests that skew it."                                                                                                        hidden:""`
}

// Validate refuses a configuration the relay cannot run with; kong calls
// it once the flags are parsed.
func (c *CLI) Validate() error {
	errs := c.Check()
	if c.ClockSkewMargin < 0 {
		errs = append(errs, fnflags.Invalid("clock-skew-margin", c.ClockSkewMargin, "must not be negative, since PodsScheduled would turn True before the agent's time is past on every clock"))
	}
	return errors.Join(errs...)
}

// Run the relay.
func (c *CLI) Run() error {
	if err := c.Validate(); err != nil {
		return err
	}
	log, err := function.NewLogger(c.Debug)
	if err != nil {
		return err
	}
	fn := &Function{
		log:    log,
		now:    func() time.Time { return time.Now().Add(c.ClockOffset) },
		margin: c.ClockSkewMargin,
	}
	return function.Serve(fn,
		function.Listen(c.Network, c.Address),
		function.MTLSCertificates(c.TLSCertsDir),
		function.Insecure(c.Insecure),
		function.WithMetricsServer(c.MetricsAddress))
}

// parser is the command line's parser.
func parser(cli *CLI, opts ...kong.Option) (*kong.Kong, error) {
	return kong.New(cli, append([]kong.Option{
		kong.Description("fleet-scheduler's relay: carries the cluster agent's reports onto InferenceClusters and ModelReplicas."),
		kong.Vars{"version": buildinfo.Line("fleet-scheduler-relay")},
	}, opts...)...)
}

func main() {
	k, err := parser(&CLI{})
	if err != nil {
		panic(err) // The CLI's tags are constants.
	}
	ctx, err := k.Parse(os.Args[1:])
	k.FatalIfErrorf(err)
	ctx.FatalIfErrorf(ctx.Run())
}
