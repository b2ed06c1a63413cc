//go:build realnode && linux

package kubeadmnode_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/upgradekit/upgradekit/harness/kubeadmnode"
	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
)

// upgradesEnv lists the upgrades the real-node scenarios run, as
// FROM>TO pairs separated by commas ("v1.35.4>v1.36.3,v1.36.3>v1.37.2":
// the last minor pair Cluster API v1.14 supports, and the newest one);
// make e2e-node sets it with the assets of every version in
// kubeadmnode.AssetsEnvVar.
const upgradesEnv = "UPGRADEKIT_NODE_UPGRADES"

// containerdEnv names a directory with a containerd 2.x
// (hack/containerd-assets.sh prints it): upgrades to v1.37 or newer move
// the nodes from the machine's containerd (Debian's 1.6, which lacks the
// CRI RuntimeConfig call kubelet v1.37 asks for) to it.
const containerdEnv = "UPGRADEKIT_CONTAINERD_ASSETS"

type upgrade struct{ from, to string }

func upgrades(t *testing.T) []upgrade {
	t.Helper()
	v := os.Getenv(upgradesEnv)
	require.NotEmpty(t, v, "make e2e-node sets %s", upgradesEnv)
	var out []upgrade
	for _, pair := range strings.Split(v, ",") {
		from, to, ok := strings.Cut(strings.TrimSpace(pair), ">")
		require.True(t, ok, "%s: %q is not FROM>TO", upgradesEnv, pair)
		out = append(out, upgrade{from, to})
	}
	return out
}

// minorOf is the minor version of "v1.X.Y".
func minorOf(t *testing.T, v string) int {
	t.Helper()
	var major, minor, patch int
	_, err := fmt.Sscanf(v, "v%d.%d.%d", &major, &minor, &patch)
	require.NoError(t, err, "version %q", v)
	return minor
}

func assets(t *testing.T, version string) kubeadmnode.Assets {
	t.Helper()
	a, err := kubeadmnode.AssetsFromEnv(version)
	require.NoError(t, err, "make e2e-node sets %s (hack/node-assets.sh VERSION builds each)", kubeadmnode.AssetsEnvVar)
	return a
}

// cluster is a network with one control plane node at from, images of
// both versions imported (air-gapped: nothing can be pulled).
type cluster struct {
	net      *kubeadmnode.Network
	cp       *kubeadmnode.Node
	from, to kubeadmnode.Assets
	upgrader string
	// containerd is the containerd 2.x the upgrade installs ("": the
	// nodes keep the machine's own, staged again).
	containerd, containerdVersion string
	// suffix names this upgrade's recordings ("-v1-37").
	suffix string
}

func newCluster(ctx context.Context, t *testing.T, u upgrade) *cluster {
	t.Helper()
	require.Zero(t, os.Geteuid(), "real nodes need root")
	c := &cluster{from: assets(t, u.from), to: assets(t, u.to), suffix: fmt.Sprintf("-v1-%d", minorOf(t, u.to))}
	if minorOf(t, u.to) >= 37 {
		c.containerd = os.Getenv(containerdEnv)
		require.NotEmpty(t, c.containerd, "make e2e-node sets %s (hack/containerd-assets.sh)", containerdEnv)
		out, err := exec.CommandContext(ctx, filepath.Join(c.containerd, "containerd"), "--version").Output()
		require.NoError(t, err)
		f := strings.Fields(string(out))
		require.GreaterOrEqual(t, len(f), 3, "containerd --version: %q", out)
		c.containerdVersion = f[2]
	}
	init := kubeadmnode.KubeadmOptions{}
	if minorOf(t, u.from) >= 31 && minorOf(t, u.from) < 36 {
		// As Cluster API v1.14 sets it on a cluster from v1.31 to v1.35;
		// kubeadm v1.36 no longer knows the gate.
		init.FeatureGates = map[string]bool{"ControlPlaneKubeletLocalMode": true}
	}
	var err error
	c.upgrader, err = kubeadmnode.BuildUpgrader(ctx, t.TempDir())
	require.NoError(t, err)
	c.net, err = kubeadmnode.NewNetwork(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.net.Close(context.Background())) })
	// Only the running version's images: the target version's come with
	// the bundle (the plan's images step), as on an air-gapped node.
	c.cp = startNode(ctx, t, c.net, "cp1", c.from, c.from.ControlPlaneImages())
	start := time.Now()
	err = c.cp.KubeadmInit(ctx, init)
	if err != nil {
		t.Logf("kubelet log:\n%s", c.cp.Log("kubelet", 6000))
	}
	require.NoError(t, err)
	t.Logf("kubeadm init %s: Ready in %s", c.from.Version, time.Since(start).Round(time.Second))
	return c
}

