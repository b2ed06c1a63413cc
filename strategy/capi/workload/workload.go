package workload

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Client returns a controller-runtime client for the workload cluster a
// Machine belongs to (in a real extension: KubeconfigClient, built from
// the <cluster>-kubeconfig secret, or Cluster API's ClusterCache).
type Client func(ctx context.Context, cluster types.NamespacedName) (client.Client, error)

// Clientset returns a client-go clientset for the workload cluster a
// Machine belongs to; capi.MachineUpdater needs it to cordon, drain (the
// Eviction API) and uncordon the node. KubeconfigClientset builds one
// from the same <cluster>-kubeconfig secret KubeconfigClient uses.
type Clientset func(ctx context.Context, cluster types.NamespacedName) (kubernetes.Interface, error)
