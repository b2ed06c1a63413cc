// Package kubeadm builds nodeexec plans that change a kubeadm node in
// place. NewPlan upgrades its Kubernetes version: a check of the staged
// bundle before anything changes (its kubeadm, kubelet and kubectl report
// the target version; every tree the plan installs from is there), an etcd
// snapshot (first control plane), containerd (installed and restarted in one step), CNI
// plugins, the kubeadm binary, `kubeadm upgrade
// apply` (first control plane) or `kubeadm upgrade node` (other control
// planes, workers), kubectl, the kubelet (replaced and restarted in one
// step) and a final verification that the versions actually running are
// the target ones. NewKubeletArgsPlan changes the kubelet's extra
// arguments at the same version (below). NewControlPlaneConfigPlan applies
// a changed control plane configuration (API server, controller-manager
// and scheduler arguments, etcd's image and arguments) at the same
// version: `kubeadm upgrade node phase control-plane` renders the static
// pod manifests again from kube-system/kubeadm-config, and a verify step
// checks the expected arguments and image tag in the manifests and that
// the mirror pods are Ready. It does not model arguments kubeadm must
// quote in YAML (they fail the verification) and it does not check that
// removed arguments are gone (kubeadm renders the whole manifest from
// kubeadm-config, so the caller checks kubeadm-config first).
//
// Air-gapped nodes also need the target version's control plane and etcd
// images: with Config.ImportImages the bundle carries them as archives
// under images/ and StepImages imports them into containerd (ctr) before
// `kubeadm upgrade` runs.
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
// # Kubelet arguments without a version change
//
// NewKubeletArgsPlan applies a change of a KubeadmConfig's
// nodeRegistration.kubeletExtraArgs in place, at the same Kubernetes
// version: StepKubeletArgs backs up /var/lib/kubelet/kubeadm-flags.env,
// rewrites it atomically, restarts the kubelet, checks it stays active and
// puts the old file back (restarting again) if it does not;
// StepKubeletArgsVerify reads the running kubelet's command line
// (/proc/<MainPID>/cmdline) and checks every desired --name=value is on
// it and no other value of a replaced or removed flag is.
//
// What it models of kubeadm (KubeadmFlags): kubeadm writes the file as
// KUBELET_KUBEADM_ARGS="--name=value ..." from its own flags
// (--container-runtime-endpoint, --pod-infra-container-image,
// --register-with-taints, --hostname-override) overridden by the extra
// args, sorted by name then value. The step writes what `kubeadm join`
// would write with the new extra args, so an in-place change and a
// replacement machine end with the same file. Flags to remove are those
// of the previous config (KubeletArgsConfig.Previous) and those a
// record file next to kubeadm-flags.env says an earlier plan applied;
// kubeadm's own flags are never added, changed or removed
// (ErrKubeadmOwnedArg). The kubelet unit passes $KUBELET_KUBEADM_ARGS to
// ExecStart, which systemd splits at whitespace and unquotes, so values
// with whitespace, quotes or backslashes cannot reach the kubelet intact
// and are refused at plan construction (ErrInvalidKubeletArg); all other
// printable values ($, backticks, ;, * ...) are passed as argv elements
// and written verbatim. A flags file in any form kubeadm does not write is
// refused by the step, which then changes nothing (ErrUnsupportedFlagsFile
// is the model's equivalent). Flags set outside kubeadm-flags.env
// (KUBELET_EXTRA_ARGS in /etc/default/kubelet) are not edited; a removed
// flag still set there makes the verification fail.
//
// What it is not: it does not drain (use package nodeexec/drain before the
// plan runs), it does not update Cluster API objects, and it does not roll
// back `kubeadm upgrade apply` automatically (that needs the etcd snapshot
// and a human). The verify step reads the Node object with the node's own
// kubeconfig (/etc/kubernetes/kubelet.conf on workers, admin.conf on
// control planes), which assumes kubeadm's standard file layout.
package kubeadm
