package capi_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/nodeexec/drain"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
	"github.com/upgradekit/upgradekit/strategy/capi/workload"
)

func createNode(t *testing.T, ctx context.Context, c client.Client, name, providerID, kubelet string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: providerID}}
	require.NoError(t, c.Create(ctx, n))
	setKubelet(t, ctx, c, n, kubelet)
	return n
}

func setKubelet(t *testing.T, ctx context.Context, c client.Client, n *corev1.Node, v string) {
	t.Helper()
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(n), n))
	n.Status.NodeInfo.KubeletVersion = v
	require.NoError(t, c.Status().Update(ctx, n))
}

// finishPod plays the kubelet: every container of the upgrader pod
// terminates with the given exit code for the named step (0 elsewhere).
func finishPod(t *testing.T, ctx context.Context, c client.Client, pod *corev1.Pod, failStep string, code int32) {
	t.Helper()
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
	term := func(name string) corev1.ContainerStatus {
		exit := int32(0)
		reason := "Completed"
		if name == failStep {
			exit, reason = code, "Error"
		}
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Reason: reason}}}
	}
	pod.Status.InitContainerStatuses = nil
	for _, ic := range pod.Spec.InitContainers {
		pod.Status.InitContainerStatuses = append(pod.Status.InitContainerStatuses, term(ic.Name))
	}
	pod.Status.ContainerStatuses = nil
	for _, ct := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, term(ct.Name))
	}
	pod.Status.Phase = corev1.PodSucceeded
	if failStep != "" {
		pod.Status.Phase = corev1.PodFailed
	}
	require.NoError(t, c.Status().Update(ctx, pod))
}

func updateReq(name, providerID, version string, controlPlane bool) *runtimehooksv1.UpdateMachineRequest {
	m := clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{clusterv1.ClusterNameLabel: "demo"}},
		Spec:       clusterv1.MachineSpec{ClusterName: "demo", Version: version, ProviderID: providerID},
	}
	if controlPlane {
		m.Labels[clusterv1.MachineControlPlaneLabel] = ""
	}
	return &runtimehooksv1.UpdateMachineRequest{Desired: runtimehooksv1.UpdateMachineRequestObjects{Machine: m}}
}

