package strategy

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// userAgent identifies upgradekit's requests in workload clusters' audit logs.
const userAgent = "upgradekit"

// KubeconfigSecretClients returns a WorkloadClient that reaches each
// workload cluster with the kubeconfig CAPI keeps in the management cluster
// (secret <cluster>-kubeconfig, key "value"), read through mgmt. Clients are
// cached per cluster; a cluster whose secret cannot be read is retried on
// the next call.
func KubeconfigSecretClients(mgmt client.Reader, scheme *runtime.Scheme) WorkloadClient {
	get := cachedPerCluster(mgmt, func(cfg *rest.Config) (client.Client, error) {
		return client.New(cfg, client.Options{Scheme: scheme})
	})
	return WorkloadClient(get)
}

// KubeconfigSecretClientsets is KubeconfigSecretClients' sibling for
// MachineUpdater's cordon, drain and uncordon (WithWorkloadClientset): a
// client-go clientset built from the same <cluster>-kubeconfig secret,
// cached per cluster, retried on the next call when the secret cannot be
// read.
func KubeconfigSecretClientsets(mgmt client.Reader) WorkloadClientset {
	get := cachedPerCluster(mgmt, func(cfg *rest.Config) (kubernetes.Interface, error) {
		return kubernetes.NewForConfig(cfg)
	})
	return WorkloadClientset(get)
}

// cachedPerCluster builds, once per cluster, a client from the cluster's
// kubeconfig secret; failures are not cached.
func cachedPerCluster[C any](mgmt client.Reader, build func(*rest.Config) (C, error)) func(context.Context, types.NamespacedName) (C, error) {
	var mu sync.Mutex
	cache := map[types.NamespacedName]C{}
	return func(ctx context.Context, cluster types.NamespacedName) (C, error) {
		mu.Lock()
		defer mu.Unlock()
		var zero C
		if c, ok := cache[cluster]; ok {
			return c, nil
		}
		if mgmt == nil {
			return zero, fmt.Errorf("kubeconfig of cluster %s: no management cluster client", cluster)
		}
		raw, err := kubeconfig.FromSecret(ctx, mgmt, cluster)
		if err != nil {
			return zero, fmt.Errorf("kubeconfig of cluster %s: %w", cluster, err)
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
		if err != nil {
			return zero, fmt.Errorf("kubeconfig of cluster %s: %w", cluster, err)
		}
		cfg.UserAgent = userAgent
		c, err := build(cfg)
		if err != nil {
			return zero, fmt.Errorf("client for cluster %s: %w", cluster, err)
		}
		cache[cluster] = c
		return c, nil
	}
}
