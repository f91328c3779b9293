package kube

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/dynamic-resource-allocation/structured"
)

// Mutation is a deliberate break of the binder, one rule at a time, for
// mutation testing: sim/calibrate runs the binder with each one on the
// same states it compared with kube-scheduler, and counts the states each
// break changes. A break that changes none is a blind spot of the
// calibration. No Mutation is ever set outside that test.
type Mutation string

// The mutations of the filters.
const (
	// IgnoreCordon lets pods onto cordoned nodes.
	IgnoreCordon Mutation = "filter/NodeUnschedulable"
	// IgnoreNoSchedule ignores NoSchedule taints in the filter.
	IgnoreNoSchedule Mutation = "filter/TaintToleration/NoSchedule"
	// IgnoreNoExecute ignores NoExecute taints in the filter.
	IgnoreNoExecute Mutation = "filter/TaintToleration/NoExecute"
	// IgnoreNodeAffinity ignores the pod's node selector and required
	// node affinity.
	IgnoreNodeAffinity Mutation = "filter/NodeAffinity"
	// IgnorePodCount ignores the node's allocatable pods.
	IgnorePodCount Mutation = "filter/NodeResourcesFit/pods"
	// IgnoreCPU ignores cpu in the filter.
	IgnoreCPU Mutation = "filter/NodeResourcesFit/cpu"
	// IgnoreMemory ignores memory in the filter.
	IgnoreMemory Mutation = "filter/NodeResourcesFit/memory"
	// IgnoreExtended ignores extended resources a device plugin
	// advertises.
	IgnoreExtended Mutation = "filter/NodeResourcesFit/extended-resources"
	// IgnorePodAffinity ignores the pod's required pod affinity.
	IgnorePodAffinity Mutation = "filter/InterPodAffinity/affinity"
	// NoSelfAffinity drops the rule that lets the first pod of a group
	// with affinity to itself land.
	NoSelfAffinity Mutation = "filter/InterPodAffinity/first-of-a-group"
	// IgnoreAntiAffinity ignores the pod's required anti-affinity.
	IgnoreAntiAffinity Mutation = "filter/InterPodAffinity/anti-affinity"
	// IgnoreExistingAntiAffinity ignores bound pods' required
	// anti-affinity against the pod.
	IgnoreExistingAntiAffinity Mutation = "filter/InterPodAffinity/existing-pods-anti-affinity"
	// IgnoreDevicesInUse gives the allocator no devices in use.
	IgnoreDevicesInUse Mutation = "filter/DynamicResources/devices-in-use"
	// IgnoreAllocatedNodeSelector ignores where a claim already allocated
	// can be used.
	IgnoreAllocatedNodeSelector Mutation = "filter/DynamicResources/allocated-claims"
	// IgnoreDRAExtended treats extended resources backed by DRA as if a
	// device plugin served them.
	IgnoreDRAExtended Mutation = "filter/DynamicResources/extended-resources"
	// IgnoreDeviceTaintRules ignores DeviceTaintRules.
	IgnoreDeviceTaintRules Mutation = "filter/DynamicResources/device-taint-rules"
)

// The mutations of what the allocator holds as allocated.
const (
	// AdminAccessHolds counts devices allocated with admin access as in
	// use.
	AdminAccessHolds Mutation = "allocated/admin-access-holds-devices"
	// SharesHoldWholeDevices counts a share of a device as the whole
	// device.
	SharesHoldWholeDevices Mutation = "allocated/shares-hold-whole-devices"
)

// The mutations of the scores.
const (
	// NoDefaultRequests scores a container that requests nothing as
	// requesting nothing, not the scheduler's defaults.
	NoDefaultRequests Mutation = "score/NodeResourcesFit/no-default-requests"
	// NoZoneSpread drops PodTopologySpread's zone constraint.
	NoZoneSpread Mutation = "score/PodTopologySpread/no-zone-constraint"
	// NoExistingAffinityTerms ignores bound pods' affinity terms in
	// InterPodAffinity's score.
	NoExistingAffinityTerms Mutation = "score/InterPodAffinity/existing-pods-terms"
	// NoHardAffinityWeight gives bound pods' required affinity terms no
	// weight (hardPodAffinityWeight 0).
	NoHardAffinityWeight Mutation = "score/InterPodAffinity/hard-pod-affinity-weight"
	// NoImageSpread scores images without scaling by how many nodes hold
	// them.
	NoImageSpread Mutation = "score/ImageLocality/no-spread"
	// FlatSubRequestRank scores every sub-request of a prioritized list
	// alike.
	FlatSubRequestRank Mutation = "score/DynamicResources/flat-rank"
)

