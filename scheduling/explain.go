package scheduling

import (
	"fmt"
	"slices"
	"strings"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
)

// ReasonKind is why a cluster cannot host another replica.
type ReasonKind string

// Why a cluster cannot host another replica.
const (
	ReasonNotReady         ReasonKind = "NotReady"
	ReasonNoGateway        ReasonKind = "NoGateway"
	ReasonUntoleratedTaint ReasonKind = "UntoleratedTaint"
	ReasonNoPoolMatches    ReasonKind = "NoPoolMatches"
	ReasonCapacity         ReasonKind = "Capacity"
	ReasonUnreadable       ReasonKind = "Unreadable"
)

// Reason is why one cluster cannot host another replica, kept as data and
// rendered last.
type Reason struct {
	Kind ReasonKind

	// Taint is the taint not tolerated, for ReasonUntoleratedTaint.
	Taint v1alpha1.Taint

	// Engine is the engine that found no pool, for ReasonNoPoolMatches and
	// ReasonCapacity.
	Engine string

	// Pools are the matching pools and what each lacks, for ReasonCapacity.
	Pools []PoolShortage

	// Defect is the field that did not read and why, for ReasonUnreadable.
	Defect string
}

// PoolShortage is what a matching pool lacks to host an engine.
type PoolShortage struct {
	Pool string

	// WholeNode is true for a pool accounted by whole nodes.
	WholeNode bool

	// Saturated is true when the pods already charged to the pool do not fit.
	Saturated bool

	// Gang is true when Pods must take distinct nodes.
	Gang bool

	// Pods is how many claiming pods needed room: whole nodes, or nodes
	// with Claim free for a gang, or room for Claim for independent pods.
	Pods int64

	// Claim is what one pod claims, by device name; empty for whole nodes.
	Claim []DeviceCount

	// Have is how many of what Pods needs the pool had.
	Have int64
}

// DeviceCount is a count of one pool device.
type DeviceCount struct {
	Name  string
	Count int64
}

// Shortfall explains per cluster why no cluster could host another replica.
type Shortfall struct {
	// Clusters is sorted by cluster name.
	Clusters []ClusterVerdict
	// Unmatched are, for each engine no pool matched on some cluster,
	// the requests no device of those clusters' pools meets, and why.
	Unmatched []UnmatchedRequest
}

// ClusterVerdict is why one cluster could not host another replica.
type ClusterVerdict struct {
	Cluster string
	Reason  Reason
}

// Bounds of a rendered shortfall, so a fleet of hundreds of clusters still
// gives a condition message of a readable, storable size.
const (
	maxNamesPerReason = 8
	maxShortfallBytes = 4096
)

// String renders the shortfall the way kube-scheduler renders a FitError:
// "0/3 clusters can host another replica: a: not Ready; b, c: ...".
// Clusters with the same reason share it, in the order of their names.
func (s *Shortfall) String() string {
	if s == nil {
		return ""
	}
	var reasons []string
	names := map[string][]string{}
	for _, v := range s.Clusters {
		r := v.Reason.String()
		if _, seen := names[r]; !seen {
			reasons = append(reasons, r)
		}
		names[r] = append(names[r], v.Cluster)
	}
	parts := make([]string, 0, len(reasons))
	for _, r := range reasons {
		n := names[r]
		list := strings.Join(n[:min(len(n), maxNamesPerReason)], ", ")
		if len(n) > maxNamesPerReason {
			list += fmt.Sprintf(" and %d more", len(n)-maxNamesPerReason)
		}
		parts = append(parts, list+": "+r)
	}
	msg := fmt.Sprintf("0/%d clusters can host another replica: %s", len(s.Clusters), strings.Join(parts, "; "))
	if len(msg) > maxShortfallBytes {
		msg = strings.ToValidUTF8(msg[:maxShortfallBytes], "") + " …"
	}
	return msg
}

func (r Reason) String() string {
	switch r.Kind {
	case ReasonNotReady:
		return "not Ready"
	case ReasonNoGateway:
		return "no gateway hostname or address"
	case ReasonUntoleratedTaint:
		t := r.Taint.Key
		if r.Taint.Value != "" {
			t += "=" + r.Taint.Value
		}
		return fmt.Sprintf("untolerated taint %s:%s", t, r.Taint.Effect)
	case ReasonNoPoolMatches:
		return fmt.Sprintf("engine %s: no pool matches the nodeSelector", r.Engine)
	case ReasonUnreadable:
		return "does not read: " + r.Defect
	case ReasonCapacity:
		pools := make([]string, 0, len(r.Pools))
		for _, p := range r.Pools {
			pools = append(pools, p.String())
		}
		return fmt.Sprintf("engine %s: %s", r.Engine, strings.Join(pools, ", "))
	}
	return string(r.Kind)
}

func (p PoolShortage) String() string {
	switch {
	case p.Saturated:
		return fmt.Sprintf("pool %s already holds more claiming pods than it can fit", p.Pool)
	case p.WholeNode:
		return fmt.Sprintf("pool %s needs %d free %s, has %d", p.Pool, p.Pods, plural(p.Pods, "node", "nodes"), p.Have)
	case p.Gang:
		return fmt.Sprintf("pool %s: gang needs %d %s with %s, %d %s", p.Pool, p.Pods, plural(p.Pods, "node", "nodes"),
			claimString(p.Claim), p.Have, plural(p.Have, "has", "have"))
	}
	return fmt.Sprintf("pool %s needs room for %d %s with %s, has room for %d", p.Pool, p.Pods, plural(p.Pods, "pod", "pods"),
		claimString(p.Claim), p.Have)
}

func claimString(c []DeviceCount) string {
	parts := make([]string, 0, len(c))
	for _, d := range c {
		parts = append(parts, fmt.Sprintf("%d free %s", d.Count, d.Name))
	}
	return strings.Join(parts, " and ")
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func newShortfall(verdicts []ClusterVerdict) *Shortfall {
	slices.SortFunc(verdicts, func(a, b ClusterVerdict) int { return strings.Compare(a.Cluster, b.Cluster) })
	return &Shortfall{Clusters: verdicts}
}
