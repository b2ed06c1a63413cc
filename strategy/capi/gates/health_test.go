package gates_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/gates"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// TestWorkloadsAndControlPlaneGatesAgainstAPIServer: the next update waits
// until Deployments and StatefulSets are fully available again, stops when
// one stays unavailable past the timeout; a control plane update waits
// until the other control plane nodes run their static pods Ready.
func TestWorkloadsAndControlPlaneGatesAgainstAPIServer(t *testing.T) {
	env := apiserver.StartForTest(t)
	c, ctx := env.Client, t.Context()
	workload := func(context.Context, types.NamespacedName) (client.Client, error) { return c, nil }
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	labels := map[string]string{"app": "web"}
	podTemplate := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/web:1"}}}}

	t.Run("workloads", func(t *testing.T) {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(3)), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: podTemplate}}
		require.NoError(t, c.Create(ctx, d))
		s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db"},
			Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: podTemplate}}
		require.NoError(t, c.Create(ctx, s))
		setDeployment := func(available int32, since time.Time) {
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: available, AvailableReplicas: available,
				Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionStatus(map[bool]string{true: "True", false: "False"}[available == 3]),
					LastTransitionTime: metav1.NewTime(since), LastUpdateTime: metav1.NewTime(since)}}}
			require.NoError(t, c.Status().Update(ctx, d))
		}
		setStatefulSet := func(ready int32) {
			s.Status = appsv1.StatefulSetStatus{ObservedGeneration: s.Generation, Replicas: 2, ReadyReplicas: ready, AvailableReplicas: ready, CurrentReplicas: 2, UpdatedReplicas: 2}
			require.NoError(t, c.Status().Update(ctx, s))
		}
		gate, err := gates.Workloads(workload, 10*time.Minute, "default")
		require.NoError(t, err)
		ask := func(now time.Time) strategy.GateResult {
			return gate.Check(ctx, strategy.GateRequest{Cluster: "default/demo", Machine: "w-1", Node: "w-1", Now: now})
		}
		setDeployment(1, t0) // two pods evicted from the last node are pending elsewhere
		setStatefulSet(1)
		r := ask(t0.Add(time.Minute))
		require.Equal(t, strategy.VerdictWait, r.Verdict)
		require.Equal(t, "workloads not fully available: Deployment default/web (1/3 available), StatefulSet default/db (1/2 ready)", r.Reason)
		r = ask(t0.Add(11 * time.Minute))
		require.Equal(t, strategy.VerdictStop, r.Verdict, "unavailable past the timeout: a person must look")
		require.Contains(t, r.Reason, "workloads unavailable for more than 10m0s: Deployment default/web")
		setDeployment(3, t0.Add(12*time.Minute))
		setStatefulSet(2)
		require.Equal(t, strategy.VerdictAllow, ask(t0.Add(12*time.Minute)).Verdict)
		other, err := gates.Workloads(workload, 0, "kube-system")
		require.NoError(t, err)
		setDeployment(0, t0)
		require.Equal(t, strategy.VerdictAllow, other.Check(ctx, strategy.GateRequest{Cluster: "default/demo", Now: t0.Add(time.Hour)}).Verdict, "only the namespaces given")
	})

	t.Run("control plane", func(t *testing.T) {
		for _, n := range []string{"cp-0", "cp-1", "cp-2"} {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{capi.LabelControlPlaneNode: ""}}}
			require.NoError(t, c.Create(ctx, node))
			node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
			require.NoError(t, c.Status().Update(ctx, node))
		}
		mirror := func(comp, node string, ready bool) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: comp + "-" + node,
				Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "x"}},
				Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: comp, Image: "registry.k8s.io/" + comp + ":v1.37.0"}}}}
			if err := c.Create(ctx, p); err != nil {
				require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(p), p))
			}
			status := corev1.ConditionFalse
			if ready {
				status = corev1.ConditionTrue
			}
			p.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}}
			require.NoError(t, c.Status().Update(ctx, p))
		}
		for _, n := range []string{"cp-0", "cp-1", "cp-2"} {
			for _, comp := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"} {
				mirror(comp, n, true)
			}
		}
		gate, err := gates.ControlPlane(workload)
		require.NoError(t, err)
		ask := func(node string, role strategy.Role) strategy.GateResult {
			return gate.Check(ctx, strategy.GateRequest{Cluster: "default/demo", Machine: node, Node: node, Role: role, Now: t0})
		}
		require.Equal(t, strategy.VerdictAllow, ask("cp-1", strategy.RoleControlPlane).Verdict)
		mirror("etcd", "cp-0", false) // cp-0 just updated: its etcd member not healthy yet
		mirror("kube-scheduler", "cp-0", false)
		r := ask("cp-1", strategy.RoleControlPlane)
		require.Equal(t, strategy.VerdictWait, r.Verdict)
		require.Equal(t, "the other control plane nodes are not all healthy: cp-0: etcd not Ready, cp-0: kube-scheduler not Ready", r.Reason)
		require.Equal(t, strategy.VerdictAllow, ask("cp-0", strategy.RoleControlPlane).Verdict, "the node about to be updated does not count")
		require.Equal(t, strategy.VerdictAllow, ask("w-0", strategy.RoleWorker).Verdict, "workers pass")
		mirror("etcd", "cp-0", true)
		mirror("kube-scheduler", "cp-0", true)
		require.NoError(t, c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "etcd-cp-2"}}, client.GracePeriodSeconds(0)))
		require.Equal(t, strategy.VerdictAllow, ask("cp-1", strategy.RoleControlPlane).Verdict, "no etcd pod: external etcd")
		require.NoError(t, c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-apiserver-cp-2"}}))
		require.Contains(t, ask("cp-1", strategy.RoleControlPlane).Reason, "cp-2: kube-apiserver being deleted", "no kubelet here: the pod terminates for ever")
		require.NoError(t, c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-apiserver-cp-2"}}, client.GracePeriodSeconds(0)))
		require.Contains(t, ask("cp-1", strategy.RoleControlPlane).Reason, "cp-2: no kube-apiserver pod")
	})

	for _, err := range []error{
		func() error { _, err := gates.Workloads(nil, 0); return err }(),
		func() error { _, err := gates.Workloads(workload, -time.Second); return err }(),
		func() error { _, err := gates.ControlPlane(nil); return err }(),
	} {
		require.ErrorIs(t, err, capi.ErrInvalidOption)
	}
}

