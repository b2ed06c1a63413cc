package simulator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/strategy"
)

const (
	from = "v1.30.4"
	to   = "v1.31.2"
)

var newBits = Staging{Kubernetes: to, Containerd: "2.0.5", CNI: "v1.7.1"}

// upgradeFleet builds a cluster, its client and fleet with the new bits
// staged on every host.
func upgradeFleet(t *testing.T, opts ...HostOption) (*Cluster, client.Client, *Fleet) {
	t.Helper()
	cl := NewCluster("demo").ControlPlane(3, from).MachineDeployment("md-0", 2, from)
	c, err := cl.Client()
	require.NoError(t, err)
	fleet, err := NewFleet(cl, append([]HostOption{WithNodeClient(c)}, opts...)...)
	require.NoError(t, err)
	for _, h := range fleet.Hosts() {
		h.Stage(newBits)
	}
	return cl, c, fleet
}

func runPlan(t *testing.T, h *Host, role kubeadm.Role, cfg func(*kubeadm.Config), opts ...nodeexec.RunnerOptions) (nodeexec.Outcome, error) {
	t.Helper()
	c := kubeadm.Config{Node: h.Node(), Role: role, FromVersion: from, ToVersion: to}
	if cfg != nil {
		cfg(&c)
	}
	plan, err := kubeadm.NewPlan(c)
	require.NoError(t, err)
	var o nodeexec.RunnerOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	o.JournalDir = t.TempDir()
	r, err := nodeexec.NewRunner(h, o)
	require.NoError(t, err)
	return r.Run(context.Background(), plan)
}

func nodeVersion(t *testing.T, c client.Client, name string) (string, corev1.ConditionStatus) {
	t.Helper()
	var n corev1.Node
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: name}, &n))
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return n.Status.NodeInfo.KubeletVersion, cond.Status
		}
	}
	return n.Status.NodeInfo.KubeletVersion, ""
}

func TestKubeadmPlansRunToCompletion(t *testing.T) {
	_, c, fleet := upgradeFleet(t)
	order := []struct {
		node string
		role kubeadm.Role
	}{
		{"demo-control-plane-0", kubeadm.RoleFirstControlPlane},
		{"demo-control-plane-1", kubeadm.RoleControlPlane},
		{"demo-control-plane-2", kubeadm.RoleControlPlane},
		{"demo-md-0-0", kubeadm.RoleWorker},
		{"demo-md-0-1", kubeadm.RoleWorker},
	}
	for _, n := range order {
		h := fleet.Host(n.node)
		v, _ := nodeVersion(t, c, n.node)
		require.Equal(t, from, v)
		out, err := runPlan(t, h, n.role, nil)
		require.NoError(t, err, "%s: %+v", n.node, out.Failure)
		require.Equal(t, nodeexec.PlanStateSucceeded, out.State)

		for _, comp := range []Component{ComponentKubeadm, ComponentKubelet, ComponentKubectl} {
			require.Equal(t, to, h.Version(comp), "%s %s", n.node, comp)
		}
		require.Equal(t, to, h.RunningVersion(ComponentKubelet))
		require.Equal(t, "2.0.5", h.Version(ComponentContainerd))
		require.Equal(t, "2.0.5", h.RunningVersion(ComponentContainerd))
		require.Equal(t, "v1.7.1", h.Version(ComponentCNI))
		require.Equal(t, UnitActive, h.UnitState("kubelet"))
		v, ready := nodeVersion(t, c, n.node)
		require.Equal(t, to, v, "the Node reports the restarted kubelet's version")
		require.Equal(t, corev1.ConditionTrue, ready)
		if n.role == kubeadm.RoleWorker {
			require.Empty(t, h.Version(ComponentControlPlane))
		} else {
			require.Equal(t, to, h.Version(ComponentControlPlane))
		}
		// Backups of what the plan replaced are kept.
		bak := kubeadm.DefaultBackupRoot + "/" + out.Plan
		old, ok := h.File(bak + "/bin/kubelet")
		require.True(t, ok)
		require.Equal(t, binary(ComponentKubelet, from), old)
		old, ok = h.File(bak + "/containerd" + containerdPath)
		require.True(t, ok)
		require.Equal(t, binary(ComponentContainerd, DefaultContainerdVersion), old)
		_, ok = h.File(bak + "/etc-kubernetes/kubelet.conf")
		require.True(t, ok)
		_, ok = h.File(bak + "/etcd-snapshot.db")
		require.Equal(t, n.role == kubeadm.RoleFirstControlPlane, ok, "only the first control plane takes an etcd snapshot")
	}
	require.Equal(t, to, fleet.ClusterVersion())
	for _, cmd := range fleet.Host("demo-md-0-0").Commands() {
		require.NotNil(t, cmd.Target, "the runner addressed the host through nsenter targets")
	}
}

