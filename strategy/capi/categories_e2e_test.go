package capi_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// defaultInPlaceUpdaters are the updaters examples/inplace-extension
// accepts with by default: each pairs with an executor of MachineUpdater.
func defaultInPlaceUpdaters(t *testing.T) strategy.Decider {
	t.Helper()
	return strategy.Updaters(
		must(strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...)),
		must(strategy.ForPaths("kubelet-args", strategy.KubeletExtraArgsPaths()...)),
		must(strategy.ForPaths("control-plane-config", strategy.ControlPlaneConfigPaths()...)),
		must(strategy.ForPaths("files", strategy.FilesPaths()...)),
	)
}

// e2eMachine is one machine of the end-to-end cases: its Machine,
// KubeadmConfig and infrastructure machine as Cluster API holds them.
type e2eMachine struct {
	machine *clusterv1.Machine
	cfg     *bootstrapv1.KubeadmConfig
	infra   map[string]any
}

func newE2EMachine(n simulator.NodeInfo) e2eMachine {
	m := &clusterv1.Machine{
		TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"},
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Namespace: "default", Labels: map[string]string{clusterv1.ClusterNameLabel: "demo"}},
		Spec: clusterv1.MachineSpec{ClusterName: "demo", Version: n.Version, ProviderID: n.ProviderID,
			Bootstrap:         clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: n.Name}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DockerMachine", Name: n.Name}},
	}
	cfg := &bootstrapv1.KubeadmConfig{
		TypeMeta: metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfig"},
		Spec:     bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{Name: n.Name}}},
	}
	if n.Role == strategy.RoleControlPlane {
		m.Labels[clusterv1.MachineControlPlaneLabel] = ""
		cfg.Spec.JoinConfiguration.ControlPlane = &bootstrapv1.JoinControlPlane{}
		cfg.Spec.ClusterConfiguration.Etcd.Local.ImageTag = simulator.DefaultEtcdVersion
	}
	infra := map[string]any{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerMachine",
		"metadata": map[string]any{"name": n.Name}, "spec": map[string]any{"customImage": "kindest/node:v1.35.4", "providerID": n.ProviderID}}
	return e2eMachine{machine: m, cfg: cfg, infra: infra}
}

// kubeadmConfigFor is kube-system/kubeadm-config's ClusterConfiguration as
// KubeadmControlPlane writes it from a control plane's KubeadmConfig
// (kubeadm v1beta4: extraArgs as name/value lists).
func kubeadmConfigFor(t *testing.T, version string, cc bootstrapv1.ClusterConfiguration) string {
	t.Helper()
	args := func(in []bootstrapv1.Arg) []map[string]string {
		var out []map[string]string
		for _, a := range in {
			out = append(out, map[string]string{"name": a.Name, "value": *a.Value})
		}
		return out
	}
	doc := map[string]any{
		"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "ClusterConfiguration", "kubernetesVersion": version,
		"apiServer":         map[string]any{"extraArgs": args(cc.APIServer.ExtraArgs)},
		"controllerManager": map[string]any{"extraArgs": args(cc.ControllerManager.ExtraArgs)},
		"scheduler":         map[string]any{"extraArgs": args(cc.Scheduler.ExtraArgs)},
		"etcd":              map[string]any{"local": map[string]any{"imageTag": cc.Etcd.Local.ImageTag, "extraArgs": args(cc.Etcd.Local.ExtraArgs)}},
	}
	b, err := yaml.Marshal(doc)
	require.NoError(t, err)
	return string(b)
}

