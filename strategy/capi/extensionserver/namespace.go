package extensionserver

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// LabelPodSecurityEnforce is the Pod Security admission label of a
// namespace; EnsureNamespace sets it to "privileged" on the namespace it
// creates, since the upgrader pod uses hostPID, a hostPath and added
// capabilities.
const LabelPodSecurityEnforce = "pod-security.kubernetes.io/enforce"

// EnsureNamespace wraps get so that each workload cluster has the upgrader
// namespace before the first client for that cluster is handed out (once
// per cluster and process): without it UpdateMachine could drain a node and
// then fail to create its upgrader pod. A missing namespace is created with
// the privileged Pod Security level and upgradekit's managed-by label; an
// existing one is not changed (so an identity that may not create
// namespaces works as long as the namespace exists). Until that succeeds
// the cluster has no client: UpdateMachine keeps answering "waiting for the
// workload cluster" with the error, and nothing is drained.
func EnsureNamespace(get capi.WorkloadClient, namespace string) capi.WorkloadClient {
	var mu sync.Mutex
	ready := map[types.NamespacedName]bool{}
	return func(ctx context.Context, cluster types.NamespacedName) (client.Client, error) {
		if get == nil {
			return nil, invalid("EnsureNamespace", "nil WorkloadClient")
		}
		c, err := get(ctx, cluster)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		if ready[cluster] {
			return c, nil
		}
		err = c.Get(ctx, types.NamespacedName{Name: namespace}, &corev1.Namespace{})
		if apierrors.IsNotFound(err) {
			err = c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: map[string]string{
				LabelPodSecurityEnforce: "privileged",
				nodepod.LabelManagedBy:  nodepod.ManagedByValue,
			}}})
			if apierrors.IsAlreadyExists(err) {
				err = nil
			}
		}
		if err != nil {
			return nil, fmt.Errorf("namespace %s for the upgrader pods in cluster %s: %w", namespace, cluster, err)
		}
		ready[cluster] = true
		return c, nil
	}
}
