package fleet

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelplaneai/fleet-scheduler/test/internal/pki"
	"github.com/modelplaneai/fleet-scheduler/test/internal/testenv"
	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

// startEtcd starts the one etcd every API server of the fleet keeps its
// objects in, each under a key prefix of its own. It returns its client
// URL.
func (f *fleet) startEtcd(t *testing.T) string {
	t.Helper()
	addr, peer := testenv.FreeLoopbackAddr(t), testenv.FreeLoopbackAddr(t)
	p := harness.StartProcess(t, f.logs, "etcd", filepath.Join(f.bin, "etcd"), nil,
		"--data-dir="+filepath.Join(f.logs, "etcd-data"),
		"--listen-client-urls=http://"+addr, "--advertise-client-urls=http://"+addr,
		"--listen-peer-urls=http://"+peer, "--initial-advertise-peer-urls=http://"+peer,
		"--initial-cluster=default=http://"+peer,
		// The data is the test's: losing it on a crash loses nothing.
		"--unsafe-no-fsync", "--log-level=warn")
	p.WaitListening(t, addr, time.Minute)
	return "http://" + addr
}

// apiServer is one cluster's kube-apiserver: RBAC on, an admin token, and
// ServiceAccount tokens signed by a key of the test's.
type apiServer struct {
	name       string
	addr       string // 127.0.0.1:port
	ca         pki.KeyPair
	adminToken string
	dir        string // its certificates and kubeconfigs

	admin *rest.Config
	kube  kubernetes.Interface
	c     client.Client
}

// startAPIServer starts a cluster's kube-apiserver on etcd, under the key
// prefix /<name>, and waits until it is ready.
func (f *fleet) startAPIServer(t *testing.T, name, etcd string) *apiServer {
	t.Helper()
	a := &apiServer{name: name, addr: testenv.FreeLoopbackAddr(t), ca: pki.NewCA(t, name+"-ca"), adminToken: fmt.Sprintf("admin-%s-%d", name, time.Now().UnixNano())}
	a.dir = filepath.Join(f.logs, name)
	if err := os.MkdirAll(a.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	server := pki.LoopbackServer(t, a.ca, "kube-apiserver")
	sa := pki.NewCA(t, name+"-service-accounts") // only its key signs tokens
	for file, b := range map[string][]byte{
		"ca.crt": a.ca.CertPEM, "server.crt": server.CertPEM, "server.key": server.KeyPEM, "sa.key": sa.KeyPEM,
		"tokens.csv": []byte(a.adminToken + ",admin,admin,system:masters\n"),
	} {
		if err := os.WriteFile(filepath.Join(a.dir, file), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	port := a.addr[strings.LastIndex(a.addr, ":")+1:]
	p := harness.StartProcess(t, f.logs, name+"-kube-apiserver", filepath.Join(f.bin, "kube-apiserver"), nil,
		"--etcd-servers="+etcd, "--etcd-prefix=/"+name,
		"--bind-address=127.0.0.1", "--secure-port="+port,
		// With loopback only there is no address to advertise in the
		// kubernetes Service, and no pod reaches it through one.
		"--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
		"--tls-cert-file="+filepath.Join(a.dir, "server.crt"), "--tls-private-key-file="+filepath.Join(a.dir, "server.key"),
		"--client-ca-file="+filepath.Join(a.dir, "ca.crt"),
		"--token-auth-file="+filepath.Join(a.dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://"+a.addr,
		"--service-account-key-file="+filepath.Join(a.dir, "sa.key"),
		"--service-account-signing-key-file="+filepath.Join(a.dir, "sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16",
		"--cert-dir="+filepath.Join(a.dir, "apiserver-certs"),
		// Pods name no ServiceAccount and no controller makes the
		// default one of a namespace.
		"--disable-admission-plugins=ServiceAccount",
		// A pod tolerates a NotReady or unreachable node this long
		// (DefaultTolerationSeconds; 300 s by default), so that a dead
		// node's pods are evicted within the scenario (nodeDies).
		"--default-not-ready-toleration-seconds="+strconv.Itoa(tolerationSeconds),
		"--default-unreachable-toleration-seconds="+strconv.Itoa(tolerationSeconds),
	)
	a.admin = &rest.Config{Host: "https://" + a.addr, BearerToken: a.adminToken, TLSClientConfig: rest.TLSClientConfig{CAData: a.ca.CertPEM}, QPS: 100, Burst: 200}
	pool := x509.NewCertPool()
	pool.AddCert(a.ca.Cert)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	eventually(t, 3*time.Minute, name+"'s kube-apiserver ready", func() error {
		p.Running(t)
		return getOK(t.Context(), hc, "https://"+a.addr+"/readyz", a.adminToken)
	})
	var err error
	if a.kube, err = kubernetes.NewForConfig(a.admin); err != nil {
		t.Fatal(err)
	}
	if a.c, err = client.New(a.admin, client.Options{}); err != nil {
		t.Fatal(err)
	}
	return a
}

// token returns a token of a ServiceAccount, as the kubelet projects into
// its pods.
func (a *apiServer) token(t *testing.T, namespace, name string) string {
	t.Helper()
	tr, err := a.kube.CoreV1().ServiceAccounts(namespace).CreateToken(t.Context(), name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(7200))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("cannot request a token of ServiceAccount %s/%s of %s: %v", namespace, name, a.name, err)
	}
	return tr.Status.Token
}

// kubeconfig returns a kubeconfig of the API server as the token's owner,
// written to <dir>/<user>.kubeconfig. Written whole, by a rename: a
// process starting meanwhile (kube-scheduler) would otherwise read the
// file emptied, and fail with "no configuration has been provided".
func (a *apiServer) kubeconfig(t *testing.T, user, token string) ([]byte, string) {
	t.Helper()
	cfg := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{a.name: {Server: "https://" + a.addr, CertificateAuthorityData: a.ca.CertPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{user: {Token: token}},
		Contexts:       map[string]*clientcmdapi.Context{a.name: {Cluster: a.name, AuthInfo: user}},
		CurrentContext: a.name,
	}
	b, err := clientcmd.Write(cfg)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(a.dir, user+".kubeconfig")
	tmp, err := os.CreateTemp(a.dir, "."+user+".kubeconfig.*")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmp.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := tmp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		t.Fatal(err)
	}
	return b, file
}

// adminKubeconfig is the API server's kubeconfig as cluster-admin.
func (a *apiServer) adminKubeconfig(t *testing.T) ([]byte, string) {
	t.Helper()
	return a.kubeconfig(t, "admin", a.adminToken)
}
