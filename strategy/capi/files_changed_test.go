package capi_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy"
)

// TestOnlyChangedFilesTravel: the KubeadmConfig's inline files travel in
// the upgrader pod (base64, in its environment) only when the node does
// not have them yet: after they were written, a version-only update's pod
// carries no file content at all, and an update that changes one file
// carries that file's content only. It failed before the fix: every inline
// file went into every update's pod.
func TestOnlyChangedFilesTravel(t *testing.T) {
	const from, to = "v1.35.4", "v1.36.1"
	const alpha, bravo, bravo2 = "token: alpha-0123456789abcdef\n", "bravo=1\n", "bravo=2\n"
	ctx := t.Context()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cl := simulator.NewCluster("demo").ControlPlane(1, to).MachineDeployment("md", 1, from)
	c, err := cl.Client()
	require.NoError(t, err)
	fleet, err := simulator.NewFleet(cl, simulator.WithNodeClient(c), simulator.WithHostClock(clk))
	require.NoError(t, err)
	node := cl.Nodes()[1]
	require.Equal(t, strategy.RoleWorker, node.Role)
	host := fleet.Host(node.Name)

	seen := map[string]bool{}
	// update drives one update to done and returns the JSON of the
	// upgrader pods it created.
	update := func(t *testing.T, version string, files ...bootstrapv1.File) string {
		t.Helper()
		des := newE2EMachine(node)
		des.machine.Spec.Version = version
		des.cfg.Spec.Files = files
		req := &runtimehooksv1.UpdateMachineRequest{Desired: runtimehooksv1.UpdateMachineRequestObjects{
			Machine: *des.machine, BootstrapConfig: raw(t, des.cfg), InfrastructureMachine: raw(t, des.infra)}}
		answers := driveUpdate(t, c, clk, host, req, simulator.Staging{Kubernetes: version, Containerd: "2.0.5", CNI: "v1.7.1"})
		require.Equal(t, "done", answers[len(answers)-1], "answers: %v", answers)
		var out strings.Builder
		for _, p := range upgraderPods(t, c) {
			if seen[p.Name] {
				continue
			}
			seen[p.Name] = true
			b, err := json.Marshal(p)
			require.NoError(t, err)
			out.Write(b)
		}
		require.NotEmpty(t, out.String(), "the update ran a pod")
		return out.String()
	}
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	fileA := bootstrapv1.File{Path: "/etc/kubernetes/example/alpha.yaml", Content: alpha, Permissions: "0600"}
	fileB := bootstrapv1.File{Path: "/etc/kubernetes/example/bravo.conf", Content: bravo}

	// The files are new to the node: both travel, and are written.
	pods := update(t, from, fileA, fileB)
	require.Contains(t, pods, b64(alpha))
	require.Contains(t, pods, b64(bravo))
	got, _ := host.File(fileA.Path)
	require.Equal(t, alpha, got)

	// A version-only update: no file content in its pod.
	pods = update(t, to, fileA, fileB)
	require.Equal(t, to, host.RunningVersion(simulator.ComponentKubelet))
	require.NotContains(t, pods, kubeadm.FilesEnvPrefix)
	require.NotContains(t, pods, b64(alpha))
	require.NotContains(t, pods, b64(bravo))

	// One file changes: only its content travels.
	pods = update(t, to, fileA, bootstrapv1.File{Path: fileB.Path, Content: bravo2})
	require.Contains(t, pods, b64(bravo2))
	require.NotContains(t, pods, b64(alpha))
	got, _ = host.File(fileB.Path)
	require.Equal(t, bravo2, got)
	got, _ = host.File(fileA.Path)
	require.Equal(t, alpha, got, "the unchanged file is left as it is")

	var n corev1.Node
	require.NoError(t, c.Get(ctx, types.NamespacedName{Name: node.Name}, &n))
	require.Len(t, strings.Split(n.Annotations["upgradekit.io/files"], ","), 2, "one digest per file")
}