// TestBreakerGate: on the Cluster API path the breaker counts a
// MachineDeployment's machines whose update failed or whose node is not
// Ready, and stops the group past its limit.
func TestBreakerGate(t *testing.T) {
	scheme, err := apiserver.NewScheme()
	require.NoError(t, err)
	var objs []client.Object
	node := func(name string, ready corev1.ConditionStatus, failed bool) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
		if failed {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: observe.ConditionInPlaceUpdate, Status: corev1.ConditionTrue, Reason: observe.ReasonFailed})
		}
		m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{clusterv1.MachineDeploymentNameLabel: "md-0"}},
			Spec: clusterv1.MachineSpec{ClusterName: "demo"}, Status: clusterv1.MachineStatus{NodeRef: clusterv1.MachineNodeReference{Name: name}}}
		objs = append(objs, n, m)
	}
	node("w-0", corev1.ConditionTrue, false)
	node("w-1", corev1.ConditionFalse, false) // unhealthy after its update
	node("w-2", corev1.ConditionTrue, false)
	node("w-3", corev1.ConditionTrue, false)
	c := crfake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&corev1.Node{}, &clusterv1.Machine{}).Build()
	workload := func(context.Context, types.NamespacedName) (client.Client, error) { return c, nil }
	gate, err := gates.Breaker(c, workload, strategy.Breaker{MaxUnhealthy: intstr.FromString("25%")})
	require.NoError(t, err)
	ask := func(machine string) strategy.GateResult {
		return gate.Check(t.Context(), strategy.GateRequest{Cluster: "default/demo", Group: "md-0", Role: strategy.RoleWorker, Machine: machine, Node: machine, Now: time.Now()})
	}
	require.Equal(t, strategy.VerdictAllow, ask("w-3").Verdict, "1 of 4 bad: at the limit")

	var w2 corev1.Node
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: "w-2"}, &w2))
	w2.Status.Conditions = append(w2.Status.Conditions, corev1.NodeCondition{Type: observe.ConditionInPlaceUpdate, Status: corev1.ConditionTrue, Reason: observe.ReasonFailed})
	require.NoError(t, c.Status().Update(t.Context(), &w2))
	r := ask("w-3")
	require.Equal(t, strategy.VerdictStop, r.Verdict)
	require.Equal(t, "circuit breaker: 2 of 4 machines failed or unhealthy after their update, more than maxUnhealthy 25% (1): w-1 (node not Ready), w-2 (update failed)", r.Reason)
	require.Equal(t, strategy.VerdictAllow, gate.Check(t.Context(), strategy.GateRequest{Cluster: "default/demo", Role: strategy.RoleControlPlane, Machine: "cp-0"}).Verdict)

	_, err = gates.Breaker(c, workload, strategy.Breaker{MaxUnhealthy: intstr.FromString("200%")})
	require.ErrorIs(t, err, capi.ErrInvalidOption)
	_, err = gates.Breaker(nil, workload, strategy.Breaker{})
	require.ErrorIs(t, err, capi.ErrInvalidOption)
}