// The mutations of the search and the pick.
const (
	// ScoreAllNodes scores every feasible node (percentageOfNodesToScore
	// 100).
	ScoreAllNodes Mutation = "cycle/score-all-nodes"
	// RestartSearch starts every search at the first node.
	RestartSearch Mutation = "cycle/restart-search"
	// StopAtEnough stops the search at the last feasible node it needs,
	// not at the next one.
	StopAtEnough Mutation = "cycle/stop-at-enough"
	// InsertionOrder lists nodes in the order they were added, not zone
	// by zone.
	InsertionOrder Mutation = "cycle/node-order"
	// FirstBest picks the first best node in search order, not the
	// heap's.
	FirstBest Mutation = "pick/first-best"
)

// allocatorMutation is the prefix of the mutations that flip one of the
// allocator's features: off where kube-scheduler has it on, on where off.
const allocatorMutation = "allocator/"

// weightMutation is the prefix of the mutations that change a plugin's
// weight by one: weight/<plugin>+1 or -1.
const weightMutation = "weight/"

// scoreOff is the prefix of the mutations that switch a score plugin off.
const scoreOff = "score/"

// Mutations are every mutation: the filters', the allocator's features
// flipped one at a time, what counts as allocated, each score plugin off, score
// details, each weight up and down by one, and the search and the pick.
func Mutations() []Mutation {
	out := []Mutation{
		IgnoreCordon, IgnoreNoSchedule, IgnoreNoExecute, IgnoreNodeAffinity, IgnorePodCount, IgnoreCPU, IgnoreMemory, IgnoreExtended,
		IgnorePodAffinity, NoSelfAffinity, IgnoreAntiAffinity, IgnoreExistingAntiAffinity,
		IgnoreDevicesInUse, IgnoreAllocatedNodeSelector, IgnoreDRAExtended, IgnoreDeviceTaintRules,
	}
	for _, f := range featureNames() {
		out = append(out, Mutation(allocatorMutation+f))
	}
	out = append(out, AdminAccessHolds, SharesHoldWholeDevices)
	plugins := pluginOrder()
	for _, pl := range plugins {
		out = append(out, Mutation(scoreOff+pl))
	}
	out = append(out, NoDefaultRequests, NoZoneSpread, NoExistingAffinityTerms, NoHardAffinityWeight, NoImageSpread, FlatSubRequestRank)
	for _, pl := range plugins {
		out = append(out, Mutation(weightMutation+pl+"+1"), Mutation(weightMutation+pl+"-1"))
	}
	return append(out, ScoreAllNodes, RestartSearch, StopAtEnough, InsertionOrder, FirstBest)
}

// Mutate sets the break the binder runs with from now on ("" for none).
// What counts as allocated (the allocated/ mutations) is counted as pods
// are added: set those before adding any. It returns an error for a name
// Mutations does not list.
func (c *Cluster) Mutate(m Mutation) error {
	if m != "" && !slices.Contains(Mutations(), m) {
		return fmt.Errorf("cannot mutate the binder: no mutation %q", m)
	}
	c.mutation = m
	c.weights = Weights()
	if rest, ok := strings.CutPrefix(string(m), weightMutation); ok {
		pl, delta := rest[:len(rest)-2], int64(1)
		if strings.HasSuffix(rest, "-1") {
			delta = -1
		}
		c.weights[pl] += delta
	}
	return nil
}

// features is the allocator's feature set under the cluster's mutation.
func (c *Cluster) features() structured.Features {
	f := Features()
	if name, ok := strings.CutPrefix(string(c.mutation), allocatorMutation); ok {
		flag := featureFlags(&f)[name]
		*flag = !*flag
	}
	return f
}

// featureFlags are the allocator's features the mutations flip, by name.
func featureFlags(f *structured.Features) map[string]*bool {
	return map[string]*bool{
		"AdminAccess":             &f.AdminAccess,
		"PrioritizedList":         &f.PrioritizedList,
		"PartitionableDevices":    &f.PartitionableDevices,
		"DeviceTaints":            &f.DeviceTaints,
		"DeviceBindingAndStatus":  &f.DeviceBindingAndStatus,
		"ConsumableCapacity":      &f.ConsumableCapacity,
		"FractionalCapacityRange": &f.FractionalCapacityRange,
	}
}

func featureNames() []string {
	var f structured.Features
	return slices.Sorted(maps.Keys(featureFlags(&f)))
}

// scoreOn reports whether a score plugin runs under the mutation.
func (c *Cluster) scoreOn(plugin string) bool {
	return c.mutation != Mutation(scoreOff+plugin)
}
