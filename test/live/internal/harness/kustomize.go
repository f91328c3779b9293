package harness

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Kustomize renders the kustomization in dir as `kubectl apply -k` does.
func Kustomize(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("cannot render %s as kubectl apply -k does: %v", dir, err)
	}
	objs := make([]*unstructured.Unstructured, 0, len(m.Resources()))
	for _, r := range m.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(y, &u.Object); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, u)
	}
	return objs
}
