package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
)

// testDigest and testDigestB pin test image references: the extension
// refuses upgrader images without a digest.
const (
	testDigest  = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	testDigestB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// deployManifests decodes every object of deploy/extension.yaml, in order.
func deployManifests(t *testing.T) []unstructured.Unstructured {
	t.Helper()
	return manifests(t, "deploy/extension.yaml")
}

// hookClient calls a served extension's hooks over HTTPS as Cluster API
// does: POST of the JSON request to the hook's path.
type hookClient struct {
	t       *testing.T
	http    *http.Client
	base    string
	catalog *runtimecatalog.Catalog
}

// newHookClient returns a client of the extension on 127.0.0.1:port,
// trusting pool, once the server answers.
func newHookClient(t *testing.T, port int, pool *x509.CertPool) *hookClient {
	t.Helper()
	catalog := runtimecatalog.New()
	require.NoError(t, runtimehooksv1.AddToCatalog(catalog))
	c := &hookClient{t: t, base: "https://127.0.0.1:" + strconv.Itoa(port), catalog: catalog,
		http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}}
	require.Eventually(t, func() bool {
		r, err := c.http.Get(c.base + "/")
		if err == nil {
			r.Body.Close()
		}
		return err == nil
	}, 30*time.Second, 50*time.Millisecond)
	return c
}

// post sends req to the named handler of hook and decodes the answer into
// resp; anything but 200 fails the test.
func (c *hookClient) post(hook runtimecatalog.Hook, name string, req, resp any) {
	c.t.Helper()
	gvh, err := c.catalog.GroupVersionHook(hook)
	require.NoError(c.t, err)
	body, err := json.Marshal(req)
	require.NoError(c.t, err)
	r, err := c.http.Post(c.base+runtimecatalog.GVHToPath(gvh, name), "application/json", bytes.NewReader(body))
	require.NoError(c.t, err)
	defer r.Body.Close()
	require.Equal(c.t, http.StatusOK, r.StatusCode)
	require.NoError(c.t, json.NewDecoder(r.Body).Decode(resp))
}
