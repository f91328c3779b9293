// Package e2e renders fixtures with the real `crossplane composition render`
// against the function built from this tree, and checks what it composes
// against the contract. TestMain builds the function, finds or builds the
// crossplane CLI (bin/crossplane, see hack/build-crossplane.sh; or
// $CROSSPLANE) and Crossplane core, whose render engine the CLI runs
// (bin/control-plane/crossplane, see hack/build-control-plane.sh; or
// $CROSSPLANE_CORE), and starts the function with --insecure on a free
// loopback port for every test to share. With -short, or when either binary
// is missing and cannot be built, the renders are skipped and say why; but
// not when CI=true or $CROSSPLANE or $CROSSPLANE_CORE is set, where a
// missing binary fails the run.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/modelplaneai/fleet-scheduler/e2e/internal/freshen"
)

// The environment shared by every test of the package, set up by TestMain.
var (
	// root is the repository's root directory.
	root string
	// crossplane is the crossplane CLI's path.
	crossplane string
	// core is the path of Crossplane core, whose render engine the CLI runs.
	core string
	// target is where the running function listens, host:port.
	target string
	// functionLog collects the function's output.
	functionLog *syncBuffer
	// skip, when not empty, is why the tests cannot run here.
	skip string
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cannot get working directory:", err)
		return 1
	}
	root = filepath.Dir(wd)

	if testing.Short() {
		skip = "e2e renders build and run the function and the crossplane CLI; not run with -short"
		return m.Run()
	}

	tmp, err := os.MkdirTemp("", "fleet-scheduler-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "cannot create temporary directory:", err)
		return 1
	}
	defer os.RemoveAll(tmp)

	crossplane, skip = findBinary("CROSSPLANE", "the crossplane CLI", "crossplane", "build-crossplane.sh")
	if skip == "" {
		core, skip = findBinary("CROSSPLANE_CORE", "Crossplane core", filepath.Join("control-plane", "crossplane"), "build-control-plane.sh", "crossplane")
	}
	if skip != "" {
		// CI builds both first (.ci/run), so there a missing one is a
		// failure, not a reason to skip.
		if os.Getenv("CI") == "true" || os.Getenv("CROSSPLANE") != "" || os.Getenv("CROSSPLANE_CORE") != "" {
			fmt.Fprintln(os.Stderr, "e2e:", skip)
			return 1
		}
		fmt.Fprintln(os.Stderr, "e2e: skipping the renders:", skip)
		return m.Run()
	}

	fn := filepath.Join(tmp, "function")
	build := exec.CommandContext(context.Background(), "go", "build", "-buildvcs=false", "-o", fn, ".")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "cannot build the function: %v\n%s", err, out)
		return 1
	}

	stop, err := startFunction(fn)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cannot start the function:", err)
		fmt.Fprint(os.Stderr, functionLog.String())
		return 1
	}
	defer stop()

	return m.Run()
}

// findBinary returns the binary named what to render with: $env if set, else
// bin/<bin>, built by hack/<script> with args when it is not current (the
// script does nothing when it is). It returns why not when there is none.
func findBinary(env, what, bin, script string, args ...string) (path, why string) {
	if p := os.Getenv(env); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			return "", fmt.Sprintf("$%s is %q, which is not an executable: %v", env, p, err)
		}
		return p, ""
	}
	p := filepath.Join(root, "bin", bin)
	cmd := exec.CommandContext(context.Background(), "bash", append([]string{filepath.Join(root, "hack", script)}, args...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		if _, statErr := os.Stat(p); statErr == nil {
			fmt.Fprintf(os.Stderr, "e2e: cannot rebuild bin/%s, using the one there: %v\n%s", bin, err, out)
			return p, ""
		}
		return "", fmt.Sprintf("no %s: bin/%s is absent and ./hack/%s failed (%v):\n%s", what, bin, script, err, out)
	}
	return p, ""
}

// startFunction starts the function on a free loopback port and waits until
// it accepts connections. A port taken between choosing it and listening on
// it is retried.
func startFunction(fn string) (stop func(), err error) {
	functionLog = &syncBuffer{}
	for range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		cmd := exec.CommandContext(context.Background(), fn, "--insecure", "--debug", "--address="+addr, "--metrics-address=")
		cmd.Stdout = functionLog
		cmd.Stderr = functionLog
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("cannot start %s: %w", fn, err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		stop := func() {
			_ = cmd.Process.Kill()
			<-exited
		}
		if err := waitListening(addr, exited, 30*time.Second); err != nil {
			stop()
			if errors.Is(err, errExited) {
				continue
			}
			return nil, err
		}
		target = addr
		return stop, nil
	}
	return nil, errors.New("the function exited before listening, three times")
}

var errExited = errors.New("the function exited")

func waitListening(addr string, exited <-chan error, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("%w before listening on %s: %w", errExited, addr, err)
		default:
		}
		d := net.Dialer{Timeout: time.Second}
		c, err := d.DialContext(context.Background(), "tcp", addr)
		if err == nil {
			_ = c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("the function did not listen on %s within %s", addr, timeout)
}

func freePort() (int, error) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("cannot find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// rendered is the output of one `crossplane composition render`.
type rendered struct {
	xr       *unstructured.Unstructured
	composed map[string]*unstructured.Unstructured // By composition resource name.
	results  []*unstructured.Unstructured
	raw      []byte
}

// render prepares the fixture in dir (relative to the repository root) and
// renders it with the real crossplane CLI against the running function.
func render(t *testing.T, dir string) rendered {
	t.Helper()
	if skip != "" {
		t.Skip(skip)
	}
	p, err := freshen.Prepare(filepath.Join(root, dir), filepath.Join(root, "example"), t.TempDir(), time.Now())
	if err != nil {
		t.Fatalf("cannot prepare fixture %s: %v", dir, err)
	}
	args := append(p.Args(), "--include-function-results",
		"--crossplane-binary="+core,
		"-a", "render.crossplane.io/runtime=Development",
		"-a", "render.crossplane.io/runtime-development-target="+target)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, crossplane, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("crossplane %v: %v\nstderr:\n%s\nfunction log:\n%s", args, err, stderr.String(), functionLog.String())
	}

	out := rendered{composed: map[string]*unstructured.Unstructured{}, raw: stdout.Bytes()}
	docs, err := decodeYAML(stdout.Bytes())
	if err != nil {
		t.Fatalf("cannot parse rendered YAML: %v\n%s", err, stdout.String())
	}
	for _, u := range docs {
		switch {
		case u.GetAPIVersion() == "render.crossplane.io/v1beta1" && u.GetKind() == "Result":
			out.results = append(out.results, u)
		case out.xr == nil:
			out.xr = u
		default:
			key := u.GetAnnotations()["crossplane.io/composition-resource-name"]
			if key == "" {
				t.Fatalf("rendered %s %s has no crossplane.io/composition-resource-name annotation", u.GetKind(), u.GetName())
			}
			out.composed[key] = u
		}
	}
	if out.xr == nil {
		t.Fatalf("crossplane composition render printed no XR:\n%s", stdout.String())
	}
	return out
}
