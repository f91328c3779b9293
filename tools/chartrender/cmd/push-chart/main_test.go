package main

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/registry"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	helmregistry "helm.sh/helm/v4/pkg/registry"
)

// TestPushAndPull pushes the chart to a registry on loopback and pulls it
// back with Helm's own client, as `helm install oci://...` does: the
// version, appVersion and default image are the release's, and the
// Deployment renders with that image.
func TestPushAndPull(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	// No credentials of this machine's leak in.
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	t.Setenv("HELM_REGISTRY_CONFIG", filepath.Join(t.TempDir(), "config.json"))
	image := u.Host + "/acme/cluster-agent"
	ref, err := run(filepath.Join("..", "..", "..", "..", "charts", "cluster-agent"), "v1.2.3", image, "oci://"+u.Host+"/acme/charts", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if want := u.Host + "/acme/charts/cluster-agent:1.2.3"; ref != want {
		t.Errorf("pushed to %s, want %s", ref, want)
	}

	client, err := helmregistry.NewClient(helmregistry.ClientOptPlainHTTP())
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := client.Pull(ref)
	if err != nil {
		t.Fatalf("cannot pull %s with Helm's client: %v", ref, err)
	}
	c, err := loader.LoadArchive(bytes.NewReader(pulled.Chart.Data))
	if err != nil {
		t.Fatalf("cannot load the pulled chart: %v", err)
	}
	if c.Metadata.Version != "1.2.3" || c.Metadata.AppVersion != "v1.2.3" {
		t.Errorf("pulled chart version %s, appVersion %s; want 1.2.3 and v1.2.3", c.Metadata.Version, c.Metadata.AppVersion)
	}
	values, err := util.ToRenderValues(c, nil, common.ReleaseOptions{Name: "mp-cluster-agent", Namespace: "modelplane-cluster-agent", IsInstall: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := engine.Engine{Strict: true}.RenderWithContext(context.Background(), c, values)
	if err != nil {
		t.Fatalf("cannot render the pulled chart: %v", err)
	}
	deployment := out["cluster-agent/templates/deployment.yaml"]
	if want := "image: " + image + ":v1.2.3"; !strings.Contains(deployment, want) {
		t.Errorf("the pulled chart's Deployment does not say %q:\n%s", want, deployment)
	}

	// Every other line of values.yaml is the chart's own.
	orig, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "charts", "cluster-agent", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var packaged []byte
	for _, f := range c.Raw {
		if f.Name == "values.yaml" {
			packaged = f.Data
		}
	}
	if diff := cmp.Diff(changedLines(orig), changedLines(packaged)); diff == "" {
		t.Error("values.yaml was packaged unchanged")
	}
	if o, p := strings.Count(string(orig), "\n"), strings.Count(string(packaged), "\n"); o != p {
		t.Errorf("values.yaml had %d lines, packaged %d", o, p)
	}
}

func changedLines(b []byte) []string {
	var out []string
	for l := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(l, "  repository:") || strings.HasPrefix(l, "  tag:") {
			out = append(out, l)
		}
	}
	return out
}

func TestSetImage(t *testing.T) {
	cases := map[string]struct {
		reason string
		values string
		want   string
		err    bool
	}{
		"ImageBlock": {
			reason: "Only the image block's repository and tag change.",
			values: "image:\n  # its repository\n  repository: a/b\n  tag: v0\n  pullPolicy: IfNotPresent\nother:\n  repository: c/d\n  tag: v9\n",
			want:   "image:\n  # its repository\n  repository: r/agent\n  tag: v1.0.0\n  pullPolicy: IfNotPresent\nother:\n  repository: c/d\n  tag: v9\n",
		},
		"NoTag": {
			reason: "An image block without a tag is refused.",
			values: "image:\n  repository: a/b\n",
			err:    true,
		},
		"NoImage": {
			reason: "values.yaml without an image block is refused.",
			values: "other:\n  repository: a/b\n  tag: v0\n",
			err:    true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := setImage([]byte(tc.values), "r/agent", "v1.0.0")
			if (err != nil) != tc.err {
				t.Fatalf("%s\nsetImage(...): error %v, want error %t", tc.reason, err, tc.err)
			}
			if diff := cmp.Diff(tc.want, string(got)); !tc.err && diff != "" {
				t.Errorf("%s\nsetImage(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
