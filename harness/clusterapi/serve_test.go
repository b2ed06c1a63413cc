package clusterapi_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/harness/clusterapi"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// TestServeForTest serves an extension's handlers without any cluster and
// asks it for its hooks over TLS, trusting only the returned CA bundle.
func TestServeForTest(t *testing.T) {
	kubeadm, err := strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...)
	require.NoError(t, err)
	ext, err := capi.NewExtension(strategy.Updaters(kubeadm), capi.ExtensionOptions{})
	require.NoError(t, err)
	url, ca := clusterapi.ServeForTest(t, ext.Handlers("my")...)
	require.True(t, strings.HasPrefix(url, "https://127.0.0.1:"), url)

	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(ca))
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	var disc struct {
		Handlers []struct {
			Name string `json:"name"`
		} `json:"handlers"`
	}
	require.Eventually(t, func() bool {
		r, err := hc.Post(url+"/hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery", "application/json",
			strings.NewReader(`{"apiVersion":"hooks.runtime.cluster.x-k8s.io/v1alpha1","kind":"DiscoveryRequest"}`))
		if err != nil {
			return false
		}
		defer r.Body.Close()
		return r.StatusCode == http.StatusOK && json.NewDecoder(r.Body).Decode(&disc) == nil
	}, 30*time.Second, 50*time.Millisecond)
	var names []string
	for _, h := range disc.Handlers {
		names = append(names, h.Name)
	}
	require.ElementsMatch(t, []string{"my-can-update-machine", "my-can-update-machineset"}, names)
}