// TestEachInPlaceCategoryEndsAppliedOrDeclined is the in-place contract
// end to end, one default category changed alone per case: Cluster API asks
// the extension (CanUpdateMachine with the default updaters); on an accept
// it calls UpdateMachine until done, a new MachineUpdater per call, while
// the node's simulated kubelet (simulator.PodRunner) runs the upgrader pods on
// a simulated host (simulator.Fleet) and KubeadmControlPlane has written the
// desired ClusterConfiguration into kubeadm-config first. Every case must
// end with the change applied on the host and verified by a succeeded
// upgrader pod, or declined with the reason before anything ran. The
// machine is the cluster's only control plane (first control plane role,
// etcd snapshot included) or a worker.
func TestEachInPlaceCategoryEndsAppliedOrDeclined(t *testing.T) {
	const from, to = "v1.35.4", "v1.36.1"
	for _, tc := range []struct {
		name         string
		controlPlane bool
		cpVersion    string // the control plane's version, default from
		edit         func(des *clusterv1.Machine, cfg *bootstrapv1.KubeadmConfig)
		applied      func(t *testing.T, h *simulator.Host) // nil: declined
		declined     string                                // the reason names this
	}{
		{name: "version, control plane", controlPlane: true,
			edit: func(des *clusterv1.Machine, _ *bootstrapv1.KubeadmConfig) { des.Spec.Version = to },
			applied: func(t *testing.T, h *simulator.Host) {
				require.Equal(t, to, h.RunningVersion(simulator.ComponentKubelet))
				require.Equal(t, "registry.k8s.io/kube-apiserver:"+to, h.StaticPodImage("kube-apiserver"))
				snapshot := slices.IndexFunc(h.Files("/var/lib/upgradekit"), func(f string) bool { return strings.HasSuffix(f, "/etcd-snapshot.db") })
				require.GreaterOrEqual(t, snapshot, 0, "the etcd snapshot was taken: %v", h.Files("/var/lib/upgradekit"))
			}},
		{name: "version, worker", cpVersion: to,
			edit: func(des *clusterv1.Machine, _ *bootstrapv1.KubeadmConfig) { des.Spec.Version = to },
			applied: func(t *testing.T, h *simulator.Host) {
				require.Equal(t, to, h.RunningVersion(simulator.ComponentKubelet))
			}},
		{name: "kubelet args, worker",
			edit: func(_ *clusterv1.Machine, cfg *bootstrapv1.KubeadmConfig) {
				cfg.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs = []bootstrapv1.Arg{{Name: "max-pods", Value: ptrTo("200")}}
			},
			applied: func(t *testing.T, h *simulator.Host) {
				require.Contains(t, h.KubeletArgs(), "--max-pods=200")
			}},
		{name: "kubelet args, control plane", controlPlane: true,
			edit: func(_ *clusterv1.Machine, cfg *bootstrapv1.KubeadmConfig) {
				cfg.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs = []bootstrapv1.Arg{{Name: "max-pods", Value: ptrTo("200")}}
			},
			applied: func(t *testing.T, h *simulator.Host) {
				require.Contains(t, h.KubeletArgs(), "--max-pods=200")
			}},
		{name: "etcd image", controlPlane: true,
			edit: func(_ *clusterv1.Machine, cfg *bootstrapv1.KubeadmConfig) {
				cfg.Spec.ClusterConfiguration.Etcd.Local.ImageTag = "3.5.16-0"
			},
			applied: func(t *testing.T, h *simulator.Host) {
				require.Equal(t, "registry.k8s.io/etcd:3.5.16-0", h.StaticPodImage("etcd"))
				require.Equal(t, "3.5.16-0", h.Version(simulator.ComponentEtcd))
			}},
		{name: "API server arguments", controlPlane: true,
			edit: func(_ *clusterv1.Machine, cfg *bootstrapv1.KubeadmConfig) {
				cfg.Spec.ClusterConfiguration.APIServer.ExtraArgs = []bootstrapv1.Arg{{Name: "audit-log-maxage", Value: ptrTo("30")}}
			},
			applied: func(t *testing.T, h *simulator.Host) {
				require.Contains(t, h.StaticPodCommand("kube-apiserver"), "--audit-log-maxage=30")
			}},
		{name: "a file, worker",
			edit: func(_ *clusterv1.Machine, cfg *bootstrapv1.KubeadmConfig) {
				cfg.Spec.Files = append(cfg.Spec.Files, bootstrapv1.File{Path: "/etc/kubernetes/example/limits.conf", Content: "nofile=65536\n", Permissions: "0600"})
			},
			applied: func(t *testing.T, h *simulator.Host) {
				got, _ := h.File("/etc/kubernetes/example/limits.conf")
				require.Equal(t, "nofile=65536\n", got)
				mode, _ := h.FileAttrs("/etc/kubernetes/example/limits.conf")
				require.Equal(t, "600", mode)
			}},
		{name: "a gzip+base64 file, control plane", controlPlane: true,
			edit: func(_ *clusterv1.Machine, cfg *bootstrapv1.KubeadmConfig) {
				cfg.Spec.Files = append(cfg.Spec.Files, bootstrapv1.File{Path: "/etc/kubernetes/example/audit.yaml", Content: gzipBase64(t, "rules: []\n"), Encoding: bootstrapv1.GzipBase64})
			},
			applied: func(t *testing.T, h *simulator.Host) {
				got, _ := h.File("/etc/kubernetes/example/audit.yaml")
				require.Equal(t, "rules: []\n", got)
			}},
		{name: "a file from a Secret: not written in place",
			edit: func(_ *clusterv1.Machine, cfg *bootstrapv1.KubeadmConfig) {
				cfg.Spec.Files = append(cfg.Spec.Files, bootstrapv1.File{Path: "/etc/kubernetes/example/token",
					ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretFileSource{Name: "token", Key: "value"}}})
			},
			declined: "its content comes from Secret token"},
		{name: "API server certSANs: no executor", controlPlane: true,
			edit: func(_ *clusterv1.Machine, cfg *bootstrapv1.KubeadmConfig) {
				cfg.Spec.ClusterConfiguration.APIServer.CertSANs = []string{"api.example"}
			},
			declined: "bootstrap.spec.clusterConfiguration.apiServer.certSANs"},
		{name: "version, worker ahead of its control plane: infeasible",
			edit:     func(des *clusterv1.Machine, _ *bootstrapv1.KubeadmConfig) { des.Spec.Version = to },
			declined: "would be newer than the control plane"},
		{name: "a skipped minor: infeasible",
			edit:     func(des *clusterv1.Machine, _ *bootstrapv1.KubeadmConfig) { des.Spec.Version = "v1.37.0" },
			declined: "skips a minor version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			cpVersion := from
			if tc.cpVersion != "" {
				cpVersion = tc.cpVersion
			}
			cl := simulator.NewCluster("demo").ControlPlane(1, cpVersion).MachineDeployment("md", 1, from)
			c, err := cl.Client()
			require.NoError(t, err)
			fleet, err := simulator.NewFleet(cl, simulator.WithNodeClient(c), simulator.WithHostClock(clk))
			require.NoError(t, err)
			node := cl.Nodes()[0]
			if !tc.controlPlane {
				node = cl.Nodes()[1]
			}
			require.Equal(t, tc.controlPlane, node.Role == strategy.RoleControlPlane)
			host := fleet.Host(node.Name)

			cur := newE2EMachine(node)
			des := newE2EMachine(node)
			tc.edit(des.machine, des.cfg)
			require.NoError(t, c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubeadm-config"},
				Data: map[string]string{"ClusterConfiguration": kubeadmConfigFor(t, from, cur.cfg.Spec.ClusterConfiguration)}}))

			ext, err := capi.NewExtension(defaultInPlaceUpdaters(t), capi.ExtensionOptions{Checks: []capi.Check{capi.ControlPlaneSkewCheck(c)}})
			require.NoError(t, err)
			resp := canUpdateMachine(t, ext, nil, cur.machine, des.machine, cur.cfg, des.cfg, cur.infra, des.infra)
			require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
			accepted := resp.MachinePatch.IsDefined() || resp.BootstrapConfigPatch.IsDefined() || resp.InfrastructureMachinePatch.IsDefined()
			if tc.applied == nil {
				require.False(t, accepted, "declined: %s", resp.Message)
				require.Contains(t, resp.Message, tc.declined)
				return // Cluster API rolls the machine; nothing ran here
			}
			require.True(t, accepted, "accepted: %s", resp.Message)
			requireNothingLeftToRoll(t, resp, cur.machine, des.machine, cur.cfg, des.cfg, cur.infra, des.infra)

			// KubeadmControlPlane writes the desired configuration (and
			// version) into kubeadm-config before it updates machines.
			var cm corev1.ConfigMap
			require.NoError(t, c.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: "kubeadm-config"}, &cm))
			cm.Data["ClusterConfiguration"] = kubeadmConfigFor(t, des.machine.Spec.Version, des.cfg.Spec.ClusterConfiguration)
			require.NoError(t, c.Update(ctx, &cm))

			req := &runtimehooksv1.UpdateMachineRequest{Desired: runtimehooksv1.UpdateMachineRequestObjects{
				Machine: *des.machine, BootstrapConfig: raw(t, des.cfg), InfrastructureMachine: raw(t, des.infra)}}
			answers := driveUpdate(t, c, clk, host, req, simulator.Staging{Kubernetes: des.machine.Spec.Version, Containerd: "2.0.5", CNI: "v1.7.1"})
			require.Equal(t, "done", answers[len(answers)-1], "answers: %v", answers)

			tc.applied(t, host)
			require.Equal(t, simulator.UnitActive, host.UnitState("kubelet"))
			var pods corev1.PodList
			require.NoError(t, c.List(ctx, &pods, client.InNamespace(nodepod.DefaultNamespace)))
			succeeded := slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool {
				return p.Spec.NodeName == node.Name && p.Status.Phase == corev1.PodSucceeded
			})
			require.True(t, succeeded, "done only with a succeeded upgrader pod on the node")

			// Cluster API calls again after done: still done, nothing new runs.
			n := len(pods.Items)
			require.Equal(t, []string{"done"}, driveUpdate(t, c, clk, host, req, simulator.Staging{}))
			require.NoError(t, c.List(ctx, &pods, client.InNamespace(nodepod.DefaultNamespace)))
			require.Len(t, pods.Items, n)
		})
	}
}

