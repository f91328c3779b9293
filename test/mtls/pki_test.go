package mtls

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

// keyPair is a certificate with its key, and the PEM encodings of both.
type keyPair struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte
}

// tlsCertificate returns the pair as a crypto/tls certificate.
func (k keyPair) tlsCertificate(t *testing.T) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(k.certPEM, k.keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// certOptions vary one certificate from the well-formed default.
type certOptions struct {
	commonName string
	usage      []x509.ExtKeyUsage
	dnsNames   []string
	ips        []net.IP
	notAfter   time.Time
}

var serial int64

// newCA returns a self-signed CA, as Crossplane creates for its functions.
func newCA(t *testing.T, cn string) keyPair {
	t.Helper()
	serial++
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	return sign(t, tmpl, nil)
}

// newLeaf returns a certificate signed by ca.
func newLeaf(t *testing.T, ca keyPair, o certOptions) keyPair {
	t.Helper()
	serial++
	notAfter := o.notAfter
	if notAfter.IsZero() {
		notAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: o.commonName},
		NotBefore:    time.Now().Add(-48 * time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  o.usage,
		DNSNames:     o.dnsNames,
		IPAddresses:  o.ips,
	}
	return sign(t, tmpl, &ca)
}

func sign(t *testing.T, tmpl *x509.Certificate, parent *keyPair) keyPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent.cert, parent.key
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
	return keyPair{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
}

// writeServerCerts writes the files the function reads from
// TLS_SERVER_CERTS_DIR: its certificate and key, and the CA that signs the
// clients it accepts. They are world-readable so that the function can run as
// the image's nonroot user; a real Secret mount sets its own modes.
func writeServerCerts(t *testing.T, dir string, server, ca keyPair) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"tls.crt": server.certPEM, "tls.key": server.keyPEM, "ca.crt": ca.certPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
