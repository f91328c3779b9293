package agent

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/modelplaneai/fleet-scheduler/test/internal/pki"
	"github.com/modelplaneai/fleet-scheduler/test/internal/testenv"
	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

// controlPlane is etcd and kube-apiserver, run as processes of the test's
// so that the API server can be killed and started again on the same
// address, certificates and etcd.
type controlPlane struct {
	root, logs string
	bin        string // bin/control-plane
	// top is the test the processes live as long as.
	top *testing.T

	ca         pki.KeyPair
	addr       string // the API server's, 127.0.0.1:port
	adminToken string
	apiArgs    []string

	etcd *harness.Process
	api  *harness.Process

	admin *rest.Config
	kube  kubernetes.Interface
	dyn   dynamic.Interface
}

// startControlPlane starts etcd and kube-apiserver with RBAC, a static
// admin token and ServiceAccount tokens signed by a key of the test's.
func startControlPlane(t *testing.T) *controlPlane {
	t.Helper()
	suite.Skip(t)
	root := testenv.RepoRoot(t)
	cp := &controlPlane{root: root, logs: suite.Logs(), bin: filepath.Join(root, "bin", "control-plane"), top: t, adminToken: "admin-" + fmt.Sprint(time.Now().UnixNano())}
	dir := filepath.Join(cp.logs, "pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cp.ca = pki.NewCA(t, "agent-test-ca")
	server := pki.LoopbackServer(t, cp.ca, "kube-apiserver")
	sa := pki.NewCA(t, "service-accounts") // only its key signs tokens
	files := map[string][]byte{
		"ca.crt": cp.ca.CertPEM, "server.crt": server.CertPEM, "server.key": server.KeyPEM, "sa.key": sa.KeyPEM,
		"tokens.csv": []byte(cp.adminToken + ",admin,admin,system:masters\n"),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	etcdAddr, peerAddr := testenv.FreeLoopbackAddr(t), testenv.FreeLoopbackAddr(t)
	// Each test's cluster starts empty: a data directory of its own, not
	// the one an earlier test of the run left its objects in.
	cp.etcd = harness.StartProcess(t, cp.logs, "etcd", filepath.Join(cp.bin, "etcd"), nil,
		"--data-dir="+filepath.Join(cp.logs, "etcd-data-"+strings.ReplaceAll(t.Name(), "/", "_")),
		"--listen-client-urls=http://"+etcdAddr, "--advertise-client-urls=http://"+etcdAddr,
		"--listen-peer-urls=http://"+peerAddr, "--initial-advertise-peer-urls=http://"+peerAddr,
		"--initial-cluster=default=http://"+peerAddr,
		"--unsafe-no-fsync", "--log-level=warn")
	cp.etcd.WaitListening(t, etcdAddr, time.Minute)

	cp.addr = testenv.FreeLoopbackAddr(t)
	port := cp.addr[strings.LastIndex(cp.addr, ":")+1:]
	cp.apiArgs = []string{
		"--etcd-servers=http://" + etcdAddr,
		"--bind-address=127.0.0.1", "--secure-port=" + port,
		"--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
		"--tls-cert-file=" + filepath.Join(dir, "server.crt"), "--tls-private-key-file=" + filepath.Join(dir, "server.key"),
		"--client-ca-file=" + filepath.Join(dir, "ca.crt"),
		"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://" + cp.addr,
		"--service-account-key-file=" + filepath.Join(dir, "sa.key"),
		"--service-account-signing-key-file=" + filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16",
		"--cert-dir=" + filepath.Join(cp.logs, "apiserver-certs"),
		// No kube-controller-manager creates the default ServiceAccount
		// of a namespace; the test's pods name none.
		"--disable-admission-plugins=ServiceAccount",
	}
	cp.admin = &rest.Config{Host: "https://" + cp.addr, BearerToken: cp.adminToken, TLSClientConfig: rest.TLSClientConfig{CAData: cp.ca.CertPEM}, QPS: 100, Burst: 200}
	cp.startAPIServer(t)
	var err error
	if cp.kube, err = kubernetes.NewForConfig(cp.admin); err != nil {
		t.Fatal(err)
	}
	if cp.dyn, err = dynamic.NewForConfig(cp.admin); err != nil {
		t.Fatal(err)
	}
	return cp
}

// startAPIServer starts kube-apiserver, with extra flags, and waits until
// it is ready.
func (cp *controlPlane) startAPIServer(t *testing.T, extra ...string) {
	t.Helper()
	cp.api = harness.StartProcessOf(t, cp.top, cp.logs, "kube-apiserver", filepath.Join(cp.bin, "kube-apiserver"), nil, append(cp.apiArgs, extra...)...)
	pool := x509.NewCertPool()
	pool.AddCert(cp.ca.Cert)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	eventually(t, 3*time.Minute, "kube-apiserver ready", func() error {
		cp.api.Running(t)
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+cp.addr+"/readyz", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+cp.adminToken)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	})
}

// token returns a token of the ServiceAccount, as the kubelet projects
// into its pods.
func (cp *controlPlane) token(t *testing.T, namespace, name string) string {
	t.Helper()
	tr, err := cp.kube.CoreV1().ServiceAccounts(namespace).CreateToken(t.Context(), name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(7200))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("cannot request a token of ServiceAccount %s/%s: %v", namespace, name, err)
	}
	return tr.Status.Token
}

// as returns a client configuration of the API server with the token.
func (cp *controlPlane) as(token string) *rest.Config {
	c := rest.CopyConfig(cp.admin)
	c.BearerToken = token
	return c
}

// kubeconfig writes a kubeconfig of server (the API server's, or a proxy's
// in front of it, with a certificate of the test's CA) with the token.
func (cp *controlPlane) kubeconfig(t *testing.T, name, server, token string) string {
	t.Helper()
	cluster := &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: cp.ca.CertPEM}
	cfg := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"test": cluster},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{name: {Token: token}},
		Contexts:       map[string]*clientcmdapi.Context{"test": {Cluster: "test", AuthInfo: name}},
		CurrentContext: "test",
	}
	f := filepath.Join(cp.logs, name+".kubeconfig")
	if err := clientcmd.WriteToFile(cfg, f); err != nil {
		t.Fatal(err)
	}
	return f
}