func startNode(ctx context.Context, t *testing.T, net *kubeadmnode.Network, name string, a kubeadmnode.Assets, images []kubeadmnode.Image) *kubeadmnode.Node {
	t.Helper()
	n, err := kubeadmnode.StartNode(ctx, kubeadmnode.NodeOptions{Name: name, Assets: a, Network: net, Images: images, Log: testr.New(t)})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s kubelet log:\n%s", name, n.Log("kubelet", 4000))
			t.Logf("%s containerd log:\n%s", name, n.Log("containerd", 2000))
		}
		require.NoError(t, n.Close(context.Background()))
	})
	return n
}

func stepTimes(t *testing.T, journalDir, plan string) string {
	t.Helper()
	j, err := nodeexec.ReadJournal(filepath.Join(journalDir, nodeexec.JournalFileName(plan)))
	require.NoError(t, err)
	var b strings.Builder
	var total time.Duration
	for _, s := range j.Steps {
		d := s.Finished.Sub(s.Started).Round(100 * time.Millisecond)
		total += d
		b.WriteString(s.Name + "=" + d.String() + " ")
	}
	return b.String() + "total=" + total.String()
}

// journalStep reads one step's record from a plan's journal (zero when
// the journal or the step is not there yet).
func journalStep(journalDir, plan, step string) nodeexec.StepRecord {
	j, err := nodeexec.ReadJournal(filepath.Join(journalDir, nodeexec.JournalFileName(plan)))
	if err != nil {
		return nodeexec.StepRecord{}
	}
	for _, s := range j.Steps {
		if s.Name == step {
			return s
		}
	}
	return nodeexec.StepRecord{}
}

// runKilledThenResumed starts the upgrader, SIGKILLs it with everything it
// started (as a crashing upgrader container would die) once step has run
// for after, then runs it again to its end: the journal resumes the plan.
func runKilledThenResumed(ctx context.Context, t *testing.T, n *kubeadmnode.Node, upgrader string, plan nodeexec.Plan, journal, step string, after time.Duration) kubeadmnode.UpgraderRun {
	t.Helper()
	cmd, err := n.UpgraderCommand(ctx, upgrader, "run", plan, journal)
	require.NoError(t, err)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	killed := false
	for !killed {
		select {
		case err := <-done:
			t.Fatalf("the upgrader ended (%v) before step %s ran for %s:\n%s", err, step, after, out.String())
		case <-time.After(500 * time.Millisecond):
		}
		r := journalStep(journal, plan.Name, step)
		if r.State == nodeexec.StepStateRunning && !r.Started.IsZero() && time.Since(r.Started) >= after {
			require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL))
			killed = true
		}
	}
	<-done
	t.Logf("killed the upgrader %s into step %s", after, step)
	require.Equal(t, nodeexec.StepStateRunning, journalStep(journal, plan.Name, step).State, "the journal says the step was under way")
	run, err := n.RunUpgrader(ctx, upgrader, "run", plan, journal)
	require.NoError(t, err)
	require.Zero(t, run.ExitCode, "resumed upgrader run:\n%s", run.Output)
	r := journalStep(journal, plan.Name, step)
	require.Equal(t, nodeexec.StepStateSucceeded, r.State)
	require.GreaterOrEqual(t, r.Resumed, 1, "the resumed run found step %s interrupted", step)
	return run
}

