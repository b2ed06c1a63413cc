package kubeadmnode

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
)

// KubeadmOptions are what KubeadmInit and KubeadmJoin pass to kubeadm
// besides what every node of this package needs.
type KubeadmOptions struct {
	// IgnorePreflightErrors are added to the ones this machine kind
	// always needs (MachineIgnoredPreflightErrors).
	IgnorePreflightErrors []string
	// KubeletExtraArgs are added to the node's kubelet arguments (the
	// node IP and cgroup root are always set).
	KubeletExtraArgs map[string]string
	// FeatureGates are the ClusterConfiguration's kubeadm feature gates
	// (KubeadmInit only): for example ControlPlaneKubeletLocalMode, which
	// Cluster API v1.14 sets on clusters from v1.31 to v1.35.
	FeatureGates map[string]bool
}

// MachineIgnoredPreflightErrors are the kubeadm preflight checks a node of
// this package fails for reasons of the machine, not of the plan under
// test: SystemVerification (the machine runs cgroup v1, which kubeadm
// >= v1.35 refuses; the kubelet is configured with failCgroupV1: false)
// and Swap (the machine may have swap; failSwapOn: false).
var MachineIgnoredPreflightErrors = []string{"SystemVerification", "Swap"}

// kubeletConfig is the KubeletConfiguration every node gets: cgroupfs (the
// machine has no systemd), cgroup v1 allowed, swap allowed, no image
// garbage collection (the images were imported, none can be pulled), and
// eviction thresholds in absolute sizes. The nodes' file systems are the
// machine's disk, shared with everything else on it, so the kubelet's
// default percentages (imagefs.available<15%) measure the machine: on a
// disk 86% full every node reports DiskPressure, is tainted, and kubeadm
// upgrade's CreateJob preflight cannot place its pod. With these values a
// node reports pressure only when the disk is nearly full.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1Gi
  nodefs.inodesFree: 1%
  imagefs.available: 1Gi
  imagefs.inodesFree: 1%
`

func (n *Node) nodeRegistration(o KubeadmOptions) string {
	var b strings.Builder
	fmt.Fprintf(&b, "nodeRegistration:\n  name: %s\n  criSocket: unix:///run/containerd/containerd.sock\n", n.Name)
	b.WriteString("  ignorePreflightErrors:\n")
	for _, e := range append(append([]string{}, MachineIgnoredPreflightErrors...), o.IgnorePreflightErrors...) {
		fmt.Fprintf(&b, "  - %s\n", e)
	}
	b.WriteString("  kubeletExtraArgs:\n")
	fmt.Fprintf(&b, "  - name: node-ip\n    value: %q\n  - name: cgroup-root\n    value: %q\n", n.IP, n.cgroupRoot)
	for k, v := range o.KubeletExtraArgs {
		fmt.Fprintf(&b, "  - name: %s\n    value: %q\n", k, v)
	}
	return b.String()
}

// KubeadmInit runs `kubeadm init` on the node with stacked etcd, the
// kube-proxy and CoreDNS addons skipped (neither has an image here; Cluster
// API manages CoreDNS), and waits until the node is Ready.
func (n *Node) KubeadmInit(ctx context.Context, o KubeadmOptions) error {
	cfg := "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n" +
		fmt.Sprintf("localAPIEndpoint:\n  advertiseAddress: %s\n  bindPort: 6443\n", n.IP) +
		n.nodeRegistration(o) +
		"skipPhases:\n- addon/kube-proxy\n- addon/coredns\n" +
		"---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n" +
		fmt.Sprintf("kubernetesVersion: %s\nclusterName: upgradekit-node\ncontrolPlaneEndpoint: %s:6443\n", n.opts.Assets.Version, n.IP) +
		"networking:\n  podSubnet: 10.244.0.0/16\n  serviceSubnet: 10.96.0.0/12\n"
	if len(o.FeatureGates) > 0 {
		names := make([]string, 0, len(o.FeatureGates))
		for k := range o.FeatureGates {
			names = append(names, k)
		}
		sort.Strings(names)
		cfg += "featureGates:\n"
		for _, k := range names {
			cfg += fmt.Sprintf("  %s: %t\n", k, o.FeatureGates[k])
		}
	}
	cfg += "---\n" + kubeletConfig
	if err := n.WriteFile("/etc/upgradekit-node/kubeadm-init.yaml", []byte(cfg), 0o600); err != nil {
		return err
	}
	if _, err := n.Run(ctx, "kubeadm", "init", "--config", "/etc/upgradekit-node/kubeadm-init.yaml"); err != nil {
		return err
	}
	return n.WaitReady(ctx, n, 5*time.Minute)
}

var joinToken = regexp.MustCompile(`--token (\S+) --discovery-token-ca-cert-hash (sha256:[0-9a-f]{64})`)

// KubeadmJoin joins the node to cp's cluster as a worker and waits until
// it is Ready.
func (n *Node) KubeadmJoin(ctx context.Context, cp *Node, o KubeadmOptions) error {
	out, err := cp.Run(ctx, "kubeadm", "token", "create", "--print-join-command")
	if err != nil {
		return err
	}
	m := joinToken.FindStringSubmatch(out)
	if m == nil {
		return fmt.Errorf("nodetest: no token in %q", out)
	}
	cfg := "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\n" +
		fmt.Sprintf("discovery:\n  bootstrapToken:\n    apiServerEndpoint: %s:6443\n    token: %s\n    caCertHashes:\n    - %s\n", cp.IP, m[1], m[2]) +
		n.nodeRegistration(o)
	if err := n.WriteFile("/etc/upgradekit-node/kubeadm-join.yaml", []byte(cfg), 0o600); err != nil {
		return err
	}
	if _, err := n.Run(ctx, "kubeadm", "join", "--config", "/etc/upgradekit-node/kubeadm-join.yaml"); err != nil {
		return err
	}
	return n.WaitReady(ctx, cp, 5*time.Minute)
}

// Kubectl runs kubectl on the node with the cluster's admin credentials
// (a control plane node's /etc/kubernetes/admin.conf).
func (n *Node) Kubectl(ctx context.Context, args ...string) (string, error) {
	return n.Run(ctx, append([]string{"kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf"}, args...)...)
}

// WaitReady waits until the node's Node object, read through cp, is Ready.
func (n *Node) WaitReady(ctx context.Context, cp *Node, limit time.Duration) error {
	return poll(ctx, 2*time.Second, limit, func() error {
		out, err := cp.Kubectl(ctx, "get", "node", n.Name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != "True" {
			return fmt.Errorf("node %s is not Ready (%q)", n.Name, out)
		}
		return nil
	})
}
