package harness

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"

	kerrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Object returns an empty object of a kind, with a name.
func Object(apiVersion, kind, namespace, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

// ReadObjects reads the objects of a YAML stream.
func ReadObjects(t *testing.T, file string) []*unstructured.Unstructured {
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

// Get reads an object; nil when it does not exist.
func Get(t *testing.T, kube client.Client, apiVersion, kind, namespace, name string) *unstructured.Unstructured {
	t.Helper()
	u := Object(apiVersion, kind, namespace, name)
	err := kube.Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: name}, u)
	if kerrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("cannot get %s %s/%s: %v", kind, namespace, name, err)
	}
	return u
}

// List reads the objects of a kind.
func List(t *testing.T, kube client.Client, apiVersion, kind string, opts ...client.ListOption) []unstructured.Unstructured {
	t.Helper()
	l := &unstructured.UnstructuredList{}
	l.SetAPIVersion(apiVersion)
	l.SetKind(kind + "List")
	if err := kube.List(t.Context(), l, opts...); err != nil {
		t.Fatalf("cannot list %s: %v", kind, err)
	}
	return l.Items
}

// Condition is an object's status condition of a type; nil when absent.
func Condition(u *unstructured.Unstructured, typ string) map[string]any {
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