// requireVersion checks the node's binaries and its running kubelet.
func requireVersion(ctx context.Context, t *testing.T, n, cp *kubeadmnode.Node, version string) {
	t.Helper()
	out, err := n.Run(ctx, "kubeadm", "version", "-o", "short")
	require.NoError(t, err)
	require.Equal(t, version, strings.TrimSpace(out))
	out, err = n.Run(ctx, "kubelet", "--version")
	require.NoError(t, err)
	require.Equal(t, "Kubernetes "+version, strings.TrimSpace(out))
	out, err = n.Run(ctx, "kubectl", "version", "--client")
	require.NoError(t, err)
	require.Contains(t, out, "Client Version: "+version)
	require.NoError(t, n.WaitReady(ctx, cp, 3*time.Minute))
	require.Eventually(t, func() bool {
		out, err = cp.Kubectl(ctx, "get", "node", n.Name, "-o", "jsonpath={.status.nodeInfo.kubeletVersion}")
		return err == nil && out == version
	}, 2*time.Minute, 2*time.Second, "the running kubelet reports %s (last: %q, %v)", version, out, err)
}

// TestUpgradeAClusterInPlace upgrades a real two-node kubeadm cluster
// (stacked etcd) for each upgrade upgradesEnv lists, with the project's
// plans, run by the project's upgrader: the first control plane (runner
// killed during `kubeadm upgrade apply` and resumed), then a worker (a
// failing step rolled back first, then the real plan with kubelet extra
// arguments and a file, runner killed during the kubelet swap and
// resumed), then a second worker by the upgrader pod on its real kubelet.
// Upgrades to v1.37 or newer also move containerd from Debian's 1.6 to
// containerd 2.x, configuration migrated.
func TestUpgradeAClusterInPlace(t *testing.T) {
	for _, u := range upgrades(t) {
		t.Run(u.from+"-to-"+u.to, func(t *testing.T) { upgradeACluster(t, u) })
		if t.Failed() {
			return
		}
	}
}

