package capi_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
	"github.com/upgradekit/upgradekit/strategy/capi/workload"
)

// reachRequest is a CheckRequest for cluster default/demo.
func reachRequest(machineSet bool) capi.CheckRequest {
	if machineSet {
		ms := &clusterv1.MachineSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ms"}, Spec: clusterv1.MachineSetSpec{ClusterName: "demo"}}
		return capi.CheckRequest{Current: diff.State{Machine: ms}, Desired: diff.State{Machine: ms}, Templates: true}
	}
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "m"}, Spec: clusterv1.MachineSpec{ClusterName: "demo"}}
	return capi.CheckRequest{Current: diff.State{Machine: m}, Desired: diff.State{Machine: m}}
}

// TestWorkloadReachableCheck: what does not pass by itself (the
// kubeconfig secret Forbidden, NotFound or unusable; credentials refused by
// the workload API server) is a decline naming the cause as permanent;
// what may pass (a timeout, a refused connection) is a Failure naming it
// as transient, which Cluster API asks again about.
func TestWorkloadReachableCheck(t *testing.T) {
	gr := schema.GroupResource{Resource: "secrets"}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	secret := func(data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo-kubeconfig"}, Data: data}
	}
	for _, tc := range []struct {
		name      string
		objs      []client.Object // in the management cluster
		secretErr error           // the secret read's error
		listErr   error           // the workload API server's answer to the probe
		declined  bool
		failed    bool
		want      string
	}{
		{name: "reachable"},
		{name: "secret forbidden (no RoleBinding in the namespace)", secretErr: apierrors.NewForbidden(gr, "demo-kubeconfig", errors.New("no RoleBinding")), declined: true,
			want: "infeasible in place: workload cluster unreachable: cluster default/demo: the extension cannot use the kubeconfig secret default/demo-kubeconfig (Forbidden; permanent:"},
		{name: "secret not found", objs: []client.Object{}, declined: true,
			want: "the kubeconfig secret default/demo-kubeconfig (NotFound; permanent:"},
		{name: "secret without a kubeconfig", objs: []client.Object{secret(map[string][]byte{"other": nil})}, declined: true,
			want: "the kubeconfig secret default/demo-kubeconfig (unusable; permanent:"},
		{name: "secret read times out", secretErr: apierrors.NewTimeoutError("slow", 1), failed: true,
			want: "workload cluster unreachable: cluster default/demo: getting its client (transient: Cluster API asks again)"},
		{name: "credentials refused by the workload cluster", listErr: apierrors.NewUnauthorized("expired"), declined: true,
			want: "cluster default/demo: its API server refuses the kubeconfig's credentials (Unauthorized; permanent: the machines are replaced)"},
		{name: "workload API server not answering", listErr: refused, failed: true,
			want: "cluster default/demo: its API server did not answer a request bounded by 3s (transient: Cluster API asks again): dial tcp: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wc := fakeclient.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
				List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
					if tc.listErr != nil {
						return tc.listErr
					}
					return c.List(ctx, list, opts...)
				}}).Build()
			var get workload.Client = func(context.Context, types.NamespacedName) (client.Client, error) {
				if tc.secretErr != nil {
					return nil, tc.secretErr
				}
				return wc, nil
			}
			if tc.objs != nil { // the real getter, reading the secret
				mgmt := fakeclient.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(tc.objs...).Build()
				get = workload.KubeconfigClient(mgmt, clientgoscheme.Scheme)
			}
			check := capi.WorkloadReachableCheck(get, capi.ReachableOptions{})
			for _, ms := range []bool{false, true} {
				err := check.Check(t.Context(), reachRequest(ms))
				if !tc.declined && !tc.failed {
					require.NoError(t, err)
					continue
				}
				require.ErrorIs(t, err, capi.ErrWorkloadUnreachable)
				require.Equal(t, tc.declined, errors.Is(err, capi.ErrInfeasible), "declined (ErrInfeasible), or a Failure: %v", err)
				require.ErrorContains(t, err, tc.want)
			}
		})
	}
}

// TestWorkloadReachableCheckCaches: one probe per cluster per TTL, a new
// one after it.
func TestWorkloadReachableCheckCaches(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	var probes atomic.Int32
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "demo-kubeconfig", errors.New("no"))
	check := capi.WorkloadReachableCheck(func(context.Context, types.NamespacedName) (client.Client, error) {
		probes.Add(1)
		return nil, forbidden
	}, capi.ReachableOptions{Clock: clk, CacheTTL: time.Minute})
	for range 3 {
		require.ErrorIs(t, check.Check(t.Context(), reachRequest(false)), capi.ErrInfeasible)
	}
	require.Equal(t, int32(1), probes.Load())
	clk.Step(time.Minute)
	require.ErrorIs(t, check.Check(t.Context(), reachRequest(true)), capi.ErrInfeasible)
	require.Equal(t, int32(2), probes.Load())
}

