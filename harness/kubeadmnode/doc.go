// Package kubeadmnode runs real kubeadm nodes on one Linux machine, so the
// node side of an upgrade is exercised by real containerd, kubelet,
// kubeadm, etcd and static pods instead of by simulator.Host's model of them.
// It needs root, Debian's containerd and runc, and the binaries
// hack/node-assets.sh builds for a Kubernetes version from the Go module
// proxy (no registry, no release download, no Docker).
//
// NewNetwork makes a private layer-2 segment (a bridge in a network
// namespace of its own; 198.18.0.0/24; no route off the machine).
// StartNode makes a node on it: a network namespace, a mount namespace
// whose root is an overlay of the machine's root (reads see the host's
// files; writes stay in the node's own memory-backed layer), its own host
// name, containerd and the kubelet run by a supervisor, and the container
// images assembled from the static binaries (WriteImages) imported into
// containerd. KubeadmInit and KubeadmJoin run kubeadm on it; StageBundle
// and RunUpgrader run the project's upgrader (examples/upgrader) against
// it exactly as the upgrader pod does on a node: the steps enter the
// node's namespaces with nsenter (the node's PID stands for the host's
// PID 1). Close stops and removes everything a node made, also after a
// failure: processes (containers and shims included), cgroups, mounts,
// directories, namespaces.
//
// The scenarios in this package's realnode_test.go (build tag realnode;
// `make e2e-node`) upgrade such nodes from one Kubernetes minor to the
// next.
//
// What is real: kubeadm, the kubelet, kubectl, containerd (Debian's 1.6),
// runc, etcd, kube-apiserver, kube-controller-manager and kube-scheduler
// of the versions given, built unmodified from their modules; the static
// pods, certificates, kubeconfigs, etcd data and kubeadm's own phases.
//
// What it does not model, and so what the scenarios do not prove:
//
//   - systemd: PID 1 of this machine is not systemd, so the node's
//     /usr/bin/systemctl is a stand-in (internal/systemctl) that asks the
//     harness's supervisor. It knows restart, start, stop, is-active,
//     is-enabled, show -p MainPID/ActiveState, daemon-reload and
//     reset-failed for two units,
//     containerd and kubelet (the kubelet's command line built as
//     kubeadm's 10-kubeadm.conf drop-in builds it); no unit files, no
//     dependencies, no journald, and stopping a unit signals its main
//     process only. A unit that exits while wanted is started again
//     after two seconds (Restart=always).
//   - isolation: the nodes share the machine's kernel, PID namespace,
//     cgroup hierarchies (each kubelet has its own --cgroup-root),
//     devices and, read-only through the overlay, its files; their
//     writable layers are on the machine's disk, so the kubelets' eviction
//     thresholds are absolute sizes (1Gi free), not the default
//     percentages, which would measure the machine's other users;
//   - the machine kind: cgroup v1 (kubelet failCgroupV1: false, kubeadm's
//     SystemVerification check ignored), no CAP_SYS_RESOURCE
//     (containerd's restrict_oom_score_adj), no registry (images are
//     imported; kube-proxy and CoreDNS, which have no image here, are
//     skipped at kubeadm init);
//   - pod networking between nodes: each node's pods get a bridge network
//     of their own (10.244.<host>.0/24) with no route to other nodes'
//     pods; the static pods use the host network.
package kubeadmnode