func upgradeACluster(t *testing.T, u upgrade) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	c := newCluster(ctx, t, u)
	cp := c.cp
	// `kubeadm upgrade apply` (its CreateJob preflight) runs a Job with the
	// TARGET version's pause image on any schedulable node, workers
	// included, before any worker is upgraded: an air-gapped cluster needs
	// that image on every node beforehand (v1.36's kubeadm failed its
	// preflight with the job's pod in ErrImagePull on a worker that had
	// only v1.35's pause). The workers start with both.
	workerImages := []kubeadmnode.Image{c.from.PauseImage()}
	if c.to.PauseVersion != c.from.PauseVersion {
		workerImages = append(workerImages, c.to.PauseImage())
	}
	w := startNode(ctx, t, c.net, "w1", c.from, workerImages)
	start := time.Now()
	require.NoError(t, w.KubeadmJoin(ctx, cp, kubeadmnode.KubeadmOptions{}))
	t.Logf("kubeadm join %s: Ready in %s", c.from.Version, time.Since(start).Round(time.Second))
	w2 := startNode(ctx, t, c.net, "w2", c.from, workerImages)
	require.NoError(t, w2.KubeadmJoin(ctx, cp, kubeadmnode.KubeadmOptions{}))
	_, err := cp.Kubectl(ctx, "create", "configmap", "written-before", "--from-literal=k=v")
	require.NoError(t, err)
	gatesBefore, err := cp.Kubectl(ctx, "-n", "kube-system", "get", "configmap", "kubeadm-config", "-o", "jsonpath={.data.ClusterConfiguration}")
	require.NoError(t, err)

	t.Run("first control plane", func(t *testing.T) {
		stage := kubeadmnode.StageOptions{Etcdctl: true, Containerd: true, ContainerdDir: c.containerd, CNIPlugins: true, Images: c.to.ControlPlaneImages()}
		sums, err := cp.StageBundle(c.to, stage)
		require.NoError(t, err)
		plan, err := kubeadm.NewPlan(kubeadm.Config{Node: cp.Name, Role: kubeadm.RoleFirstControlPlane, FromVersion: c.from.Version, ToVersion: c.to.Version,
			IgnorePreflightErrors: []string{"SystemVerification"}, ImportImages: true, Checksums: sums, RequireChecksums: true, RollbackOnFailure: true})
		require.NoError(t, err)
		before := c.fakeNode(ctx, t, cp, kubeadm.RoleFirstControlPlane, stage)
		containerdStarts, kubeletStarts := cp.Starts("containerd"), cp.Starts("kubelet")
		journal := t.TempDir()
		start := time.Now()
		runKilledThenResumed(ctx, t, cp, c.upgrader, plan, journal, kubeadm.StepKubeadmUpgrade, 20*time.Second)
		t.Logf("first control plane %s -> %s in %s: %s", c.from.Version, c.to.Version, time.Since(start).Round(time.Second), stepTimes(t, journal, plan.Name))
		fidelity(ctx, t, "first-control-plane"+c.suffix, cp, before, plan, journal)

		requireVersion(ctx, t, cp, cp, c.to.Version)
		c.requireContainerd(ctx, t, cp, before)
		for pod, image := range map[string]string{
			"kube-apiserver":          "registry.k8s.io/kube-apiserver:" + c.to.Version,
			"kube-controller-manager": "registry.k8s.io/kube-controller-manager:" + c.to.Version,
			"kube-scheduler":          "registry.k8s.io/kube-scheduler:" + c.to.Version,
			"etcd":                    "registry.k8s.io/etcd:" + c.to.EtcdImageTag,
		} {
			out, err := cp.Kubectl(ctx, "-n", "kube-system", "get", "pod", pod+"-"+cp.Name, "-o", "jsonpath={.spec.containers[0].image}")
			require.NoError(t, err)
			require.Equal(t, image, out, "static pod %s", pod)
		}
		out, err := cp.Kubectl(ctx, "get", "configmap", "written-before", "-o", "jsonpath={.data.k}")
		require.NoError(t, err)
		require.Equal(t, "v", out, "an object written before the upgrade is still there")
		require.Greater(t, cp.Starts("containerd"), containerdStarts, "the containerd step restarted containerd")
		require.Greater(t, cp.Starts("kubelet"), kubeletStarts, "the kubelet step restarted the kubelet")
		gatesAfter, err := cp.Kubectl(ctx, "-n", "kube-system", "get", "configmap", "kubeadm-config", "-o", "jsonpath={.data.ClusterConfiguration}")
		require.NoError(t, err)
		if strings.Contains(gatesBefore, "ControlPlaneKubeletLocalMode: true") {
			// kubeadm >= v1.36 no longer knows the gate, yet neither
			// refuses the configuration nor removes the gate (measured on
			// v1.36.3): the plan needs no step for it. Cluster API v1.14
			// drops it from kubeadm-config itself at v1.36
			// (UpdateFeatureGatesInKubeadmConfigMap).
			require.Contains(t, gatesAfter, "ControlPlaneKubeletLocalMode: true", "kubeadm-config after the upgrade:\n%s", gatesAfter)
			require.Contains(t, gatesAfter, "kubernetesVersion: "+c.to.Version)
		}

		// The snapshot restores, and holds what was written before.
		snap := kubeadm.DefaultBackupRoot + "/" + plan.Name + "/etcd-snapshot.db"
		_, err = cp.Run(ctx, c.from.Bin("etcdutl"), "snapshot", "restore", snap, "--data-dir", "/var/lib/upgradekit-node/restored",
			"--name", "default", "--initial-cluster", "default=http://127.0.0.1:23800", "--initial-advertise-peer-urls", "http://127.0.0.1:23800")
		require.NoError(t, err)
		out, err = cp.Run(ctx, "sh", "-c", restoredEtcdScript, "sh", c.from.Bin("etcd"), c.from.Bin("etcdctl"))
		require.NoError(t, err)
		require.Contains(t, out, "restored")
	})
	if t.Failed() {
		return
	}

	t.Run("worker: a failing step is rolled back", func(t *testing.T) {
		stage := kubeadmnode.StageOptions{Containerd: true, CNIPlugins: true}
		sums, err := w.StageBundle(c.to, stage)
		require.NoError(t, err)
		// A containerd 2.x that migrates the configuration but does not
		// stay up (its checksum is the one the operator's records would
		// give it): the step restores the old containerd and its
		// configuration and fails (three attempts), the plan rolls back.
		require.NoError(t, w.WriteFile(kubeadm.DefaultStagingDir+"/containerd/usr/bin/containerd", []byte(kubeadmnode.CrashingContainerd), 0o755))
		crashing := sha256.Sum256([]byte(kubeadmnode.CrashingContainerd))
		sums["containerd/usr/bin/containerd"] = hex.EncodeToString(crashing[:])
		plan, err := kubeadm.NewPlan(kubeadm.Config{PlanName: "worker-broken-containerd", Node: w.Name, Role: kubeadm.RoleWorker,
			FromVersion: c.from.Version, ToVersion: c.to.Version, IgnorePreflightErrors: []string{"SystemVerification"},
			Checksums: sums, RequireChecksums: true, RollbackOnFailure: true})
		require.NoError(t, err)
		before := c.fakeNode(ctx, t, w, kubeadm.RoleWorker, stage)
		before.ContainerdCrashes = true
		confBefore, err := os.ReadFile(w.Path(kubeadm.DefaultContainerdConfig))
		require.NoError(t, err)
		journal := t.TempDir()
		run, err := w.RunUpgrader(ctx, c.upgrader, "run", plan, journal)
		require.NoError(t, err)
		require.Equal(t, 4, run.ExitCode, "RolledBack:\n%s", run.Output)
		require.Contains(t, journalStep(journal, plan.Name, kubeadm.StepContainerd).Output, "migrated "+kubeadm.DefaultContainerdConfig,
			"the crashing containerd 2.x got a migrated configuration before it failed")
		fidelity(ctx, t, "worker-broken-containerd"+c.suffix, w, before, plan, journal)
		_, err = w.Run(ctx, "systemctl", "is-active", "--quiet", "containerd")
		require.NoError(t, err, "containerd runs again")
		host, err := os.ReadFile("/usr/bin/containerd")
		require.NoError(t, err)
		node, err := os.ReadFile(w.Path("/usr/bin/containerd"))
		require.NoError(t, err)
		require.True(t, bytes.Equal(host, node), "the node has its own containerd back")
		confAfter, err := os.ReadFile(w.Path(kubeadm.DefaultContainerdConfig))
		require.NoError(t, err)
		require.Equal(t, string(confBefore), string(confAfter), "containerd 1.6 has its own configuration back")
		requireVersion(ctx, t, w, cp, c.from.Version)
	})
	if t.Failed() {
		return
	}

	t.Run("worker: kubelet arguments and a file with the upgrade", func(t *testing.T) {
		stage := kubeadmnode.StageOptions{Containerd: true, ContainerdDir: c.containerd, CNIPlugins: true}
		sums, err := w.StageBundle(c.to, stage)
		require.NoError(t, err)
		plan, err := kubeadm.NewPlan(kubeadm.Config{Node: w.Name, Role: kubeadm.RoleWorker, FromVersion: c.from.Version, ToVersion: c.to.Version,
			IgnorePreflightErrors: []string{"SystemVerification"}, Checksums: sums, RequireChecksums: true, RollbackOnFailure: true})
		require.NoError(t, err)
		flags, err := os.ReadFile(w.Path(kubeadm.DefaultKubeadmFlagsFile))
		require.NoError(t, err)
		before := c.fakeNode(ctx, t, w, kubeadm.RoleWorker, stage)
		before.Files[kubeadm.DefaultKubeadmFlagsFile] = string(flags)
		// As MachineUpdater composes them: the files after the bundle
		// check, the kubelet's extra arguments at the end.
		files, err := kubeadm.NewFilesPlan(kubeadm.FilesConfig{PlanName: plan.Name, Node: w.Name, BackupDir: kubeadm.DefaultBackupRoot + "/" + plan.Name + "/files",
			Files: []kubeadm.File{{Path: "/etc/sysctl.d/99-upgradekit.conf", Content: []byte("vm.swappiness = 10\n"), Permissions: "0644"}}})
		require.NoError(t, err)
		args, err := kubeadm.NewKubeletArgsPlan(kubeadm.KubeletArgsConfig{PlanName: plan.Name, Node: w.Name, BackupDir: kubeadm.DefaultBackupRoot + "/" + plan.Name + "/kubelet-args",
			Desired: []kubeadm.KubeletArg{{Name: "max-pods", Value: "150"}}})
		require.NoError(t, err)
		plan.Steps = append(append(append([]nodeexec.Step{plan.Steps[0]}, files.Steps...), plan.Steps[1:]...), args.Steps...)
		require.NoError(t, plan.Validate())

		journal := t.TempDir()
		start := time.Now()
		runKilledThenResumed(ctx, t, w, c.upgrader, plan, journal, kubeadm.StepKubelet, time.Second)
		t.Logf("worker %s -> %s in %s: %s", c.from.Version, c.to.Version, time.Since(start).Round(time.Second), stepTimes(t, journal, plan.Name))

		fidelity(ctx, t, "worker-files-kubelet-args"+c.suffix, w, before, plan, journal, "/etc/sysctl.d/99-upgradekit.conf", kubeadm.DefaultKubeadmFlagsFile)
		requireVersion(ctx, t, w, cp, c.to.Version)
		c.requireContainerd(ctx, t, w, before)
		data, err := os.ReadFile(w.Path("/etc/sysctl.d/99-upgradekit.conf"))
		require.NoError(t, err)
		require.Equal(t, "vm.swappiness = 10\n", string(data))
		require.Eventually(t, func() bool {
			out, err := cp.Kubectl(ctx, "get", "node", w.Name, "-o", "jsonpath={.status.capacity.pods}")
			return err == nil && out == "150"
		}, 2*time.Minute, 2*time.Second, "the kubelet runs with --max-pods=150")
	})
	if t.Failed() {
		return
	}

	t.Run("worker: the upgrader pod on the real kubelet", func(t *testing.T) {
		upgradeByPod(ctx, t, c, w2)
	})
}

