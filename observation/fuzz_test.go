package observation

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// FuzzPool feeds arbitrary bytes into a pool's three report fields, its
// binding and its device list. Pool must never panic, must return one of
// the four states, and its verdict must agree with an independent reading
// of the contract's validity rules (docs/spec.md#usable-reports): a Usable
// report is valid and fresh, and a valid, fresh report is Usable, whatever
// its binding; it is steered exactly when its binding is "Steered". .ci/run can fuzz it for a fixed time:
//
//	go test ./observation -run '^$' -fuzz '^FuzzPool$' -fuzztime 20s
//
// Without -fuzz, go test runs only the seed corpus.
func FuzzPool(f *testing.F) {
	f.Add([]byte(`"2026-10-20T20:06:00Z"`), []byte(`3`), []byte(`[{"nodes":2,"free":[{"name":"gpu","count":4}]},{"nodes":1,"free":[{"name":"gpu","count":1}]}]`), []byte(`"Steered"`), []byte{0x40, 0x05}, int64(0), uint16(300))
	f.Add([]byte(``), []byte(``), []byte(``), []byte(``), []byte{0x40}, int64(0), uint16(300))
	f.Add([]byte(`null`), []byte(`3`), []byte(`[]`), []byte(`"Steered"`), []byte{0x40}, int64(0), uint16(300))
	f.Add([]byte(`"2026-10-20T20:06:00Z"`), []byte(`-1`), []byte(`[]`), []byte(`"steered"`), []byte{0x40}, int64(0), uint16(300))
	f.Add([]byte(`"2026-10-20T20:06:00Z"`), []byte(`2.5`), []byte(`[]`), []byte(`true`), []byte{0x40}, int64(0), uint16(300))
	f.Add([]byte(`"2026-10-20T20:06:00Z"`), []byte(`"3"`), []byte(`{}`), []byte(`{}`), []byte{0x40}, int64(0), uint16(300))
	f.Add([]byte(`"2026-10-20T20:06:00Z"`), []byte(`1e30`), []byte(`[]`), []byte(``), []byte{0x40}, int64(0), uint16(300))
	f.Add([]byte(`"2026-10-20T20:06:00Z"`), []byte(`1`), []byte(`[{"nodes":1,"free":[{"name":"nic","count":1}]}]`), []byte(`"MostFree"`), []byte{0x40, 0x16}, int64(0), uint16(300))
	f.Add([]byte(`"2026-10-20T20:06:00Z"`), []byte(`1`), []byte(`[{"nodes":1,"free":[{"name":"gpu","count":1},{"name":"gpu","count":1}]}]`), []byte(``), []byte{0x40}, int64(0), uint16(300))
	f.Add([]byte(`"2026-10-20T20:06:00Z"`), []byte(`1`), []byte(`[{"nodes":2,"free":[{"name":"gpu","count":9}]}]`), []byte(`"Steered"`), []byte{0x40}, int64(0), uint16(300))
	f.Add([]byte(`"2026-10-20T20:06:00Z"`), []byte(`1`), []byte(`[{"nodes":1,"free":[{"name":"tpu","count":1}]}]`), []byte(``), []byte{0x40}, int64(0), uint16(300))
	f.Add([]byte(`"2026-10-20T20:00:00Z"`), []byte(`0`), []byte(`[]`), []byte(`"Steered"`), []byte{}, int64(360), uint16(300))
	f.Add([]byte(`"2026-10-20T20:11:00Z"`), []byte(`0`), []byte(`[]`), []byte(``), []byte{}, int64(0), uint16(300))
	f.Add([]byte(`1792526760`), []byte(`0`), []byte(`[]`), []byte(`["Steered"]`), []byte{}, int64(0), uint16(300))
	f.Add([]byte(`"yesterday"`), []byte(`0`), []byte(`[{"nodes":null}]`), []byte(`null`), []byte{}, int64(0), uint16(300))
	f.Add([]byte(`"2026-10-20T20:06:00Z"`), []byte(`1`), []byte(`[{"NODES":1,"Free":[{"Name":"gpu","COUNT":4}]}]`), []byte(``), []byte{0x40}, int64(0), uint16(300))

	base := time.Date(2026, 10, 20, 20, 6, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, observedAt, observedNodes, histogram, binding, devices []byte, nowOffset int64, maxAgeSeconds uint16) {
		var fields [4]any
		for i, b := range [][]byte{observedAt, observedNodes, histogram, binding} {
			if len(b) > 0 && json.Unmarshal(b, &fields[i]) != nil {
				// Not JSON, or a number out of float range: no request can
				// carry it.
				t.Skip()
			}
		}
		p := &v1alpha1.GPUPool{
			Name:               "p",
			Nodes:              new(int64(10)),
			Devices:            fuzzDevices(devices),
			ObservedAt:         fields[0],
			ObservedNodes:      fields[1],
			NodesByFreeDevices: fields[2],
			Binding:            fields[3],
		}
		now := base.Add(time.Duration(nowOffset%(1<<40)) * time.Second)
		maxAge := time.Duration(maxAgeSeconds)*time.Second + time.Second

		obs, rep := Pool(p, now, maxAge)

		if rep.Pool != p.Name {
			t.Fatalf("report names pool %q, want %q", rep.Pool, p.Name)
		}
		switch rep.State {
		case Usable:
			if obs == nil {
				t.Fatalf("Usable report without an observation")
			}
			if !rep.ExpiresAt.Equal(obs.ObservedAt.Add(maxAge)) {
				t.Fatalf("ExpiresAt %v, want observedAt %v + maxAge %v", rep.ExpiresAt, obs.ObservedAt, maxAge)
			}
		case Missing, Stale, Invalid:
			if obs != nil {
				t.Fatalf("%s report with an observation %+v", rep.State, obs)
			}
			if rep.State == Invalid && rep.Defect == "" {
				t.Fatalf("Invalid report without a defect")
			}
			if rep.State == Stale && rep.Age <= maxAge {
				t.Fatalf("Stale report of age %v, not over maxAge %v", rep.Age, maxAge)
			}
		default:
			t.Fatalf("state %q is none of the four", rep.State)
		}
		if rep.Reason() == "" {
			t.Fatalf("empty Reason for %+v", rep)
		}

		// Whatever the verdict, the scheduler takes the pool without a
		// panic or an error, and places no more than it was asked to.
		c := &v1alpha1.InferenceCluster{Metadata: v1alpha1.ObjectMeta{Name: "a"}, Status: v1alpha1.InferenceClusterStatus{
			Conditions: []v1alpha1.Condition{{Type: "Ready", Status: "True"}},
			Gateway:    &v1alpha1.Gateway{Address: "gw"},
			GPUPools:   []v1alpha1.GPUPool{*p},
		}}
		sc := scheduling.Cluster{Object: c, Observed: map[string]*scheduling.PoolObservation{}}
		if obs != nil {
			sc.Observed[p.Name] = obs
		}
		one := int64(1)
		d := &v1alpha1.ModelDeployment{Metadata: v1alpha1.ObjectMeta{Name: "m", Namespace: "ns"}, Spec: v1alpha1.ModelDeploymentSpec{
			Replicas: 10,
			Template: v1alpha1.ReplicaTemplate{Spec: v1alpha1.DeploymentTemplateSpec{Engines: []v1alpha1.Engine{{
				Name: "main", Copies: &one, Members: []v1alpha1.Member{{NodeSelector: &v1alpha1.NodeSelector{Devices: []v1alpha1.DeviceSelector{{Name: "gpu", Count: &one}}}}},
			}}}},
		}}
		plan, err := scheduling.Schedule(scheduling.Snapshot{Deployment: d, Clusters: []scheduling.Cluster{sc}})
		if err != nil {
			t.Fatalf("Schedule: %v", err)
		}
		if len(plan.Replicas) > 10 {
			t.Fatalf("placed %d replicas of 10", len(plan.Replicas))
		}

		want := judge(p, now, maxAge)
		if want.state != rep.State {
			t.Fatalf("state %s (%s), want %s (%s)", rep.State, rep.Defect, want.state, want.why)
		}
		// The binding: "Steered" or none reads without a defect; anything
		// else is a defect, named, whatever the state.
		steered := p.Binding == "Steered"
		if bad := p.Binding != nil && !steered; bad != (rep.BindingDefect != "") {
			t.Fatalf("binding %#v: defect %q, want one: %t", p.Binding, rep.BindingDefect, bad)
		}
		if rep.BindingDefect != "" && !strings.HasPrefix(rep.BindingDefect, "binding: ") {
			t.Fatalf("binding defect %q does not name the field", rep.BindingDefect)
		}
		if rep.State != Usable {
			return
		}
		if obs.Steered != steered {
			t.Fatalf("binding %#v: steered %t, want %t", p.Binding, obs.Steered, steered)
		}
		if !obs.ObservedAt.Equal(want.obs.ObservedAt) || obs.ObservedNodes != want.obs.ObservedNodes || len(obs.Buckets) != len(want.obs.Buckets) {
			t.Fatalf("observation %+v, want %+v", obs, want.obs)
		}
		for i, b := range obs.Buckets {
			wb := want.obs.Buckets[i]
			if b.Nodes != wb.Nodes || len(b.Free) != len(wb.Free) {
				t.Fatalf("bucket %d is %+v, want %+v", i, b, wb)
			}
			for name, n := range wb.Free {
				if got, ok := b.Free[name]; !ok || got != n {
					t.Fatalf("bucket %d is %+v, want %+v", i, b, wb)
				}
			}
		}
	})
}

