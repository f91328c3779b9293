package fleet

import (
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

// verifyInstall: the checklist of docs/production.md#verify-the-install,
// each step's request made as kubectl makes it, its output checked as the
// checklist gives it, on the fleet fourOnOne left: four 1-GPU replicas of
// four on alpha's one 4-GPU node.
func verifyInstall(t *testing.T, f *fleet) { //nolint:thelper // A scenario run by t.Run: its failures are its own lines.
	// 1. kubectl get functions acme-fleet-scheduler acme-fleet-scheduler-relay
	for _, name := range []string{fnScheduler, fnRelay} {
		if got := f.cp.printed(t, "pkg.crossplane.io/v1", "functions", name); got["INSTALLED"] != "True" || got["HEALTHY"] != "True" {
			t.Errorf("step 1: kubectl get function %s prints INSTALLED %s HEALTHY %s, want True and True (the row: %v)", name, got["INSTALLED"], got["HEALTHY"], got)
		}
	}

	// 2. In each workload cluster: the Lease's holder, and kubectl get
	// poolobservations.
	for _, name := range []string{"alpha", "beta"} {
		w := f.clusters[name]
		lease := &coordinationv1.Lease{}
		if err := w.api.c.Get(t.Context(), client.ObjectKey{Namespace: agentNamespace, Name: "cluster-agent"}, lease); err != nil {
			t.Errorf("step 2: cannot get the agent's Lease in %s: %v", name, err)
		} else if h := lease.Spec.HolderIdentity; h == nil || w.agent == nil || *h != w.agent.pod {
			t.Errorf("step 2: %s's Lease is held by %v, want the running agent's pod", name, h)
		}
		for _, pool := range w.spec.pools {
			got := w.api.printed(t, agentAPIVersion, "poolobservations", pool.name)
			age, err := time.ParseDuration(got["OBSERVED"])
			if got["SYNCED"] != "True" || err != nil || age >= 2*time.Minute {
				t.Errorf("step 2: kubectl get poolobservation %s in %s prints SYNCED %s OBSERVED %s, want True and under two minutes (the row: %v)", pool.name, name, got["SYNCED"], got["OBSERVED"], got)
			}
		}
	}
	if got := f.clusters["alpha"].api.printed(t, agentAPIVersion, "poolobservations", "quad"); got["FREE"] != "0" || got["TOTAL"] != "4" {
		t.Errorf("step 2: kubectl get poolobservation quad prints FREE %s TOTAL %s, want 0 and 4 (the row: %v)", got["FREE"], got["TOTAL"], got)
	}

	// 3. kubectl get inferenceclusters -o wide
	for _, name := range []string{"alpha", "beta"} {
		got := f.cp.printed(t, apiVersion, "inferenceclusters", name)
		age, err := time.ParseDuration(got["OLDEST-REPORT"])
		if got["POOLS"] != fmt.Sprint(len(f.clusters[name].spec.pools)) || got["REPORTED"] != got["POOLS"] || got["POOLS-OBSERVED"] != "True" || err != nil || age >= 5*time.Minute {
			t.Errorf("step 3: kubectl get inferencecluster %s prints POOLS %s REPORTED %s OLDEST-REPORT %s POOLS-OBSERVED %s, want %d, as many, under 5m and True (the row: %v)",
				name, got["POOLS"], got["REPORTED"], got["OLDEST-REPORT"], got["POOLS-OBSERVED"], len(f.clusters[name].spec.pools), got)
		}
	}

	// 4. The ModelDeployment's CapacityObserved reason.
	if got := conditionString(f.xr(t, "four"), "CapacityObserved", "reason"); got != "AllPoolsObserved" {
		t.Errorf("step 4: ModelDeployment four's CapacityObserved reason is %q, want AllPoolsObserved: %s", got, describe(f.xr(t, "four"), "CapacityObserved"))
	}

	// 5. Its replicas' PodsScheduled.
	rs := f.replicas(t, "four")
	if len(rs) != 4 {
		t.Errorf("step 5: ModelDeployment four has %d replicas, want 4", len(rs))
	}
	for _, r := range rs {
		got := harness.Get(t, f.cp.c, apiVersion, "ModelReplica", namespace, r.GetName())
		if s := conditionString(got, "PodsScheduled", "status"); s != "True" {
			t.Errorf("step 5: replica %s: PodsScheduled %q, want True: %s", r.GetName(), s, describe(got, "PodsScheduled"))
		}
	}

	// 6. The function's metrics.
	m := f.functions[fnScheduler].metrics
	metric := func(name string, labels ...string) float64 {
		return metricAt(t, m, "fleet-scheduler", name, labels...)
	}
	for _, name := range []string{"alpha", "beta"} {
		for _, pool := range f.clusters[name].spec.pools {
			if got := metric("fleet_scheduler_pool_accounting", `cluster="`+name+`"`, `pool="`+pool.name+`"`, `mode="free-devices"`); got != 1 {
				t.Errorf("step 6: fleet_scheduler_pool_accounting of %s/%s in mode free-devices is %v, want 1", name, pool.name, got)
			}
		}
	}
	quad := []string{`cluster="alpha"`, `pool="quad"`, `device="gpu"`}
	if free, all := metric("fleet_scheduler_pool_free_devices", quad...), metric("fleet_scheduler_pool_devices", quad...); free != 0 || all != 4 {
		t.Errorf("step 6: quad's fleet_scheduler_pool_free_devices %v of fleet_scheduler_pool_devices %v, want 0 of 4", free, all)
	}
	if got := metric("fleet_scheduler_replicas_beyond_whole_node_total"); got < 3 {
		t.Errorf("step 6: fleet_scheduler_replicas_beyond_whole_node_total is %v, want at least 3: whole nodes would have placed one of four's replicas on quad", got)
	}
}
