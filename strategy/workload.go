package strategy

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KubeconfigSecretClients returns a WorkloadClient that reaches each
// workload cluster with the kubeconfig CAPI keeps in the management cluster
// (secret <cluster>-kubeconfig, key "value"), read through mgmt. Clients are
// cached per cluster; a cluster whose secret cannot be read is retried on
// the next call.
func KubeconfigSecretClients(mgmt client.Reader, scheme *runtime.Scheme) WorkloadClient {
	var mu sync.Mutex
	cache := map[types.NamespacedName]client.Client{}
	return func(ctx context.Context, cluster types.NamespacedName) (client.Client, error) {
		mu.Lock()
		defer mu.Unlock()
		if c, ok := cache[cluster]; ok {
			return c, nil
		}
		raw, err := kubeconfig.FromSecret(ctx, mgmt, cluster)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig of cluster %s: %w", cluster, err)
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig of cluster %s: %w", cluster, err)
		}
		cfg.UserAgent = "upgradekit"
		c, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return nil, fmt.Errorf("client for cluster %s: %w", cluster, err)
		}
		cache[cluster] = c
		return c, nil
	}
}
