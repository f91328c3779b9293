package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelplaneai/fleet-scheduler/test/internal/pki"
	"github.com/modelplaneai/fleet-scheduler/test/internal/testenv"
	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

const (
	apiVersion          = "modelplane.ai/v1alpha1"
	crossplaneNamespace = "crossplane-system"
	systemNamespace     = "modelplane-system"
	objectAPIVersion    = "kubernetes.m.crossplane.io/v1alpha1"

	// releaseRepository is where the fleet's release is pushed in its
	// registry, as the README's ./hack/release.sh registry.example.com/acme.
	releaseRepository = "acme"

	// The Functions the Compositions reference: this project's, as the
	// package manager names them when installed from
	// <registry>/acme/<name>, where ./hack/release.sh pushes them (the
	// README's names), and Modelplane v0.3.1's, as it names v0.3.1's
	// dependencies; the stand-in serves its compose-inference-cluster and
	// compose-model-replica, and fleet-scheduler its
	// compose-model-deployment (docs/live-fleet.md).
	fnScheduler     = releaseRepository + "-fleet-scheduler"
	fnRelay         = releaseRepository + "-fleet-scheduler-relay"
	fnV03Cluster    = "modelplane-modelplanecompose-inference-cluster"
	fnV03Replica    = "modelplane-modelplanecompose-model-replica"
	fnV03Deployment = "modelplane-modelplanecompose-model-deployment"
	configuration   = "modelplane" // the Configuration Modelplane's guide creates
	v031Package     = "modelplane/modelplane:v0.3.1"
	rebuiltPackage  = "modelplane:v0.3.1-fleet-scheduler-v0.1.0"

	// relayAhead is how far the relay's clock runs ahead of Crossplane's
	// in the test: within the margin less a second, so PodsScheduled is
	// still never stamped before the agent's time.
	relayAhead = 3 * time.Second

	// circuitBreakerBurst is Crossplane's XR circuit breaker burst, in
	// tokens: the default is 100.
	circuitBreakerBurst = "1000"
)

// fleet is the control plane and the workload clusters.
type fleet struct {
	// owner is the test the fleet runs for: a process a scenario starts
	// again (the agent, kube-scheduler) runs until it ends, not the
	// scenario.
	owner                      *testing.T
	root, logs, bin, artifacts string
	etcd                       string
	cp                         *apiServer
	ca                         pki.KeyPair // signs the functions' and Crossplane's certificates
	certs                      string
	registry                   string
	repository                 string // <registry>/acme, where the release is pushed
	kwokConfig                 string // KWOK's stages (kwok_test.go)
	functions                  map[string]*function
	clusters                   map[string]*workload
}

// function is a composition function the test runs and installs.
type function struct {
	name, bin, addr string
	// metrics is where its /metrics is served; empty when it is not.
	metrics string
	args    []string
	proc    *harness.Process
	server  pki.KeyPair
}

// startFleet starts the control plane and the workload clusters of the
// scenarios (workloads), the function re-placing after replaceAfter and
// assuming LeastFree (see TestLiveFleet).
func startFleet(t *testing.T) *fleet {
	t.Helper()
	return startFleetOf(t, workloads(), map[string]string{"assumedBinding": "LeastFree", "replaceUnscheduledAfter": replaceAfter.String()})
}

// registryPlaceholder, in a value of the input startFleetOf is given,
// stands for where the fleet's release is pushed (<registry>/acme), its
// registry on loopback not being known before.
const registryPlaceholder = "${REGISTRY}"

