// Package kube binds pods to nodes as kube-scheduler v1.37's default
// profile does, for the fleet simulator, from real Kubernetes objects:
// Nodes, Pods, ResourceSlices, DeviceClasses, DeviceTaintRules and
// ResourceClaims. sim/calibrate checks it against kube-scheduler v1.37.2
// itself (docs/calibration.md).
//
// Filter. A node fits a pod when the default profile's filters that can
// reject it pass: NodeUnschedulable, TaintToleration (NoSchedule and
// NoExecute), NodeAffinity (the pod's nodeSelector and required node
// affinity, through k8s.io/component-helpers), NodeResourcesFit (pods,
// cpu, memory and extended resources, the pod's requests summed by
// k8s.io/component-helpers as the scheduler sums them), InterPodAffinity
// (the pod's required affinity, with the rule that lets the first pod of
// a group with affinity to itself land; its required anti-affinity; the
// bound pods' required anti-affinity against it), and DynamicResources:
// the structured allocator of k8s.io/dynamic-resource-allocation, with
// kube-scheduler's v1.37 feature set, allocates the pod's claims on the
// node (those it names and those made from its templates, as its status
// names them), on the ResourceSlices with the DeviceTaintRules' taints
// added as kube-scheduler's slice tracker adds them; a claim already
// allocated must be usable there. The allocation it returns is what the
// pod takes when it binds. An extended resource a DeviceClass backs
// (DRAExtendedResource) is allocated as kube-scheduler allocates it: on a
// node whose device plugin does not advertise it, a claim for that many
// devices of the class, made as the DynamicResources plugin makes it
// (k8s.io/dynamic-resource-allocation's extended resource cache maps the
// resource to the class).
//
// Score. The default profile's score plugins, computed as
// pkg/scheduler/framework/plugins computes them at v1.37 (written here, not
// imported: k8s.io/kubernetes stays out of this module), weighted as the
// default profile weighs them and normalised as the framework normalises
// them:
//
//   - TaintToleration (weight 3): intolerable PreferNoSchedule taints,
//     reversed and scaled to 0-100.
//   - NodeAffinity (2): the weights of the preferred node affinity terms
//     a node matches, scaled by the highest; skipped for a pod without.
//   - NodeResourcesFit (1): LeastAllocated, or MostAllocated under the
//     MostAllocated profile, over cpu and memory with the scheduler's
//     non-zero defaults (100m, 200Mi) for a container that requests none.
//   - PodTopologySpread (2): the system default constraints (hostname
//     maxSkew 3, zone maxSkew 5, ScheduleAnyway) for a pod whose controller
//     is a ReplicaSet, StatefulSet or ReplicationController the cluster
//     knows, selecting by that controller's selector.
//   - InterPodAffinity (2): per topology domain, the weights of the pod's
//     preferred affinity terms bound pods there match, less its preferred
//     anti-affinity terms', plus the bound pods' terms that match the pod
//     (required affinity at hardPodAffinityWeight 1, preferred affinity,
//     less preferred anti-affinity), scaled from the lowest to the highest;
//     skipped when no term matched.
//   - DynamicResources (2): the rank of the sub-request of each prioritized
//     list (firstAvailable) the allocation on the node took, 8 for the
//     first down to 1, scaled by the highest; 0 for every other claim.
//   - NodeResourcesBalancedAllocation (1): cpu and memory, the balance with
//     the pod against the balance without it.
//   - ImageLocality (1): the sizes of the pod's images a node holds, scaled
//     by how many of the cluster's nodes hold them.
//
// VolumeBinding also scores under v1.37's default StorageCapacityScoring:
// 0 on every node for a pod without persistent volumes, which are the
// only pods NewPod accepts; it is left out.
//
// Node affinity by name. A required term of `matchFields metadata.name In`
// (a steering agent's pin, Pod.SetAffinity) is NodeAffinity's PreFilter
// result when every term has one: the search goes through only the nodes
// the terms name, in the node tree's order (kube-scheduler's is its set's,
// random beyond one name), from the same start, which then moves by the
// nodes searched, as findNodesThatFitPod moves it.
//
// Left out, because NewPod refuses the pods they would matter for (none a
// ModelReplica's template can express: its containers carry no resources,
// ports or volumes of their own, its pods no spread constraints or
// affinity): explicit topologySpreadConstraints, host ports (NodePorts),
// persistent and CSI volumes (VolumeBinding, VolumeRestrictions,
// VolumeZone, NodeVolumeLimits), ephemeral storage and hugepages, node
// affinity by a field other than metadata.name, and affinity terms with a
// namespace selector or label keys. Services
// selecting the pods would narrow PodTopologySpread's default selector;
// the simulator creates none.
//
// Which node. kube-scheduler searches the nodes in its node tree's order
// (zones in the order they first appeared, one node of each in turn) from
// where the previous search stopped; in a cluster of 100 nodes or more it
// scores only the first percentageOfNodesToScore feasible nodes, with that
// setting's adaptive default (50% less one point per 125 nodes, at least
// 5% and at least 100 nodes). Evaluate searches as it does with
// parallelism 1: one node after another until it finds one feasible node
// more than it scores, which it drops, and the next search starts past
// the nodes it kept or rejected. The best total wins; v1.37 sets no random
// tie-breaker unless an extender scores, and takes whichever tied node its
// heap over the scored nodes puts on top, which depends on their order:
// Pick is that node for the search order. With more than one worker (the
// default is 16) the order is whichever worker finished first, and
// Schedule, given a random source, picks among the best at random.
//
// Mutations. Cluster.Mutate sets one deliberate break of the rules above
// (Mutations lists them), for sim/calibrate's mutation testing only.
package kube
