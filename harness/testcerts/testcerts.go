package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// CAFile is the name under which Write leaves the CA certificate (PEM),
// for clients configured with a CA bundle, such as an ExtensionConfig.
const CAFile = "ca.crt"

// Write creates a CA and a certificate for 127.0.0.1 signed by it, writes
// the certificate and key into dir as tls.crt and tls.key (the names
// controller-runtime's webhook server and CAPI's runtime server expect)
// and the CA as CAFile, and returns a pool that trusts the CA. It fails t
// on any error.
func Write(t testing.TB, dir string) *x509.CertPool {
	t.Helper()
	pool, err := WriteFiles(dir)
	if err != nil {
		t.Fatalf("testcerts: %v", err)
	}
	return pool
}

// WriteFiles is Write for code that has no testing.TB (a harness started
// from a test): the same files, and an error instead of a failed test.
func WriteFiles(dir string) (*x509.CertPool, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "upgradekit-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "upgradekit-test-server"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	for name, b := range map[string]*pem.Block{
		"tls.crt": {Type: "CERTIFICATE", Bytes: der},
		"tls.key": {Type: "EC PRIVATE KEY", Bytes: keyDER},
		CAFile:    {Type: "CERTIFICATE", Bytes: caDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(b), 0o600); err != nil {
			return nil, err
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool, nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago and
// that no earlier call in this process returned: the kernel may hand a
// port that was just closed out again, and a test that asks for two (a
// webhook and a metrics server) must not get one port twice.
func FreePort(t testing.TB) int {
	t.Helper()
	handedOut.mu.Lock()
	defer handedOut.mu.Unlock()
	for range 1000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("testcerts: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port
		}
	}
	t.Fatalf("testcerts: no port that was not handed out before in 1,000 tries")
	return 0
}

// handedOut holds the ports FreePort returned.
var handedOut = struct {
	mu    sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}