// startFleetOf starts the control plane and the workload clusters, the
// function's step given input, and waits until every InferenceCluster is
// Ready, with its pools' reports where its agent runs.
func startFleetOf(t *testing.T, workloads []workloadSpec, input map[string]string) *fleet {
	t.Helper()
	suite.Skip(t)
	root := testenv.RepoRoot(t)
	f := &fleet{
		owner: t, root: root, logs: suite.Logs(), bin: filepath.Join(root, "bin", "control-plane"),
		artifacts: os.Getenv(envArtifacts), functions: map[string]*function{}, clusters: map[string]*workload{},
	}
	// On a failed start, the objects as they are, before the cleanups
	// stop the processes.
	defer func() {
		if t.Failed() {
			f.dump(t)
		}
	}()
	started := time.Now()
	f.etcd = f.startEtcd(t)
	f.cp = f.startAPIServer(t, "control-plane", f.etcd)
	_, kubeconfig := f.cp.adminKubeconfig(t)
	harness.StartProcess(t, f.logs, "control-plane-kube-controller-manager", filepath.Join(f.bin, "kube-controller-manager"), nil,
		"--kubeconfig="+kubeconfig,
		// Crossplane deletes composed resources with foreground
		// propagation; only the garbage collector finishes that.
		"--controllers=garbage-collector-controller", "--leader-elect=false", "--secure-port=0")
	for _, ns := range []string{crossplaneNamespace, systemNamespace} {
		apply(t, f.cp.c, harness.Object("v1", "Namespace", "", ns))
	}

	f.ca = pki.NewCA(t, "live-fleet-functions-ca")
	f.certs = filepath.Join(f.logs, "certs")
	pki.WriteCertsDir(t, filepath.Join(f.certs, "crossplane"), pki.Client(t, f.ca, "crossplane"), f.ca)
	f.startCrossplane(t, kubeconfig)
	f.startProvider(t, kubeconfig)
	if slices.ContainsFunc(workloads, func(w workloadSpec) bool { return w.agentByRelease }) {
		f.startProviderHelm(t, kubeconfig)
	}
	// A registry on loopback; ServeRegistry names a package in it.
	f.registry = strings.SplitN(testenv.ServeRegistry(t), "/", 2)[0]
	f.repository = f.registry + "/" + releaseRepository
	input = maps.Clone(input)
	for k, v := range input {
		input[k] = strings.ReplaceAll(v, registryPlaceholder, f.repository)
	}
	apis, v031 := harness.BuildModelplaneStandIn(t, filepath.Join(root, "bin", "crossplane"))
	// The README's path: a release, every artefact pushed (under acme/,
	// so that the package manager names the Functions acme-fleet-scheduler
	// and acme-fleet-scheduler-relay), with the fleet's input.
	release, log := harness.Release(t, root, f.repository, apis, harness.WriteInput(t, input))
	if err := os.WriteFile(filepath.Join(f.logs, "release.log"), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(release, "bin", "linux_"+runtime.GOARCH)
	// The function serves its metrics, as in production: the verify
	// checklist reads them, and they turn on its whole-node comparison.
	metrics := testenv.FreeLoopbackAddr(t)
	f.startFunction(t, fnScheduler, filepath.Join(bin, "function"), f.repository+"/fleet-scheduler:"+harness.ReleaseVersion, "--debug", "--metrics-address="+metrics)
	f.functions[fnScheduler].metrics = metrics
	f.startFunction(t, fnRelay, filepath.Join(bin, "relay"), f.repository+"/fleet-scheduler-relay:"+harness.ReleaseVersion,
		"--debug", "--metrics-address=", "--clock-offset="+relayAhead.String())
	// Modelplane v0.3.1's functions, as their dependencies are named.
	standin := filepath.Join(f.artifacts, "standin")
	f.startFunction(t, fnV03Cluster, filepath.Join(standin, "standin"), f.push(t, "modelplane/modelplane_compose-inference-cluster:v0.3.1", filepath.Join(standin, "standin.xpkg")),
		"--input="+f.writeStandinInput(t))
	f.installFunction(t, fnV03Replica, f.push(t, "modelplane/modelplane_compose-model-replica:v0.3.1", filepath.Join(standin, "standin.xpkg")), f.functions[fnV03Cluster])
	f.installFunction(t, fnV03Deployment, f.push(t, "modelplane/modelplane_compose-model-deployment:v0.3.1",
		filepath.Join(release, "xpkg", "fleet-scheduler-"+runtime.GOARCH+".xpkg")), f.functions[fnScheduler])
	f.installModelplane(t, f.push(t, v031Package, v031))
	t.Logf("the control plane started in %s", time.Since(started).Round(time.Second))

	f.kwokConfig = f.writeKWOKConfig(t)
	for _, w := range workloads {
		started := time.Now()
		f.clusters[w.name] = f.startWorkload(t, w)
		t.Logf("workload cluster %s started in %s", w.name, time.Since(started).Round(time.Second))
	}
	for _, w := range f.clusters {
		if w.spec.agentByRelease {
			f.runReleasedAgent(t, w)
		}
	}
	for name, w := range f.clusters {
		want := []string{"Ready", "PoolsObserved"}
		if w.spec.noAgent {
			want = want[:1]
		}
		eventually(t, 3*time.Minute, "InferenceCluster "+name+" Ready, and with an agent every pool reported", func() error {
			ic := f.inferenceCluster(t, name)
			for _, c := range want {
				if conditionString(ic, c, "status") != "True" {
					return fmt.Errorf("%s", describe(ic, c))
				}
			}
			return nil
		})
	}
	t.Logf("the fleet is Ready %s after it started", time.Since(started).Round(time.Second))
	// Registered last, so it runs first: the processes still run.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the processes' logs are in %s", f.logs)
			f.dump(t)
		}
	})
	return f
}

