package capi_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// TestUpdateMachineWorkerWaitsForTheControlPlane: ControlPlaneSkewCheck
// accepts a worker's version change while the control plane is still on
// its way to the version (Cluster API's MachineDeployment does not wait
// for it), so UpdateMachine holds the worker, with nothing done to its
// node, until every control plane node runs the target minor with no
// in-place update unfinished; then the worker's update starts.
func TestUpdateMachineWorkerWaitsForTheControlPlane(t *testing.T) {
	ctx := t.Context()
	setup := func(t *testing.T) *podsCluster {
		pc := newPodsCluster(t)
		cp := pc.node()
		cp.Labels = map[string]string{capi.LabelControlPlaneNode: ""}
		require.NoError(t, pc.c.Update(ctx, cp))
		createNode(t, ctx, pc.c, "md-0", "docker:////md-0", "v1.35.4")
		return pc
	}
	worker := func(pc *podsCluster) *corev1.Node {
		n := &corev1.Node{}
		require.NoError(t, pc.c.Get(ctx, client.ObjectKey{Name: "md-0"}, n))
		return n
	}
	cpCondition := func(t *testing.T, pc *podsCluster, status corev1.ConditionStatus, reason string) {
		n := pc.node()
		n.Status.Conditions = []corev1.NodeCondition{{Type: observe.ConditionInPlaceUpdate, Status: status, Reason: reason}}
		require.NoError(t, pc.c.Status().Update(ctx, n))
	}

	pc := setup(t)
	req := updateReq("md-0", "docker:////md-0", "v1.36.1", false)
	requireWaiting(t, pc.call(req), `node md-0 not started: waiting for the control plane to run v1.36.1 first: control plane node cp-0 runs "v1.35.4"`)
	require.Empty(t, pc.pods(), "no upgrader pod")
	n := worker(pc)
	require.NotContains(t, n.Annotations, observe.AnnotationInPlaceUpdate, "nothing recorded on the worker")
	require.Equal(t, observe.ReasonPending, nodeCondition(t, n).Reason)

	// The control plane node's kubelet reports the version, but its update
	// is not done yet.
	pc.kubelet("v1.36.1")
	cpCondition(t, pc, corev1.ConditionTrue, observe.ReasonWaitingForKubelet)
	requireWaiting(t, pc.call(req), "the in-place update of control plane node cp-0 is unfinished")
	require.Empty(t, pc.pods())

	cpCondition(t, pc, corev1.ConditionFalse, observe.ReasonSucceeded)
	requireWaiting(t, pc.call(req), "started worker upgrade of node md-0")
	require.Len(t, pc.pods(), 1)

	for _, tc := range []struct {
		name, to string
		cpLabel  bool
	}{
		{"a patch within the control plane's minor", "v1.35.5", true},
		{"no control plane nodes (a managed control plane)", "v1.36.1", false},
	} {
		t.Run(tc.name+" is not held", func(t *testing.T) {
			pc := setup(t)
			if !tc.cpLabel {
				cp := pc.node()
				cp.Labels = nil
				require.NoError(t, pc.c.Update(ctx, cp))
			}
			requireWaiting(t, pc.call(updateReq("md-0", "docker:////md-0", tc.to, false)), "started worker upgrade of node md-0")
		})
	}
}
