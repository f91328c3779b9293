// Command build-index makes one multi-platform image of image tarballs of
// several architectures (build-image's), as an OCI image layout directory,
// and pushes it to a registry if asked.
//
//	build-index --tarball=agent-amd64.tar --tarball=agent-arm64.tar --output=_output/image/cluster-agent
//	build-index --layout=_output/image/cluster-agent --push=registry.example.com/cluster-agent:v0.1.0
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/modelplaneai/fleet-scheduler/tools/image"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "build-index:", err)
		os.Exit(1)
	}
}

func run() error {
	var tarballs list
	flag.Var(&tarballs, "tarball", "An image tarball of one architecture (build-image's --output); repeat for each.")
	output := flag.String("output", "", "OCI image layout directory to write the multi-platform image to.")
	from := flag.String("layout", "", "OCI image layout directory to push (build-index's --output).")
	push := flag.String("push", "", "Image reference to push --layout to; credentials from the Docker config (~/.docker/config.json).")
	flag.Parse()

	switch {
	case len(tarballs) > 0 && *output != "":
		return writeIndex(tarballs, *output)
	case *from != "" && *push != "":
		return pushIndex(*from, *push)
	default:
		return errors.New("either --tarball (repeated) and --output, or --layout and --push")
	}
}

// writeIndex writes one multi-platform image of tarballs to the OCI image
// layout directory output.
func writeIndex(tarballs []string, output string) error {
	imgs := make([]v1.Image, 0, len(tarballs))
	for _, t := range tarballs {
		img, err := tarball.ImageFromPath(t, nil)
		if err != nil {
			return fmt.Errorf("cannot read image tarball %s: %w", t, err)
		}
		if img, err = image.OCI(img); err != nil {
			return fmt.Errorf("image tarball %s: %w", t, err)
		}
		imgs = append(imgs, img)
	}
	idx, err := image.Index(imgs...)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(output); err != nil {
		return fmt.Errorf("cannot clear %s: %w", output, err)
	}
	if err := image.WriteLayout(output, idx); err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return fmt.Errorf("cannot compute the index digest: %w", err)
	}
	_, err = fmt.Fprintf(os.Stdout, "wrote %s (%d platforms, %s)\n", output, len(imgs), d)
	return err
}

// pushIndex pushes the multi-platform image of the OCI image layout
// directory from to the reference push.
func pushIndex(from, push string) error {
	p, err := layout.FromPath(from)
	if err != nil {
		return fmt.Errorf("cannot read OCI image layout %s: %w", from, err)
	}
	// layout.Write (build-index --output) writes the multi-platform index
	// as the layout's own index.json.
	idx, err := p.ImageIndex()
	if err != nil {
		return fmt.Errorf("cannot read the index of %s: %w", from, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return fmt.Errorf("cannot read the index manifest of %s: %w", from, err)
	}
	for _, d := range m.Manifests {
		if d.Platform == nil || !d.MediaType.IsImage() {
			return fmt.Errorf("%s is not a multi-platform image: %s (%s) has no platform", from, d.Digest, d.MediaType)
		}
	}
	ref, err := name.ParseReference(push)
	if err != nil {
		return fmt.Errorf("cannot parse image reference %q: %w", push, err)
	}
	if err := remote.WriteIndex(ref, idx, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("cannot push %s: %w", ref, err)
	}
	_, err = fmt.Fprintf(os.Stdout, "pushed %s\n", ref)
	return err
}

// list is a repeated flag.
type list []string

func (l *list) String() string { return strings.Join(*l, ",") }

func (l *list) Set(v string) error { *l = append(*l, v); return nil }
