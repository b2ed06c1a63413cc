// Package kubeadm builds nodeexec plans that upgrade a kubeadm node in
// place: an etcd snapshot (first control plane), containerd (installed and
// restarted in one step), CNI plugins, the kubeadm binary, `kubeadm upgrade
// apply` (first control plane) or `kubeadm upgrade node` (other control
// planes, workers), kubectl, the kubelet (replaced and restarted in one
// step) and a final verification that the versions actually running are
// the target ones.
//
// No step ends with the kubelet or containerd down: in nodepod's
// init-container layout only a running kubelet starts the next step's
// container, so a separate "stop the kubelet" step would leave the node
// NotReady and the pod stuck for ever. A step that restarts one of them
// checks it stays up and, if it does not, puts the old files back and
// restarts it again before failing.
//
// The step list follows EKS Anywhere's upgrader, with what it lacks added:
// every replaced file is backed up first and the backup is kept, every
// step has a deadline and a retry budget, binary steps have a check (cmp)
// so re-runs are cheap, and steps that change files have a rollback.
//
// NewPlan refuses downgrades and skipped minor versions (kubeadm's own
// rule) with a *VersionError, and applies the version gates real clusters
// need: a kubeadm.k8s.io/v1beta4 UpgradeConfiguration for `upgrade apply`
// from 1.31 (flags before that), and skipping the CoreDNS addon phase from 1.32 (Cluster API
// owns CoreDNS).
//
// What it is not: it does not drain (use package nodeexec/drain before the
// plan runs), it does not update Cluster API objects, and it does not roll
// back `kubeadm upgrade apply` automatically (that needs the etcd snapshot
// and a human). The verify step reads the Node object with the node's own
// kubeconfig (/etc/kubernetes/kubelet.conf on workers, admin.conf on
// control planes), which assumes kubeadm's standard file layout.
package kubeadm