// TestUpdateMachineAgainstRealAPIServer drives UpdateMachine to completion
// against a real kube-apiserver, with a new handler (a restarted extension)
// for every call: all state is in the cluster.
func TestUpdateMachineAgainstRealAPIServer(t *testing.T) {
	env := apiserver.StartForTest(t)
	c := env.Client
	ctx := context.Background()
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nodepod.DefaultNamespace}}))
	require.NoError(t, c.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubeadm-config"},
		Data:       map[string]string{"ClusterConfiguration": "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: v1.35.4\n"},
	}))
	cp := createNode(t, ctx, c, "cp-0", "docker:////cp-0", "v1.35.4")
	createNode(t, ctx, c, "md-0-a", "docker:////md-0-a", "v1.35.4")

	clients := func(_ context.Context, cluster types.NamespacedName) (client.Client, error) {
		require.Equal(t, types.NamespacedName{Namespace: "default", Name: "demo"}, cluster)
		return c, nil
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	clientset := func(context.Context, types.NamespacedName) (kubernetes.Interface, error) { return cs, nil }
	// Events go to the API server through client-go's events broadcaster,
	// as a controller-runtime manager's GetEventRecorder would send them.
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	require.NoError(t, broadcaster.StartRecordingToSinkWithContext(ctx))
	t.Cleanup(broadcaster.Shutdown)
	recorder := broadcaster.NewRecorder(env.Scheme, "upgradekit-test")
	call := func(req *runtimehooksv1.UpdateMachineRequest) runtimehooksv1.UpdateMachineResponse {
		u, err := capi.NewMachineUpdater(clients, capi.UpdaterOptions{Clientset: clientset, SkipPrePull: true, EventRecorder: recorder, PodOptions: []nodepod.Option{nodepod.WithImage("registry.example/upgrader:v1.36.1")}, RetryAfter: 5 * time.Second})
		require.NoError(t, err)
		var resp runtimehooksv1.UpdateMachineResponse
		u.UpdateMachine(ctx, req, &resp)
		return resp
	}

	t.Run("control plane node to completion", func(t *testing.T) {
		req := updateReq("cp-0", "docker:////cp-0", "v1.36.1", true)
		resp := call(req)
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
		require.Equal(t, int32(5), resp.RetryAfterSeconds)
		require.Contains(t, resp.Message, "started first-control-plane upgrade of node cp-0")

		var pods corev1.PodList
		require.NoError(t, c.List(ctx, &pods, client.InNamespace(nodepod.DefaultNamespace), client.MatchingLabels{nodepod.LabelNode: "cp-0"}))
		require.Len(t, pods.Items, 1)
		pod := &pods.Items[0]
		require.Equal(t, "cp-0", pod.Spec.NodeName)
		require.Contains(t, pod.Annotations[nodepod.AnnotationSteps], "kubeadm-upgrade")
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(cp), cp))
		require.True(t, cp.Spec.Unschedulable, "drained (nothing to evict) and cordoned before the upgrade")
		require.Equal(t, observe.ReasonUpgrading, observe.InPlaceUpdateCondition(cp).Reason)

		// Asked again (a restarted extension): same pod, still running.
		resp = call(req)
		require.Equal(t, int32(5), resp.RetryAfterSeconds)
		require.Contains(t, resp.Message, "upgrading node cp-0")
		require.NoError(t, c.List(ctx, &pods, client.InNamespace(nodepod.DefaultNamespace)))
		require.Len(t, pods.Items, 1, "no second pod")

		finishPod(t, ctx, c, pod, "", 0)
		resp = call(req)
		require.Equal(t, int32(5), resp.RetryAfterSeconds, "not done until the kubelet reports the version")
		require.Contains(t, resp.Message, "waiting for the kubelet to report v1.36.1")

		setKubelet(t, ctx, c, cp, "v1.36.1")
		resp = call(req)
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status)
		require.Equal(t, int32(0), resp.RetryAfterSeconds, resp.Message)
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(cp), cp))
		require.False(t, cp.Spec.Unschedulable, "uncordoned once the kubelet reports the version")
		require.NotContains(t, cp.Annotations, drain.AnnotationCordon)
		require.NotContains(t, cp.Annotations, observe.AnnotationInPlaceUpdate)
		cond := observe.InPlaceUpdateCondition(cp)
		require.NotNil(t, cond)
		require.Equal(t, observe.ReasonSucceeded, cond.Reason)
		require.Equal(t, corev1.ConditionFalse, cond.Status)

		// The Events are on the Machine, with stable reasons.
		var reasons []string
		require.Eventually(t, func() bool {
			list, err := cs.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
			require.NoError(t, err)
			reasons = reasons[:0]
			for _, e := range list.Items {
				if e.Regarding.Kind == "Machine" && e.Regarding.APIVersion == clusterv1.GroupVersion.String() && e.Regarding.Name == "cp-0" {
					reasons = append(reasons, e.Reason)
				}
			}
			return len(reasons) == 3
		}, 30*time.Second, 100*time.Millisecond)
		require.ElementsMatch(t, []string{observe.EventReasonUpdateStarted, observe.EventReasonNodeDrained, observe.EventReasonUpdateSucceeded}, reasons)
	})

	t.Run("a failed step is a Failure naming the step and exit code", func(t *testing.T) {
		req := updateReq("md-0-a", "docker:////md-0-a", "v1.36.1", false)
		resp := call(req)
		require.Contains(t, resp.Message, "started worker upgrade of node md-0-a")
		var pods corev1.PodList
		require.NoError(t, c.List(ctx, &pods, client.InNamespace(nodepod.DefaultNamespace), client.MatchingLabels{nodepod.LabelNode: "md-0-a"}))
		require.Len(t, pods.Items, 1)
		finishPod(t, ctx, c, &pods.Items[0], "kubeadm-upgrade", 3)
		resp = call(req)
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status)
		require.Contains(t, resp.Message, observe.FailureStepFailed+": node md-0-a: step kubeadm-upgrade failed with exit code 3")
		n := &corev1.Node{}
		require.NoError(t, c.Get(ctx, types.NamespacedName{Name: "md-0-a"}, n))
		require.True(t, n.Spec.Unschedulable, "a failed node stays cordoned: its pods are not sent back to a half-upgraded node")
		require.Equal(t, observe.ReasonFailed, observe.InPlaceUpdateCondition(n).Reason)
	})

	t.Run("workload clients from CAPI's kubeconfig secrets", func(t *testing.T) {
		get := workload.KubeconfigClient(c, env.Scheme)
		key := types.NamespacedName{Namespace: "default", Name: "demo"}
		_, err := get(ctx, key)
		require.Error(t, err, "no secret yet")

		secret, err := env.KubeconfigSecret("default", "demo")
		require.NoError(t, err)
		require.NoError(t, c.Create(ctx, secret))
		wc, err := get(ctx, key)
		require.NoError(t, err, "a failure is not cached")
		var nodes corev1.NodeList
		require.NoError(t, wc.List(ctx, &nodes))
		require.Len(t, nodes.Items, 2)
		again, err := get(ctx, key)
		require.NoError(t, err)
		require.Same(t, wc, again, "clients are cached per cluster")
	})

	t.Run("refusals", func(t *testing.T) {
		cases := []struct {
			name string
			req  *runtimehooksv1.UpdateMachineRequest
			msg  string
		}{
			{"skipped minor", updateReq("md-0-a", "docker:////md-0-a", "v1.37.0", false), observe.FailurePlanRejected + ": node md-0-a from v1.35.4 to v1.37.0"},
			{"downgrade", updateReq("md-0-a", "docker:////md-0-a", "v1.29.9", false), "downgrade"},
			{"no providerID", updateReq("x", "", "v1.36.1", false), observe.FailureInvalidMachine + ": desired Machine has no spec.providerID"},
			{"bad version", updateReq("x", "docker:////md-0-a", "latest", false), "spec.version"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				resp := call(tc.req)
				require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status)
				require.Contains(t, resp.Message, tc.msg)
			})
		}
		// A node that does not exist yet is a wait, not a failure.
		resp := call(updateReq("x", "docker:////nowhere", "v1.36.1", false))
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status)
		require.Equal(t, int32(5), resp.RetryAfterSeconds)
		require.Contains(t, resp.Message, "no node with spec.providerID")
	})
}