// TestExtensionDeclinesAnUnreachableCluster: through the hook, the
// decline is a Success without patches whose message says why.
func TestExtensionDeclinesAnUnreachableCluster(t *testing.T) {
	mgmt := fakeclient.NewClientBuilder().WithScheme(clientgoscheme.Scheme).Build()
	kubeadm, err := strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...)
	require.NoError(t, err)
	ext, err := capi.NewExtension(strategy.Updaters(kubeadm), capi.ExtensionOptions{Checks: []capi.Check{capi.WorkloadReachableCheck(workload.KubeconfigClient(mgmt, clientgoscheme.Scheme), capi.ReachableOptions{})}})
	require.NoError(t, err)
	cur, des, _, _, curInfra, desInfra := machinePair()
	req := &runtimehooksv1.CanUpdateMachineRequest{
		Current: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *cur, InfrastructureMachine: raw(t, curInfra)},
		Desired: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *des, InfrastructureMachine: raw(t, desInfra)},
	}
	var resp runtimehooksv1.CanUpdateMachineResponse
	ext.CanUpdateMachine(t.Context(), req, &resp)
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
	require.False(t, resp.MachinePatch.IsDefined())
	require.Contains(t, resp.Message, "cannot update in place: infeasible in place: workload cluster unreachable: cluster default/demo: the extension cannot use the kubeconfig secret default/demo-kubeconfig (NotFound; permanent:")
}

// TestUpdateMachineWorkloadUnreachableDeadline: while UpdateMachine cannot
// reach the workload cluster (no client, or no answer to the node lookup)
// it answers in progress, and Failure (FailureWorkloadUnreachable) once
// that has lasted longer than WithWorkloadUnreachableTimeout, counted by
// the updater's clock from the first such call, never from before Cluster
// API's Updating condition turned True; a call that reaches the cluster
// resets the count.
func TestUpdateMachineWorkloadUnreachableDeadline(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w-0"}, Spec: corev1.NodeSpec{ProviderID: "docker:////w-0"},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.36.1"}}}
	reachable := fakeclient.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(node).Build()
	noAnswer := fakeclient.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
		}}).Build()
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "demo-kubeconfig", errors.New("no RoleBinding"))
	var workload client.Client // nil: no client (the calls are synchronous)
	u, err := capi.NewMachineUpdater(func(context.Context, types.NamespacedName) (client.Client, error) {
		if workload != nil {
			return workload, nil
		}
		return nil, forbidden
	}, capi.UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{nodepod.WithImage("registry.example/upgrader:v1.36.1")}, Clock: clk, WorkloadUnreachableTimeout: 10 * time.Minute})
	require.NoError(t, err)
	requireFailure := func(t *testing.T, resp runtimehooksv1.UpdateMachineResponse, reason string) {
		t.Helper()
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
		require.Contains(t, resp.Message, capi.ErrUpdateFailed.Error()+": "+reason+": ")
	}
	call := func(req *runtimehooksv1.UpdateMachineRequest) runtimehooksv1.UpdateMachineResponse {
		var resp runtimehooksv1.UpdateMachineResponse
		u.UpdateMachine(t.Context(), req, &resp)
		return resp
	}
	req := updateReq("w-0", "docker:////w-0", "v1.36.1", false)

	workload = nil
	requireWaiting(t, call(req), "waiting for the workload cluster: secrets \"demo-kubeconfig\" is forbidden: no RoleBinding (for 0s)")
	clk.Step(10 * time.Minute)
	requireWaiting(t, call(req), "(for 10m0s)")
	clk.Step(time.Second)
	for range 2 {
		resp := call(req)
		requireFailure(t, resp, observe.FailureWorkloadUnreachable)
		require.Contains(t, resp.Message, "waiting for the workload cluster for 10m1s (deadline 10m0s, counted in the management cluster): secrets \"demo-kubeconfig\" is forbidden")
	}
	// A client, but its API server does not answer: the same wait.
	workload = noAnswer
	resp := call(req)
	requireFailure(t, resp, observe.FailureWorkloadUnreachable)
	require.Contains(t, resp.Message, "waiting for the node for 10m1s (deadline 10m0s, counted in the management cluster):")
	require.Contains(t, resp.Message, "connection refused")

	// Reached: the update goes on, and the count starts afresh.
	workload = reachable
	resp = call(req)
	require.NotContains(t, resp.Message, observe.FailureWorkloadUnreachable)
	require.NotContains(t, resp.Message, "waiting for the workload cluster")
	workload = nil
	requireWaiting(t, call(req), "(for 0s)")

	// Counted from Cluster API's start of the update at the earliest: a
	// wait left over from before it does not count.
	clk.Step(time.Hour)
	restarted := req.DeepCopy()
	restarted.Desired.Machine.Status.Conditions = []metav1.Condition{{Type: clusterv1.MachineUpdatingCondition, Status: metav1.ConditionTrue,
		Reason: clusterv1.MachineInPlaceUpdatingReason, LastTransitionTime: metav1.NewTime(clk.Now().Add(-time.Minute))}}
	requireWaiting(t, call(restarted), "(for 1m0s)")
	requireFailure(t, call(req), observe.FailureWorkloadUnreachable) // without it: an hour
}
