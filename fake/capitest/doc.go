// Package capitest runs Cluster API's own managers against a real API
// server from a test: the core manager, the kubeadm bootstrap provider and
// the kubeadm control plane provider of the sigs.k8s.io/cluster-api version
// upgradekit's go.mod requires, built from the Go module proxy by
// hack/capi-managers.sh (no container images, no Docker, no kind), started
// as child processes against a fake/envtest API server with the feature
// gates the in-place path needs (InPlaceUpdates, RuntimeSDK), and stopped
// when the test ends.
//
// What runs for real: each manager's main (flags, controllers, caches,
// its runtime client, leader election off), talking to envtest's
// kube-apiserver and etcd, and each manager's admission webhooks: its
// webhook configurations, as Cluster API ships them
// (config/webhook/manifests.yaml, copied by hack/capi-managers.sh), are
// created with their service references replaced by the manager's local
// URL and CA, so the API server defaults and validates Cluster API's
// objects through Cluster API's own code. What it is not, yet:
//
//   - there is no infrastructure provider and no workload cluster: Machines
//     are not provisioned and nothing reaches a <cluster>-kubeconfig;
//   - the CRDs are fake/envtest's (Cluster API's config/crd/bases, served
//     without conversion webhooks: v1beta2 only).
//
// Those are the steps between this package and Cluster API driving an
// in-place update through upgradekit's extension end to end.
package capitest
