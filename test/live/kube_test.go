package live

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	kerrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

// apply creates an object, or merge-patches its metadata and spec if it
// exists, then merge-patches its status, if it has one, through the status
// subresource (a create or an update of the object itself drops status).
// Not server-side apply: it refuses a field the schema lacks, where an update
// or a patch, as Crossplane and most controllers write, has the API server
// prune it (with a warning), which is what these tests show.
func (cp *controlPlane) apply(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	u = u.DeepCopy()
	status, hasStatus := u.Object["status"]
	delete(u.Object, "status")
	var err error
	// A kind an XRD just defined is served a moment after its package is
	// Healthy: the API server's discovery lags the CRD it made (seen once
	// in CI, on a busy machine).
	eventually(t, time.Minute, "kind "+u.GetKind()+" served", func() error {
		err = cp.kube.Create(t.Context(), u.DeepCopy())
		if meta.IsNoMatchError(err) {
			return err
		}
		return nil
	})
	if kerrors.IsAlreadyExists(err) {
		err = cp.kube.Patch(t.Context(), u.DeepCopy(), client.RawPatch(types.MergePatchType, mustJSON(t, u.Object)))
	}
	if err != nil {
		t.Fatalf("cannot apply %s %s: %v", u.GetKind(), key(u), err)
	}
	if hasStatus {
		cp.applyStatus(t, u, status)
	}
}

// applyStatus merge-patches an object's status: a list in it replaces the
// list there.
func (cp *controlPlane) applyStatus(t *testing.T, u *unstructured.Unstructured, status any) {
	t.Helper()
	patch := mustJSON(t, map[string]any{"status": status})
	target := harness.Object(u.GetAPIVersion(), u.GetKind(), u.GetNamespace(), u.GetName())
	if err := cp.kube.Status().Patch(t.Context(), target, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("cannot patch the status of %s %s: %v", u.GetKind(), key(u), err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// eventually calls check until it returns nil, failing the test with its
// last error once timeout has passed (harness.Eventually, every 250ms). It
// returns how long it waited.
func eventually(t *testing.T, timeout time.Duration, what string, check func() error) time.Duration {
	t.Helper()
	return harness.Eventually(t, timeout, 250*time.Millisecond, what, check)
}

func conditionStatus(u *unstructured.Unstructured, typ string) string {
	s, _ := harness.Condition(u, typ)["status"].(string)
	return s
}

func conditionMessage(u *unstructured.Unstructured, typ string) string {
	s, _ := harness.Condition(u, typ)["message"].(string)
	return s
}

func key(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetName()
	}
	return fmt.Sprintf("%s/%s", u.GetNamespace(), u.GetName())
}

// applyAll applies objects in order.
func (cp *controlPlane) applyAll(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		cp.apply(t, o)
	}
}

// installXRDs applies XRDs and waits until Crossplane has established each,
// and the API server serves its kind.
func (cp *controlPlane) installXRDs(t *testing.T, files ...string) {
	t.Helper()
	for _, f := range files {
		for _, xrd := range harness.ReadObjects(t, f) {
			cp.apply(t, xrd)
			eventually(t, 2*time.Minute, "XRD "+xrd.GetName()+" Established", func() error {
				got := harness.Get(t, cp.kube, xrd.GetAPIVersion(), xrd.GetKind(), "", xrd.GetName())
				if s := conditionStatus(got, "Established"); s != "True" {
					return fmt.Errorf("Established is %q: %s", s, conditionMessage(got, "Established"))
				}
				group, _, _ := unstructured.NestedString(xrd.Object, "spec", "group")
				kind, _, _ := unstructured.NestedString(xrd.Object, "spec", "names", "kind")
				l := &unstructured.UnstructuredList{}
				l.SetAPIVersion(group + "/v1alpha1")
				l.SetKind(kind + "List")
				return cp.kube.List(t.Context(), l)
			})
		}
	}
}

// waitSchemaHas waits until a CRD's schema names a field: Crossplane has
// updated the CRD from a changed XRD.
func (cp *controlPlane) waitSchemaHas(t *testing.T, crd, field string) {
	t.Helper()
	eventually(t, 2*time.Minute, "CRD "+crd+" has "+field, func() error {
		has, err := cp.schemaHas(t, crd, field)
		if err == nil && !has {
			err = errors.New("not in its schema yet")
		}
		return err
	})
}

// schemaHas says whether a CRD's spec names a field.
func (cp *controlPlane) schemaHas(t *testing.T, crd, field string) (bool, error) {
	t.Helper()
	return harness.SchemaHas(t, cp.kube, crd, field)
}
