package capi_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/upgradekit/upgradekit/nodeexec/drain"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// TestUpdateMachineReportsOnceWithoutNodeStatus: without permission to
// write the Node's status the condition is never written, yet a blocked
// drain and a failure are each recorded once (Event, failure counter), not
// on every poll: the record on the Node says what was reported.
func TestUpdateMachineReportsOnceWithoutNodeStatus(t *testing.T) {
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	var statusPatches int
	c := crfake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&corev1.Node{}, &corev1.Pod{}).
		WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if _, ok := obj.(*corev1.Node); ok && sub == "status" {
				statusPatches++
				return errors.New(`nodes "md-0-a" is forbidden: cannot patch resource "nodes/status"`)
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		}}).Build()
	ctx := t.Context()
	node := createNode(t, ctx, c, "md-0-a", "docker:////md-0-a", "v1.35.4")
	// The clientset (cordon, drain) sees the node cordoned by kured.
	cs := k8sfake.NewClientset(node.DeepCopy())
	_, err := drain.Cordon(ctx, cs, "md-0-a", "kured")
	require.NoError(t, err)

	clk := clocktesting.NewFakeClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	recorder := events.NewFakeRecorder(100)
	reg := prometheus.NewRegistry()
	metrics, err := capi.NewMetrics(reg, capi.MetricsOptions{})
	require.NoError(t, err)
	workload := func(context.Context, types.NamespacedName) (client.Client, error) { return c, nil }
	clientset := func(context.Context, types.NamespacedName) (kubernetes.Interface, error) { return cs, nil }
	call := func(req *runtimehooksv1.UpdateMachineRequest) runtimehooksv1.UpdateMachineResponse {
		t.Helper()
		u, err := capi.NewMachineUpdater(workload, capi.UpdaterOptions{Clientset: clientset, SkipPrePull: true, Clock: clk, EventRecorder: recorder, Metrics: metrics, PodOptions: []nodepod.Option{nodepod.WithImage("r/u:1")}})
		require.NoError(t, err)
		var resp runtimehooksv1.UpdateMachineResponse
		u.UpdateMachine(ctx, req, &resp)
		return resp
	}
	req := updateReq("md-0-a", "docker:////md-0-a", "v1.36.1", false)
	reported := func() string {
		t.Helper()
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(node), node))
		return record(t, node).Reported
	}

	for range 3 {
		resp := call(req)
		requireWaiting(t, resp, `node md-0-a is cordoned by "kured"`)
	}
	evs := recorded(recorder)
	require.Len(t, evs, 2, "%q", evs)
	require.Contains(t, evs[0], "Normal InPlaceUpdateStarted")
	require.Contains(t, evs[1], `Warning NodeDrainBlocked node md-0-a is cordoned by "kured"`)
	require.Equal(t, observe.ReasonDrainBlocked, reported())

	clk.Step(time.Hour)
	for range 3 {
		resp := call(req)
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status)
		require.Contains(t, resp.Message, observe.FailureDrainTimeout)
	}
	evs = recorded(recorder)
	require.Len(t, evs, 1, "%q", evs)
	require.Contains(t, evs[0], "Warning InPlaceUpdateFailed DrainTimeout: node md-0-a is cordoned by \"kured\"")
	require.Equal(t, 1.0, counter(t, reg, observe.MetricFailures, "reason", observe.FailureDrainTimeout))
	require.Equal(t, "Failed/"+observe.FailureDrainTimeout, reported())

	// kured lets go: the drain goes on and the reported state is cleared,
	// so a later block would be reported again.
	_, err = drain.Uncordon(ctx, cs, "md-0-a", "kured")
	require.NoError(t, err)
	requireWaiting(t, call(req), "started worker upgrade of node md-0-a")
	require.Empty(t, reported())
	require.Equal(t, []string{"Normal NodeDrained Drained node md-0-a in 1h0m0s: 0 pod(s) evicted in the last attempt"}, recorded(recorder))

	require.Positive(t, statusPatches, "the condition was attempted")
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(node), node))
	require.Nil(t, observe.InPlaceUpdateCondition(node), "and never written")
}

// TestUpdateMachineReportedIsCompareAndSwap: when another replica records
// the failure between this call's read of the Node and its write, the
// write is refused and this call does not record the failure again.
func TestUpdateMachineReportedIsCompareAndSwap(t *testing.T) {
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	var raced bool
	c := crfake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&corev1.Node{}, &corev1.Pod{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				return errors.New("no nodes/status permission")
			},
			Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if patch.Type() == types.JSONPatchType && !raced {
					// The other replica: same failure, recorded first.
					raced = true
					var n corev1.Node
					require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(obj), &n))
					rec := record(t, &n)
					rec.Reported = "Failed/" + observe.FailurePlanRejected
					rec.Started = metav1.NewTime(rec.Started.Add(time.Second)) // its own write differs
					require.NoError(t, cl.Patch(ctx, &n, client.RawPatch(types.MergePatchType, mustJSON(t, map[string]any{
						"metadata": map[string]any{"annotations": map[string]any{observe.AnnotationInPlaceUpdate: string(mustJSON(t, rec))}}}))))
				}
				return cl.Patch(ctx, obj, patch, opts...)
			},
		}).Build()
	ctx := t.Context()
	createNode(t, ctx, c, "md-0-a", "docker:////md-0-a", "v1.35.4")
	recorder := events.NewFakeRecorder(10)
	workload := func(context.Context, types.NamespacedName) (client.Client, error) { return c, nil }
	u, err := capi.NewMachineUpdater(workload, capi.UpdaterOptions{SkipDrain: true, EventRecorder: recorder, PodOptions: []nodepod.Option{nodepod.WithImage("r/u:1")}})
	require.NoError(t, err)
	var resp runtimehooksv1.UpdateMachineResponse
	u.UpdateMachine(ctx, updateReq("md-0-a", "docker:////md-0-a", "v1.37.0", false), &resp)
	require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status)
	require.Contains(t, resp.Message, observe.FailurePlanRejected)
	require.True(t, raced)
	evs := recorded(recorder)
	require.Len(t, evs, 1, "%q", evs)
	require.Contains(t, evs[0], "InPlaceUpdateStarted", "the failure is the other replica's to record")
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
