// Package upgradekit is a library and SDK for Kubernetes node upgrade
// strategies: deciding, per machine, whether a change can be applied in place
// (upgrade kubeadm, kubelet, containerd... on the machine that is there) or
// needs a replacement (roll a new machine in, the old one out), and carrying
// that out safely.
//
// The module is a set of packages; this root package holds no code.
//
//   - diff: what differs between the machine we have and the machine we want
//     (CAPI Machine + bootstrap config + infrastructure machine), field by
//     field, with CAPI's own normalisation rules and RFC 6902/7386 patches.
//   - drift: stable, versioned hashing of desired specs; drift detection with
//     reasons and field-level explanations; hash migrations without mass drift.
//   - amiselect: Karpenter-compatible AMI selector terms, resolution and
//     staged promotion.
//   - nodeexec: running upgrade steps on a node's host through nsenter, with a
//     crash-safe journal, rollback, a pod builder and safe cordon/drain.
//   - strategy: the accept/decline decision, composable strategies, rollout
//     planning and CAPI in-place update hooks.
//   - fake: fake clusters and simulated hosts for tests; harness/apiserver starts a
//     real kube-apiserver + etcd with the CAPI CRDs.
//
// README.md has the first steps (run the demo, the fast tests, the whole
// suite), the package map and a tour; ARCHITECTURE.md draws the package
// graph.
package upgradekit