// fakeNode is n as it is before a plan with the bundle stage: what
// FakeRun needs to run the same plan on a fake host, containerd's
// configuration included.
func (c *cluster) fakeNode(ctx context.Context, t *testing.T, n *kubeadmnode.Node, role kubeadm.Role, stage kubeadmnode.StageOptions) kubeadmnode.FakeNode {
	t.Helper()
	conf, err := os.ReadFile(n.Path(kubeadm.DefaultContainerdConfig))
	require.NoError(t, err)
	fn := kubeadmnode.FakeNode{Name: n.Name, Role: role, FromVersion: c.from.Version, ToVersion: c.to.Version,
		ContainerdVersion: containerdVersion(ctx, t, n), Bundle: kubeadmnode.BundleOf(stage),
		Files: map[string]string{kubeadm.DefaultContainerdConfig: string(conf)}}
	if role != kubeadm.RoleFirstControlPlane {
		fn.ClusterVersion = c.to.Version
	}
	if stage.ContainerdDir != "" {
		fn.StagedContainerdVersion = c.containerdVersion
	}
	return fn
}

// requireContainerd checks the containerd n runs after a plan: the
// staged containerd 2.x, its configuration migrated, the CRI answering
// (the kubelet's node is Ready and its runtime is that containerd), or
// the machine's own, its configuration unchanged.
func (c *cluster) requireContainerd(ctx context.Context, t *testing.T, n *kubeadmnode.Node, before kubeadmnode.FakeNode) {
	t.Helper()
	conf, err := os.ReadFile(n.Path(kubeadm.DefaultContainerdConfig))
	require.NoError(t, err)
	if c.containerd == "" {
		require.Equal(t, before.ContainerdVersion, containerdVersion(ctx, t, n))
		require.Equal(t, before.Files[kubeadm.DefaultContainerdConfig], string(conf), "containerd's configuration is unchanged")
		return
	}
	require.Equal(t, c.containerdVersion, containerdVersion(ctx, t, n))
	first, _, _ := strings.Cut(string(conf), "\n")
	var version int
	_, err = fmt.Sscanf(first, "version = %d", &version)
	require.NoError(t, err, "first line of the migrated configuration: %q", first)
	require.GreaterOrEqual(t, version, 3, "containerd's configuration is in containerd 2.x's format")
	require.Contains(t, string(conf), "restrict_oom_score_adj = true", "the migration kept the node's settings")
	require.Eventually(t, func() bool {
		out, err := c.cp.Kubectl(ctx, "get", "node", n.Name, "-o", "jsonpath={.status.nodeInfo.containerRuntimeVersion}")
		// containerd's CRI reports its version as built ("v2.4.2").
		return err == nil && (out == "containerd://"+c.containerdVersion || out == "containerd://"+strings.TrimPrefix(c.containerdVersion, "v"))
	}, 2*time.Minute, 2*time.Second, "the kubelet reports containerd %s", c.containerdVersion)
}

