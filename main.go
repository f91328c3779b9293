// Package main implements fleet-scheduler, a Crossplane composition function
// that places the replicas of a Modelplane ModelDeployment across a fleet of
// GPU clusters.
package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/alecthomas/kong"

	"github.com/crossplane/function-sdk-go"
	"github.com/crossplane/function-sdk-go/logging"

	"github.com/modelplaneai/fleet-scheduler/internal/assume"
	"github.com/modelplaneai/fleet-scheduler/internal/buildinfo"
	"github.com/modelplaneai/fleet-scheduler/internal/codec"
	"github.com/modelplaneai/fleet-scheduler/internal/fleet"
	"github.com/modelplaneai/fleet-scheduler/internal/fnflags"
	"github.com/modelplaneai/fleet-scheduler/internal/metrics"
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
	fnflags.Template `embed:""`

	Version kong.VersionFlag `help:"Print the version and exit."`

	MaxRecvMessageSize int `default:"${max_recv_message_size}" help:"Maximum size of received messages in MB; the default holds a request carrying 10,000 ModelReplicas."`

	MaxConcurrentStreams uint32        `default:"${max_concurrent_streams}" help:"Most calls in flight on each client connection; calls over it wait in the client, unsent. 0 for no cap."`
	AssumedPlacementTTL  time.Duration `default:"${assumed_placement_ttl}" help:"How long a replica this server composed is charged to other calls until the fleet shows it (docs/spec.md#assumed-placements); 0 assumes nothing."`
	ObjectCache          bool          `default:"true" help:"Keep what was read of each object between calls, by uid and resourceVersion; --no-object-cache for fixtures edited without a new resourceVersion." negatable:""`

	NarrowRequests bool          `default:"true" help:"Ask only for a deployment's own ModelReplicas and those no report counts, where that is safe (docs/spec.md#narrow-requests); --no-narrow-requests asks for all on every call." negatable:""`
	FullReadEvery  time.Duration `default:"${full_read_every}" help:"Read the whole fleet at least this often for each deployment, however safe a narrow request would be."`
}

// Bounds of the flags (docs/spec.md#server-flags; docs/operations.md,
// Bounds, says where each comes from).
const (
	// minMaxRecvMessageSizeMB is gRPC's default: a request carries the
	// resources the last response composed, which may be up to the 4 MiB
	// Crossplane accepts, so a smaller limit could refuse the call after
	// a response the function wrote.
	minMaxRecvMessageSizeMB = 4
	// maxMaxRecvMessageSizeMB is under the 2 GiB no protobuf message may
	// reach.
	maxMaxRecvMessageSizeMB = 2047

	// minAssumedPlacementTTL is above 6.7 s, the longest the live control
	// plane test measured from the function coming back after a stop to
	// what its next call composed existing (docs/production.md): that
	// includes Crossplane's wait before it calls again, so a call's own
	// apply takes less. No test measures the apply alone. The default is
	// 12 times the floor. maxAssumedPlacementTTL is the default
	// replaceUnscheduledAfter: an entry whose replica never appears holds
	// devices no longer than a stuck replica waits.
	minAssumedPlacementTTL     = 10 * time.Second
	defaultAssumedPlacementTTL = 12 * minAssumedPlacementTTL
	maxAssumedPlacementTTL     = 15 * time.Minute

	// minFullReadEvery is the response TTL, at which every deployment is
	// called at least: shorter reads the whole fleet on every call, which
	// --no-narrow-requests says. maxFullReadEvery bounds how long a
	// replica that nothing labels (Modelplane v0.3's) goes unseen.
	minFullReadEvery = time.Minute
	maxFullReadEvery = time.Hour
)

