package testcerts_test

import (
	"crypto/tls"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/upgradekit/upgradekit/harness/testcerts"
)

func TestWriteServesTLSTheCATrusts(t *testing.T) {
	dir := t.TempDir()
	pool := testcerts.Write(t, dir)
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	port := testcerts.FreePort(t)
	l, err := tls.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port), &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	resp, err := c.Get("https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("the CA must verify the server: %v", err)
	}
	resp.Body.Close()
	// A client that does not trust the CA is refused.
	if _, err := http.Get("https://127.0.0.1:" + strconv.Itoa(port)); err == nil {
		t.Fatal("an untrusting client connected")
	}
}

// TestFreePortNeverTwice: ports come back distinct however often a test
// asks (the kernel may offer a just-closed port again), and each is free
// to listen on.
func TestFreePortNeverTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 300 {
		p := testcerts.FreePort(t)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(testcerts.FreePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}