// containerdVersion is the node's containerd version as `containerd
// --version` prints it (its third field).
func containerdVersion(ctx context.Context, t *testing.T, n *kubeadmnode.Node) string {
	t.Helper()
	out, err := n.Run(ctx, "containerd", "--version")
	require.NoError(t, err)
	f := strings.Fields(out)
	require.GreaterOrEqual(t, len(f), 3, "containerd --version: %q", out)
	return f[2]
}

// fidelity runs the plan the real node just ran on a simulator.Host set up as
// the node was before (before), and fails on every difference, step by
// step and in the end state, so the fake cannot drift from the real node.
// With UPGRADEKIT_RECORD_REAL=1 the real run is also written to
// testdata/real/<scenario>.json, which `go test ./harness/kubeadmnode/` replays
// on the fake without root.
func fidelity(ctx context.Context, t *testing.T, scenario string, n *kubeadmnode.Node, before kubeadmnode.FakeNode, plan nodeexec.Plan, journal string, files ...string) {
	t.Helper()
	real, err := kubeadmnode.ObserveReal(ctx, n, filepath.Join(journal, nodeexec.JournalFileName(plan.Name)), files...)
	require.NoError(t, err)
	recorded, err := kubeadmnode.RecordReal(kubeadmnode.RecordingsDir, kubeadmnode.Recording{Scenario: scenario,
		Source: "make e2e-node, " + time.Now().UTC().Format("2006-01-02"), Node: before, Plan: plan, Real: real})
	require.NoError(t, err)
	if recorded {
		t.Logf("recorded %s in %s", scenario, kubeadmnode.RecordingsDir)
	}
	res, err := kubeadmnode.FakeRun(ctx, before, plan, testr.New(t))
	require.NoError(t, err)
	for _, d := range kubeadmnode.CompareWithFake(real, res) {
		t.Errorf("%s: the fake differs from the real node: %s", scenario, d)
	}
}