// startCrossplane runs `crossplane core init` (Crossplane's CRDs), then
// `crossplane core start` with the External runtime for Functions (the
// test runs them) and no webhooks (no Service network reaches them).
func (f *fleet) startCrossplane(t *testing.T, kubeconfig string) {
	t.Helper()
	bin := filepath.Join(f.bin, "crossplane")
	env := []string{"KUBECONFIG=" + kubeconfig, "POD_NAMESPACE=" + crossplaneNamespace}
	initEnv := append([]string{
		"CRDS_PATH=" + filepath.Join(os.Getenv(envCrossplane), "cluster", "crds"),
		"TLS_CA_SECRET_NAME=crossplane-root-ca",
		"TLS_CLIENT_SECRET_NAME=crossplane-tls-client",
	}, env...)
	// Init applies the CRDs and uses them at once, before the API server
	// serves them; in a cluster the kubelet restarts the init container.
	for attempt := 1; ; attempt++ {
		err := harness.RunToEnd(t, f.logs, "crossplane-init", bin, initEnv, "core", "init", "--enable-webhooks=false")
		if err == nil {
			break
		}
		if attempt == 5 {
			t.Fatalf("%v, %d times", err, attempt)
		}
		time.Sleep(2 * time.Second)
	}
	cache := filepath.Join(f.logs, "xpkg-cache")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	harness.StartProcess(t, f.logs, "crossplane", bin, env, "--debug", "core", "start",
		"--package-runtime=Function=External",
		"--enable-webhooks=false",
		"--tls-client-certs-dir="+filepath.Join(f.certs, "crossplane"),
		"--xpkg-cache-dir="+cache,
		"--metrics-port="+port(t),
		"--health-probe-port="+port(t),
		// Composing an XR's Objects spends the default burst of its
		// circuit breaker (100 tokens, 2 an update) within seconds, and
		// for the 5-minute cooldown a change of its Objects then reaches
		// it only at the 30s probe or the poll (docs/production.md, A
		// live fleet). Burst raised as docs/production.md recommends.
		"--circuit-breaker-burst="+circuitBreakerBurst,
	).Running(t)
}

// startProvider installs provider-kubernetes' CRDs and runs it with
// watches on, as Modelplane runs it: each Object's remote object is
// watched, so its status follows within seconds, not the 10-minute poll.
func (f *fleet) startProvider(t *testing.T, kubeconfig string) {
	t.Helper()
	f.installProviderCRDs(t, "provider-kubernetes", os.Getenv(envProvider))
	// Its conversion webhook serves on :9443 with a certificate of ours;
	// nothing calls it (the CRDs name no webhook).
	dir := filepath.Join(f.certs, "provider-kubernetes")
	pki.WriteCertsDir(t, dir, pki.LoopbackServer(t, f.ca, "provider-kubernetes"), f.ca)
	harness.StartProcess(t, f.logs, "provider-kubernetes", filepath.Join(f.bin, "provider-kubernetes"),
		[]string{"KUBECONFIG=" + kubeconfig, "TLS_SERVER_CERTS_DIR=" + dir, "POD_NAMESPACE=" + crossplaneNamespace},
		"--debug", "--enable-watches", "--health-probe-bind-addr=127.0.0.1:"+port(t),
	).Running(t)
}

// startProviderHelm installs provider-helm's CRDs and runs it: the
// provider of the relay's Release of the agent (TestAgentRelease).
func (f *fleet) startProviderHelm(t *testing.T, kubeconfig string) {
	t.Helper()
	f.installProviderCRDs(t, "provider-helm", os.Getenv(envProviderHelm))
	harness.StartProcess(t, f.logs, "provider-helm", filepath.Join(f.bin, "provider-helm"),
		[]string{"KUBECONFIG=" + kubeconfig, "POD_NAMESPACE=" + crossplaneNamespace}, "--debug",
	).Running(t)
}

