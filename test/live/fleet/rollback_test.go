package fleet

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/modelplaneai/fleet-scheduler/internal/relay"
	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

// rollBack follows docs/production.md's roll back to v0.3's scheduler and
// the first step of its uninstall order: the Configuration pointed back at
// v0.3.1's package. Its XRD and Compositions are v0.3.1's again, the
// relay's steps are gone, so Crossplane deletes the Objects they composed
// and provider-kubernetes the PoolObservations and ReplicaObservations in
// the workload clusters (the agent's CRDs stay); no ModelDeployment,
// ModelReplica or InferenceCluster of the control plane is deleted or
// re-created. It ends the fleet: no scenario can follow it.
func rollBack(t *testing.T, f *fleet) { //nolint:thelper // A scenario run by t.Run: its failures are its own lines.
	before := harness.ModelplaneUIDs(t, f.cp.c)
	started := time.Now()
	harness.SetConfigurationPackage(t, f.cp.c, configuration, f.registry+"/"+v031Package)
	harness.WaitConfiguration(t, f.cp.c, configuration, f.registry+"/"+v031Package)
	for composition, want := range map[string][]string{
		"modeldeployments.modelplane.ai":  {fnV03Deployment},
		"inferenceclusters.modelplane.ai": {fnV03Cluster},
		"modelreplicas.modelplane.ai":     {fnV03Replica},
	} {
		eventually(t, time.Minute, "Composition "+composition+" v0.3.1's", func() error {
			if got := harness.CompositionFunctions(t, f.cp.c, composition); !slices.Equal(got, want) {
				return fmt.Errorf("it calls %v, want %v", got, want)
			}
			return nil
		})
	}
	// Step 1 of the uninstall order: no Object of the relay is left.
	eventually(t, 3*time.Minute, "no Object of the relay left in the control plane", func() error {
		var left []string
		for _, o := range harness.List(t, f.cp.c, objectAPIVersion, "Object") {
			if kind, _, _ := unstructured.NestedString(o.Object, "spec", "forProvider", "manifest", "kind"); kind == "PoolObservation" || kind == "ReplicaObservation" {
				left = append(left, o.GetNamespace()+"/"+o.GetName())
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("%d left: %s", len(left), strings.Join(left, ", "))
		}
		return nil
	})
	for name, w := range f.clusters {
		eventually(t, 2*time.Minute, "no PoolObservation or ReplicaObservation left in "+name, func() error {
			pools := harness.List(t, w.api.c, agentAPIVersion, "PoolObservation")
			replicas := harness.List(t, w.api.c, agentAPIVersion, "ReplicaObservation")
			if len(pools)+len(replicas) > 0 {
				return fmt.Errorf("%d PoolObservations, %d ReplicaObservations", len(pools), len(replicas))
			}
			return nil
		})
		for _, crd := range []string{"poolobservations.agent.modelplane.ai", "replicaobservations.agent.modelplane.ai"} {
			if harness.Get(t, w.api.c, "apiextensions.k8s.io/v1", "CustomResourceDefinition", "", crd) == nil {
				t.Errorf("CRD %s is gone from %s", crd, name)
			}
		}
	}
	t.Logf("rolled back: v0.3.1's Compositions, and the relay's objects gone from every workload cluster, %s after the Configuration was pointed back",
		time.Since(started).Round(time.Second))
	// The API server prunes the report fields v0.3.1's XRD has no schema
	// for from what it reads back.
	for _, c := range harness.List(t, f.cp.c, apiVersion, "InferenceCluster") {
		pools, _, _ := unstructured.NestedSlice(c.Object, "status", "gpuPools")
		for _, p := range pools {
			if at, _, _ := unstructured.NestedString(p.(map[string]any), "observedAt"); at != "" {
				t.Errorf("InferenceCluster %s still reads back a report (observedAt %s)", c.GetName(), at)
			}
		}
	}
	harness.CheckKept(t, before, harness.ModelplaneUIDs(t, f.cp.c))
}

// uninstall follows the rest of docs/production.md's uninstall order,
// after the rollback: the two Functions deleted, then in each workload
// cluster the agent's process stopped, helm uninstall, and its CRDs
// deleted. Nothing in the control plane is deleted with them, and no
// Object is left waiting on a kind no longer served.
func uninstall(t *testing.T, f *fleet) { //nolint:thelper // A scenario run by t.Run: its failures are its own lines.
	before := harness.ModelplaneUIDs(t, f.cp.c)
	for _, name := range []string{fnScheduler, fnRelay} {
		if err := f.cp.c.Delete(t.Context(), harness.Object("pkg.crossplane.io/v1", "Function", "", name)); err != nil {
			t.Fatalf("cannot delete Function %s: %v", name, err)
		}
		eventually(t, time.Minute, "Function "+name+" gone", func() error {
			if harness.Get(t, f.cp.c, "pkg.crossplane.io/v1", "Function", "", name) != nil {
				return errors.New("still there")
			}
			return nil
		})
	}
	crds := []string{"poolobservations.agent.modelplane.ai", "replicaobservations.agent.modelplane.ai"}
	for name, w := range f.clusters {
		w.stopAgent(t, w.agent, false)
		f.helm(t, w, "uninstall", relay.AgentReleaseName, "-n", agentNamespace)
		eventually(t, time.Minute, "the agent's objects gone from "+name+" after helm uninstall", func() error {
			for _, u := range w.manifests {
				if harness.Get(t, w.api.c, u.GetAPIVersion(), u.GetKind(), u.GetNamespace(), u.GetName()) != nil {
					return fmt.Errorf("%s %s still there", u.GetKind(), objectKey(u))
				}
			}
			return nil
		})
		for _, crd := range crds {
			if err := w.api.c.Delete(t.Context(), harness.Object("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", crd)); err != nil {
				t.Fatalf("cannot delete CRD %s from %s: %v", crd, name, err)
			}
		}
		eventually(t, time.Minute, "the agent's CRDs gone from "+name, func() error {
			for _, crd := range crds {
				if harness.Get(t, w.api.c, "apiextensions.k8s.io/v1", "CustomResourceDefinition", "", crd) != nil {
					return fmt.Errorf("%s still there", crd)
				}
			}
			return nil
		})
	}
	// The InferenceClusters' Compositions call v0.3.1's step alone now;
	// each is reconciled again within a poll, and must not wait on
	// anything the uninstall removed.
	time.Sleep(30 * time.Second)
	for _, o := range harness.List(t, f.cp.c, objectAPIVersion, "Object") {
		if o.GetDeletionTimestamp() != nil {
			t.Errorf("Object %s/%s is being deleted, since %s", o.GetNamespace(), o.GetName(), o.GetDeletionTimestamp())
		}
	}
	for _, c := range harness.List(t, f.cp.c, apiVersion, "InferenceCluster") {
		if s := conditionString(&c, "Synced", "status"); s != "True" {
			t.Errorf("InferenceCluster %s: %s", c.GetName(), describe(&c, "Synced"))
		}
	}
	harness.CheckKept(t, before, harness.ModelplaneUIDs(t, f.cp.c))
}
