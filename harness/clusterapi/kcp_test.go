package clusterapi_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/clusterapi"
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
	h := clusterapi.NewForTest(t)
	ctx, c := t.Context(), h.Env.Client
	objs, err := clusterapi.KubeadmControlPlaneObjects(h.Env, "default", "demo", 3, "v1.35.4")
	require.NoError(t, err)
	require.NoError(t, clusterapi.Create(ctx, c, objs...))
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

// TestClusterAPIProvisionsAStackedEtcdControlPlane: the same with etcd on
// the control plane machines (StackedEtcd), kubeadm's default.
// KubeadmControlPlane generates the etcd CA, and reads each member's
// health through the API server's port-forward to kube-system/etcd-<node>,
// which the provider's kubelets serve in front of a real etcd member per
// machine: it reports etcd healthy, and the members are named after the
// machines' Nodes, none a learner, no alarm raised.
func TestClusterAPIProvisionsAStackedEtcdControlPlane(t *testing.T) {
	h := clusterapi.NewForTest(t)
	ctx, c := t.Context(), h.Env.Client
	objs, err := clusterapi.KubeadmControlPlaneObjects(h.Env, "default", "stacked", 3, "v1.35.4", clusterapi.StackedEtcd())
	require.NoError(t, err)
	require.NoError(t, clusterapi.Create(ctx, c, objs...))
	start := time.Now()
	var kcp controlplanev1.KubeadmControlPlane
	waitFor(t, 5*time.Minute, func() (bool, string) {
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "stacked-cp"}, &kcp))
		st := kcp.Status
		ok := st.ObservedGeneration == kcp.Generation && st.AvailableReplicas != nil && *st.AvailableReplicas == 3 &&
			st.UpToDateReplicas != nil && *st.UpToDateReplicas == 3 && conditionTrue(st.Conditions, controlplanev1.KubeadmControlPlaneEtcdClusterHealthyCondition)
		return ok, fmt.Sprintf("KubeadmControlPlane status %+v; machines %s; provider %v", st, machineConditions(kcpMachines(t, c)), h.Provider.Errors())
	})
	t.Logf("3 stacked etcd control plane machines in %s", time.Since(start).Round(time.Millisecond))
	members, alarms, err := h.Provider.EtcdMembers(ctx, types.NamespacedName{Namespace: "default", Name: "stacked"})
	require.NoError(t, err)
	var names []string
	for _, m := range members {
		require.False(t, m.Learner, m.Name)
		names = append(names, m.Name)
	}
	machines := kcpMachines(t, c)
	var nodes []string
	for _, m := range machines {
		require.True(t, conditionTrue(m.Status.Conditions, controlplanev1.KubeadmControlPlaneMachineEtcdMemberHealthyCondition), "%s: %v", m.Name, m.Status.Conditions)
		nodes = append(nodes, m.Status.NodeRef.Name)
	}
	require.ElementsMatch(t, nodes, names, "one member per machine, named after its Node")
	require.Empty(t, alarms)
	require.Empty(t, h.Provider.Errors())
}

// conditionTrue reports whether conds has typ with status True.
func conditionTrue(conds []metav1.Condition, typ string) bool {
	for _, c := range conds {
		if c.Type == typ {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}
