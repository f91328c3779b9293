package scheduling

import (
	"encoding/json"
	"time"

	"github.com/google/go-cmp/cmp/cmpopts"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// ignoreUnmatched leaves a shortfall's diagnosis of selectors out of a
// comparison: unmatched_test.go tests it, the oracles know nothing of it.
var ignoreUnmatched = cmpopts.IgnoreFields(Shortfall{}, "Unmatched")

// observedPools reads the fixture pools' agent fields as a fresh, valid
// report. Validation is the observation package's job, tested there.
func observedPools(c *v1alpha1.InferenceCluster) map[string]*PoolObservation {
	out := map[string]*PoolObservation{}
	for _, p := range c.Status.GPUPools {
		if p.ObservedAt == nil {
			continue
		}
		var at string
		var nodes int64
		var buckets []struct {
			Nodes int64 `json:"nodes"`
			Free  []struct {
				Name  string `json:"name"`
				Count int64  `json:"count"`
			} `json:"free"`
		}
		if remarshal(p.ObservedAt, &at) != nil || remarshal(p.ObservedNodes, &nodes) != nil || remarshal(p.NodesByFreeDevices, &buckets) != nil {
			continue
		}
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			continue
		}
		obs := &PoolObservation{ObservedAt: t, ObservedNodes: nodes, Steered: p.Binding == agentv1alpha1.BindingSteered}
		for _, b := range buckets {
			bk := Bucket{Nodes: b.Nodes, Free: map[string]int64{}}
			for _, f := range b.Free {
				bk.Free[f.Name] = f.Count
			}
			obs.Buckets = append(obs.Buckets, bk)
		}
		out[p.Name] = obs
	}
	return out
}

// scheduledSince reads a fixture replica's PodsScheduled condition.
func scheduledSince(r *v1alpha1.ModelReplica) *time.Time {
	if r.Status == nil {
		return nil
	}
	var conds []v1alpha1.Condition
	if remarshal(r.Status.Conditions, &conds) != nil {
		return nil
	}
	c := v1alpha1.FindCondition(conds, "PodsScheduled")
	if c == nil || c.Status != "True" {
		return nil
	}
	t, err := time.Parse(time.RFC3339, c.LastTransitionTime)
	if err != nil {
		return nil
	}
	return &t
}

// remarshal reads decoded JSON into a typed value.
func remarshal(v, out any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// Builders of a Shortfall, for tests that compare explanations as data.

// cannotHost is the shortfall of clusters that cannot host another replica,
// in cluster order.
func cannotHost(v ...ClusterVerdict) *Shortfall { return &Shortfall{Clusters: v} }

func notReady(cluster string) ClusterVerdict {
	return ClusterVerdict{Cluster: cluster, Reason: Reason{Kind: ReasonNotReady}}
}

func noGateway(cluster string) ClusterVerdict {
	return ClusterVerdict{Cluster: cluster, Reason: Reason{Kind: ReasonNoGateway}}
}

func untoleratedTaint(cluster, key, value, effect string) ClusterVerdict {
	return ClusterVerdict{Cluster: cluster, Reason: Reason{Kind: ReasonUntoleratedTaint, Taint: v1alpha1.Taint{Key: key, Value: value, Effect: effect}}}
}

func noPoolMatches(cluster, engine string) ClusterVerdict {
	return ClusterVerdict{Cluster: cluster, Reason: Reason{Kind: ReasonNoPoolMatches, Engine: engine}}
}

// capacity: every pool that matches the engine lacks room.
func capacity(cluster, engine string, pools ...PoolShortage) ClusterVerdict {
	return ClusterVerdict{Cluster: cluster, Reason: Reason{Kind: ReasonCapacity, Engine: engine, Pools: pools}}
}

// wholeNodes: a whole-node pool needs pods free nodes and has have.
func wholeNodes(pool string, pods, have int64) PoolShortage {
	return PoolShortage{Pool: pool, WholeNode: true, Pods: pods, Have: have}
}

// roomFor: a free-device pool has room for have of the pods, each
// claiming claim.
func roomFor(pool string, pods int64, claim []DeviceCount, have int64) PoolShortage {
	return PoolShortage{Pool: pool, Pods: pods, Claim: claim, Have: have}
}

// gangNodes: a gang of pods needs distinct nodes with claim free, and have
// nodes have it.
func gangNodes(pool string, pods int64, claim []DeviceCount, have int64) PoolShortage {
	return PoolShortage{Pool: pool, Gang: true, Pods: pods, Claim: claim, Have: have}
}

// saturated: the pods charged to a pool already do not fit it.
func saturated(pool string, wholeNode bool) PoolShortage {
	return PoolShortage{Pool: pool, WholeNode: wholeNode, Saturated: true}
}

func unreadable(cluster, defect string) ClusterVerdict {
	return ClusterVerdict{Cluster: cluster, Reason: Reason{Kind: ReasonUnreadable, Defect: defect}}
}

// unreadableCluster makes a snapshot's cluster one that did not read: its
// name only, and the defect.
func unreadableCluster(s Snapshot, name, defect string) Snapshot {
	for i, c := range s.Clusters {
		if c.Object.Metadata.Name == name {
			s.Clusters[i] = Cluster{Object: &v1alpha1.InferenceCluster{Metadata: v1alpha1.ObjectMeta{Name: name}}, Unreadable: defect}
		}
	}
	return s
}

// unreadableReplica makes a snapshot's i-th replica one that did not read
// whole: what read is kept, its PodsScheduled time is not.
func unreadableReplica(s Snapshot, i int, defect string) Snapshot {
	s.Replicas[i].Unreadable = defect
	s.Replicas[i].ScheduledSince = nil
	return s
}