// installProviderCRDs applies the CRDs of a provider's package, from its
// module directory, and waits until each is Established.
func (f *fleet) installProviderCRDs(t *testing.T, provider, module string) {
	t.Helper()
	crds, err := filepath.Glob(filepath.Join(module, "package", "crds", "*.yaml"))
	if err != nil || len(crds) == 0 {
		t.Fatalf("no CRDs of %s in %s: %v", provider, module, err)
	}
	for _, file := range crds {
		for _, crd := range harness.ReadObjects(t, file) {
			// A cluster-scoped kind converts between its versions through
			// the provider's webhook, whose Service Crossplane's package
			// manager fills in. Nothing here uses those kinds: served
			// without conversion.
			if strategy, _, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "strategy"); strategy == "Webhook" {
				unstructured.RemoveNestedField(crd.Object, "spec", "conversion")
			}
			apply(t, f.cp.c, crd)
		}
	}
	for _, file := range crds {
		for _, crd := range harness.ReadObjects(t, file) {
			f.waitEstablished(t, crd.GetName())
		}
	}
}

// waitEstablished waits until a CRD is Established.
func (f *fleet) waitEstablished(t *testing.T, name string) {
	t.Helper()
	eventually(t, 2*time.Minute, "CRD "+name+" Established", func() error {
		crd := harness.Get(t, f.cp.c, "apiextensions.k8s.io/v1", "CustomResourceDefinition", "", name)
		if conditionString(crd, "Established", "status") != "True" {
			return fmt.Errorf("%s", describe(crd, "Established"))
		}
		return nil
	})
}

// startFunction starts a function from its binary, serving with mTLS on a
// loopback address, and installs it as the Function name from the package
// ref.
func (f *fleet) startFunction(t *testing.T, name, bin, ref string, args ...string) {
	t.Helper()
	fn := &function{name: name, bin: bin, addr: testenv.FreeLoopbackAddr(t), server: pki.LoopbackServer(t, f.ca, name)}
	dir := filepath.Join(f.certs, name)
	pki.WriteCertsDir(t, dir, fn.server, f.ca)
	fn.args = append([]string{"--address=" + fn.addr, "--tls-server-certs-dir=" + dir}, args...)
	fn.proc = harness.StartProcess(t, f.logs, name, bin, nil, fn.args...)
	fn.proc.WaitListening(t, fn.addr, 30*time.Second)
	f.functions[name] = fn
	f.installFunction(t, name, ref, fn)
}

// push pushes a package file to the test's registry as repository (with
// its tag) and returns its reference.
func (f *fleet) push(t *testing.T, repository, file string) string {
	t.Helper()
	ref := f.registry + "/" + repository
	testenv.PushPackage(t, filepath.Join(f.root, "bin", "crossplane"), ref, file)
	return ref
}

// installFunction installs the Function name from the package ref, served
// by fn, then does what Crossplane's Deployment runtime would for its
// revision (with the External runtime that is left to whoever runs the
// function): the server certificate in the Secret the revision names, and
// the revision's status.tlsServerSecretName and status.endpoint.
func (f *fleet) installFunction(t *testing.T, name, ref string, fn *function) {
	t.Helper()
	pkg := harness.Object("pkg.crossplane.io/v1", "Function", "", name)
	pkg.Object["spec"] = map[string]any{"package": ref}
	apply(t, f.cp.c, pkg)
	var rev unstructured.Unstructured
	eventually(t, 3*time.Minute, "a FunctionRevision of "+name, func() error {
		revs := harness.List(t, f.cp.c, "pkg.crossplane.io/v1", "FunctionRevision", client.MatchingLabels{"pkg.crossplane.io/package": name})
		if len(revs) != 1 {
			return fmt.Errorf("%d revisions", len(revs))
		}
		rev = revs[0]
		return nil
	})
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: crossplaneNamespace, Name: name + "-tls-server"},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": fn.server.CertPEM, "tls.key": fn.server.KeyPEM, "ca.crt": f.ca.CertPEM},
	}
	if err := f.cp.c.Create(t.Context(), secret); err != nil {
		t.Fatalf("cannot create Secret %s: %v", secret.Name, err)
	}
	// Server-side applied as a field manager of its own: conditions are a
	// map by type, so Crossplane's stay as they are.
	s := harness.Object(rev.GetAPIVersion(), rev.GetKind(), "", rev.GetName())
	s.Object["status"] = map[string]any{
		"endpoint":            "dns:///" + fn.addr,
		"tlsServerSecretName": secret.Name,
		"conditions": []any{map[string]any{
			"type": "RuntimeHealthy", "status": "True", "reason": "HealthyPackageRevision",
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
		}},
	}
	eventually(t, time.Minute, "revision "+rev.GetName()+"'s status set as its runtime's", func() error {
		return f.cp.c.Status().Apply(t.Context(), client.ApplyConfigurationFromUnstructured(s), client.FieldOwner("live-fleet-runtime"), client.ForceOwnership)
	})
	eventually(t, 3*time.Minute, "Function "+name+" Installed and Healthy", func() error {
		got := harness.Get(t, f.cp.c, "pkg.crossplane.io/v1", "Function", "", name)
		for _, c := range []string{"Installed", "Healthy"} {
			if conditionString(got, c, "status") != "True" {
				return fmt.Errorf("%s", describe(got, c))
			}
		}
		return nil
	})
}