func TestPreV130FirstControlPlanePlan(t *testing.T) {
	h, err := NewHost("cp-0", strategy.RoleControlPlane, "v1.29.7")
	require.NoError(t, err)
	h.Stage(Staging{Kubernetes: "v1.30.4"})
	plan, err := kubeadm.NewPlan(kubeadm.Config{Node: "cp-0", Role: kubeadm.RoleFirstControlPlane, FromVersion: "v1.29.7", ToVersion: "v1.30.4", SkipContainerd: true, SkipCNIPlugins: true})
	require.NoError(t, err)
	r, err := nodeexec.NewRunner(h, nodeexec.RunnerOptions{JournalDir: t.TempDir(), Direct: true})
	require.NoError(t, err)
	out, err := r.Run(context.Background(), plan)
	require.NoError(t, err, "%+v", out.Failure)
	require.Equal(t, "v1.30.4", h.Version(ComponentControlPlane))
	require.Equal(t, "v1.30.4", h.RunningVersion(ComponentKubelet), "without a node client the host's own state stands in for the Node")
	require.Equal(t, DefaultContainerdVersion, h.Version(ComponentContainerd))
}

func TestWorkerBeforeControlPlaneFails(t *testing.T) {
	_, _, fleet := upgradeFleet(t)
	fc := testingclock.NewFakeClock(time.Unix(0, 0))
	stop := DriveClock(fc, 10*time.Second)
	defer stop()
	out, err := runPlan(t, fleet.Host("demo-md-0-0"), kubeadm.RoleWorker, nil, nodeexec.RunnerOptions{Clock: fc})
	require.ErrorIs(t, err, nodeexec.ErrStepFailed)
	require.Equal(t, kubeadm.StepKubeadmUpgrade, out.Failure.Step)
	require.Contains(t, out.Failure.Output, "run `kubeadm upgrade apply` on the first control plane node first")
	require.Equal(t, from, fleet.ClusterVersion())
}

func TestRollback(t *testing.T) {
	tests := []struct {
		name      string
		failStep  string
		times     int
		wantState nodeexec.PlanState
		wantErr   error
		// versions after the rollback
		kubelet, kubectl, kubeadm, containerd, cni string
	}{
		{
			// Everything the plan changed is undone: the binary backup, the
			// tree backups (containerd, CNI) and the unit restarts.
			name: "failure before kubeadm upgrade rolls back every step", failStep: kubeadm.StepKubeadmBinary, times: 1,
			wantState: nodeexec.PlanStateRolledBack, wantErr: nodeexec.ErrRolledBack,
			kubelet: from, kubectl: from, kubeadm: from, containerd: DefaultContainerdVersion, cni: defaultCNIVersion,
		},
		{
			// kubeadm-upgrade has no rollback argv, so the runner undoes
			// the steps after it and stops there for a human.
			name: "failure after kubeadm upgrade rolls back to it", failStep: kubeadm.StepVerify, times: 100,
			wantState: nodeexec.PlanStateNeedsAttention, wantErr: nodeexec.ErrNeedsAttention,
			kubelet: from, kubectl: from, kubeadm: to, containerd: "2.0.5", cni: "v1.7.1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			faults := NewFaults(1).FailStep("demo-md-0-0", tt.failStep, tt.times)
			_, c, fleet := upgradeFleet(t, WithFaults(faults))
			fleet.Host("demo-control-plane-0").kubeadm.set(to) // as if the control plane were done
			fc := testingclock.NewFakeClock(time.Unix(0, 0))
			stop := DriveClock(fc, 10*time.Second)
			defer stop()

			h := fleet.Host("demo-md-0-0")
			out, err := runPlan(t, h, kubeadm.RoleWorker, func(c *kubeadm.Config) { c.RollbackOnFailure = true }, nodeexec.RunnerOptions{Clock: fc})
			require.ErrorIs(t, err, tt.wantErr)
			require.Equal(t, tt.wantState, out.State)
			require.Equal(t, tt.kubelet, h.Version(ComponentKubelet))
			require.Equal(t, tt.kubelet, h.RunningVersion(ComponentKubelet), "the kubelet was restarted on the restored binary")
			require.Equal(t, tt.kubectl, h.Version(ComponentKubectl))
			require.Equal(t, tt.kubeadm, h.Version(ComponentKubeadm))
			require.Equal(t, tt.containerd, h.Version(ComponentContainerd))
			require.Equal(t, tt.containerd, h.RunningVersion(ComponentContainerd))
			require.Equal(t, tt.cni, h.Version(ComponentCNI))
			v, _ := nodeVersion(t, c, "demo-md-0-0")
			require.Equal(t, tt.kubelet, v)
		})
	}
}

