package main

import (
	"context"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/cluster-api/exp/runtime/server"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
)

// The handoff between the two reference binaries: UpdateMachine (this
// extension) creates the upgrader pod; the pod runs examples/upgrader's
// image, whose /upgrader reads the plan from the pod's environment, journals
// on the host and writes a summary to the termination log; UpdateMachine
// reads the pod's status back with nodepod.ReadStatus.

// TestUpdateMachineCreatesAPodTheUpgraderRuns goes through the extension's
// own path (flags, handlers, the UpdateMachine handler, the workload
// cluster reached through CAPI's kubeconfig secret) against a real API
// server, then checks the pod it created against what examples/upgrader's
// image and binary expect.
func TestUpdateMachineCreatesAPodTheUpgraderRuns(t *testing.T) {
	env := apiserver.StartForTest(t)
	ctx := context.Background()
	wl := env.Client // the workload cluster; the extension creates the upgrader namespace
	require.NoError(t, wl.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubeadm-config"},
		Data:       map[string]string{"ClusterConfiguration": "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: v1.35.4\n"},
	}))

	// The management cluster holds the workload cluster's kubeconfig
	// secret, as CAPI writes it.
	secret, err := env.KubeconfigSecret("default", "demo")
	require.NoError(t, err)
	mgmt := fakeclient.NewClientBuilder().WithScheme(mgmtScheme(t)).WithObjects(secret).Build()
	img := readUpgraderImage(t)

	for _, tc := range []struct {
		name         string
		args         []string
		node         string
		controlPlane bool
		role         kubeadm.Role
		// What the plan reads from (or, for the UpgradeConfiguration,
		// writes to) the staging directory on the host, relative to it:
		// what the bundle image must carry under /staging.
		staged []string
	}{
		{
			name: "worker, default flags", node: "md-0-a", role: kubeadm.RoleWorker,
			staged: []string{"containerd", "cni-plugins", "kubernetes/kubeadm", "kubernetes/kubectl", "kubernetes/kubelet"},
		},
		{
			name: "first control plane, single container, containerd and CNI left alone",
			args: []string{"-upgrader-mode", "SingleContainer", "-skip-steps", "containerd,cni-plugins"},
			node: "cp-0", controlPlane: true, role: kubeadm.RoleFirstControlPlane,
			staged: []string{"etcd/etcdctl", "kubeadm-upgrade-config.yaml", "kubernetes/kubeadm", "kubernetes/kubectl", "kubernetes/kubelet"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: tc.node}, Spec: corev1.NodeSpec{ProviderID: "docker:////" + tc.node}}
			require.NoError(t, wl.Create(ctx, node))
			node.Status.NodeInfo.KubeletVersion = "v1.35.4"
			require.NoError(t, wl.Status().Update(ctx, node))

			// The extension as run() builds it, minus the servers.
			o, err := parseFlags(append([]string{"-upgrader-image", "registry.example/upgradekit-upgrader:v1.36.1@" + testDigest, "-allow-unverified-bundles"}, tc.args...), &strings.Builder{})
			require.NoError(t, err)
			metrics, err := capi.NewMetrics(prometheus.NewRegistry(), capi.MetricsOptions{})
			require.NoError(t, err)
			hs := handlers(t, o, deps{mgmt: mgmt, scheme: env.Scheme, recorder: events.NewFakeRecorder(100), metrics: metrics})
			require.NoError(t, err)
			i := slices.IndexFunc(hs, func(h server.ExtensionHandler) bool { return h.Name == "upgradekit-update-machine" })
			require.GreaterOrEqual(t, i, 0, "an UpdateMachine handler")
			update, ok := hs[i].HandlerFunc.(func(context.Context, *runtimehooksv1.UpdateMachineRequest, *runtimehooksv1.UpdateMachineResponse))
			require.True(t, ok, "UpdateMachine handler type %T", hs[i].HandlerFunc)

			m := clusterv1.Machine{
				ObjectMeta: metav1.ObjectMeta{Name: tc.node, Namespace: "default", Labels: map[string]string{clusterv1.ClusterNameLabel: "demo"}},
				Spec:       clusterv1.MachineSpec{ClusterName: "demo", Version: "v1.36.1", ProviderID: "docker:////" + tc.node},
			}
			if tc.controlPlane {
				m.Labels[clusterv1.MachineControlPlaneLabel] = ""
			}
			// The live Machine, as Cluster API marks it for the update:
			// the extension checks every request against it.
			live := m.DeepCopy()
			infra := markForUpdate(ctx, t, mgmt, live)
			require.NoError(t, mgmt.Create(ctx, live))
			m.Annotations = live.Annotations
			var resp runtimehooksv1.UpdateMachineResponse
			update(ctx, &runtimehooksv1.UpdateMachineRequest{Desired: runtimehooksv1.UpdateMachineRequestObjects{Machine: m, InfrastructureMachine: infra}}, &resp)
			require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
			require.Contains(t, resp.Message, "pulling the upgrader image registry.example/upgradekit-upgrader:v1.36.1@"+testDigest+" on node "+tc.node+" before cordoning it")

			// First the pre-pull pod: the upgrader pod's image, running a
			// program the image has, with a command the upgrader knows.
			var prePull corev1.PodList
			require.NoError(t, wl.List(ctx, &prePull, client.InNamespace(nodepod.DefaultNamespace), client.MatchingLabelsSelector{Selector: nodepod.PrePullSelector()},
				client.MatchingLabels{nodepod.LabelNode: tc.node}))
			require.Len(t, prePull.Items, 1)
			pp := &prePull.Items[0]
			require.Equal(t, tc.node, pp.Spec.NodeName)
			ppc := pp.Spec.Containers[0]
			require.Equal(t, "registry.example/upgradekit-upgrader:v1.36.1@"+testDigest, ppc.Image)
			_, ok = img.lookPath(ppc.Command[0])
			require.True(t, ok, "the pre-pull command %q is in the upgrader image", ppc.Command[0])
			require.Equal(t, []string{"/upgrader", "version"}, ppc.Command, "upgrader version exits 0 at once (examples/upgrader)")
			// The kubelet pulls the image and runs the command.
			pp.Status = corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: ppc.Name, Image: ppc.Image,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}}}
			require.NoError(t, wl.Status().Update(ctx, pp))
			update(ctx, &runtimehooksv1.UpdateMachineRequest{Desired: runtimehooksv1.UpdateMachineRequestObjects{Machine: m, InfrastructureMachine: infra}}, &resp)
			require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
			require.Contains(t, resp.Message, "started "+string(tc.role)+" upgrade of node "+tc.node)

			var ns corev1.Namespace
			require.NoError(t, wl.Get(ctx, client.ObjectKey{Name: nodepod.DefaultNamespace}, &ns), "the extension created the upgrader namespace")
			require.Equal(t, "privileged", ns.Labels[extensionserver.LabelPodSecurityEnforce], "the upgrader pod needs the privileged Pod Security level")
			var pods corev1.PodList
			require.NoError(t, wl.List(ctx, &pods, client.InNamespace(nodepod.DefaultNamespace), client.MatchingLabels{nodepod.LabelNode: tc.node}))
			require.Len(t, pods.Items, 1)
			pod := &pods.Items[0]

			// It is the pod podOptions builds for the plan planConfig
			// shapes: the rest of this test is about both.
			// The updater names each update's plan (its journal on the
			// host is the update's own); the rest is the same plan.
			cfg := kubeadm.Config{Node: tc.node, Role: tc.role, FromVersion: "v1.35.4", ToVersion: "v1.36.1", PlanName: pod.Labels[nodepod.LabelPlan]}
			planConfigOf(t, o, &cfg)
			plan, err := kubeadm.NewPlan(cfg)
			require.NoError(t, err)
			want, err := nodepod.Build(plan, podOptionsOf(t, o)...)
			require.NoError(t, err)
			require.Empty(t, cmp.Diff(containerRuns(want), containerRuns(pod)), "the created pod runs what podOptions builds")

			checkUpgraderPod(t, img, pod, plan, o)

			// Staging: the stage container copies the bundle's /staging to
			// the directory the plan installs from.
			var staged []string
			for _, s := range plan.Steps {
				if s.Name == kubeadm.StepBundle {
					continue // it checks what the other steps install from
				}
				for _, argv := range [][]string{s.Argv, s.Backup, s.Check, s.Rollback} {
					for _, a := range argv {
						if rel, ok := strings.CutPrefix(a, kubeadm.DefaultStagingDir+"/"); ok && !slices.Contains(staged, rel) {
							staged = append(staged, rel)
						}
					}
				}
			}
			require.ElementsMatch(t, tc.staged, staged)

			// Before the kubelet runs anything, UpdateMachine reads a
			// pending pod with every step of the plan.
			st := nodepod.ReadStatus(pod)
			require.Equal(t, nodepod.PhasePending, st.Phase)
			var names []string
			for _, s := range st.Steps {
				names = append(names, s.Name)
			}
			require.Equal(t, stepNames(plan), names)
		})
	}
}

