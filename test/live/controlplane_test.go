package live

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/modelplaneai/fleet-scheduler/test/internal/pki"
	"github.com/modelplaneai/fleet-scheduler/test/internal/testenv"
	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

const (
	// functionName is the Function the example Composition's step references.
	functionName = "fleet-scheduler"
	// crossplaneNamespace is where Crossplane runs, as its Helm chart installs it.
	crossplaneNamespace = "crossplane-system"
	// circuitBreakerBurst is Crossplane's XR circuit breaker burst, in
	// tokens, as the live fleet (test/live/fleet) sets it: the default is
	// 100, one an event, refilled at one a second.
	circuitBreakerBurst = "1000"
)

// controlPlane is etcd, kube-apiserver, kube-controller-manager's garbage
// collector and Crossplane core, with the function installed from its
// package and served over mTLS.
type controlPlane struct {
	root string // the repository
	logs string // the processes' logs, kept after the test

	kube client.Client

	function     *harness.Process
	functionBin  string
	functionAddr string
	functionArgs []string
	// recorder stands between Crossplane and the function, and records
	// every request.
	recorder *recorder
	// crossplane is Crossplane core's process.
	crossplane *harness.Process
	// registry is the host of the package registry served on loopback.
	registry string
	// ca and server are the function's CA and server certificate: every
	// Function the test installs is served by the one function process.
	ca, server pki.KeyPair
}

// startControlPlane starts everything the live test needs and stops it when
// the test ends. crossplaneArgs go to `crossplane core start` too.
func startControlPlane(t *testing.T, crossplaneArgs ...string) *controlPlane {
	t.Helper()
	suite.Skip(t)
	cp := &controlPlane{root: testenv.RepoRoot(t), logs: suite.Logs()}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the processes' logs are in %s", cp.logs)
		}
	})

	cfg, kubeconfig := cp.startAPIServer(t)
	var err error
	if cp.kube, err = client.New(cfg, client.Options{}); err != nil {
		t.Fatalf("cannot create a client of the API server: %v", err)
	}
	// Registered after the API server's cleanup, so it runs before it.
	t.Cleanup(func() {
		if t.Failed() {
			cp.dumpObjects(t)
		}
	})
	cp.startControllerManager(t, kubeconfig)

	ca := pki.NewCA(t, "fleet-scheduler-live-ca")
	certs := filepath.Join(cp.logs, "certs")
	pki.WriteCertsDir(t, filepath.Join(certs, "crossplane"), pki.Client(t, ca, "crossplane"), ca)
	server := pki.LoopbackServer(t, ca, functionName)
	pki.WriteCertsDir(t, filepath.Join(certs, "function"), server, ca)
	cp.ca, cp.server = ca, server

	cp.startCrossplane(t, kubeconfig, filepath.Join(certs, "crossplane"), crossplaneArgs...)
	cp.functionBin = filepath.Join(os.Getenv(envArtifacts), "bin", "linux_"+runtime.GOARCH, "function")
	cp.functionAddr = testenv.FreeLoopbackAddr(t)
	cp.functionArgs = []string{"--debug", "--address=" + cp.functionAddr, "--tls-server-certs-dir=" + filepath.Join(certs, "function"), "--metrics-address=127.0.0.1:0"}
	cp.startFunction(t)
	cp.recorder = startRecorder(t, ca, server, cp.functionAddr)
	// A registry on loopback; ServeRegistry names a package in it.
	cp.registry = strings.SplitN(testenv.ServeRegistry(t), "/", 2)[0]
	cp.installFunction(t, functionName, cp.pushPackage(t, functionName+":v0.1.0", filepath.Join(os.Getenv(envArtifacts), "xpkg", "fleet-scheduler-"+runtime.GOARCH+".xpkg")))
	return cp
}

// startAPIServer starts etcd and kube-apiserver on loopback with envtest, from
// bin/control-plane. It returns a cluster-admin config and its kubeconfig file.
func (cp *controlPlane) startAPIServer(t *testing.T) (*rest.Config, string) {
	t.Helper()
	etcdLog := cp.logFile(t, "etcd")
	apiLog := cp.logFile(t, "kube-apiserver")
	api := &envtest.APIServer{Out: apiLog, Err: apiLog}
	// With no default route (the namespace has loopback only), the API
	// server cannot pick the address it advertises in the kubernetes
	// Service's endpoints, and it refuses to advertise a loopback one. No
	// pod here reaches it through that Service: keep no endpoints.
	api.Configure().Set("advertise-address", "127.0.0.1")
	api.Configure().Set("endpoint-reconciler-type", "none")
	env := &envtest.Environment{
		BinaryAssetsDirectory:    filepath.Join(cp.root, "bin", "control-plane"),
		ControlPlaneStartTimeout: 3 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
		ControlPlane: envtest.ControlPlane{
			Etcd:      &envtest.Etcd{Out: etcdLog, Err: etcdLog},
			APIServer: api,
		},
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("cannot start etcd and kube-apiserver: %v; their logs: %s, %s", err, etcdLog.Name(), apiLog.Name())
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Logf("cannot stop etcd and kube-apiserver: %v", err)
		}
	})
	kubeconfig := filepath.Join(cp.logs, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg, kubeconfig
}

