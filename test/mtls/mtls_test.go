// Package mtls starts the function the way its runtime image does and checks
// that it serves RunFunction over mutual TLS only: it builds the static binary
// and the runtime image (tools/image), lays the image's filesystem out,
// starts its entrypoint with its environment and user plus the
// TLS_SERVER_CERTS_DIR Crossplane sets, with certificates generated here, and
// calls it with good and bad clients.
package mtls

import (
	"archive/tar"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/modelplaneai/fleet-scheduler/test/internal/pki"
	"github.com/modelplaneai/fleet-scheduler/test/internal/testenv"
	"github.com/modelplaneai/fleet-scheduler/tools/image"
)

// metricsPort is where function-sdk-go serves Prometheus metrics, on every
// interface, unless the binary takes --metrics-address.
const metricsPort = "8080"

func TestServesRunFunctionOnlyOverMutualTLS(t *testing.T) {
	dir := sharedTempDir(t)

	bin, err := os.ReadFile(testenv.BuildFunction(t, runtime.GOARCH, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	img, err := image.Build(bin, image.Options{Arch: runtime.GOARCH})
	if err != nil {
		t.Fatal(err)
	}
	rootfs := filepath.Join(dir, "rootfs")
	extract(t, img, rootfs)

	ca := pki.NewCA(t, "crossplane-root-ca")
	server := pki.LoopbackServer(t, ca, "fleet-scheduler")
	client := pki.Client(t, ca, "crossplane")
	certs := filepath.Join(dir, "certs")
	pki.WriteCertsDir(t, certs, server, ca)

	addr := start(t, img, rootfs, certs)

	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)

	good := credentials.NewTLS(&tls.Config{
		MinVersion:   tls.VersionTLS12,
		RootCAs:      roots,
		Certificates: []tls.Certificate{client.TLSCertificate(t)},
	})
	t.Run("a client whose certificate the CA signed gets a response", func(t *testing.T) {
		expectResponse(t, addr, good)
	})

	rogueCA := pki.NewCA(t, "rogue-ca")
	refused := map[string]struct {
		reason string
		creds  credentials.TransportCredentials
	}{
		"NoCertificate": {
			reason: "A client that presents no certificate is refused.",
			creds:  credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}),
		},
		"OtherCA": {
			reason: "A client whose certificate a CA other than ca.crt signed is refused.",
			creds: credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, Certificates: []tls.Certificate{
				pki.Client(t, rogueCA, "crossplane").TLSCertificate(t),
			}}),
		},
		"Expired": {
			reason: "A client whose certificate the CA signed but that has expired is refused.",
			creds: credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, Certificates: []tls.Certificate{
				pki.NewLeaf(t, ca, pki.Options{CommonName: "crossplane", Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, NotAfter: time.Now().Add(-time.Hour)}).TLSCertificate(t),
			}}),
		},
		"ServerOnlyUsage": {
			reason: "A client presenting a certificate the CA signed for server authentication only is refused.",
			creds: credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, Certificates: []tls.Certificate{
				pki.NewLeaf(t, ca, pki.Options{CommonName: "crossplane", Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}).TLSCertificate(t),
			}}),
		},
		"Plaintext": {
			reason: "A client that does not speak TLS at all is refused.",
			creds:  insecure.NewCredentials(),
		},
	}
	for name, tc := range refused {
		t.Run(name, func(t *testing.T) {
			rsp, err := call(t, addr, tc.creds, &fnv1.RunFunctionRequest{Meta: &fnv1.RequestMeta{Tag: "refused"}})
			if err == nil {
				t.Fatalf("%s\nRunFunction succeeded, want it refused; response: %v", tc.reason, rsp)
			}
			if got := status.Code(err); got != codes.Unavailable {
				t.Errorf("%s\nRunFunction error code: want %s, got %s (%v)", tc.reason, codes.Unavailable, got, err)
			}
			t.Logf("refused as expected: %v", err)
		})
	}

	// The refusals above were the certificates', not a server gone away.
	t.Run("the function still answers a good client after refusing the others", func(t *testing.T) {
		expectResponse(t, addr, good)
	})
}

// expectResponse calls RunFunction and expects the response to this request.
func expectResponse(t *testing.T, addr string, creds credentials.TransportCredentials) {
	t.Helper()
	tag := "mtls-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	rsp, err := call(t, addr, creds, &fnv1.RunFunctionRequest{Meta: &fnv1.RequestMeta{Tag: tag}})
	if err != nil {
		t.Fatalf("RunFunction over mTLS: %v", err)
	}
	// The response answers this request: it echoes the request's tag.
	if diff := cmp.Diff(&fnv1.ResponseMeta{Tag: tag}, rsp.GetMeta(), protocmp.Transform(), protocmp.IgnoreFields(&fnv1.ResponseMeta{}, "ttl")); diff != "" {
		t.Errorf("response meta: -want, +got:\n%s", diff)
	}
}

// call makes one RunFunction call on a fresh connection.
func call(t *testing.T, addr string, creds credentials.TransportCredentials, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return fnv1.NewFunctionRunnerServiceClient(conn).RunFunction(ctx, req)
}

