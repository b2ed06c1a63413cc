package workload_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/upgradekit/upgradekit/strategy/capi/workload"
)

// kubeconfigFor is the kubeconfig CAPI would write for a cluster served at
// server.
func kubeconfigFor(t *testing.T, server string) []byte {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: server}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: "t"}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "admin"}
	kc.CurrentContext = "c"
	raw, err := clientcmd.Write(*kc)
	require.NoError(t, err)
	return raw
}

func kubeconfigSecret(cluster string, raw []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: cluster + "-kubeconfig", Labels: map[string]string{clusterv1.ClusterNameLabel: cluster}},
		Data:       map[string][]byte{"value": raw},
	}
}

// TestKubeconfigClientFollowsTheSecret: a rotated kubeconfig secret
// (new credentials, or a cluster recreated under the same name with a new
// CA and endpoint) gets a new client on the next call; an unchanged one
// keeps its client; a deleted one is an error, not the old client.
func TestKubeconfigClientFollowsTheSecret(t *testing.T) {
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	mgmt := crfake.NewClientBuilder().WithScheme(s).Build()
	ctx := t.Context()
	key := types.NamespacedName{Namespace: "default", Name: "demo"}
	clients := workload.KubeconfigClient(mgmt, s)
	clientsets := workload.KubeconfigClientset(mgmt)
	host := func() string {
		t.Helper()
		cs, err := clientsets(ctx, key)
		require.NoError(t, err)
		return cs.CoreV1().RESTClient().Get().URL().Host
	}

	_, err := clients(ctx, key)
	require.ErrorContains(t, err, "kubeconfig of cluster default/demo")

	sec := kubeconfigSecret("demo", kubeconfigFor(t, "https://127.0.0.1:1"))
	require.NoError(t, mgmt.Create(ctx, sec))
	c1, err := clients(ctx, key)
	require.NoError(t, err, "a failure is not cached")
	require.Equal(t, "127.0.0.1:1", host())
	again, err := clients(ctx, key)
	require.NoError(t, err)
	require.Same(t, c1, again, "an unchanged secret keeps its client")

	// A relabelled secret (new resourceVersion, same kubeconfig) keeps it too.
	sec.Labels["touched"] = "yes"
	require.NoError(t, mgmt.Update(ctx, sec))
	again, err = clients(ctx, key)
	require.NoError(t, err)
	require.Same(t, c1, again)

	// The cluster is recreated under the same name: new endpoint, new secret.
	require.NoError(t, mgmt.Delete(ctx, sec))
	_, err = clients(ctx, key)
	require.ErrorContains(t, err, "not found", "no stale client for a cluster whose secret is gone")
	require.NoError(t, mgmt.Create(ctx, kubeconfigSecret("demo", kubeconfigFor(t, "https://127.0.0.1:2"))))
	c2, err := clients(ctx, key)
	require.NoError(t, err)
	require.NotSame(t, c1, c2, "a new kubeconfig, a new client")
	require.Equal(t, "127.0.0.1:2", host())

	// Rotated in place (CAPI renews the credentials in the same secret).
	var cur corev1.Secret
	require.NoError(t, mgmt.Get(ctx, types.NamespacedName{Namespace: "default", Name: "demo-kubeconfig"}, &cur))
	cur.Data["value"] = kubeconfigFor(t, "https://127.0.0.1:3")
	require.NoError(t, mgmt.Update(ctx, &cur))
	c3, err := clients(ctx, key)
	require.NoError(t, err)
	require.NotSame(t, c2, c3)
	require.Equal(t, "127.0.0.1:3", host())

	cur.Data = map[string][]byte{"other": []byte("x")}
	require.NoError(t, mgmt.Update(ctx, &cur))
	_, err = clients(ctx, key)
	require.ErrorContains(t, err, `secret default/demo-kubeconfig has no key "value"`)
}

// TestKubeconfigClientDoesNotSerialiseClusters: a slow secret read for
// one cluster does not hold up the calls for another.
func TestKubeconfigClientDoesNotSerialiseClusters(t *testing.T) {
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	entered, release := make(chan struct{}), make(chan struct{})
	mgmt := crfake.NewClientBuilder().WithScheme(s).
		WithObjects(kubeconfigSecret("slow", kubeconfigFor(t, "https://127.0.0.1:1")), kubeconfigSecret("fast", kubeconfigFor(t, "https://127.0.0.1:2"))).
		WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if key.Name == "slow-kubeconfig" {
				close(entered)
				<-release
			}
			return c.Get(ctx, key, obj, opts...)
		}}).Build()
	clients := workload.KubeconfigClient(mgmt, s)
	slowDone := make(chan error, 1)
	go func() {
		_, err := clients(t.Context(), types.NamespacedName{Namespace: "default", Name: "slow"})
		slowDone <- err
	}()
	<-entered
	fastDone := make(chan error, 1)
	go func() {
		_, err := clients(t.Context(), types.NamespacedName{Namespace: "default", Name: "fast"})
		fastDone <- err
	}()
	select {
	case err := <-fastDone:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("the call for cluster fast waited for cluster slow's secret read")
	}
	close(release)
	require.NoError(t, <-slowDone)
}

// TestKubeconfigClientsetRateLimit: a workload cluster's clientset
// is rate-limited as Cluster API's own workload cluster clients are (20
// requests per second, bursts of 30), not with client-go's default of 5
// and 10, which every update in the cluster would share.
func TestKubeconfigClientsetRateLimit(t *testing.T) {
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	mgmt := crfake.NewClientBuilder().WithScheme(s).WithObjects(kubeconfigSecret("demo", kubeconfigFor(t, "https://127.0.0.1:6443"))).Build()
	cs, err := workload.KubeconfigClientset(mgmt)(t.Context(), types.NamespacedName{Namespace: "default", Name: "demo"})
	require.NoError(t, err)
	rl := cs.CoreV1().RESTClient().GetRateLimiter()
	require.NotNil(t, rl)
	require.InDelta(t, 20, rl.QPS(), 0.001)
	for i := range 30 {
		require.True(t, rl.TryAccept(), "request %d of a burst of 30", i+1)
	}
}
