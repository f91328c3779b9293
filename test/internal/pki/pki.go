// Package pki makes the certificates Crossplane and a function use for mutual
// TLS: a CA, leaves it signs, and the directory layout both read them from.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// KeyPair is a certificate with its key, and the PEM encodings of both.
type KeyPair struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// TLSCertificate returns the pair as a crypto/tls certificate.
func (k KeyPair) TLSCertificate(t *testing.T) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(k.CertPEM, k.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Options vary one certificate from the well-formed default.
type Options struct {
	CommonName string
	Usage      []x509.ExtKeyUsage
	DNSNames   []string
	IPs        []net.IP
	NotAfter   time.Time
}

// NewCA returns a self-signed CA, as Crossplane creates for its functions.
func NewCA(t *testing.T, cn string) KeyPair {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	return sign(t, tmpl, nil)
}

// NewLeaf returns a certificate signed by ca.
func NewLeaf(t *testing.T, ca KeyPair, o Options) KeyPair {
	t.Helper()
	notAfter := o.NotAfter
	if notAfter.IsZero() {
		notAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: o.CommonName},
		NotBefore:    time.Now().Add(-48 * time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  o.Usage,
		DNSNames:     o.DNSNames,
		IPAddresses:  o.IPs,
	}
	return sign(t, tmpl, &ca)
}

// LoopbackServer returns a server certificate signed by ca for localhost and
// 127.0.0.1, where the tests serve a function.
func LoopbackServer(t *testing.T, ca KeyPair, cn string) KeyPair {
	t.Helper()
	return NewLeaf(t, ca, Options{
		CommonName: cn,
		Usage:      []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:   []string{"localhost"},
		IPs:        []net.IP{net.IPv4(127, 0, 0, 1)},
	})
}

// Client returns a client certificate signed by ca.
func Client(t *testing.T, ca KeyPair, cn string) KeyPair {
	t.Helper()
	return NewLeaf(t, ca, Options{CommonName: cn, Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

// serial returns a random serial number, unique without shared state.
func serial(t *testing.T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func sign(t *testing.T, tmpl *x509.Certificate, parent *KeyPair) KeyPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent.Cert, parent.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return KeyPair{
		Cert:    cert,
		Key:     key,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
}

// WriteCertsDir writes a certificate, its key and the CA that signs the peers
// it accepts as tls.crt, tls.key and ca.crt: the layout of the Secrets
// Crossplane mounts, read by a function from TLS_SERVER_CERTS_DIR and by
// Crossplane from --tls-client-certs-dir. They are world-readable so that a
// process running as the image's nonroot user can read them; a real Secret
// mount sets its own modes.
func WriteCertsDir(t *testing.T, dir string, leaf, ca KeyPair) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM, "ca.crt": ca.CertPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
