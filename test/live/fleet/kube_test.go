package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	kerrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
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

// object returns an empty object of a kind, with a name.
func object(apiVersion, kind, namespace, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

// readObjects reads the objects of a YAML stream.
func readObjects(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		u := &unstructured.Unstructured{}
		err := d.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("cannot decode %s: %v", file, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
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
	target := object(u.GetAPIVersion(), u.GetKind(), u.GetNamespace(), u.GetName())
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

// get reads an object; nil when it does not exist.
func get(t *testing.T, c client.Client, apiVersion, kind, namespace, name string) *unstructured.Unstructured {
	t.Helper()
	u := object(apiVersion, kind, namespace, name)
	err := c.Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: name}, u)
	if kerrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("cannot get %s %s/%s: %v", kind, namespace, name, err)
	}
	return u
}

// list reads the objects of a kind.
func list(t *testing.T, c client.Client, apiVersion, kind string, opts ...client.ListOption) []unstructured.Unstructured {
	t.Helper()
	l := &unstructured.UnstructuredList{}
	l.SetAPIVersion(apiVersion)
	l.SetKind(kind + "List")
	if err := c.List(t.Context(), l, opts...); err != nil {
		t.Fatalf("cannot list %s: %v", kind, err)
	}
	return l.Items
}

// condition is an object's status condition of a type; nil when absent.
func condition(u *unstructured.Unstructured, typ string) map[string]any {
	if u == nil {
		return nil
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return m
		}
	}
	return nil
}

func conditionString(u *unstructured.Unstructured, typ, field string) string {
	s, _ := condition(u, typ)[field].(string)
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
	c := condition(u, typ)
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
