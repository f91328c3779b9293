package fleet

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelplaneai/fleet-scheduler/internal/relay"
	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

// agentDeployment is the chart's Deployment of the agent.
const agentDeployment = "cluster-agent"

// TestAgentRelease installs the cluster agent as the relay's Release does
// (docs/cluster-agent.md#a-release-with-every-cluster): the fleet's
// Configuration is released with agentRelease in its input, naming the
// chart ./hack/release.sh pushed, and provider-helm runs in the control
// plane. No agent is installed by hand in the workload cluster. It checks
// that the Release installed every object of the chart there, as Helm's
// release mp-cluster-agent, through a provider-helm ClusterProviderConfig
// with the cluster's credentials; that, with the agent run as the chart's
// Deployment says, every pool's report reaches the InferenceCluster; and
// that deleting the InferenceCluster uninstalls the release and keeps the
// agent's CRDs; and that an agent already running, applied from
// deploy/cluster-agent/ as kubectl apply -k does or installed with helm
// install as the README does, is adopted by its cluster's Release and keeps
// reporting. There is no kubelet: the agent runs as a process, as in the
// live fleet.
//
// Run by ./hack/test-agent-release.sh, which builds provider-helm; not in
// CI (docs/testing.md).
func TestAgentRelease(t *testing.T) {
	if os.Getenv(envProviderHelm) == "" {
		t.Skipf("run by ./hack/test-agent-release.sh (%s=1), which builds provider-helm for it alone", envAgentRelease)
	}
	// delta has nothing installed by hand. epsilon has the agent applied
	// from deploy/cluster-agent/ as kubectl apply -k does, and zeta has it
	// installed as the README does (helm install mp-cluster-agent), both
	// running, which their Releases adopt.
	const name, applied, helmInstalled = "delta", "epsilon", "zeta"
	specs := []workloadSpec{
		{name: name, pools: []poolSpec{{name: "quad", class: "l4-4x", nodes: 2}}, agentByRelease: true},
		{name: applied, pools: []poolSpec{{name: "quad", class: "l4-4x", nodes: 1}}, agentApplied: true},
		{name: helmInstalled, pools: []poolSpec{{name: "quad", class: "l4-4x", nodes: 1}}},
	}
	input := map[string]string{
		"agentRelease": `{chart: "oci://` + registryPlaceholder + `/charts/cluster-agent", version: 0.1.0, plainHTTP: true}`,
	}
	started := time.Now()
	f := startFleetOf(t, specs, input)
	w := f.clusters[name]
	t.Logf("the fleet is Ready, with the agent installed by its Release, in %s", time.Since(started).Round(time.Second))

	t.Run("the Release is Ready, through provider-helm's ClusterProviderConfig with the cluster's credentials", func(t *testing.T) {
		// provider-helm marks it Ready at the observation after the
		// install, which may come after the agent it installed reported.
		var rel *unstructured.Unstructured
		eventually(t, 2*time.Minute, "the agent's Release Ready and Synced", func() error {
			rel = f.agentRelease(t, name)
			for _, c := range []string{"Ready", "Synced"} {
				if conditionString(rel, c, "status") != "True" {
					return fmt.Errorf("release %s: %s", rel.GetName(), describe(rel, c))
				}
			}
			return nil
		})
		if got := rel.GetAnnotations()["crossplane.io/external-name"]; got != relay.AgentReleaseName {
			t.Errorf("Release %s: external name %q, want %q", rel.GetName(), got, relay.AgentReleaseName)
		}
		if got, _, _ := unstructured.NestedString(rel.Object, "status", "atProvider", "state"); got != "deployed" {
			t.Errorf("Release %s: status.atProvider.state %q, want deployed", rel.GetName(), got)
		}
		pc, _, _ := unstructured.NestedString(rel.Object, "spec", "providerConfigRef", "name")
		helm := harness.Get(t, f.cp.c, relay.HelmAPIVersion, relay.ProviderConfigKind, "", pc)
		kube := harness.Get(t, f.cp.c, objectAPIVersion, relay.ProviderConfigKind, "", pc)
		hc, _, _ := unstructured.NestedMap(helm.Object, "spec", "credentials")
		kc, _, _ := unstructured.NestedMap(kube.Object, "spec", "credentials")
		if fmt.Sprint(hc) != fmt.Sprint(kc) || len(kc) == 0 {
			t.Errorf("provider-helm ClusterProviderConfig %s's credentials %v, want provider-kubernetes' %v", pc, hc, kc)
		}
	})

	t.Run("every object of the chart is in the workload cluster, Helm's release mp-cluster-agent", func(t *testing.T) {
		secret, err := w.api.kube.CoreV1().Secrets(agentNamespace).Get(t.Context(), "sh.helm.release.v1."+relay.AgentReleaseName+".v1", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("Helm's record of release %s: %v", relay.AgentReleaseName, err)
		}
		if got := secret.Labels["status"]; got != "deployed" {
			t.Errorf("Helm's record of release %s: status %q, want deployed", relay.AgentReleaseName, got)
		}
		// deploy/cluster-agent/ is the chart's render with its defaults
		// (tools/chartrender); the Release renders it with namespace.create
		// false, since it makes the namespace itself.
		for _, u := range harness.Kustomize(t, filepath.Join(f.root, "deploy", "cluster-agent")) {
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(u.GroupVersionKind())
			if err := w.api.c.Get(t.Context(), client.ObjectKeyFromObject(u), got); err != nil {
				t.Errorf("%s %s: %v", u.GetKind(), objectKey(u), err)
				continue
			}
			// Helm marks what it renders from templates/, not crds/ or the
			// namespace provider-helm makes.
			if u.GetKind() == "CustomResourceDefinition" || u.GetKind() == "Namespace" {
				continue
			}
			if rn := got.GetAnnotations()["meta.helm.sh/release-name"]; rn != relay.AgentReleaseName {
				t.Errorf("%s %s: annotation meta.helm.sh/release-name %q, want %q", u.GetKind(), objectKey(u), rn, relay.AgentReleaseName)
			}
		}
	})

	t.Run("every pool's report reaches the InferenceCluster", func(t *testing.T) {
		ic := f.inferenceCluster(t, name)
		if conditionString(ic, "PoolsObserved", "status") != "True" {
			t.Errorf("InferenceCluster %s: %s", name, describe(ic, "PoolsObserved"))
		}
		reported, _, _ := unstructured.NestedInt64(ic.Object, "status", relay.FieldPoolReports, "reported")
		pools, _, _ := unstructured.NestedInt64(ic.Object, "status", relay.FieldPoolReports, "pools")
		if reported != 1 || pools != 1 {
			t.Errorf("InferenceCluster %s: status.%s says %d of %d pools reported, want 1 of 1", name, relay.FieldPoolReports, reported, pools)
		}
	})

	adoptions := []struct {
		cluster, how string
		// revision is Helm's record of the release the Release leaves:
		// its first over objects applied by hand, its second over helm
		// install's, an upgrade since the Release's values (the chart's
		// defaults but namespace.create) differ from the fleet's install
		// (steering on, no replicas), which they replace.
		revision int
	}{
		{applied, "applied from deploy/cluster-agent/", 1},
		{helmInstalled, "installed with helm install " + relay.AgentReleaseName, 2},
	}
	for _, a := range adoptions {
		t.Run("an agent "+a.how+" is adopted by its Release, and keeps reporting", func(t *testing.T) {
			e := f.clusters[a.cluster]
			eventually(t, 2*time.Minute, "the Release of "+a.cluster+" Ready, deployed over the agent "+a.how, func() error {
				rel := f.agentRelease(t, a.cluster)
				if conditionString(rel, "Ready", "status") != "True" {
					return fmt.Errorf("release %s: %s", rel.GetName(), describe(rel, "Ready"))
				}
				if state, _, _ := unstructured.NestedString(rel.Object, "status", "atProvider", "state"); state != "deployed" {
					return fmt.Errorf("release %s: status.atProvider.state %q", rel.GetName(), state)
				}
				return nil
			})
			// The Release's revision deployed, and helm install's (if
			// any) superseded by it.
			for rev := 1; rev <= a.revision; rev++ {
				want := "superseded"
				if rev == a.revision {
					want = "deployed"
				}
				record := fmt.Sprintf("sh.helm.release.v1.%s.v%d", relay.AgentReleaseName, rev)
				secret, err := e.api.kube.CoreV1().Secrets(agentNamespace).Get(t.Context(), record, metav1.GetOptions{})
				if err != nil {
					t.Errorf("cannot get Helm's record %s in %s: %v", record, a.cluster, err)
				} else if got := secret.Labels["status"]; got != want {
					t.Errorf("Helm's record %s in %s: status %q, want %s", record, a.cluster, got, want)
				}
			}
			d, err := e.api.kube.AppsV1().Deployments(agentNamespace).Get(t.Context(), agentDeployment, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if rn := d.Annotations["meta.helm.sh/release-name"]; rn != relay.AgentReleaseName {
				t.Errorf("Deployment %s/%s in %s: annotation meta.helm.sh/release-name %q, want %q: not adopted", agentNamespace, agentDeployment, a.cluster, rn, relay.AgentReleaseName)
			}
			eventually(t, 2*time.Minute, "InferenceCluster "+a.cluster+" PoolsObserved", func() error {
				ic := f.inferenceCluster(t, a.cluster)
				if conditionString(ic, "PoolsObserved", "status") != "True" {
					return fmt.Errorf("%s", describe(ic, "PoolsObserved"))
				}
				return nil
			})
		})
	}

	t.Run("deleting the InferenceCluster uninstalls the release and keeps the agent's CRDs", func(t *testing.T) {
		ic := f.inferenceCluster(t, name)
		if err := f.cp.c.Delete(t.Context(), ic); err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		eventually(t, 5*time.Minute, "release "+relay.AgentReleaseName+" uninstalled from "+name, func() error {
			_, err := w.api.kube.AppsV1().Deployments(agentNamespace).Get(t.Context(), agentDeployment, metav1.GetOptions{})
			if !kerrors.IsNotFound(err) {
				return fmt.Errorf("deployment %s/%s still there (%w)", agentNamespace, agentDeployment, err)
			}
			return nil
		})
		t.Logf("the release was uninstalled %s after the InferenceCluster's deletion", time.Since(deleted).Round(time.Second))
		for _, crd := range []string{relay.CRDPoolObservations, relay.CRDReplicaObservations} {
			got := harness.Object("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", crd)
			if err := w.api.c.Get(t.Context(), client.ObjectKeyFromObject(got), got); err != nil {
				t.Errorf("CRD %s after the uninstall: %v", crd, err)
			}
		}
		eventually(t, 5*time.Minute, "the Release and InferenceCluster "+name+" gone from the control plane", func() error {
			if l := f.agentReleases(t, name); len(l) > 0 {
				return fmt.Errorf("%d Releases of %s left", len(l), name)
			}
			err := f.cp.c.Get(t.Context(), client.ObjectKeyFromObject(ic), ic.DeepCopy())
			if !kerrors.IsNotFound(err) {
				return fmt.Errorf("InferenceCluster %s still there (%w)", name, err)
			}
			return nil
		})
	})
}

// agentRelease is the one Release of the agent that an InferenceCluster
// composes.
func (f *fleet) agentRelease(t *testing.T, cluster string) *unstructured.Unstructured {
	t.Helper()
	l := f.agentReleases(t, cluster)
	if len(l) != 1 {
		t.Fatalf("%d Releases of InferenceCluster %s in %s, want the agent's one", len(l), cluster, systemNamespace)
	}
	return &l[0]
}

// agentReleases are the Releases an InferenceCluster composes, by
// Crossplane's label of composed resources.
func (f *fleet) agentReleases(t *testing.T, cluster string) []unstructured.Unstructured {
	t.Helper()
	l := &unstructured.UnstructuredList{}
	l.SetAPIVersion(relay.HelmAPIVersion)
	l.SetKind(relay.KindRelease + "List")
	if err := f.cp.c.List(t.Context(), l, client.InNamespace(systemNamespace), client.MatchingLabels{"crossplane.io/composite": cluster}); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// runReleasedAgent waits until the relay's Release has applied the
// agent's Deployment in the workload cluster, then runs the agent as it
// says, one process whose Pod the test makes, as installAgent does: the
// Deployment is scaled to none, since no kubelet runs its pods.
func (f *fleet) runReleasedAgent(t *testing.T, w *workload) {
	t.Helper()
	var d *appsv1.Deployment
	eventually(t, 5*time.Minute, "the agent's Deployment, from the Release, in "+w.spec.name, func() error {
		got, err := w.api.kube.AppsV1().Deployments(agentNamespace).Get(t.Context(), agentDeployment, metav1.GetOptions{})
		if err != nil {
			return err
		}
		d = got
		return nil
	})
	if _, err := w.api.kube.AppsV1().Deployments(agentNamespace).Patch(t.Context(), agentDeployment, types.MergePatchType,
		[]byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("cannot scale Deployment %s/%s to none: %v", agentNamespace, agentDeployment, err)
	}
	f.runAgentOf(t, w, d)
}

// objectKey is an object's namespace/name, or its name.
func objectKey(u *unstructured.Unstructured) string {
	return strings.TrimPrefix(u.GetNamespace()+"/"+u.GetName(), "/")
}
