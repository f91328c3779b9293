package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"

	"github.com/modelplaneai/fleet-scheduler/test/internal/pki"
	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

// The agent's kinds.
var (
	poolObservations    = schema.GroupVersionResource{Group: "agent.modelplane.ai", Version: "v1alpha1", Resource: "poolobservations"}
	replicaObservations = schema.GroupVersionResource{Group: "agent.modelplane.ai", Version: "v1alpha1", Resource: "replicaobservations"}
)

// eventually calls check until it returns nil, failing the test with its
// last error once timeout has passed (harness.Eventually, every 100ms). It
// returns how long it waited.
func eventually(t *testing.T, timeout time.Duration, what string, check func() error) time.Duration {
	t.Helper()
	return harness.Eventually(t, timeout, 100*time.Millisecond, what, check)
}

// install renders deploy/cluster-agent/ as `kubectl apply -k` does
// (kustomize) and applies every object it holds, server-side, as kubectl
// apply --server-side would. It returns the objects, and waits until the
// CRDs are served.
func (cp *controlPlane) install(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	return cp.installFrom(t, filepath.Join(cp.root, "deploy", "cluster-agent"))
}

// installFrom is install of the kustomization in dir.
func (cp *controlPlane) installFrom(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	objs := harness.Kustomize(t, dir)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cp.kube.Discovery()))
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		if gvk.Kind == "CustomResourceDefinition" || gvk.Kind == "Namespace" {
			cp.applyObject(t, mapper, u)
		}
	}
	eventually(t, time.Minute, "the agent's CRDs served", func() error {
		for _, gvr := range []schema.GroupVersionResource{poolObservations, replicaObservations} {
			if _, err := cp.dyn.Resource(gvr).List(t.Context(), metav1.ListOptions{Limit: 1}); err != nil {
				return err
			}
		}
		return nil
	})
	mapper.Reset()
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		if gvk.Kind != "CustomResourceDefinition" && gvk.Kind != "Namespace" {
			cp.applyObject(t, mapper, u)
		}
	}
	return objs
}

func (cp *controlPlane) applyObject(t *testing.T, mapper *restmapper.DeferredDiscoveryRESTMapper, u *unstructured.Unstructured) {
	t.Helper()
	gvk := u.GroupVersionKind()
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("the API server does not serve %s: %v", gvk, err)
	}
	b, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	force := true
	if _, err := cp.dyn.Resource(mapping.Resource).Namespace(u.GetNamespace()).Patch(t.Context(), u.GetName(), types.ApplyPatchType, b, metav1.PatchOptions{FieldManager: "kubectl", Force: &force}); err != nil {
		t.Fatalf("the API server refused %s %s/%s of the agent's manifests: %v", gvk.Kind, u.GetNamespace(), u.GetName(), err)
	}
}

// deploymentArgs are the shipped Deployment's container args and env
// names: the agent is run with them.
func deploymentArgs(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	return deployment(t, objs).Spec.Template.Spec.Containers[0].Args
}

// deployment is the agent's Deployment of the rendered objects.
func deployment(t *testing.T, objs []*unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() != "Deployment" {
			continue
		}
		d := &appsv1.Deployment{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	t.Fatal("the agent's manifests have no Deployment")
	return nil
}

// proxy stands between the agent and the API server, so that a test can
// stall every watch: responses of watch requests stop flowing (what they
// hold stays held) until the stall ends.
type proxy struct {
	addr string
	mu   sync.Mutex
	// resume is closed when the stall ends; nil when not stalled.
	resume chan struct{}
}

// startProxy serves, on loopback, a proxy of the API server, over TLS with
// a certificate of the test's CA (a kubeconfig's credentials are sent over
// TLS only).
func (cp *controlPlane) startProxy(t *testing.T) *proxy {
	t.Helper()
	target, err := url.Parse("https://" + cp.addr)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cp.ca.Cert)
	p := &proxy{}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target); r.Out.Host = target.Host },
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: false},
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if w := resp.Request.URL.Query().Get("watch"); w == "true" || w == "1" {
				resp.Body = &stallingBody{ReadCloser: resp.Body, p: p}
			}
			return nil
		},
		ErrorLog: nil,
	}
	var lc net.ListenConfig
	l, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serving := pki.LoopbackServer(t, cp.ca, "proxy")
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second, TLSConfig: &tls.Config{Certificates: []tls.Certificate{serving.TLSCertificate(t)}, MinVersion: tls.VersionTLS12}}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	t.Cleanup(func() { p.unstall(); _ = srv.Close() })
	p.addr = l.Addr().String()
	return p
}