// start runs the image's entrypoint as its config says (environment, working
// directory, user), plus TLS_SERVER_CERTS_DIR as Crossplane sets it, on a
// loopback port instead of the image's :9443 (every interface). It returns the
// address once the function accepts connections.
func start(t *testing.T, img v1.Image, rootfs, certs string) string {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if len(cf.Config.Entrypoint) != 1 {
		t.Fatalf("entrypoint %v: want the function binary alone", cf.Config.Entrypoint)
	}
	entrypoint := filepath.Join(rootfs, cf.Config.Entrypoint[0])

	help, err := exec.CommandContext(t.Context(), entrypoint, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --help: %v\n%s", cf.Config.Entrypoint[0], err, help)
	}
	if !strings.Contains(string(help), `--address=":9443"`) {
		t.Errorf("the function's default address is not :9443, the port the image exposes:\n%s", help)
	}

	addr := testenv.FreeLoopbackAddr(t)
	args := []string{"--address=" + addr}
	if strings.Contains(string(help), "--metrics-address") {
		args = append(args, "--metrics-address=127.0.0.1:0")
	} else {
		holdMetricsPort(t)
	}

	var out strings.Builder
	// Not CommandContext: the cleanup below stops the function and reaps it.
	cmd := exec.Command(entrypoint, args...) //nolint:noctx // stopped by t.Cleanup
	cmd.Dir = filepath.Join(rootfs, cf.Config.WorkingDir)
	cmd.Env = append(append([]string{}, cf.Config.Env...), "TLS_SERVER_CERTS_DIR="+certs)
	cmd.Stdout = &out
	cmd.Stderr = &out
	if os.Geteuid() == 0 {
		uid, gid := parseUser(t, cf.Config.User)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("cannot start the function: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		t.Logf("function output:\n%s", out.String())
	})

	if os.Geteuid() == 0 {
		checkRunsAs(t, cmd.Process.Pid, cf.Config.User)
	}

	deadline := time.After(30 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the function exited before serving: %v\n%s", err, out.String())
		case <-deadline:
			t.Fatalf("the function did not listen on %s within 30s", addr)
		case <-time.After(50 * time.Millisecond):
		}
		d := net.Dialer{Timeout: time.Second}
		c, err := d.DialContext(t.Context(), "tcp", addr)
		if err == nil {
			_ = c.Close()
			return addr
		}
	}
}

// checkRunsAs checks the function process runs as the image's user, not root.
func checkRunsAs(t *testing.T, pid int, user string) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := parseUser(t, user)
	for l := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" {
			if f[1] != strconv.FormatUint(uint64(uid), 10) {
				t.Errorf("the function runs as uid %s, want the image's user %s", f[1], user)
			}
			return
		}
	}
	t.Errorf("no Uid in /proc/%d/status", pid)
}

// holdMetricsPort listens on 127.0.0.1:8080 for the test's duration. The
// binary serves metrics on every interface at :8080 and ignores a failure to
// bind, so holding the port keeps the test from exposing anything beyond
// loopback. If the port is taken already the function cannot bind it either.
func holdMetricsPort(t *testing.T) {
	t.Helper()
	var lc net.ListenConfig
	l, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:"+metricsPort)
	if err != nil {
		t.Logf("127.0.0.1:%s is taken (%v); the function's metrics server cannot bind it either", metricsPort, err)
		return
	}
	t.Cleanup(func() { _ = l.Close() })
}

func parseUser(t *testing.T, user string) (uint32, uint32) {
	t.Helper()
	u, g, _ := strings.Cut(user, ":")
	uid, err := strconv.ParseUint(u, 10, 32)
	if err != nil {
		t.Fatalf("image user %q is not numeric: %v", user, err)
	}
	gid := uid
	if g != "" {
		if gid, err = strconv.ParseUint(g, 10, 32); err != nil {
			t.Fatalf("image group %q is not numeric: %v", user, err)
		}
	}
	return uint32(uid), uint32(gid)
}

// sharedTempDir returns a temporary directory the image's nonroot user can
// traverse (t.TempDir's parent is private to root).
func sharedTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fleet-scheduler-mtls-") //nolint:usetesting // t.TempDir's parent is private to root
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// extract lays out the image's filesystem under dir, with the layers' modes
// and, when running as root, their owners.
func extract(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		if err := untar(rc, dir); err != nil {
			t.Fatalf("cannot extract image layer: %v", err)
		}
		_ = rc.Close()
	}
}

func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, tr); err != nil {
				_ = f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: unexpected tar entry type %c", h.Name, h.Typeflag)
		}
		if err := os.Chmod(p, os.FileMode(h.Mode).Perm()|sticky(h.Mode)); err != nil {
			return err
		}
		if os.Geteuid() == 0 {
			if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
				return err
			}
		}
	}
}

func sticky(mode int64) os.FileMode {
	if mode&0o1000 != 0 {
		return os.ModeSticky
	}
	return 0
}