// containerRun is what a container runs: the part of it the upgrader
// binary and image see.
type containerRun struct {
	Name, Image string
	Command     []string
	Env         []corev1.EnvVar
}

func containerRuns(pod *corev1.Pod) []containerRun {
	var out []containerRun
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		out = append(out, containerRun{c.Name, c.Image, c.Command, c.Env})
	}
	return out
}

func stepNames(p nodeexec.Plan) []string {
	var names []string
	for _, s := range p.Steps {
		names = append(names, s.Name)
	}
	return names
}

// checkUpgraderPod checks a pod the extension built for plan against what
// examples/upgrader's bundle image holds and what its binary reads.
func checkUpgraderPod(t *testing.T, img upgraderImage, pod *corev1.Pod, plan nodeexec.Plan, o options) {
	t.Helper()
	hostMount := func(c corev1.Container, p string) {
		t.Helper()
		for _, m := range c.VolumeMounts {
			if p == m.MountPath || strings.HasPrefix(p, m.MountPath+"/") {
				i := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
				require.GreaterOrEqual(t, i, 0)
				hp := pod.Spec.Volumes[i].HostPath
				require.NotNil(t, hp, "container %s: %s is on a hostPath volume", c.Name, p)
				require.Equal(t, m.MountPath, path.Join(hp.Path, m.SubPath), "mounted at the host's own path, so host and container paths agree")
				return
			}
		}
		require.Failf(t, "not on the host", "container %s: %s is on no volume, so it would not outlive the container", c.Name, p)
	}

	var runners []string
	for i, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		// A container without a command would run the image's
		// ENTRYPOINT+CMD ("/upgrader help"), not the plan.
		require.NotEmpty(t, c.Command, "container %s sets its command", c.Name)
		prog, ok := img.lookPath(c.Command[0])
		require.True(t, ok, "container %s runs %q, which examples/upgrader's image does not have", c.Name, c.Command[0])

		if c.Name == nodepod.StageContainer {
			require.Zero(t, i, "staging comes first")
			require.Equal(t, "/bin/sh", prog)
			script, src, dst := c.Command[2], c.Command[4], c.Command[5]
			for _, p := range []string{"mkdir", "cp"} {
				require.Contains(t, script, p+" ")
				_, ok := img.lookPath(p)
				require.True(t, ok, "the stage script runs %s", p)
			}
			require.Equal(t, o.stageFrom, src)
			require.True(t, img.dirs[src], "-stage-from %s is a directory of the bundle image", src)
			require.Equal(t, kubeadm.DefaultStagingDir, dst, "copied to where the kubeadm plan installs from")
			hostMount(c, dst)
			continue
		}

		// A runner: "/upgrader run", configured by its environment alone.
		require.Equal(t, []string{"/upgrader", "run"}, c.Command)
		require.Empty(t, c.Args)
		env := map[string]string{}
		for _, e := range c.Env {
			require.Nil(t, e.ValueFrom, "the runner's environment is literal")
			env[e.Name] = e.Value
		}
		cfg, err := nodeexec.FromEnv(func(k string) string { return env[k] })
		require.NoError(t, err, "container %s: the upgrader reads its environment", c.Name)
		require.Equal(t, plan.Fingerprint(), cfg.Plan.Fingerprint(), "container %s carries the plan", c.Name)
		require.Equal(t, 1, cfg.TargetPID, "steps enter the host's PID 1")
		require.True(t, pod.Spec.HostPID, "so PID 1 is the host's")
		nsenter, ok := img.lookPath(cfg.Nsenter)
		require.True(t, ok, "the runner execs %q, which the image has", cfg.Nsenter)
		require.Equal(t, "/bin/nsenter", nsenter)
		require.Equal(t, path.Join(nodepod.DefaultStagingHostPath, "journal"), cfg.JournalDir)
		hostMount(c, cfg.JournalDir)
		// The summary goes where the kubelet reads the termination
		// message from, which is how ReadStatus sees per-step results.
		require.Equal(t, c.TerminationMessagePath, cfg.SummaryFile)
		require.Equal(t, corev1.TerminationMessageReadFile, c.TerminationMessagePolicy)
		if c.Name == nodepod.StatusContainer {
			require.Empty(t, cfg.StopAfter, "the last container runs the plan to its end")
		} else {
			require.Equal(t, c.Name, cfg.StopAfter, "a step's container runs the plan up to that step")
		}
		runners = append(runners, c.Name)
	}
	want := []string{nodepod.StatusContainer}
	if nodepod.Mode(o.upgraderMode) == nodepod.ModeInitContainers {
		want = append(stepNames(plan), want...)
	}
	require.Equal(t, want, runners)
}
