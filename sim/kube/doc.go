// Package kube binds pods to nodes as kube-scheduler v1.37's default
// profile does, for the fleet simulator, from real Kubernetes objects:
// Nodes, Pods, ResourceSlices, DeviceClasses and ResourceClaims.
//
// Filter. A node fits a pod when the default profile's filters that can
// reject it pass: NodeUnschedulable, TaintToleration (NoSchedule and
// NoExecute), NodeAffinity (the pod's nodeSelector and required node
// affinity, through k8s.io/component-helpers), NodeResourcesFit (pods, cpu
// and memory, the pod's requests summed by k8s.io/component-helpers as the
// scheduler sums them), InterPodAffinity's required anti-affinity (how a
// gang's pods get distinct nodes), and DynamicResources: the structured
// allocator of k8s.io/dynamic-resource-allocation, with kube-scheduler's
// v1.37 feature set, allocates the pod's ResourceClaims on the node. The
// allocation it returns is what the pod takes when it binds.
//
// Score. The default profile's score plugins, computed as
// pkg/scheduler/framework/plugins computes them at v1.37 (written here, not
// imported: k8s.io/kubernetes stays out of this module), weighted as the
// default profile weighs them and normalised as the framework normalises
// them:
//
//   - TaintToleration (weight 3): intolerable PreferNoSchedule taints,
//     reversed and scaled to 0-100.
//   - NodeResourcesFit (1): LeastAllocated, or MostAllocated under the
//     MostAllocated profile, over cpu and memory with the scheduler's
//     non-zero defaults (100m, 200Mi) for a container that requests none.
//   - PodTopologySpread (2): the system default constraints (hostname
//     maxSkew 3, zone maxSkew 5, ScheduleAnyway) for a pod whose controller
//     is a ReplicaSet, StatefulSet or ReplicationController the cluster
//     knows, selecting by that controller's selector.
//   - NodeResourcesBalancedAllocation (1): cpu and memory, the balance with
//     the pod against the balance without it.
//   - ImageLocality (1): the sizes of the pod's images a node holds, scaled
//     by how many of the cluster's nodes hold them.
//
// Left out, because for the pods this package accepts they give every node
// the same score (NewPod refuses a pod they would not): NodeAffinity's score
// (only preferred node affinity terms score; the pods have none),
// InterPodAffinity's score (only preferred terms and other pods' required
// affinity terms score; the pods have required anti-affinity at most, which
// is a filter), DynamicResources' score (only firstAvailable sub-requests
// score; the claims use exactly), VolumeBinding's (no volumes) and explicit
// topologySpreadConstraints (none; the system defaults apply). Services
// selecting the pods would narrow PodTopologySpread's default selector; the
// simulator creates none.
//
// Which node. The best total wins. Ties are broken at random: v1.37 sets no
// random tie-breaker unless an extender scores, and takes whichever tied
// node its heap over the parallel filter's output puts first, an order no
// configuration controls; the calibration (sim/calibrate) compares sets of
// best nodes, not the pick. In a cluster of 100 nodes or more, the nodes are
// searched from where the previous pod's search stopped and only the first
// percentageOfNodesToScore feasible ones are scored, with that setting's
// adaptive default (50% less one point per 125 nodes, at least 5% and at
// least 100 nodes).
package kube
