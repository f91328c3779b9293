package live

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

const (
	// v03Function is the Function Modelplane v0.3.1's ModelDeployment
	// Composition calls: its compose-model-deployment, as the package
	// manager names the dependency.
	v03Function = "modelplane-modelplanecompose-model-deployment"
	// configuration is the Configuration Modelplane's installation guide
	// creates, and the one this project's install keeps.
	configuration = "modelplane"
	// syncInterval is Crossplane's resync, short here (the default is 1h):
	// each one re-applies every package's objects, as a Lock change does.
	syncInterval = 30 * time.Second
)

// TestInstallOverModelplanesConfiguration installs fleet-scheduler as
// docs/production.md#install-over-modelplanes-configuration says, over a
// stand-in for Modelplane v0.3.1's Configuration: the Configuration
// `modelplane` is pointed at this project's rebuild of it, which
// hack/build-modelplane-configuration.sh builds from v0.3.1's apis/. Then it
// forces what re-applies a package's objects (a Lock change, Crossplane's
// resync), and rolls back. Throughout, every Modelplane CRD and XR keeps its
// uid.
//
// v0.3.1's compose-model-deployment is Python and cannot run here: its
// stand-in is this function, installed under v0.3.1's Function name. With
// v0.3.1's InferenceCluster XRD, the API server prunes every agent report,
// so it places by whole nodes, as v0.3 does (the renders of e2e/ hold the
// two equal where nothing is reported).
func TestInstallOverModelplanesConfiguration(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: -short: the live control plane takes minutes to start")
	}
	cp := startControlPlane(t, "--sync-interval="+syncInterval.String(),
		// As Modelplane's installation guide installs Crossplane.
		"--enable-dependency-version-upgrades")
	fnPackage := filepath.Join(os.Getenv(envArtifacts), "xpkg", "fleet-scheduler-"+runtime.GOARCH+".xpkg")
	cp.installFunction(t, v03Function, cp.pushPackage(t, "modelplane/modelplane_compose-model-deployment:v0.3.1", fnPackage))

	apis, standIn := harness.BuildModelplaneStandIn(t, filepath.Join(cp.root, "bin", "crossplane"))
	v031 := cp.pushPackage(t, "modelplane/modelplane:v0.3.1", standIn)
	// Every artefact of a release, pushed under <registry>/modelplane as
	// docs/production.md#release says; installed from there below. The
	// rebuilt Configuration's Compositions call the functions by the names
	// the package manager gives such dependencies:
	// modelplane-fleet-scheduler and modelplane-fleet-scheduler-relay.
	// Installed by hand here, since this test skips dependency resolution.
	_, log := harness.Release(t, cp.root, cp.registry+"/modelplane", apis, "")
	t.Logf("%s", log)
	rebuild := cp.registry + "/modelplane/modelplane:v0.3.1-fleet-scheduler-v0.1.0"
	cp.installFunction(t, "modelplane-fleet-scheduler", cp.registry+"/modelplane/fleet-scheduler:v0.1.0")

	// As Modelplane's guide installs it, but for skipDependencyResolution:
	// its dependencies are on registries this machine cannot reach.
	harness.InstallConfiguration(t, cp.kube, configuration, v031)
	fl := cp.applyFleet(t)
	cp.apply(t, harness.ReadObjects(t, filepath.Join(cp.root, "example", "xr.yaml"))[0])
	xrd := "inferenceclusters.modelplane.ai"

	var kept map[string]string // every Modelplane CRD and XR, by kind and name: its uid
	if !t.Run("v0.3.1's package: whole nodes place 3 of 4 replicas", func(t *testing.T) {
		cp.waitReplicas(t, converge, wholeNodePlacements()...)
		cp.waitScheduled(t, 3, 4, false)
		kept = harness.ModelplaneUIDs(t, cp.kube)
	}) {
		return
	}
	if !t.Run("an XRD applied over the package's own is reverted by the next Lock change or resync", func(t *testing.T) {
		cp.installXRDs(t, filepath.Join(cp.root, "deploy", "inferenceclusters.yaml"))
		cp.waitSchemaHas(t, xrd, "observedAt")
		applied := time.Now()
		// Said, not asserted: a resync may come first.
		time.Sleep(5 * time.Second)
		if has, err := cp.schemaHas(t, xrd, "observedAt"); err == nil {
			t.Logf("5s after it was applied, before any Lock change, the XRD is still the one applied: %t", has)
		}
		lock := cp.lockVersion(t)
		// Any package installed changes the Lock: here the relay, as this
		// project's install guide had users install it beside a `kubectl
		// apply` of this XRD.
		relayPackage := filepath.Join(os.Getenv(envArtifacts), "xpkg", "fleet-scheduler-relay-"+runtime.GOARCH+".xpkg")
		installed := time.Now()
		cp.installFunction(t, "fleet-scheduler-relay", cp.pushPackage(t, "fleet-scheduler-relay:v0.1.0", relayPackage))
		if cp.lockVersion(t) == lock {
			t.Errorf("installing a Function left the Lock at resourceVersion %s", lock)
		}
		cp.waitSchemaLacks(t, xrd, "observedAt", syncInterval+converge)
		t.Logf("the XRD was back to v0.3.1's %s after it was applied, %s after a Function's install began (a resync every %s)",
			time.Since(applied).Round(time.Second), time.Since(installed).Round(time.Second), syncInterval)
		harness.CheckKept(t, kept, harness.ModelplaneUIDs(t, cp.kube))
	}) {
		return
	}
	if !t.Run("the Configuration pointed at the rebuild: free devices place the fourth, and it holds through a Lock change and resyncs", func(t *testing.T) {
		before := uids(cp.replicasOf(t, namespace, deployment))
		// Paused until every report reads back, as in
		// TestModelDeploymentOnALiveControlPlane: one reconcile on all of them.
		cp.setPaused(t, true)
		harness.SetConfigurationPackage(t, cp.kube, configuration, rebuild)
		harness.WaitConfiguration(t, cp.kube, configuration, rebuild)
		cp.waitSchemaHas(t, xrd, "observedAt")
		cp.waitReportsKept(t, fl)
		cp.setPaused(t, false)
		want := []replica{placed("eks-us-east", 0), placed("eks-us-east", 1), placed("gke-us-central", 0), placed("gke-us-central", 1)}
		cp.waitReplicas(t, defaultTTL+ttlJitter+margin, want...)
		cp.waitScheduled(t, 4, 4, true)
		harness.CheckKept(t, before, uids(cp.replicasOf(t, namespace, deployment)))

		lock := cp.lockVersion(t)
		cp.installFunction(t, "another-function", cp.pushPackage(t, "another-function:v0.1.0", fnPackage))
		if cp.lockVersion(t) == lock {
			t.Errorf("installing a Function left the Lock at resourceVersion %s", lock)
		}
		// Two resyncs and a half: the package's objects re-applied at least
		// twice since the Lock changed.
		time.Sleep(syncInterval*5/2 + ttlJitter)
		cp.waitSchemaHas(t, xrd, "observedAt")
		if got := harness.CompositionFunctions(t, cp.kube, "modeldeployments.modelplane.ai"); !slices.Equal(got, []string{"modelplane-fleet-scheduler"}) {
			t.Errorf("after a Lock change and resyncs, the ModelDeployment Composition calls %v, want [modelplane-fleet-scheduler]", got)
		}
		cp.waitReplicas(t, converge, want...)
		cp.waitScheduled(t, 4, 4, true)
		harness.CheckKept(t, kept, harness.ModelplaneUIDs(t, cp.kube))
		kept = harness.ModelplaneUIDs(t, cp.kube) // the fourth replica too
	}) {
		return
	}
	t.Run("rolled back to v0.3.1's package: every replica stays, a new one is placed by whole nodes, nothing is deleted", func(t *testing.T) {
		harness.SetConfigurationPackage(t, cp.kube, configuration, v031)
		harness.WaitConfiguration(t, cp.kube, configuration, v031)
		cp.waitSchemaLacks(t, xrd, "observedAt", converge)
		eventually(t, converge, "the ModelDeployment Composition calling v0.3.1's function", func() error {
			if got := harness.CompositionFunctions(t, cp.kube, "modeldeployments.modelplane.ai"); !slices.Equal(got, []string{v03Function}) {
				return fmt.Errorf("it calls %v", got)
			}
			return nil
		})
		// The API server prunes what the XRD no longer has from what it
		// reads back, reports included.
		for _, c := range harness.List(t, cp.kube, apiVersion, "InferenceCluster") {
			if got := agentFields(&c); len(got) > 0 {
				t.Errorf("after the rollback InferenceCluster %s still reads back agent fields %v", c.GetName(), got)
			}
		}
		cp.scale(t, 5)
		// v0.3.1's XRD has no spec.placement either: the placement labels
		// go, as v0.3 composes them; the replicas are updated, not
		// re-created.
		cp.waitReplicas(t, converge,
			withoutPlacementLabels(placed("eks-us-east", 0)), withoutPlacementLabels(placed("eks-us-east", 1)),
			withoutPlacementLabels(placed("gke-us-central", 0)), withoutPlacementLabels(placed("gke-us-central", 1)))
		cp.waitScheduled(t, 4, 5, false)
		harness.CheckKept(t, kept, harness.ModelplaneUIDs(t, cp.kube))
	})
}