// stall stops every watch response where it is.
func (p *proxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resume == nil {
		p.resume = make(chan struct{})
	}
}

// unstall lets the watches' responses flow again, what was held first.
func (p *proxy) unstall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resume != nil {
		close(p.resume)
		p.resume = nil
	}
}

func (p *proxy) wait() {
	p.mu.Lock()
	ch := p.resume
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// stallingBody holds what it read while the proxy is stalled.
type stallingBody struct {
	io.ReadCloser

	p *proxy
}

func (b *stallingBody) Read(buf []byte) (int, error) {
	b.p.wait()
	n, err := b.ReadCloser.Read(buf)
	b.p.wait()
	return n, err
}

// status is a PoolObservation's status as the recorder saw it.
type status struct {
	seen       time.Time
	pool       string
	synced     string
	observedAt time.Time
	// report is observedNodes and nodesByFreeDevices, as JSON.
	report string
	raw    map[string]any
}

// recorder watches every PoolObservation as an admin and keeps each
// status it sees, across API server restarts.
type recorder struct {
	mu       sync.Mutex
	statuses []status
}

func (cp *controlPlane) record(t *testing.T) *recorder {
	t.Helper()
	r := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		rv := ""
		for ctx.Err() == nil {
			w, err := cp.dyn.Resource(poolObservations).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				u, ok := ev.Object.(*unstructured.Unstructured)
				if !ok {
					if st, ok := ev.Object.(*metav1.Status); ok && st.Code == http.StatusGone {
						rv = ""
					}
					continue
				}
				rv = u.GetResourceVersion()
				if ev.Type == "BOOKMARK" {
					continue
				}
				r.add(u)
			}
			w.Stop()
		}
	}()
	return r
}

func (r *recorder) add(u *unstructured.Unstructured) {
	s := readStatus(u)
	s.seen = time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.statuses = append(r.statuses, s)
}

func (r *recorder) all() []status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]status(nil), r.statuses...)
}

// readStatus reads a PoolObservation's status.
func readStatus(u *unstructured.Unstructured) status {
	s := status{pool: u.GetName()}
	raw, _, _ := unstructured.NestedMap(u.Object, "status")
	s.raw = raw
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Synced" {
			s.synced, _ = m["status"].(string)
		}
	}
	if at, ok, _ := unstructured.NestedString(u.Object, "status", "observedAt"); ok {
		s.observedAt, _ = time.Parse(time.RFC3339, at)
	}
	report := map[string]any{"observedNodes": raw["observedNodes"], "nodesByFreeDevices": raw["nodesByFreeDevices"]}
	b, err := json.Marshal(report)
	if err != nil {
		b = []byte(fmt.Sprintf("cannot encode the report: %v", err))
	}
	s.report = string(b)
	return s
}

// poolStatus reads a PoolObservation's status from the API server.
func (cp *controlPlane) poolStatus(ctx context.Context, name string) (status, error) {
	u, err := cp.dyn.Resource(poolObservations).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return status{}, err
	}
	return readStatus(u), nil
}

// forbidden checks that the API server refuses err's request as
// forbidden.
func forbidden(t *testing.T, what string, err error) {
	t.Helper()
	if !kerrors.IsForbidden(err) {
		t.Errorf("%s: want the API server to refuse it (403 Forbidden), got %v", what, err)
	}
}