func TestUnknownCommandsFail(t *testing.T) {
	h, err := NewHost("n", strategy.RoleWorker, from)
	require.NoError(t, err)
	tests := map[string][]string{
		"unknown program":   {"rm", "-rf", "/"},
		"unknown script":    nodeexec.ShellArgv("echo hi"),
		"unknown systemctl": {"systemctl", "mask", "kubelet"},
		"unknown kubeadm":   {"/usr/bin/kubeadm", "reset", "-f"},
		"empty":             {},
	}
	for name, argv := range tests {
		t.Run(name, func(t *testing.T) {
			res, err := h.Run(context.Background(), nodeexec.Command{Step: "x", Phase: nodeexec.PhaseRun, Argv: argv})
			require.NoError(t, err)
			require.Equal(t, ExitUnknownCommand, res.ExitCode)
			require.NotEmpty(t, res.Output)
		})
	}
}

func TestDirectCommands(t *testing.T) {
	h, err := NewHost("n", strategy.RoleWorker, from)
	require.NoError(t, err)
	run := func(argv ...string) (int, string) {
		res, err := h.Run(context.Background(), nodeexec.Command{Argv: nodeexec.NsenterArgv("nsenter", nodeexec.Target{PID: 1, Namespaces: nodeexec.DefaultNamespaces()}, argv)})
		require.NoError(t, err)
		return res.ExitCode, strings.TrimSpace(string(res.Output))
	}
	tests := []struct {
		argv []string
		code int
		out  string
	}{
		{[]string{"kubeadm", "version", "-o", "short"}, 0, from},
		{[]string{"/usr/bin/kubelet", "--version"}, 0, "Kubernetes " + from},
		{[]string{"containerd", "--version"}, 0, "containerd github.com/containerd/containerd/v2 " + DefaultContainerdVersion},
		{[]string{"systemctl", "is-active", "kubelet"}, 0, "active"},
		{[]string{"systemctl", "stop", "kubelet"}, 0, ""},
		{[]string{"systemctl", "is-active", "--quiet", "kubelet"}, 3, ""},
		{[]string{"systemctl", "restart", "etcd"}, 5, "Failed to restart etcd.service: Unit etcd.service not found."},
		{[]string{"cmp", "-s", "--", "/usr/bin/kubelet", "/usr/bin/kubeadm"}, 1, ""},
		{[]string{"cmp", "-s", "--", "/usr/bin/kubelet", "/nope"}, 2, ""},
		{[]string{"/usr/bin/kubeadm", "upgrade", "apply", to, "--yes"}, 1, "[upgrade/config] FATAL: kubeadm upgrade apply must run on a control plane node"},
	}
	for _, tt := range tests {
		code, out := run(tt.argv...)
		require.Equal(t, tt.code, code, "%q: %s", tt.argv, out)
		require.Equal(t, tt.out, out, "%q", tt.argv)
	}
	h.RemoveFile("/usr/bin/kubelet")
	code, out := run("systemctl", "start", "kubelet")
	require.Equal(t, 1, code)
	require.Contains(t, out, "not found")
	require.Equal(t, UnitInactive, h.UnitState("kubelet"))
}