// startControllerManager runs kube-controller-manager's garbage collector
// alone: Crossplane deletes the composed resources it no longer wants with
// foreground propagation, which leaves each with a foregroundDeletion
// finalizer that only the garbage collector removes.
func (cp *controlPlane) startControllerManager(t *testing.T, kubeconfig string) {
	t.Helper()
	p := harness.StartProcess(t, cp.logs, "kube-controller-manager", filepath.Join(cp.root, "bin", "control-plane", "kube-controller-manager"), nil,
		"--kubeconfig="+kubeconfig,
		"--controllers=garbagecollector",
		"--leader-elect=false",
		"--secure-port=0", // serves nothing
	)
	p.Running(t)
	cp.crossplane = p
}

// dumpObjects writes what the test's kinds hold to objects.yaml in the logs.
func (cp *controlPlane) dumpObjects(t *testing.T) {
	t.Helper()
	var b strings.Builder
	for _, k := range []struct{ apiVersion, kind string }{
		{apiVersion, "ModelDeployment"},
		{apiVersion, "ModelReplica"},
		{apiVersion, "ModelEndpoint"},
		{apiVersion, "InferenceCluster"},
		{"pkg.crossplane.io/v1", "Function"},
		{"pkg.crossplane.io/v1", "FunctionRevision"},
	} {
		l := &unstructured.UnstructuredList{}
		l.SetAPIVersion(k.apiVersion)
		l.SetKind(k.kind + "List")
		if err := cp.kube.List(context.Background(), l); err != nil {
			fmt.Fprintf(&b, "# cannot list %s: %v\n", k.kind, err)
			continue
		}
		for _, u := range l.Items {
			y, err := yaml.Marshal(u.Object)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "---\n%s", y)
		}
	}
	f := filepath.Join(cp.logs, "objects.yaml")
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		t.Logf("cannot write %s: %v", f, err)
		return
	}
	t.Logf("the objects as the test ended: %s", f)
}

// startCrossplane runs `crossplane core init`, which installs Crossplane's
// CRDs, then `crossplane core start` with the External runtime for Functions
// (nothing runs their Deployments: this test runs the function itself) and
// no webhooks (nothing could call them: there is no Service network).
func (cp *controlPlane) startCrossplane(t *testing.T, kubeconfig, clientCerts string, args ...string) {
	t.Helper()
	bin := filepath.Join(cp.root, "bin", "control-plane", "crossplane")
	env := []string{"KUBECONFIG=" + kubeconfig, "POD_NAMESPACE=" + crossplaneNamespace}
	cp.apply(t, harness.Object("v1", "Namespace", "", crossplaneNamespace))
	// The environment Crossplane's Helm chart gives its init container.
	initEnv := append([]string{
		"CRDS_PATH=" + filepath.Join(os.Getenv(envCrossplane), "cluster", "crds"),
		"TLS_CA_SECRET_NAME=crossplane-root-ca",
		"TLS_CLIENT_SECRET_NAME=crossplane-tls-client",
	}, env...)
	// Init applies the CRDs and uses them at once, before the API server
	// serves them; in a cluster the kubelet restarts the init container.
	for attempt := 1; ; attempt++ {
		err := harness.RunToEnd(t, cp.logs, "crossplane-init", bin, initEnv, "core", "init", "--enable-webhooks=false")
		if err == nil {
			break
		}
		if attempt == 5 {
			t.Fatalf("%v, %d times", err, attempt)
		}
		time.Sleep(2 * time.Second)
	}

	cache := filepath.Join(cp.logs, "xpkg-cache")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	// Crossplane listens on :<port> (every interface) for metrics and health:
	// in this test's network namespace that is loopback only.
	metricsPort := port(t)
	args = append([]string{
		"--debug", "core", "start",
		"--package-runtime=Function=External",
		"--enable-webhooks=false",
		"--tls-client-certs-dir=" + clientCerts,
		"--xpkg-cache-dir=" + cache,
		"--metrics-port=" + metricsPort,
		"--health-probe-port=" + port(t),
		// Crossplane v2.4 watches an XR's required resources too (on with
		// realtime compositions, the default): every write to an
		// InferenceCluster or to any ModelReplica of the fleet the
		// function read reconciles the XR. The test's writes (the
		// reports, the other teams' replicas labelled) spend the XR
		// circuit breaker's default burst of 100 tokens within seconds;
		// open, it drops the XR's own changes too for its 5-minute
		// cooldown, but for a probe every 30 s. Raised as the live fleet
		// raises it.
		"--circuit-breaker-burst=" + circuitBreakerBurst,
	}, args...)
	p := harness.StartProcess(t, cp.logs, "crossplane", bin, env, args...)
	p.Running(t)
	cp.crossplane = p
}