// Validate refuses a bad flag before anything is served, naming it.
func (c *CLI) Validate() error {
	errs := c.Check()
	bad := func(flag string, v any, why string) {
		errs = append(errs, fnflags.Invalid(flag, v, why))
	}
	if n := c.MaxRecvMessageSize; n < minMaxRecvMessageSizeMB || n > maxMaxRecvMessageSizeMB {
		bad("max-recv-message-size", n, fmt.Sprintf("must be between %d and %d (MB): a request holds what the last response composed, up to 4 MiB, and no protobuf message reaches 2 GiB", minMaxRecvMessageSizeMB, maxMaxRecvMessageSizeMB))
	}
	if d := c.AssumedPlacementTTL; d != 0 && (d < minAssumedPlacementTTL || d > maxAssumedPlacementTTL) {
		bad("assumed-placement-ttl", d, fmt.Sprintf("must be 0s (assume nothing), or between %s and %s", minAssumedPlacementTTL, maxAssumedPlacementTTL))
	}
	if d := c.FullReadEvery; d < minFullReadEvery || d > maxFullReadEvery {
		bad("full-read-every", d, fmt.Sprintf("must be between %s and %s; --no-narrow-requests reads the whole fleet on every call", minFullReadEvery, maxFullReadEvery))
	}
	return errors.Join(errs...)
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
		// Of these options only the certificates can fail.
		return fmt.Errorf("invalid --tls-server-certs-dir %q: %w", c.TLSCertsDir, err)
	}
	// Listening comes before the start line: a port another process holds
	// is a bad flag, and the function exits on it rather than serving
	// without metrics.
	lis, err := server.Listen(so)
	if err != nil {
		return err
	}
	started(log, c)
	// The request codec leaves the fleet on the wire for the fleet reader,
	// and takes each request's buffer back once its call is done.
	requests := codec.New(fleet.RequiredClusters, fleet.RequiredReplicas, fleet.RequiredOwnReplicas, fleet.RequiredUncountedReplicas)
	fn := newFunction(log, c.ObjectCache, c.AssumedPlacementTTL)
	fn.tel.ledger = c.Debug
	if c.MetricsAddress != "" {
		var held func(time.Time) int
		if fn.planner.Ledger != nil {
			held = fn.planner.Ledger.Held
		}
		fn.tel.metrics = metrics.New(time.Now, held)
		so.MetricsRegistry.MustRegister(fn.tel.metrics)
	}
	if c.NarrowRequests {
		fn.narrowing = fleet.NewNarrowing(c.FullReadEvery)
	}
	return server.Serve(log, lis, so, server.New(so, requests, fn, c.MaxConcurrentStreams))
}

// newFunction is the function as a server starts it: its caches empty (none
// with objectCache false), and no placement assumed yet (none ever with a
// zero assumedTTL).
func newFunction(log logging.Logger, objectCache bool, assumedTTL time.Duration) *Function {
	fn := &Function{log: log, planner: plan.Planner{Selectors: scheduling.NewSelectors()}, tel: &telemetry{log: log}}
	if assumedTTL > 0 {
		fn.planner.Ledger = assume.New(assumedTTL)
	}
	if objectCache {
		fn.fleet = fleet.NewReader()
	}
	return fn
}

// started logs the line a server starts with: its version, its flags and
// the limits it enforces.
func started(log logging.Logger, c *CLI) {
	version, revision := buildinfo.Read()
	flags := map[string]any{
		"debug": c.Debug, "network": c.Network, "address": c.Address, "insecure": c.Insecure,
		"tlsServerCertsDir": c.TLSCertsDir, "metricsAddress": c.MetricsAddress,
		"maxRecvMessageSizeMB": c.MaxRecvMessageSize, "maxConcurrentStreams": c.MaxConcurrentStreams,
		"assumedPlacementTTL": c.AssumedPlacementTTL.String(), "objectCache": c.ObjectCache,
		"narrowRequests": c.NarrowRequests, "fullReadEvery": c.FullReadEvery.String(),
	}
	limits := map[string]any{
		"maxResponseBytes": maxResponseBytes, "metricsStaleAfter": metrics.StaleAfter.String(),
		"observationMaxAge":       plan.MinObservationMaxAge.String() + ".." + plan.MaxObservationMaxAge.String(),
		"maxRecvMessageSizeMB":    fmt.Sprintf("%d..%d", minMaxRecvMessageSizeMB, maxMaxRecvMessageSizeMB),
		"assumedPlacementTTL":     fmt.Sprintf("0s or %s..%s", minAssumedPlacementTTL, maxAssumedPlacementTTL),
		"fullReadEvery":           fmt.Sprintf("%s..%s", minFullReadEvery, maxFullReadEvery),
		"replaceUnscheduledAfter": fmt.Sprintf("0s or %s..%s", plan.MinReplaceUnscheduledAfter, plan.MaxReplaceUnscheduledAfter),
	}
	log.Info("Starting fleet-scheduler", "version", version, "revision", revision,
		"flags", flags, "limits", limits)
}

// parser is the command line's parser, its defaults filled in.
func parser(cli *CLI, opts ...kong.Option) (*kong.Kong, error) {
	return kong.New(cli, append([]kong.Option{
		kong.Description("A Crossplane function that places ModelDeployment replicas on a GPU fleet."),
		kong.Vars{
			"max_recv_message_size":  strconv.Itoa(defaultMaxRecvMessageSizeMB),
			"max_concurrent_streams": strconv.Itoa(defaultMaxConcurrentStreams),
			"assumed_placement_ttl":  defaultAssumedPlacementTTL.String(),
			"full_read_every":        fleet.DefaultFullEvery.String(),
			"version":                buildinfo.Line("fleet-scheduler"),
		},
	}, opts...)...)
}

func main() {
	cli := &CLI{}
	k, err := parser(cli)
	if err != nil {
		panic(err) // The CLI's tags are constants.
	}
	ctx, err := k.Parse(os.Args[1:])
	k.FatalIfErrorf(err)
	ctx.FatalIfErrorf(ctx.Run())
}
