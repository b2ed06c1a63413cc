package capitest_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/fake/capitest"
)

// kcpMachines returns the KubeadmControlPlane's Machines by name.
func kcpMachines(t *testing.T, c client.Client) map[string]clusterv1.Machine {
	t.Helper()
	var ms clusterv1.MachineList
	require.NoError(t, c.List(t.Context(), &ms, client.InNamespace("default"), client.HasLabels{clusterv1.MachineControlPlaneLabel}))
	out := map[string]clusterv1.Machine{}
	for _, m := range ms.Items {
		out[m.Name] = m
	}
	return out
}

// TestClusterAPIProvisionsAKubeadmControlPlane: KubeadmControlPlane's own
// controller creates three control plane machines one at a time on the
// harness's provider (the first initialises the cluster: kubeadm-config
// appears, KubeadmControlPlane reports itself initialised; the others
// join once its preflight checks see the control plane Pods healthy).
func TestClusterAPIProvisionsAKubeadmControlPlane(t *testing.T) {
	h := capitest.NewForTest(t)
	ctx, c := t.Context(), h.Env.Client
	objs, err := capitest.KubeadmControlPlaneObjects(h.Env, "default", "demo", 3, "v1.35.4")
	require.NoError(t, err)
	require.NoError(t, capitest.Create(ctx, c, objs...))
	start := time.Now()
	var kcp controlplanev1.KubeadmControlPlane
	waitFor(t, 4*time.Minute, func() (bool, string) {
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "demo-cp"}, &kcp))
		st := kcp.Status
		ok := st.ObservedGeneration == kcp.Generation && st.Initialization.ControlPlaneInitialized != nil && *st.Initialization.ControlPlaneInitialized &&
			st.AvailableReplicas != nil && *st.AvailableReplicas == 3 && st.UpToDateReplicas != nil && *st.UpToDateReplicas == 3
		return ok, fmt.Sprintf("KubeadmControlPlane status %+v; machines %s; provider %v", st, machineConditions(kcpMachines(t, c)), h.Provider.Errors())
	})
	t.Logf("3 control plane machines in %s", time.Since(start).Round(time.Millisecond))
	var cm corev1.ConfigMap
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "kubeadm-config"}, &cm))
	require.Contains(t, cm.Data["ClusterConfiguration"], "kind: ClusterConfiguration")
	for name := range kcpMachines(t, c) {
		require.NotNil(t, h.Provider.Host(name), name)
	}
	require.Empty(t, h.Provider.Errors())
}

// waitFor polls cond until it holds, failing t with cond's last
// explanation after timeout.
func waitFor(t *testing.T, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			require.FailNow(t, "condition never satisfied", why)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// machineConditions lists each Machine's false or unknown conditions.
func machineConditions(ms map[string]clusterv1.Machine) string {
	var b strings.Builder
	for name, m := range ms {
		fmt.Fprintf(&b, "\n%s (%s):", name, m.Status.Phase)
		for _, c := range m.Status.Conditions {
			if c.Status != metav1.ConditionTrue {
				fmt.Fprintf(&b, " %s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message)
			}
		}
	}
	return b.String()
}
