// Command push-chart packages the cluster agent's Helm chart for a release
// and pushes it to an OCI registry with Helm's own registry client, as `helm
// package` and `helm push` would:
//
//	go run -C tools/chartrender ./cmd/push-chart --chart=../../charts/cluster-agent \
//	  --version=v0.1.0 --image=registry.example.com/acme/cluster-agent \
//	  --to=registry.example.com/acme/charts
//
// The packaged chart's version is the release's (without its leading v), its
// appVersion the release's, and its default image the one the release
// pushed (values.yaml's image.repository and image.tag), so that `helm
// install oci://<to>/cluster-agent --version <version>` runs that release's
// agent. Credentials come from Helm's registry config, then Docker's, as for
// `helm push`; a registry on a loopback address is spoken to over plain HTTP.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/registry"
)

func main() {
	dir := flag.String("chart", "", "the chart's directory")
	version := flag.String("version", "", "the release, a semantic version with a leading v (v0.1.0)")
	image := flag.String("image", "", "the agent's image the release pushed, without its tag")
	to := flag.String("to", "", "where to push the chart: the chart goes to <to>/<its name>:<version>")
	output := flag.String("output", "", "a directory to keep the packaged chart in (optional)")
	flag.Parse()
	ref, err := run(*dir, *version, *image, *to, *output)
	if err != nil {
		fmt.Fprintf(os.Stderr, "push-chart: %v\n", err)
		os.Exit(1)
	}
	if _, err := fmt.Fprintf(os.Stdout, "push-chart: %s\n", ref); err != nil {
		os.Exit(1)
	}
}

func run(dir, version, image, to, output string) (string, error) {
	if dir == "" || image == "" || to == "" {
		return "", errors.New("--chart, --image and --to are required")
	}
	c, err := loader.LoadDir(dir)
	if err != nil {
		return "", fmt.Errorf("cannot load the chart in %s: %w", dir, err)
	}
	if err := stamp(c, version, image); err != nil {
		return "", fmt.Errorf("cannot set chart %s's version and image: %w", c.Name(), err)
	}
	if output == "" {
		if output, err = os.MkdirTemp("", "push-chart-"); err != nil {
			return "", err
		}
		defer os.RemoveAll(output) //nolint:errcheck // A temporary directory.
	}
	file, err := chartutil.Save(c, output)
	if err != nil {
		return "", fmt.Errorf("cannot package chart %s: %w", c.Name(), err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	var opts []registry.ClientOption
	if loopback(to) {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	client, err := registry.NewClient(opts...)
	if err != nil {
		return "", fmt.Errorf("cannot create Helm's registry client: %w", err)
	}
	ref := strings.TrimSuffix(strings.TrimPrefix(to, "oci://"), "/") + "/" + c.Name() + ":" + c.Metadata.Version
	if _, err := client.Push(data, ref); err != nil {
		return "", fmt.Errorf("cannot push %s to %s: %w", filepath.Base(file), ref, err)
	}
	return ref, nil
}

// stamp sets the chart's version and appVersion to the release's, and its
// default image to image:version, in the parsed values and in values.yaml
// as packaged.
func stamp(c *chart.Chart, version, image string) error {
	if !strings.HasPrefix(version, "v") || len(version) < 2 {
		return fmt.Errorf("version %q is not a semantic version with a leading v", version)
	}
	c.Metadata.Version = strings.TrimPrefix(version, "v")
	c.Metadata.AppVersion = version
	if err := c.Metadata.Validate(); err != nil {
		return err
	}
	for _, f := range c.Raw {
		if f.Name != chartutil.ValuesfileName {
			continue
		}
		data, err := setImage(f.Data, image, version)
		if err != nil {
			return err
		}
		values, err := common.ReadValues(data)
		if err != nil {
			return fmt.Errorf("cannot read values.yaml as changed: %w", err)
		}
		got, _ := values["image"].(map[string]any)
		if got["repository"] != image || got["tag"] != version {
			return fmt.Errorf("values.yaml as changed has image %v, want repository %s and tag %s", got, image, version)
		}
		f.Data, c.Values = data, values
		return nil
	}
	return errors.New("the chart has no values.yaml")
}

// setImage rewrites the repository and tag lines of values.yaml's
// top-level image block, leaving its comments and every other line as they
// are.
func setImage(values []byte, image, tag string) ([]byte, error) {
	lines := bytes.Split(values, []byte("\n"))
	in, set := false, 0
	for i, l := range lines {
		s := string(l)
		switch {
		case s == "image:":
			in = true
		case in && len(s) > 0 && s[0] != ' ' && s[0] != '#':
			in = false
		case in && strings.HasPrefix(s, "  repository:"):
			lines[i], set = []byte("  repository: "+image), set+1
		case in && strings.HasPrefix(s, "  tag:"):
			lines[i], set = []byte("  tag: "+tag), set+1
		}
	}
	if set != 2 {
		return nil, errors.New("values.yaml has no image block with a repository and a tag")
	}
	return bytes.Join(lines, []byte("\n")), nil
}

// loopback says whether a reference's registry is on a loopback address
// (or localhost), which a test's registry is: plain HTTP there.
func loopback(ref string) bool {
	host, _, _ := strings.Cut(strings.TrimPrefix(ref, "oci://"), "/")
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
