// Package agent computes what a cluster agent publishes for each GPU pool
// of its cluster, for fleet-scheduler to fit replicas against free devices
// instead of whole nodes: status.gpuPools[].observedNodes, observedAt and
// nodesByFreeDevices on the InferenceCluster (docs/spec.md#pool-reports). An agent, or
// the fleet simulator, gives PoolReport the pool's description and its
// view of the cluster, and publishes the Report it returns.
//
// # What it takes
//
// A Pool is the pool as the InferenceCluster publishes it: its name, its
// devices (apis/v1alpha1.Device: name, driver, deviceClassName, count per
// node), which Nodes are its own (by default those labelled
// modelplane.ai/pool=<name>) and, optionally, the taints its pods tolerate.
//
// A View is the cluster's Nodes, ResourceSlices, DeviceClasses and
// ResourceClaims (k8s.io/api, resource.k8s.io/v1), and SyncedAt: a time as
// of which the view is complete, every pod bound before it reflected in
// the claims. Take it before reading the objects, never after: the
// simplest is the time just before listing them from the API server (a
// List without a resourceVersion reads the newest state). An informer's
// cache lags the API server by an unknown amount; the time it last synced
// is only a SyncedAt for what it had seen by then. Pass the slices with
// the taints of DeviceTaintRules applied, as
// k8s.io/dynamic-resource-allocation/resourceslice/tracker returns them
// for kube-scheduler, and the claims of every namespace.
//
// # What it computes
//
//   - ObservedNodes counts the pool's Nodes, ready or not.
//   - The histogram holds only the nodes a new pod could land on: Ready,
//     not cordoned, no NoSchedule or NoExecute taint that the pool does not
//     tolerate, and every resource pool with a slice on the node complete
//     (every ResourceSlice of its newest generation present, as many as
//     resourceSliceCount says), whichever driver publishes it.
//     Report.LeftOut says why each node that is not is left out, for logs.
//   - A node's free count of a pool device is how many devices of its
//     driver and DeviceClass a claim for one whole device could be
//     allocated now. Kubernetes' own allocator
//     (k8s.io/dynamic-resource-allocation/structured, with Kubernetes
//     1.37's default features: partitionable devices, consumable capacity,
//     device taints) decides: it is asked for one such device, then for
//     another with the first taken, until it allocates none or the pool's
//     per-node count is reached. So it checks every rule it knows: devices
//     in use, the class's CEL selectors, device taints, shared counters of
//     partitionable devices, binding conditions. Two rules are the
//     package's own, and both only ever count less: a device that any
//     claim holds a share of (consumable capacity) is not whole-free,
//     though more shares of it could be had; and a device that a slice
//     offers to several nodes (a node selector, all nodes) is counted on
//     none, since one device free on many nodes would be counted many
//     times.
//   - Pool devices are counted in published order, each one's free
//     devices staying taken for the next: every device reported free on a
//     node can be had at once, even where two devices of the pool are
//     partitions of the same GPUs (a whole GPU counted first leaves none of
//     its partitions to count). A pod may still be given devices counted
//     under another pool device when two DeviceClasses select the same
//     devices: keep the classes of one pool's devices disjoint.
//   - ObservedAt is SyncedAt in UTC, rounded down to the second: the
//     function counts a replica as reported when its PodsScheduled time,
//     in whole seconds, is before observedAt. Kept to the fraction, a sync
//     at 20:06:00.5 would count a pod bound after it, at 20:06:00.7, which
//     reads 20:06:00.
//   - More than poolreport.MaxBuckets distinct free counts are merged, two groups of
//     nodes at a time, into one whose free counts are the smaller of
//     theirs, device by device, the pair that hides the fewest devices
//     first: a merged report never fits a pod on more nodes than there are.
//
// PoolReport returns an error, naming the object and the field, for what
// it cannot read: a pool device without a driver or a DeviceClass, a class
// whose CEL selector does not compile, a slice of an invalid driver name,
// an allocation result without a device, a view without SyncedAt; and when
// the allocator fails, as it does on a CEL runtime error in a class
// selector (as kube-scheduler's allocation would).
//
// # Counting node by node
//
// An agent that keeps its view in informers need not recount every node
// of a pool on each event: a Counter (NewCounter, of the pool and the
// cluster's DeviceClasses) counts one node at a time from a NodeView (the
// Node, and the slices and claims of the resource pools on it: SliceNodes
// and ClaimPools name what to index them by), and Counter.Report groups
// the nodes' NodeFree into the pool's Report. PoolReport is a Counter run
// over every node of a view, and reports the same.
//
// # Publishing
//
// The cluster agent (cmd/cluster-agent, docs/cluster-agent.md) writes a
// pool's Report, whose JSON is these three fields, to the status of the
// pool's PoolObservation (agent.modelplane.ai/v1alpha1) in its own
// cluster: an update of the status subresource that carries the object's
// resourceVersion, so that two replicas of an agent never interleave a
// stale report. The control plane reads it back and relays it into the
// pool's entry of the InferenceCluster's status.gpuPools[]. Fill sets the
// three fields on a v1alpha1.GPUPool as the function decodes them.
//
// Never publish a report with a JSON merge patch of status.gpuPools: a
// merge patch replaces a list whole (RFC 7386), so it drops every other
// pool's entry and the fields the agent does not own. A relay writes the
// one pool's entry: by server-side apply (gpuPools is a list keyed by
// name in the extended XRD, deploy/inferenceclusters.yaml, which
// Modelplane v0.3's XRD needs to keep these fields at all), or by an
// update of the whole status carrying its resourceVersion. Publish on
// every change and at least every minute, well inside the function's
// observationMaxAge (5m by default).
//
// # Cost
//
// Each free device costs one allocation, most of it the allocator's CEL
// evaluation: BenchmarkPoolReport measures 0.3 to 0.5 ms a node of 8 GPUs
// and 8 NICs, some of each in use, on the project's shared 2-core machine
// (0.3 to 0.5 s for a pool of 1,000 nodes); a node of two GPUs of seven
// partitions each, counted both ways, about 0.6 ms.
package agent
