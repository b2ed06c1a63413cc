package workload

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrKubeconfigUnusable is matched by the errors of KubeconfigClient
// and KubeconfigClientset for a <cluster>-kubeconfig secret that
// exists but holds no usable kubeconfig (no key "value", or a value that
// is not a kubeconfig): like a secret that cannot be read, it does not
// pass by itself.
var ErrKubeconfigUnusable = errors.New("kubeconfig unusable")

// userAgent identifies upgradekit's requests in workload clusters' audit logs.
const userAgent = "upgradekit"

// The client-side rate limit of the workload cluster clients
// KubeconfigClient and KubeconfigClientset build: Cluster
// API's own for workload clusters (its ClusterCache's default client QPS
// and burst). A kubeconfig cannot set one, and client-go's default (5
// requests per second, burst 10), shared by every update in a cluster,
// made each UpdateMachine call wait seconds on its own client once a
// MachineDeployment updated ten machines at once (make e2e-scale).
const (
	workloadQPS   = 20
	workloadBurst = 30
)

// KubeconfigClient returns a Client that reaches each
// workload cluster with the kubeconfig CAPI keeps in the management cluster
// (secret <cluster>-kubeconfig, key "value"), read through mgmt. The secret
// is read on every call (mgmt is typically a manager's cached client, so
// that is a map lookup) and the client built from it is cached per cluster
// and per kubeconfig: a rotated secret, or a cluster recreated under the
// same name with a new CA, gets a new client on the next call, and a secret
// that cannot be read is an error (retried on the next call), never a stale
// client. Calls for different clusters do not wait for each other. Each
// cluster's client is rate-limited client-side as Cluster API's own
// workload cluster clients are: 20 requests per second, bursts of 30.
func KubeconfigClient(mgmt client.Reader, scheme *runtime.Scheme) Client {
	get := cachedPerCluster(mgmt, func(cfg *rest.Config) (client.Client, error) {
		return client.New(cfg, client.Options{Scheme: scheme})
	})
	return Client(get)
}

// KubeconfigClientset is KubeconfigClient's sibling for
// capi.MachineUpdater's cordon, drain and uncordon (capi.UpdaterOptions.Clientset): a
// client-go clientset built from the same <cluster>-kubeconfig secret,
// cached and renewed the same way.
func KubeconfigClientset(mgmt client.Reader) Clientset {
	get := cachedPerCluster(mgmt, func(cfg *rest.Config) (kubernetes.Interface, error) {
		return kubernetes.NewForConfig(cfg)
	})
	return Clientset(get)
}

// cached is a client and the kubeconfig it was built from (its hash).
type cached[C any] struct {
	kubeconfig [sha256.Size]byte
	client     C
}

// cachedPerCluster reads the cluster's kubeconfig secret on every call and
// builds a client when there is none for that kubeconfig yet. The lock only
// guards the map: the secret read and the client build run outside it.
func cachedPerCluster[C any](mgmt client.Reader, build func(*rest.Config) (C, error)) func(context.Context, types.NamespacedName) (C, error) {
	var mu sync.Mutex
	cache := map[types.NamespacedName]cached[C]{}
	return func(ctx context.Context, cluster types.NamespacedName) (C, error) {
		var zero C
		if mgmt == nil {
			return zero, fmt.Errorf("kubeconfig of cluster %s: no management cluster client", cluster)
		}
		s, err := secret.GetFromNamespacedName(ctx, mgmt, cluster, secret.Kubeconfig)
		if err != nil {
			if apierrors.IsNotFound(err) {
				mu.Lock()
				delete(cache, cluster)
				mu.Unlock()
			}
			return zero, fmt.Errorf("kubeconfig of cluster %s: %w", cluster, err)
		}
		raw, ok := s.Data[secret.KubeconfigDataName]
		if !ok {
			return zero, fmt.Errorf("kubeconfig of cluster %s: %w: secret %s/%s has no key %q", cluster, ErrKubeconfigUnusable, s.Namespace, s.Name, secret.KubeconfigDataName)
		}
		sum := sha256.Sum256(raw)
		mu.Lock()
		e, ok := cache[cluster]
		mu.Unlock()
		if ok && e.kubeconfig == sum {
			return e.client, nil
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
		if err != nil {
			return zero, fmt.Errorf("kubeconfig of cluster %s: %w: secret %s/%s: %w", cluster, ErrKubeconfigUnusable, s.Namespace, s.Name, err)
		}
		cfg.UserAgent = userAgent
		cfg.QPS, cfg.Burst = workloadQPS, workloadBurst
		c, err := build(cfg)
		if err != nil {
			return zero, fmt.Errorf("client for cluster %s: %w", cluster, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if e, ok := cache[cluster]; ok && e.kubeconfig == sum {
			return e.client, nil // built meanwhile by a concurrent call: share it
		}
		cache[cluster] = cached[C]{kubeconfig: sum, client: c}
		return c, nil
	}
}
