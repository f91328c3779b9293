// Command cluster-agent runs in each workload cluster of a fleet and
// writes the status of the cluster's PoolObservations (each GPU pool's
// report: nodes by free devices, docs/spec.md#poolobservation) and
// ReplicaObservations (whether a replica's pods are bound,
// docs/spec.md#replicaobservation), which the control plane reads back for
// fleet-scheduler. See docs/cluster-agent.md.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/alecthomas/kong"

	"github.com/modelplaneai/fleet-scheduler/internal/buildinfo"
)

// CLI is the agent's command line.
type CLI struct {
	Version kong.VersionFlag `help:"Print the version and exit."`

	Kubeconfig       string   `help:"Kubeconfig of the cluster to observe; empty uses the in-cluster config (the pod's ServiceAccount)." type:"path"`
	PodNamespaces    []string `default:"default"                                                                                          help:"Namespaces whose Pods the agent reads, for the ReplicaObservations there (Modelplane v0.3 runs replicas in default). An empty value (--pod-namespaces=) reads every namespace's, which needs cluster-wide read of Pods." sep:","`
	DeviceTaintRules string   `default:"auto"                                                                                             enum:"auto,on,off"                                                                                                                                                        help:"Whether DeviceTaintRules taint the devices they select: auto when the cluster serves resource.k8s.io/v1 DeviceTaintRules."`

	LeaderElect      bool          `default:"true"          help:"Elect a leader through a Lease, so that several replicas can run; only the leader writes." negatable:""`
	LeaderElectionID string        `default:"cluster-agent" help:"Name of the leader election Lease."`
	LeaderElectionNS string        `env:"POD_NAMESPACE"     help:"Namespace of the leader election Lease: the agent's own."            name:"leader-election-namespace"`
	LeaseDuration    time.Duration `default:"15s"           help:"How long a leader's Lease holds without renewal before another replica may take it."`
	RenewDeadline    time.Duration `default:"10s"           help:"How long the leader keeps trying to renew its Lease before it stops leading."`
	RetryPeriod      time.Duration `default:"2s"            help:"How often replicas try to take or renew the Lease."`
	Identity         string        `env:"POD_NAME"          help:"This replica's identity in the Lease; the host name when unset."`

	PodName      string `env:"POD_NAME"      help:"The agent's own Pod (the downward API's metadata.name): the leader lists the pools it steers on it, for the steering admission policy. Without it no pool is steered."`
	PodNamespace string `env:"POD_NAMESPACE" help:"The namespace of the agent's own Pod (the downward API's metadata.namespace)."`

	SteeringWindow      time.Duration `default:"1s"  help:"How often the held pods of each steered pool are decided, together: a pod waits at most this long for the others that arrive with it."`
	SteeringMaxHold     time.Duration `default:"30s" help:"The longest a pod is held: past it, it is released unpinned, whatever else."`
	SteeringGangWait    time.Duration `default:"5s"  help:"How long the held pods of a LeaderWorkerSet group wait for the rest of the group before those present are decided."`
	SteeringReplicaWait time.Duration `default:"5s"  help:"How long a held pod waits for a ReplicaObservation to select it before it is decided last, as unknown."`
	SteeringPinTimeout  time.Duration `default:"30s" help:"How long after its release a pinned pod that is not bound counts as taking its node; past it, it is deleted if its node no longer has its claim free."`

	Debounce     time.Duration `default:"1s"   help:"How long after a change a report is rebuilt: changes in between join it."`
	Heartbeat    time.Duration `default:"50s"  help:"How old a published observedAt may get before the report is published again with a newer one (docs/spec.md#the-cluster-agent asks for at least every minute)."`
	SyncInterval time.Duration `default:"5s"   help:"How often the agent proves how recent its view is: the time it publishes as observedAt."`
	SyncProbes   bool          `default:"true" help:"Prove a quiet kind's cache current with a short watch of its own, rather than wait for the API server's next bookmark (about a minute)." negatable:""`
	Resync       time.Duration `default:"5m"   help:"How often every ReplicaObservation is counted again, changes or not."`
	KubeAPIQPS   float32       `default:"50"   help:"Requests per second to the API server, sustained."                                                              name:"kube-api-qps"`
	KubeAPIBurst int           `default:"100"  help:"Requests to the API server in a burst."                                                                         name:"kube-api-burst"`

	HealthAddress  string `default:":8081" help:"Address of /healthz and /readyz; empty serves none."`
	MetricsAddress string `default:":8080" help:"Address of /metrics (Prometheus); empty serves none."`
	LogFormat      string `default:"json"  enum:"json,text"                                                                   help:"Log format."`
	Verbosity      int    `default:"0"     help:"Log verbosity: 1 logs each status write, 4 and more client-go's requests." short:"v"`
}

// parser is the command line's parser.
func parser(cli *CLI, opts ...kong.Option) (*kong.Kong, error) {
	return kong.New(cli, append([]kong.Option{
		kong.Name("cluster-agent"),
		kong.Description("Reports a cluster's GPU pools (nodes by free devices) and whether replicas' pods are bound, in the status of PoolObservations and ReplicaObservations (agent.modelplane.ai/v1alpha1), for fleet-scheduler."),
		kong.UsageOnError(),
		kong.Vars{"version": buildinfo.Line("cluster-agent")},
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
	if err := cli.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "cluster-agent:", err)
		ctx.Exit(1)
	}
}
