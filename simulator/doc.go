// Package simulator is upgradekit's simulator: it builds Cluster API clusters
// and simulated nodes for tests of upgrade code, and plays rollouts on
// them in virtual time.
//
// NewCluster builds a CAPI v1beta2 cluster: a KubeadmControlPlane and
// MachineDeployments with their Machines, KubeadmConfigs, infrastructure
// machines and Nodes. Names and UIDs are deterministic. Cluster.Client
// serves it from a controller-runtime fake client; Cluster.Apply writes it
// into a real API server.
//
// A Host is one simulated node. It runs the commands of the
// nodeexec/kubeadm plans through nodeexec's real Runner, and fails on any
// command it does not know. A Fleet shares the cluster's kubeadm state
// between hosts. PodRunner plays a Host's kubelet for upgrader pods; a
// stopped kubelet starts no container.
//
// Faults injects failures: a failed or slow step, a NotReady node, a
// crashed runner or controller, API errors.
//
// NewSimulator plans a rollout and runs it on a virtual clock. It checks
// invariants (CheckSkew, CheckDisruption, CheckNoRerun, CheckCordons,
// CheckStall). A failed update stalls the rollout where Cluster API would
// (Options.OnFailure changes that). Options.MachineUpdater drives each
// in-place machine through a real capi.MachineUpdater, as Cluster API
// calls it.
//
// Prefer this package's fake clients (Cluster.Client, Simulator.Client)
// for logic that only reads and writes objects. Prefer harness/apiserver's real API server when the test depends on
// what the API server does: validation, conflicts, field selectors,
// server-side apply and, above all, evictions.
//
// It is not a simulation of controllers: nothing reconciles. Its hosts
// model the kubeadm library's commands, not Linux. What it does and does
// not model, in full, is in docs/simulator.md in the repository.
package simulator