// writeStandinInput writes the stand-in's Input, the fleet's
// InferenceClasses, for v0.3.1's InferenceCluster step, which has none.
func (f *fleet) writeStandinInput(t *testing.T) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"classes": classes(), "gatewayDomain": "gw.fleet.test"})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(f.logs, "standin-input.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// installModelplane installs the stand-in for Modelplane v0.3.1's
// Configuration package from the registry (ref), as Modelplane's guide
// installs v0.3.1 but for skipDependencyResolution (its dependencies are
// the Functions the test installed, under the names the package manager
// would give them), then follows the README: the Configuration pointed at
// the rebuild ./hack/release.sh pushed.
func (f *fleet) installModelplane(t *testing.T, ref string) {
	t.Helper()
	harness.InstallConfiguration(t, f.cp.c, configuration, ref)
	harness.SetConfigurationPackage(t, f.cp.c, configuration, f.repository+"/"+rebuiltPackage)
	harness.WaitConfiguration(t, f.cp.c, configuration, f.repository+"/"+rebuiltPackage)
	for _, xrd := range []string{"inferenceclusters", "modeldeployments", "modelreplicas", "modelcaches", "modelendpoints"} {
		eventually(t, 2*time.Minute, "XRD "+xrd+".modelplane.ai Established", func() error {
			got := harness.Get(t, f.cp.c, "apiextensions.crossplane.io/v1", "CompositeResourceDefinition", "", xrd+".modelplane.ai")
			if conditionString(got, "Established", "status") != "True" {
				return fmt.Errorf("%s", describe(got, "Established"))
			}
			return nil
		})
	}
	eventually(t, 2*time.Minute, "the InferenceCluster CRD with the agent's report fields", func() error {
		has, err := harness.SchemaHas(t, f.cp.c, "inferenceclusters.modelplane.ai", "observedAt")
		if err == nil && !has {
			err = errors.New("not in its schema yet")
		}
		return err
	})
	apply(t, f.cp.c, harness.Object("v1", "Namespace", "", namespace))
}

// inferenceCluster reads an InferenceCluster.
func (f *fleet) inferenceCluster(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	return harness.Get(t, f.cp.c, apiVersion, "InferenceCluster", "", name)
}

// dump writes the control plane's and the workload clusters' objects to
// the logs.
func (f *fleet) dump(t *testing.T) {
	t.Helper()
	dump(t, f.cp.c, filepath.Join(f.logs, "control-plane-objects.yaml"),
		[2]string{apiVersion, "ModelDeployment"}, [2]string{apiVersion, "ModelReplica"}, [2]string{apiVersion, "InferenceCluster"},
		[2]string{objectAPIVersion, "Object"}, [2]string{"pkg.crossplane.io/v1", "Function"})
	for name, w := range f.clusters {
		dump(t, w.api.c, filepath.Join(f.logs, name+"-objects.yaml"),
			[2]string{"v1", "Pod"}, [2]string{"resource.k8s.io/v1", "ResourceClaim"}, [2]string{"apps/v1", "Deployment"},
			[2]string{agentAPIVersion, "PoolObservation"}, [2]string{agentAPIVersion, "ReplicaObservation"}, [2]string{"v1", "Node"})
	}
}

// port returns a port nothing listens on now, on loopback.
func port(t *testing.T) string {
	t.Helper()
	addr := testenv.FreeLoopbackAddr(t)
	return addr[strings.LastIndex(addr, ":")+1:]
}
