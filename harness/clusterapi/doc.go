// Package clusterapi runs Cluster API's own controllers from a test, so an
// in-place update extension (upgradekit's, or yours) is exercised by the
// real callers of its hooks instead of by a model of them: the core
// manager, the kubeadm bootstrap provider and the kubeadm control plane
// provider of the sigs.k8s.io/cluster-api version upgradekit's go.mod
// requires, built from the Go module proxy by hack/capi-managers.sh (no
// container images, no Docker, no kind), started as child processes
// against a harness/apiserver API server with the feature gates the in-place
// path needs (InPlaceUpdates, RuntimeSDK), and stopped when the test ends.
//
// NewForTest starts everything in one call: envtest, the infrastructure
// CRDs, the three managers and the Provider. ClusterObjects and
// MachineDeploymentObjects build a workload cluster to create,
// RegisterExtension registers an extension through an ExtensionConfig and
// waits for Cluster API to discover it, and WaitForRollout waits for
// Cluster API to report a MachineDeployment rolled out.
//
// What is Cluster API's, for real: each manager's main (flags,
// controllers, caches, its runtime client, ExtensionConfig discovery, the
// calls to CanUpdateMachineSet and UpdateMachine and what it does with
// the answers), talking to envtest's kube-apiserver and etcd, and each
// manager's admission webhooks: its webhook configurations, as Cluster
// API ships them (config/webhook/manifests.yaml, copied by
// hack/capi-managers.sh), are created with their service references
// replaced by the manager's local URL and CA, so the API server defaults
// and validates Cluster API's objects through Cluster API's own code.
//
// What is ours:
//
//   - the infrastructure provider (Provider, InfrastructureCRDs): it
//     provisions at once and boots a simulated host (simulator.Host) per
//     machine; Provider documents what its kubelets model and what they
//     do not;
//   - the workload cluster is the same API server (the <cluster>-kubeconfig
//     Secret points back at envtest), so Node names must be unique across
//     the clusters of one harness;
//   - ClusterObjects' control plane is a standalone Machine with its own
//     bootstrap data, not a KubeadmControlPlane;
//   - the CRDs are harness/apiserver's (Cluster API's config/crd/bases with the
//     contract labels its kustomizations add, served without conversion
//     webhooks: v1beta2 only).
//
// KubeadmControlPlane: KubeadmControlPlaneObjects gives a cluster whose
// control plane KubeadmControlPlane's own controller creates, initialises,
// scales and updates in place through the extension (CanUpdateMachine is
// its hook; the provider does what kubeadm init and join leave that it
// reads). It uses external etcd unless StackedEtcd asks for kubeadm's
// default. With stacked etcd, KubeadmControlPlane's preflight checks and
// conditions require each etcd member healthy, which it learns by dialling
// each etcd Pod through the API server's portforward subresource
// (controlplane/kubeadm/pkg/proxy/dial.go): the provider (WithEtcd, on in
// NewForTest) runs a real etcd member per control plane machine and, in
// front of each, a kubelet HTTPS endpoint serving that port-forward;
// Provider.EtcdMembers reads the members as the test's own client.
//
// Managed topologies: ClusterClassObjects gives a cluster of Cluster
// API's ClusterTopology feature gate (start the managers with
// WithFeatureGates(DefaultFeatureGates + ",ClusterTopology=true")): a
// ClusterClass with its templates (a TestClusterTemplate among them) and a
// Cluster whose spec.topology Cluster API's topology controller turns
// into a KubeadmControlPlane and a MachineDeployment, and whose
// topology.version bumps it sequences, control plane first.
//
// What it does not model, so what a test here cannot catch:
//
//   - one API server serves the management cluster and every workload
//     cluster: no second endpoint, certificate or outage of a workload
//     cluster alone, and a client that mixes up the two still works;
//   - no kube-scheduler and no kube-controller-manager: a Pod runs only if
//     its spec.nodeName names a node (upgrader pods are pinned; other pods
//     are only reported Running), owned objects are not garbage collected
//     when their owner goes, no node lifecycle controller marks a silent
//     Node NotReady or taints it, and no Deployment or ReplicaSet makes
//     Pods;
//   - steps take no time: a simulated host runs a kubeadm plan's commands
//     at once, so a whole in-place update fits inside one RetryAfter and
//     nothing depends on how long a real kubeadm upgrade, drain or image
//     pull takes (simulator.Faults.SlowStep, through WithHostOptions, makes a
//     step overrun its own deadline; it does not make it last longer on
//     the real clock);
//   - image pulls only with WithRegistry, and then without time: a pull
//     that fails is reported as a kubelet reports it (ErrImagePull, then
//     ImagePullBackOff, one kubelet poll apart, not on the kubelet's
//     back-off), and pull policies, the node's image cache and pull
//     secrets are not modeled (simulator.Registry).
//
// Tests here shorten only delays they do not test (the extension's
// RetryAfter, 1 s instead of 15 s), and say so where they do; a test about
// a deadline (examples/inplace-extension's workload-unreachable timeout,
// the pre-pull timeout in TestAnUnpullableUpgraderImageFailsBeforeTheDrain)
// shortens it to see it pass, and says so too.
package clusterapi