// upgradeByPod runs the worker plan as the privileged upgrader pod
// nodepod builds, on the node's real kubelet: the stage container copies
// the bundle out of the upgrader image (assembled like examples/upgrader's
// bundle image), each step's init container runs the journaled runner
// through nsenter, and the kubelet and containerd restart under it.
func upgradeByPod(ctx context.Context, t *testing.T, c *cluster, w *kubeadmnode.Node) {
	t.Helper()
	cp := c.cp
	image := "upgradekit.local/upgrader:" + c.to.Version
	stage := kubeadmnode.StageOptions{Containerd: true, ContainerdDir: c.containerd, CNIPlugins: true}
	img, err := kubeadmnode.UpgraderImage(image, c.upgrader, c.to, stage, t.TempDir())
	require.NoError(t, err)
	require.NoError(t, w.ImportImages(ctx, img))
	before := c.fakeNode(ctx, t, w, kubeadm.RoleWorker, stage)
	plan, err := kubeadm.NewPlan(kubeadm.Config{Node: w.Name, Role: kubeadm.RoleWorker, FromVersion: c.from.Version, ToVersion: c.to.Version,
		IgnorePreflightErrors: []string{"SystemVerification"}, RollbackOnFailure: true})
	require.NoError(t, err)
	pod, err := nodepod.Build(plan, nodepod.WithImage(image), nodepod.WithImagePullPolicy(corev1.PullNever),
		nodepod.WithRunnerCommand("/upgrader", "run"), nodepod.WithStageFrom("/staging"), nodepod.WithTargetPID(w.PID()))
	require.NoError(t, err)
	pod.APIVersion, pod.Kind = "v1", "Pod"
	data, err := json.Marshal(pod)
	require.NoError(t, err)
	require.NoError(t, cp.WriteFile("/etc/upgradekit-node/upgrader-pod.json", data, 0o600))
	_, err = cp.Kubectl(ctx, "create", "namespace", pod.Namespace)
	require.NoError(t, err)
	_, err = cp.Kubectl(ctx, "create", "-f", "/etc/upgradekit-node/upgrader-pod.json")
	require.NoError(t, err)
	containerdStarts, kubeletStarts := w.Starts("containerd"), w.Starts("kubelet")

	start := time.Now()
	var st nodepod.Status
	var live corev1.Pod
	require.Eventually(t, func() bool {
		out, err := cp.Kubectl(ctx, "-n", pod.Namespace, "get", "pod", pod.Name, "-o", "json")
		if err != nil || json.Unmarshal([]byte(out), &live) != nil {
			return false
		}
		st = nodepod.ReadStatus(&live)
		return st.Phase == nodepod.PhaseSucceeded || st.Phase == nodepod.PhaseFailed
	}, 15*time.Minute, 3*time.Second, "the upgrader pod ends")
	t.Logf("upgrader pod on %s: %s in %s (%d steps)", w.Name, st.Phase, time.Since(start).Round(time.Second), len(st.Steps))
	if st.Phase != nodepod.PhaseSucceeded {
		logs, _ := cp.Kubectl(ctx, "-n", pod.Namespace, "logs", pod.Name, "--all-containers", "--tail=40")
		t.Fatalf("upgrader pod %s: %+v\n%s", st.Phase, st.Failed, logs)
	}

	// The pod's status and the host's journal agree, step by step.
	j, err := nodeexec.ReadJournal(w.Path("/var/lib/upgradekit/journal/" + nodeexec.JournalFileName(plan.Name)))
	require.NoError(t, err)
	require.Equal(t, nodeexec.PlanStateSucceeded, j.State)
	journaled := map[string]nodeexec.StepState{}
	for _, s := range j.Steps {
		journaled[s.Name] = s.State
	}
	for _, s := range st.Steps {
		require.Equal(t, nodepod.PhaseSucceeded, s.Phase, "pod step %s", s.Name)
		require.Contains(t, []nodeexec.StepState{nodeexec.StepStateSucceeded, nodeexec.StepStateSkipped}, journaled[s.Name], "journal step %s", s.Name)
	}
	require.Len(t, st.Steps, len(j.Steps))
	require.Greater(t, w.Starts("containerd"), containerdStarts, "containerd restarted under the pod")
	require.Greater(t, w.Starts("kubelet"), kubeletStarts, "the kubelet restarted under the pod")
	requireVersion(ctx, t, w, cp, c.to.Version)
	c.requireContainerd(ctx, t, w, before)
}

// restoredEtcdScript starts etcd ($1) on a restored data directory on
// loopback ports of the node and waits until etcdctl ($2) reads the
// ConfigMap written before the upgrade from it.
const restoredEtcdScript = `set -eu
"$1" --data-dir /var/lib/upgradekit-node/restored --listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
  --listen-peer-urls http://127.0.0.1:23800 --initial-cluster default=http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 >/dev/null 2>&1 &
pid=$!
trap 'kill $pid; wait $pid || true' EXIT
i=0
until "$2" --endpoints=http://127.0.0.1:23790 get /registry/configmaps/default/written-before --keys-only 2>/dev/null | grep -q written-before; do
  i=$((i+1)); [ $i -lt 60 ] || { echo "restored etcd does not answer"; exit 1; }
  sleep 1
done
echo restored`