// lockVersion returns the resourceVersion of Crossplane's package Lock.
func (cp *controlPlane) lockVersion(t *testing.T) string {
	t.Helper()
	return harness.Get(t, cp.kube, "pkg.crossplane.io/v1beta1", "Lock", "", "lock").GetResourceVersion()
}

// waitScheduled waits until the XR says it scheduled placed of wanted
// replicas, with every pool accounted by free devices (observed) or not.
func (cp *controlPlane) waitScheduled(t *testing.T, placed, wanted int, observed bool) {
	t.Helper()
	capacity := conditionWant{status: "False", reason: "WholeNodeFallback"}
	if observed {
		capacity = conditionWant{status: "True", reason: "AllPoolsObserved"}
	}
	cp.waitXR(t, converge, xrWant{
		conditions: map[string]conditionWant{
			"ReplicasScheduled": {status: "True", reason: "ReplicasCreated", message: fmt.Sprintf("Scheduled %d of %d replicas", placed, wanted)},
			"CapacityObserved":  capacity,
		},
		total: int64(placed),
	})
}

// waitSchemaLacks waits until a CRD's schema no longer names a field.
func (cp *controlPlane) waitSchemaLacks(t *testing.T, crd, field string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "CRD "+crd+" without "+field, func() error {
		has, err := cp.schemaHas(t, crd, field)
		if err == nil && has {
			err = errors.New("still in its schema")
		}
		return err
	})
}
