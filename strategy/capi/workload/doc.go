// Package workload reaches the workload clusters Cluster API manages,
// from an extension running in the management cluster.
//
// A Client (controller-runtime) or Clientset (client-go) is a function
// from a cluster's namespace and name to a client for its API server.
// KubeconfigClient and KubeconfigClientset build them from the
// <cluster>-kubeconfig secret Cluster API keeps beside each Cluster:
// read on every call, cached per kubeconfig, rate-limited as Cluster
// API's own workload cluster clients are. A secret that is missing or
// unreadable is an error, never a stale client; one that holds no usable
// kubeconfig matches ErrKubeconfigUnusable.
//
// It decides nothing and writes nothing: strategy/capi (MachineUpdater,
// WorkloadReachableCheck) and strategy/capi/gates take these functions
// and do the work. It is not a cache of objects either (no informers):
// callers read through the clients as they need.
package workload