// fuzzDevices builds a pool's devices from bytes, two bytes a device: name,
// claim and whether a count is published from the first, the count from the
// second.
func fuzzDevices(b []byte) []v1alpha1.Device {
	names := []string{"gpu", "nvme", "nic", ""}
	claims := []string{"", v1alpha1.ClaimDRA, v1alpha1.ClaimSynthetic, "Bogus"}
	var out []v1alpha1.Device
	for i := 0; i+1 < len(b) && len(out) < 6; i += 2 {
		d := v1alpha1.Device{Name: names[b[i]&3], Claim: claims[(b[i]>>2)&3], Driver: "x.example.com"}
		if b[i]&0x40 != 0 {
			d.Count = new(int64(int8(b[i+1])))
		}
		out = append(out, d)
	}
	if len(b)%2 == 1 {
		// An odd byte adds the usual four-GPU device last.
		out = append(out, v1alpha1.Device{Name: "gpu", Driver: "gpu.nvidia.com", Count: new(int64(4))})
	}
	return out
}

type verdict struct {
	state State
	why   string
	obs   scheduling.PoolObservation
}

// judge reads a pool's report, decoded JSON, independently of Pool, and
// applies docs/spec.md#usable-reports with the schema's bounds (64 buckets, 16 free entries,
// counts up to 2^20).
func judge(p *v1alpha1.GPUPool, now time.Time, maxAge time.Duration) verdict {
	at, nodes, hist := p.ObservedAt, p.ObservedNodes, p.NodesByFreeDevices
	switch {
	case nodes == nil && hist == nil:
		// Neither count nor histogram: the agent is not reporting on the
		// pool, whether or not it stamped observedAt.
		return verdict{state: Missing}
	case at == nil || nodes == nil || hist == nil:
		return verdict{state: Invalid, why: "partly published"}
	}
	bad := func(why string) verdict { return verdict{state: Invalid, why: why} }

	s, ok := at.(string)
	if !ok {
		return bad("observedAt not a string")
	}
	observedAt, ok := rfc3339(s)
	if !ok {
		return bad("observedAt not RFC 3339")
	}
	if observedAt.Sub(now) > maxAge {
		return bad("observedAt too far in the future")
	}
	observedNodes, ok := whole(nodes)
	if !ok {
		return bad("observedNodes not a count")
	}
	list, ok := hist.([]any)
	if !ok || len(list) > 64 {
		return bad("histogram not a list of at most 64")
	}
	perNode := map[string]v1alpha1.Device{}
	for _, d := range p.Devices {
		if _, dup := perNode[d.Name]; !dup {
			perNode[d.Name] = d
		}
	}
	v := verdict{obs: scheduling.PoolObservation{ObservedAt: observedAt, ObservedNodes: observedNodes}}
	var total int64
	for _, e := range list {
		obj, ok := e.(map[string]any)
		if !ok {
			return bad("bucket not an object")
		}
		bn, ok := whole(obj["nodes"])
		if !ok {
			return bad("bucket nodes not a count")
		}
		b := scheduling.Bucket{Nodes: bn, Free: map[string]int64{}}
		var frees []any
		switch fv := obj["free"].(type) {
		case nil:
		case []any:
			frees = fv
		default:
			return bad("free not a list")
		}
		if len(frees) > 16 {
			return bad("more than 16 free entries")
		}
		for _, fe := range frees {
			fo, ok := fe.(map[string]any)
			if !ok {
				if fe == nil {
					// A null entry decodes as a zero entry: no name.
					return bad("free entry without a name")
				}
				return bad("free entry not an object")
			}
			name, ok := fo["name"].(string)
			if !ok || name == "" {
				return bad("free entry without a name")
			}
			d, known := perNode[name]
			if !known || !d.IsDRA() {
				return bad("unknown or Synthetic device")
			}
			if _, dup := b.Free[name]; dup {
				return bad("device listed twice")
			}
			c, ok := whole(fo["count"])
			if !ok {
				return bad("free count not a count")
			}
			limit := int64(0)
			if d.Count != nil {
				limit = *d.Count
			}
			if c > limit {
				return bad("free above the per-node count")
			}
			b.Free[name] = c
		}
		total += bn
		v.obs.Buckets = append(v.obs.Buckets, b)
	}
	if total > observedNodes {
		return bad("buckets hold more nodes than observedNodes")
	}
	if now.Sub(observedAt) > maxAge {
		v.state = Stale
		return v
	}
	v.state = Usable
	return v
}

// whole reads a JSON number that is a whole count in [0, 2^20].
func whole(v any) (int64, bool) {
	f, ok := v.(float64)
	if !ok || f != math.Trunc(f) || f < 0 || f > 1<<20 {
		return 0, false
	}
	return int64(f), true
}

// rfc3339 reads a time as RFC 3339 section 5.6 writes it, stated apart from
// ParseTime: the date-time separator "T" and the "Z" of UTC may be lower
// case, and a leap second (:60) is the next second.
func rfc3339(s string) (time.Time, bool) {
	b := []byte(s)
	if len(b) > 10 && b[10] == 't' {
		b[10] = 'T'
	}
	if n := len(b); n > 0 && b[n-1] == 'z' {
		b[n-1] = 'Z'
	}
	leap := len(b) >= 19 && b[10] == 'T' && string(b[17:19]) == "60"
	if leap {
		b[17], b[18] = '5', '9'
	}
	t, err := time.Parse(time.RFC3339, string(b))
	if err != nil {
		return time.Time{}, false
	}
	if leap {
		t = t.Add(time.Second)
	}
	return t, true
}
