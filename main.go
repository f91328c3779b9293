// Package main implements fleet-scheduler, a Crossplane composition function
// that places the replicas of a Modelplane ModelDeployment across a fleet of
// GPU clusters.
package main

import (
	"strconv"
	"time"

	"github.com/alecthomas/kong"

	"github.com/crossplane/function-sdk-go"
	"github.com/crossplane/function-sdk-go/logging"

	"github.com/modelplaneai/fleet-scheduler/internal/assume"
	"github.com/modelplaneai/fleet-scheduler/internal/codec"
	"github.com/modelplaneai/fleet-scheduler/internal/fleet"
	"github.com/modelplaneai/fleet-scheduler/internal/plan"
	"github.com/modelplaneai/fleet-scheduler/internal/server"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// defaultMaxRecvMessageSizeMB holds a RunFunctionRequest carrying 10,000
// ModelReplicas (about 37 MiB at a measured 3,773 bytes each) with room to
// spare (docs/overview.md, Message size).
const defaultMaxRecvMessageSizeMB = 64

// defaultMaxConcurrentStreams is how many calls a connection may have in
// flight: at 10,000 ModelReplicas each holds about 140 MiB at its peak,
// and two cores are busy with two or three (docs/production.md, Memory).
const defaultMaxConcurrentStreams = 4

// CLI of this function: the Crossplane function template's flags, then
// ours (docs/spec.md#server-flags).
type CLI struct {
	Debug bool `help:"Emit debug logs in addition to info logs." short:"d"`

	Network     string `default:"tcp" help:"Network on which to listen for gRPC connections."`
	Address     string `default:":9443" help:"Address at which to listen for gRPC connections."`
	TLSCertsDir string `env:"TLS_SERVER_CERTS_DIR" help:"Directory containing server certs (tls.key, tls.crt) and the CA used to verify client certificates (ca.crt)." name:"tls-server-certs-dir"`
	Insecure    bool   `help:"Run without mTLS credentials. If you supply this flag --tls-server-certs-dir will be ignored."`

	MaxRecvMessageSize int    `default:"${max_recv_message_size}" help:"Maximum size of received messages in MB; the default holds a request carrying 10,000 ModelReplicas."`
	MetricsAddress     string `default:":8080" help:"Address at which to serve Prometheus metrics; empty serves none."`

	MaxConcurrentStreams uint32        `default:"${max_concurrent_streams}" help:"Most calls in flight on each client connection; calls over it wait in the client, unsent. 0 for no cap."`
	AssumedPlacementTTL  time.Duration `default:"2m" help:"How long a replica this server composed is charged to other calls until the fleet shows it (docs/spec.md#assumed-placements); 0 assumes nothing."`
	ObjectCache          bool          `default:"true" help:"Keep what was read of each object between calls, by uid and resourceVersion; --no-object-cache for fixtures edited without a new resourceVersion." negatable:""`

	NarrowRequests bool          `default:"true" help:"Ask only for a deployment's own ModelReplicas and those no report counts, where that is safe (docs/spec.md#narrow-requests); --no-narrow-requests asks for all on every call." negatable:""`
	FullReadEvery  time.Duration `default:"5m" help:"Read the whole fleet at least this often for each deployment, however safe a narrow request would be."`
}

// Run this function.
func (c *CLI) Run() error {
	log, err := function.NewLogger(c.Debug)
	if err != nil {
		return err
	}

	so, err := server.Options(
		function.Listen(c.Network, c.Address),
		function.MTLSCertificates(c.TLSCertsDir),
		function.Insecure(c.Insecure),
		function.MaxRecvMessageSize(c.MaxRecvMessageSize*1024*1024),
		function.WithMetricsServer(c.MetricsAddress))
	if err != nil {
		return err
	}
	// The request codec leaves the fleet on the wire for the fleet reader,
	// and takes each request's buffer back once its call is done.
	requests := codec.New(requiredClusters, requiredReplicas, requiredOwnReplicas, requiredUncountedReplicas)
	fn := newFunction(log, c.ObjectCache, c.AssumedPlacementTTL)
	if c.NarrowRequests {
		fn.narrowing = plan.NewNarrowing(c.FullReadEvery)
	}
	return server.ListenAndServe(log, so, server.New(so, requests, fn, c.MaxConcurrentStreams))
}

// newFunction is the function as a server starts it: its caches empty (none
// with objectCache false), and no placement assumed yet (none ever with a
// zero assumedTTL).
func newFunction(log logging.Logger, objectCache bool, assumedTTL time.Duration) *Function {
	fn := &Function{log: log, planner: plan.Planner{Selectors: scheduling.NewSelectors()}}
	if assumedTTL > 0 {
		fn.planner.Ledger = assume.New(assumedTTL)
	}
	if objectCache {
		fn.fleet = fleet.NewReader()
	}
	return fn
}

func main() {
	ctx := kong.Parse(&CLI{},
		kong.Description("A Crossplane function that places ModelDeployment replicas on a GPU fleet."),
		kong.Vars{
			"max_recv_message_size":  strconv.Itoa(defaultMaxRecvMessageSizeMB),
			"max_concurrent_streams": strconv.Itoa(defaultMaxConcurrentStreams),
		})
	ctx.FatalIfErrorf(ctx.Run())
}
