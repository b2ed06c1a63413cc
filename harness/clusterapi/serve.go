package clusterapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/cluster-api/exp/runtime/server"

	"github.com/upgradekit/upgradekit/harness/testcerts"
)

// ServeForTest serves handlers through Cluster API's own runtime extension
// server (sigs.k8s.io/cluster-api/exp/runtime/server) on a free port of
// 127.0.0.1, over TLS with a throwaway certificate (harness/testcerts) and
// HTTP/1.1 only, until t ends. It returns the server's URL and the CA
// bundle that trusts it: what RegisterExtension (or your own
// ExtensionConfig, or an HTTPS client in a unit test) needs. Any handler,
// yours or package capi's, can be served; it fails t when the server
// cannot start or a handler is refused.
func ServeForTest(t testing.TB, handlers ...server.ExtensionHandler) (url string, caBundle []byte) {
	t.Helper()
	if len(handlers) == 0 {
		t.Fatal("capitest: ServeForTest: no handlers")
	}
	dir := t.TempDir()
	testcerts.Write(t, dir)
	port := testcerts.FreePort(t)
	catalog := runtimecatalog.New()
	if err := runtimehooksv1.AddToCatalog(catalog); err != nil {
		t.Fatalf("capitest: ServeForTest: %v", err)
	}
	srv, err := server.New(server.Options{Catalog: catalog, Host: "127.0.0.1", Port: port, CertDir: dir,
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}})
	if err != nil {
		t.Fatalf("capitest: ServeForTest: %v", err)
	}
	for _, h := range handlers {
		if err := srv.AddExtensionHandler(h); err != nil {
			t.Fatalf("capitest: ServeForTest: handler %s: %v", h.Name, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("capitest: the extension server: %v", err)
		}
	})
	ca, err := os.ReadFile(filepath.Join(dir, testcerts.CAFile))
	if err != nil {
		t.Fatalf("capitest: ServeForTest: %v", err)
	}
	return fmt.Sprintf("https://127.0.0.1:%s", strconv.Itoa(port)), ca
}