func gzipBase64(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, err := zw.Write([]byte(s))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

// driveUpdate calls UpdateMachine as Cluster API does until it answers
// done or a Failure (a new updater per call), playing the node's kubelet
// between calls, and returns the answers ("waiting: ...", "done",
// "failure: ...").
func driveUpdate(t *testing.T, c client.Client, clk *clocktesting.FakeClock, host *simulator.Host, req *runtimehooksv1.UpdateMachineRequest, staging simulator.Staging) []string {
	t.Helper()
	ctx := context.Background()
	workload := func(context.Context, types.NamespacedName) (client.Client, error) { return c, nil }
	runners := map[string]*simulator.PodRunner{}
	journal := t.TempDir()
	var answers []string
	for call := 0; call < 40; call++ {
		u, err := capi.NewMachineUpdater(workload, capi.UpdaterOptions{SkipDrain: true, Clock: clk, PodOptions: []nodepod.Option{nodepod.WithImage("r/u:1"), nodepod.WithStageFrom("/staging"), nodepod.WithRunnerCommand("/upgrader", "run")}})
		require.NoError(t, err)
		var resp runtimehooksv1.UpdateMachineResponse
		u.UpdateMachine(ctx, req, &resp)
		switch {
		case resp.Status == runtimehooksv1.ResponseStatusFailure:
			return append(answers, "failure: "+resp.Message)
		case resp.RetryAfterSeconds == 0:
			return append(answers, "done")
		}
		answers = append(answers, "waiting: "+resp.Message)
		clk.Step(time.Duration(resp.RetryAfterSeconds) * time.Second)
		for _, p := range upgraderPods(t, c) {
			if p.Spec.NodeName != host.Node() {
				continue
			}
			r, ok := runners[p.Name]
			if !ok {
				r, err = simulator.NewPodRunner(host, &p, simulator.WithPodJournalDir(journal), simulator.WithPodImageStaging(staging))
				require.NoError(t, err)
				runners[p.Name] = r
			}
			_, err := r.Run(ctx)
			require.NoError(t, err)
			p.Status = r.Pod().Status
			require.NoError(t, c.Status().Update(ctx, &p))
		}
	}
	require.FailNow(t, "no end after 40 UpdateMachine calls", fmt.Sprint(answers))
	return nil
}