// startFunction starts the function binary of the package built for this
// test, serving RunFunction with mTLS on the loopback address picked for it.
func (cp *controlPlane) startFunction(t *testing.T) {
	t.Helper()
	cp.function = harness.StartProcess(t, cp.logs, "function", cp.functionBin, nil, cp.functionArgs...)
	cp.function.WaitListening(t, cp.functionAddr, 30*time.Second)
}

// stopFunction stops the function, as a pod that goes away.
func (cp *controlPlane) stopFunction(t *testing.T) {
	t.Helper()
	cp.function.Stop(t)
}

// pushPackage pushes a package file as repository (with its tag) to the
// registry served on loopback, in this process, and returns the package's
// reference.
func (cp *controlPlane) pushPackage(t *testing.T, repository, file string) string {
	t.Helper()
	ref := cp.registry + "/" + repository
	testenv.PushPackage(t, filepath.Join(cp.root, "bin", "crossplane"), ref, file)
	return ref
}

// installFunction installs the Function name from the package ref, as a
// platform team does, then does what Crossplane's Deployment runtime would for its revision, which
// with the External runtime is left to whoever runs the function: it stores
// the function's server certificate in the Secret the revision names and sets
// the revision's status.tlsServerSecretName (until then Crossplane does not
// establish the package's objects) and status.endpoint (which Crossplane
// dials, crossplane#5444, #6566): the recorder, which passes every call on
// to the test's one function process, whichever Function it is called as.
func (cp *controlPlane) installFunction(t *testing.T, name, ref string) {
	t.Helper()
	fn := harness.Object("pkg.crossplane.io/v1", "Function", "", name)
	fn.Object["spec"] = map[string]any{"package": ref}
	cp.apply(t, fn)

	var rev *unstructured.Unstructured
	eventually(t, 3*time.Minute, "a FunctionRevision of "+name, func() error {
		revs := harness.List(t, cp.kube, "pkg.crossplane.io/v1", "FunctionRevision", client.MatchingLabels{"pkg.crossplane.io/package": name})
		if len(revs) != 1 {
			return fmt.Errorf("%d revisions", len(revs))
		}
		rev = &revs[0]
		return nil
	})
	// The name the Deployment runtime gives it.
	secretName := name + "-tls-server"
	secret := harness.Object("v1", "Secret", crossplaneNamespace, secretName)
	secret.Object["type"] = "kubernetes.io/tls"
	secret.Object["stringData"] = map[string]any{"tls.crt": string(cp.server.CertPEM), "tls.key": string(cp.server.KeyPEM), "ca.crt": string(cp.ca.CertPEM)}
	cp.apply(t, secret)

	// Server-side applied, as its own field manager: the conditions are a
	// map by type, so Crossplane's own conditions stay as they are.
	status := map[string]any{
		"endpoint":            "dns:///" + cp.recorder.addr,
		"tlsServerSecretName": secretName,
		"conditions": []any{map[string]any{
			"type": "RuntimeHealthy", "status": "True", "reason": "HealthyPackageRevision",
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
		}},
	}
	s := harness.Object(rev.GetAPIVersion(), rev.GetKind(), "", rev.GetName())
	s.Object["status"] = status
	eventually(t, time.Minute, "the revision's status set as its runtime's", func() error {
		return cp.kube.Status().Apply(t.Context(), client.ApplyConfigurationFromUnstructured(s), client.FieldOwner("fleet-scheduler-live-runtime"), client.ForceOwnership)
	})
	eventually(t, 3*time.Minute, "Function "+name+" Installed and Healthy", func() error {
		got := harness.Get(t, cp.kube, "pkg.crossplane.io/v1", "Function", "", name)
		for _, c := range []string{"Installed", "Healthy"} {
			if s := conditionStatus(got, c); s != "True" {
				return fmt.Errorf("%s is %q: %s", c, s, conditionMessage(got, c))
			}
		}
		r := harness.Get(t, cp.kube, "pkg.crossplane.io/v1", "FunctionRevision", "", rev.GetName())
		if ep, _, _ := unstructured.NestedString(r.Object, "status", "endpoint"); !strings.HasSuffix(ep, cp.recorder.addr) {
			return fmt.Errorf("the revision's endpoint is %q", ep)
		}
		return nil
	})
}

func (cp *controlPlane) logFile(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(cp.logs, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// port returns a port nothing listens on now, on loopback.
func port(t *testing.T) string {
	t.Helper()
	addr := testenv.FreeLoopbackAddr(t)
	return addr[strings.LastIndex(addr, ":")+1:]
}