func TestKubeadmApplyRefusesSkewAndWrongBinary(t *testing.T) {
	h, err := NewHost("cp", strategy.RoleControlPlane, "v1.29.0")
	require.NoError(t, err)
	h.WriteFile("/usr/bin/kubeadm", binary(ComponentKubeadm, "v1.31.0"))
	res, err := h.Run(context.Background(), nodeexec.Command{Argv: []string{"/usr/bin/kubeadm", "upgrade", "apply", "v1.31.0", "--yes"}})
	require.NoError(t, err)
	require.Equal(t, 1, res.ExitCode)
	require.Contains(t, string(res.Output), "skips a minor version")
	res, err = h.Run(context.Background(), nodeexec.Command{Argv: []string{"/usr/bin/kubeadm", "upgrade", "apply", "v1.30.0", "--yes"}})
	require.NoError(t, err)
	require.Equal(t, 1, res.ExitCode)
	require.Contains(t, string(res.Output), "differs from kubeadm's v1.31.0")
	require.Equal(t, "v1.29.0", h.Version(ComponentControlPlane))
}

func TestNewHostErrors(t *testing.T) {
	_, err := NewHost("", strategy.RoleWorker, from)
	require.ErrorIs(t, err, ErrInvalidCluster)
	_, err = NewHost("n", "boss", from)
	require.ErrorIs(t, err, ErrInvalidCluster)
	_, err = NewHost("n", strategy.RoleWorker, "latest")
	require.ErrorIs(t, err, ErrInvalidCluster)
}

func TestCanceledContext(t *testing.T) {
	h, err := NewHost("n", strategy.RoleWorker, from)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = h.Run(ctx, nodeexec.Command{Argv: []string{"systemctl", "stop", "kubelet"}})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, UnitActive, h.UnitState("kubelet"))
}

func TestLearnsEveryLibraryScript(t *testing.T) {
	kinds := map[scriptKind]bool{}
	for _, k := range knownScripts() {
		kinds[k] = true
	}
	require.Len(t, kinds, int(scriptBundle), "every script kind was found in the library's plan")
}

// TestContainerdConfigMigration: the containerd step rewrites containerd's
// configuration exactly when it installs a containerd 2.x (or newer) over
// a file older than version 3, and a failed start puts the old file back,
// as the real script does (nodeexec/kubeadm's
// TestContainerdConfigMigrationForReal, and real nodes in harness/kubeadmnode).
func TestContainerdConfigMigration(t *testing.T) {
	const conf, v2 = kubeadm.DefaultContainerdConfig, "version = 2\nroot = \"/var/lib/containerd\"\n"
	for _, tc := range []struct {
		name, staged, before string
		crashes              bool
		migrated             bool
	}{
		{name: "2.x over version 2", staged: "2.0.5", before: v2, migrated: true},
		{name: "2.x over a file without a version", staged: "v2.4.2", before: "root = \"/x\"\n", migrated: true},
		{name: "2.x over version 3", staged: "2.0.5", before: "version = 3\n"},
		{name: "1.7 over version 2", staged: "1.7.28", before: v2},
		{name: "an indented version line is not a version line", staged: "2.0.5", before: "  version = 3\n", migrated: true},
		{name: "2.x that crashes on start", staged: "v2.4.2", before: v2, crashes: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := NewHost("n1", strategy.RoleWorker, from)
			require.NoError(t, err)
			h.WriteFile(conf, tc.before)
			h.Stage(Staging{Kubernetes: to, Containerd: tc.staged, ContainerdCrashes: tc.crashes, CNI: "v1.7.1"})
			// Later steps may fail (this host has no cluster); only a
			// crash rolls back, so the containerd step's result stays.
			out, _ := runPlan(t, h, kubeadm.RoleWorker, func(c *kubeadm.Config) { c.RollbackOnFailure = tc.crashes })
			if tc.crashes {
				require.Equal(t, nodeexec.PlanStateRolledBack, out.State)
				require.Equal(t, DefaultContainerdVersion, h.RunningVersion(ComponentContainerd), "the old containerd runs again")
			} else {
				require.Equal(t, tc.staged, h.RunningVersion(ComponentContainerd), "the containerd step succeeded")
			}
			got, ok := h.File(conf)
			require.True(t, ok)
			if tc.migrated {
				require.True(t, strings.HasPrefix(got, "version = 3\n"), "migrated: %q", got)
				return
			}
			require.Equal(t, tc.before, got)
		})
	}
}
