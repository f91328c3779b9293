package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

// eventually calls check every 100 ms until it returns nil, failing the
// test with its last error once timeout has passed. It returns how long it
// waited.
func eventually(t *testing.T, timeout time.Duration, what string, check func() error) time.Duration {
	t.Helper()
	return harness.Eventually(t, timeout, 100*time.Millisecond, what, check)
}

// apply creates an object, or merge-patches it if it exists, then
// merge-patches its status through the status subresource, if it has one.
func apply(t *testing.T, c client.Client, u *unstructured.Unstructured) {
	t.Helper()
	u = u.DeepCopy()
	status, hasStatus := u.Object["status"]
	delete(u.Object, "status")
	err := c.Create(t.Context(), u.DeepCopy())
	if kerrors.IsAlreadyExists(err) {
		err = c.Patch(t.Context(), u.DeepCopy(), client.RawPatch(types.MergePatchType, mustJSON(t, u.Object)))
	}
	if err != nil {
		t.Fatalf("cannot apply %s %s: %v", u.GetKind(), key(u), err)
	}
	if hasStatus {
		patchStatus(t, c, u, status)
	}
}

// patchStatus merge-patches an object's status.
func patchStatus(t *testing.T, c client.Client, u *unstructured.Unstructured, status any) {
	t.Helper()
	target := harness.Object(u.GetAPIVersion(), u.GetKind(), u.GetNamespace(), u.GetName())
	if err := c.Status().Patch(t.Context(), target, client.RawPatch(types.MergePatchType, mustJSON(t, map[string]any{"status": status}))); err != nil {
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

func conditionString(u *unstructured.Unstructured, typ, field string) string {
	s, _ := harness.Condition(u, typ)[field].(string)
	return s
}

// conditionTime is a condition's lastTransitionTime; zero when it has
// none.
func conditionTime(u *unstructured.Unstructured, typ string) time.Time {
	at, _ := time.Parse(time.RFC3339, conditionString(u, typ, "lastTransitionTime"))
	return at
}

// describe is a condition as a line: status reason: message.
func describe(u *unstructured.Unstructured, typ string) string {
	c := harness.Condition(u, typ)
	if c == nil {
		return typ + " absent"
	}
	return fmt.Sprintf("%s %v %v: %v", typ, c["status"], c["reason"], c["message"])
}

func key(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetName()
	}
	return u.GetNamespace() + "/" + u.GetName()
}

// dump writes what kinds hold to a file in the logs, for a failed test.
func dump(t *testing.T, c client.Client, file string, kinds ...[2]string) {
	t.Helper()
	var b strings.Builder
	for _, k := range kinds {
		l := &unstructured.UnstructuredList{}
		l.SetAPIVersion(k[0])
		l.SetKind(k[1] + "List")
		// The test's context is done by the time its cleanups run.
		if err := c.List(context.Background(), l); err != nil {
			fmt.Fprintf(&b, "# cannot list %s: %v\n", k[1], err)
			continue
		}
		for _, u := range l.Items {
			u.SetManagedFields(nil)
			y, err := yaml.Marshal(u.Object)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "---\n%s", y)
		}
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Logf("cannot write %s: %v", file, err)
		return
	}
	t.Logf("the objects as the test ended: %s", file)
}

// printed is the row kubectl get prints for a cluster-scoped object of
// the agent's kinds: its printer columns' cells by column name, as the API
// server renders them (a Table, as kubectl asks for it).
func (a *apiServer) printed(t *testing.T, groupVersion, resource, name string) map[string]string {
	t.Helper()
	b, err := a.kube.Discovery().RESTClient().Get().
		AbsPath("/apis", groupVersion, resource, name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").
		DoRaw(t.Context())
	if err != nil {
		t.Fatalf("cannot get %s %s as a Table: %v", resource, name, err)
	}
	table := &metav1.Table{}
	if err := json.Unmarshal(b, table); err != nil {
		t.Fatalf("cannot read %s %s's Table: %v", resource, name, err)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("%s %s's Table has %d rows", resource, name, len(table.Rows))
	}
	out := map[string]string{}
	for i, c := range table.ColumnDefinitions {
		if i < len(table.Rows[0].Cells) {
			out[c.Name] = fmt.Sprint(table.Rows[0].Cells[i])
		}
	}
	return out
}
