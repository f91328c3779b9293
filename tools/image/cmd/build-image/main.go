// Command build-image writes fleet-scheduler's runtime image as an image
// tarball without a Docker engine, for `crossplane xpkg build
// --embed-runtime-image-tarball`, or the cluster agent's (--entrypoint,
// --port, --title).
//
//	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go build -o function-arm64 .
//	build-image --binary=function-arm64 --arch=arm64 --output=runtime-arm64.tar
package main

import (
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/modelplaneai/fleet-scheduler/tools/image"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "build-image:", err)
		os.Exit(1)
	}
}

func run() error {
	binary := flag.String("binary", "", "Path of the static linux function binary.")
	arch := flag.String("arch", "", "GOARCH of the binary: amd64 or arm64.")
	output := flag.String("output", "", "Path of the image tarball to write.")
	tag := flag.String("tag", "fleet-scheduler-runtime:latest", "Tag recorded in the tarball.")
	source := flag.String("source", "", "Value of the org.opencontainers.image.source label (optional).")
	revision := flag.String("revision", "", "Value of the org.opencontainers.image.revision label (optional).")
	title := flag.String("title", "fleet-scheduler", "Value of the org.opencontainers.image.title label.")
	entrypoint := flag.String("entrypoint", image.BinaryPath, "Where the binary lives in the image, and its entrypoint.")
	var ports portsFlag
	flag.Var(&ports, "port", "A port the image exposes, as <port>/tcp; repeat for more (default "+image.Port+").")
	flag.Parse()

	if *binary == "" || *arch == "" || *output == "" {
		return errors.New("--binary, --arch and --output are required")
	}
	if err := checkBinary(*binary, *arch); err != nil {
		return err
	}
	created, err := sourceDateEpoch()
	if err != nil {
		return err
	}
	bin, err := os.ReadFile(*binary)
	if err != nil {
		return fmt.Errorf("cannot read the binary: %w", err)
	}

	labels := map[string]string{"org.opencontainers.image.title": *title}
	if *source != "" {
		labels["org.opencontainers.image.source"] = *source
	}
	if *revision != "" {
		labels["org.opencontainers.image.revision"] = *revision
	}

	img, err := image.Build(bin, image.Options{Arch: *arch, Created: created, Labels: labels, Entrypoint: *entrypoint, Ports: ports})
	if err != nil {
		return err
	}
	if err := image.WriteTarball(*output, *tag, img); err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return fmt.Errorf("cannot compute image digest: %w", err)
	}
	_, err = fmt.Fprintf(os.Stdout, "wrote %s (linux/%s, %s)\n", *output, *arch, d)
	return err
}

// portsFlag is a repeated --port.
type portsFlag []string

func (p *portsFlag) String() string { return strings.Join(*p, ",") }

func (p *portsFlag) Set(v string) error {
	if !strings.HasSuffix(v, "/tcp") && !strings.HasSuffix(v, "/udp") {
		return fmt.Errorf("port %q is not <port>/tcp or <port>/udp", v)
	}
	*p = append(*p, v)
	return nil
}

// checkBinary refuses a binary for another architecture or one that needs a
// dynamic loader: the image has no libc.
func checkBinary(path, arch string) error {
	// The ELF machine a GOARCH's binaries carry, so that an amd64 binary
	// never ends up in an arm64 image.
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	want, ok := machines[arch]
	if !ok {
		return fmt.Errorf("unsupported architecture %q (want amd64 or arm64)", arch)
	}
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("cannot read %s as an ELF binary: %w", path, err)
	}
	defer f.Close() //nolint:errcheck // read-only file
	if f.Machine != want {
		return fmt.Errorf("%s is built for %s, not %s", path, f.Machine, arch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; build it with CGO_ENABLED=0", path)
		}
	}
	return nil
}

// sourceDateEpoch reads SOURCE_DATE_EPOCH (reproducible-builds.org); unset
// means the Unix epoch, so that the same binary gives the same image digest.
func sourceDateEpoch() (time.Time, error) {
	v := os.Getenv("SOURCE_DATE_EPOCH")
	if v == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	s, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("cannot parse SOURCE_DATE_EPOCH %q: %w", v, err)
	}
	return time.Unix(s, 0).UTC(), nil
}
