// Command relay is fleet-scheduler's relay, a Crossplane composition
// function a platform team appends to Modelplane's InferenceCluster and
// ModelReplica Compositions (docs/spec.md#the-relay): it composes the
// cluster agent's PoolObservations and ReplicaObservations in the workload
// cluster, through provider-kubernetes Objects that watch them, and
// carries their status back onto the InferenceCluster's status.gpuPools
// and the ModelReplica's PodsScheduled condition. See docs/production.md.
package main

import (
	"fmt"
	"time"

	"github.com/alecthomas/kong"

	"github.com/crossplane/function-sdk-go"
)

// CLI of the relay: the Crossplane function template's flags, then its own.
type CLI struct {
	Debug bool `help:"Emit debug logs in addition to info logs." short:"d"`

	Network     string `default:"tcp"   help:"Network on which to listen for gRPC connections."`
	Address     string `default:":9443" help:"Address at which to listen for gRPC connections."`
	TLSCertsDir string `env:"TLS_SERVER_CERTS_DIR" help:"Directory containing server certs (tls.key, tls.crt) and the CA used to verify client certificates (ca.crt)." name:"tls-server-certs-dir"`
	Insecure    bool   `help:"Run without mTLS credentials. If you supply this flag --tls-server-certs-dir will be ignored."`

	MetricsAddress string `default:":8080" help:"Address at which to serve Prometheus metrics; empty serves none."`

	ClockSkewMargin time.Duration `default:"5s" help:"How far past the agent's time this clock must be before PodsScheduled turns True: at least 1s more than this clock may run ahead of Crossplane's (docs/spec.md#podsscheduled)."`
	ClockOffset     time.Duration `default:"0s" help:"Added to this clock: for tests that skew it."                                                                                                        hidden:""`
}

// Validate refuses a configuration the relay cannot run with; kong calls
// it once the flags are parsed.
func (c *CLI) Validate() error {
	if c.ClockSkewMargin < 0 {
		return fmt.Errorf("--clock-skew-margin is %s: it must not be negative, since PodsScheduled would turn True before the agent's time is past on every clock", c.ClockSkewMargin)
	}
	return nil
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

func main() {
	ctx := kong.Parse(&CLI{}, kong.Description("fleet-scheduler's relay: carries the cluster agent's reports onto InferenceClusters and ModelReplicas."))
	ctx.FatalIfErrorf(ctx.Run())
}
