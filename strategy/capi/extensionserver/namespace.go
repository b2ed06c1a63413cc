package extensionserver

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy/capi/workload"
)

// LabelPodSecurityEnforce is the Pod Security admission label of a
// namespace; EnsureNamespace sets it to "privileged" on the namespace it
// creates, since the upgrader pod uses hostPID, a hostPath and added
// capabilities.
const LabelPodSecurityEnforce = "pod-security.kubernetes.io/enforce"

// ErrNamespaceNotManaged is returned (wrapped) by the client getter of
// EnsureNamespace when the upgrader namespace exists without upgradekit's
// managed-by label: someone else made it, and may have put there what the
// updater would take for its own (a pod with an upgrader pod's name).
var ErrNamespaceNotManaged = errors.New("namespace not managed by upgradekit")

// EnsureNamespace wraps get so that each workload cluster has the upgrader
// namespace before the first client for that cluster is handed out (once
// per cluster and process): without it UpdateMachine could drain a node and
// then fail to create its upgrader pod. A missing namespace is created with
// the privileged Pod Security level and upgradekit's managed-by label
// (nodepod.LabelManagedBy=nodepod.ManagedByValue). An existing one is used
// as it is (so an identity that may not create namespaces works as long as
// the namespace exists) only if it carries that label: one without it is
// refused (ErrNamespaceNotManaged, naming the label), since whoever made it
// could have made pods in it that the updater would trust. Until that
// succeeds the cluster has no client: UpdateMachine keeps answering
// "waiting for the workload cluster" with the error, and nothing is
// drained.
func EnsureNamespace(get workload.Client, namespace string) workload.Client {
	var mu sync.Mutex
	ready := map[types.NamespacedName]bool{}
	return func(ctx context.Context, cluster types.NamespacedName) (client.Client, error) {
		if get == nil {
			return nil, invalid("EnsureNamespace", "nil workload.Client")
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
		ns := &corev1.Namespace{}
		err = c.Get(ctx, types.NamespacedName{Name: namespace}, ns)
		if apierrors.IsNotFound(err) {
			err = c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: map[string]string{
				LabelPodSecurityEnforce: "privileged",
				nodepod.LabelManagedBy:  nodepod.ManagedByValue,
			}}})
			if apierrors.IsAlreadyExists(err) {
				// Made by someone else meanwhile: check it as any other.
				err = c.Get(ctx, types.NamespacedName{Name: namespace}, ns)
			} else if err == nil {
				ns.Labels = map[string]string{nodepod.LabelManagedBy: nodepod.ManagedByValue}
			}
		}
		if err == nil && ns.Labels[nodepod.LabelManagedBy] != nodepod.ManagedByValue {
			err = fmt.Errorf("%w: it exists without the label %s=%s; upgradekit does not run privileged upgrader pods in a namespace it did not make (label it if it is yours)",
				ErrNamespaceNotManaged, nodepod.LabelManagedBy, nodepod.ManagedByValue)
		}
		if err != nil {
			return nil, fmt.Errorf("namespace %s for the upgrader pods in cluster %s: %w", namespace, cluster, err)
		}
		ready[cluster] = true
		return c, nil
	}
}
