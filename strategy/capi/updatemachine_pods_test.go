package capi_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// podsCluster is a workload cluster on controller-runtime's fake client:
// kubeadm-config at v1.35.4 and one node, cp-0, whose kubelet reports
// v1.35.4. Its UpdateMachine runs without drain, so that every call is
// about the upgrader pods.
type podsCluster struct {
	t    *testing.T
	c    client.Client
	call func(*runtimehooksv1.UpdateMachineRequest) runtimehooksv1.UpdateMachineResponse
}

func newPodsCluster(t *testing.T, opts ...updOpt) *podsCluster {
	t.Helper()
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	c := crfake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&corev1.Node{}, &corev1.Pod{}).Build()
	ctx := t.Context()
	require.NoError(t, c.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubeadm-config"},
		Data:       map[string]string{"ClusterConfiguration": "kubernetesVersion: v1.35.4\n"},
	}))
	createNode(t, ctx, c, "cp-0", "docker:////cp-0", "v1.35.4")
	workload := func(context.Context, types.NamespacedName) (client.Client, error) { return c, nil }
	return &podsCluster{t: t, c: c, call: func(req *runtimehooksv1.UpdateMachineRequest) runtimehooksv1.UpdateMachineResponse {
		// A new updater per call: nothing survives in memory.
		u, err := capi.NewMachineUpdater(workload, updaterOpts(append([]updOpt{withoutDrain(), withPodOptions(nodepod.WithImage("r/u:1"))}, opts...)...))
		require.NoError(t, err)
		var resp runtimehooksv1.UpdateMachineResponse
		u.UpdateMachine(ctx, req, &resp)
		return resp
	}}
}

// pods returns the upgrader pods, by name.
func (pc *podsCluster) pods() []corev1.Pod {
	pc.t.Helper()
	var pods corev1.PodList
	require.NoError(pc.t, pc.c.List(pc.t.Context(), &pods, client.MatchingLabelsSelector{Selector: nodepod.Selector()}))
	return pods.Items
}

// onlyPod asserts there is exactly one upgrader pod and returns it.
func (pc *podsCluster) onlyPod() *corev1.Pod {
	pc.t.Helper()
	pods := pc.pods()
	require.Len(pc.t, pods, 1, "exactly one upgrader pod on the node")
	return &pods[0]
}

func (pc *podsCluster) node() *corev1.Node {
	pc.t.Helper()
	n := &corev1.Node{}
	require.NoError(pc.t, pc.c.Get(pc.t.Context(), types.NamespacedName{Name: "cp-0"}, n))
	return n
}

func (pc *podsCluster) kubelet(v string) {
	pc.t.Helper()
	setKubelet(pc.t, pc.t.Context(), pc.c, pc.node(), v)
}

// runTo plays the kubelet: the init containers before step have exited 0,
// step runs.
func (pc *podsCluster) runTo(pod *corev1.Pod, step string) {
	pc.t.Helper()
	require.NoError(pc.t, pc.c.Get(pc.t.Context(), client.ObjectKeyFromObject(pod), pod))
	pod.Status.InitContainerStatuses = nil
	found := false
	for _, ic := range pod.Spec.InitContainers {
		cs := corev1.ContainerStatus{Name: ic.Name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}}
		if ic.Name == step {
			cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
			found = true
		}
		pod.Status.InitContainerStatuses = append(pod.Status.InitContainerStatuses, cs)
		if found {
			break
		}
	}
	require.True(pc.t, found, "no step %s in pod %s", step, pod.Name)
	pod.Status.Phase = corev1.PodPending // init containers still run
	require.NoError(pc.t, pc.c.Status().Update(pc.t.Context(), pod))
}

func (pc *podsCluster) record() *observe.UpdateRecord {
	pc.t.Helper()
	raw, ok := pc.node().Annotations[observe.AnnotationInPlaceUpdate]
	if !ok {
		return nil
	}
	var r observe.UpdateRecord
	require.NoError(pc.t, json.Unmarshal([]byte(raw), &r))
	return &r
}

func requireWaiting(t *testing.T, resp runtimehooksv1.UpdateMachineResponse, msg string) {
	t.Helper()
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
	require.NotZero(t, resp.RetryAfterSeconds, "not done: %s", resp.Message)
	require.Contains(t, resp.Message, msg)
}

func requireDone(t *testing.T, resp runtimehooksv1.UpdateMachineResponse) {
	t.Helper()
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
	require.Zero(t, resp.RetryAfterSeconds, "done: %s", resp.Message)
}

// TestUpdateMachineKeepsTheRoleOfTheFirstControlPlane: `kubeadm upgrade
// apply` raises kubeadm-config's kubernetesVersion while the first control
// plane's upgrader pod still has the kubelet steps to run. The role, and so
// the plan and the pod, stay those the update started with: no second pod.
func TestUpdateMachineKeepsTheRoleOfTheFirstControlPlane(t *testing.T) {
	pc := newPodsCluster(t)
	req := updateReq("cp-0", "docker:////cp-0", "v1.36.1", true)
	requireWaiting(t, pc.call(req), "started first-control-plane upgrade of node cp-0")
	pod := pc.onlyPod()
	rec := pc.record()
	require.Equal(t, string(kubeadm.RoleFirstControlPlane), rec.Role)
	require.Equal(t, nodepod.DefaultNamespace+"/"+pod.Name, rec.Pod)
	require.Equal(t, "v1.35.4", rec.FromVersion)

	var cm corev1.ConfigMap
	require.NoError(t, pc.c.Get(t.Context(), types.NamespacedName{Namespace: "kube-system", Name: "kubeadm-config"}, &cm))
	cm.Data["ClusterConfiguration"] = "kubernetesVersion: v1.36.1\n" // the upload-config phase of `kubeadm upgrade apply`
	require.NoError(t, pc.c.Update(t.Context(), &cm))
	pc.runTo(pod, kubeadm.StepKubelet)

	for range 2 {
		resp := pc.call(req)
		requireWaiting(t, resp, "upgrading node cp-0")
		require.Equal(t, pod.Name, pc.onlyPod().Name, "the same pod, not one for role control-plane")
	}
	require.Equal(t, string(kubeadm.RoleFirstControlPlane), pc.record().Role)

	finishPod(t, t.Context(), pc.c, pod, "", 0)
	pc.kubelet("v1.36.1")
	requireDone(t, pc.call(req))
	require.Nil(t, pc.record())
}

// TestUpdateMachineDesiredVersionChangesMidUpdate: a new desired version
// while the pod of the old one runs waits for that pod, deletes it once it
// has finished, and only then starts the new one: never two pods at once.
func TestUpdateMachineDesiredVersionChangesMidUpdate(t *testing.T) {
	pc := newPodsCluster(t)
	requireWaiting(t, pc.call(updateReq("w-0", "docker:////cp-0", "v1.36.1", false)), "started worker upgrade of node cp-0 from v1.35.4 to v1.36.1")
	first := pc.onlyPod()
	pc.runTo(first, kubeadm.StepKubeadmUpgrade)

	req := updateReq("w-0", "docker:////cp-0", "v1.36.2", false)
	for range 2 {
		resp := pc.call(req)
		requireWaiting(t, resp, "upgrader pod "+nodepod.DefaultNamespace+"/"+first.Name+" (plan ")
		require.Contains(t, resp.Message, "still running on node cp-0")
		require.Equal(t, first.Name, pc.onlyPod().Name, "no second pod next to the running one")
	}
	rec := pc.record()
	require.Equal(t, "v1.36.2", rec.Version)
	require.Empty(t, rec.Pod, "the new update's pod is not recorded before it can start")

	// The old plan ends (it took the kubelet to v1.36.1): its pod is
	// deleted, then the new update starts from v1.36.1.
	finishPod(t, t.Context(), pc.c, first, "", 0)
	pc.kubelet("v1.36.1")
	requireWaiting(t, pc.call(req), "deleted the finished upgrader pod "+nodepod.DefaultNamespace+"/"+first.Name)
	require.Empty(t, pc.pods())
	requireWaiting(t, pc.call(req), "started worker upgrade of node cp-0 from v1.36.1 to v1.36.2")
	second := pc.onlyPod()
	require.NotEqual(t, first.Name, second.Name)
	require.Equal(t, "v1.36.1", pc.record().FromVersion)

	finishPod(t, t.Context(), pc.c, second, "", 0)
	pc.kubelet("v1.36.2")
	requireDone(t, pc.call(req))
}

// TestUpdateMachineDesiredVersionRevertedMidUpdate: the desired version
// goes back to the node's own version while the pod of the abandoned update
// runs. That is not done while the pod runs.
func TestUpdateMachineDesiredVersionRevertedMidUpdate(t *testing.T) {
	revert := updateReq("w-0", "docker:////cp-0", "v1.35.4", false)
	start := func(t *testing.T) (*podsCluster, *corev1.Pod) {
		pc := newPodsCluster(t)
		pc.call(updateReq("w-0", "docker:////cp-0", "v1.36.1", false))
		pod := pc.onlyPod()
		pc.runTo(pod, kubeadm.StepKubeadmUpgrade)
		for range 2 {
			resp := pc.call(revert)
			requireWaiting(t, resp, "kubelet reports v1.35.4, but the update is not over: upgrader pod "+nodepod.DefaultNamespace+"/"+pod.Name)
			require.NotNil(t, pc.record(), "the record stays while its pod runs")
		}
		return pc, pod
	}

	t.Run("the abandoned pod fails before the kubelet changes: deleted, then done", func(t *testing.T) {
		pc, pod := start(t)
		finishPod(t, t.Context(), pc.c, pod, kubeadm.StepKubeadmUpgrade, 1)
		requireWaiting(t, pc.call(revert), "deleted the finished upgrader pod")
		require.Empty(t, pc.pods())
		requireDone(t, pc.call(revert))
		require.Nil(t, pc.record())
	})

	t.Run("the abandoned pod upgrades the node: going back is a downgrade, refused", func(t *testing.T) {
		pc, pod := start(t)
		finishPod(t, t.Context(), pc.c, pod, "", 0)
		pc.kubelet("v1.36.1")
		resp := pc.call(revert)
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status)
		require.Contains(t, resp.Message, observe.FailurePlanRejected+": node cp-0 from v1.36.1 to v1.35.4")
	})
}

// TestUpdateMachineDoneOnlyWhenThePodIsDone: the kubelet reports the new
// version after the kubelet step, before the verify step. The
// answer follows the update's own pod from there.
func TestUpdateMachineDoneOnlyWhenThePodIsDone(t *testing.T) {
	req := updateReq("w-0", "docker:////cp-0", "v1.36.1", false)
	start := func(t *testing.T) (*podsCluster, *corev1.Pod) {
		pc := newPodsCluster(t)
		pc.call(req)
		pod := pc.onlyPod()
		pc.runTo(pod, kubeadm.StepVerify)
		pc.kubelet("v1.36.1")
		return pc, pod
	}

	t.Run("verify still runs: not done", func(t *testing.T) {
		pc, pod := start(t)
		resp := pc.call(req)
		requireWaiting(t, resp, "node cp-0: kubelet reports v1.36.1, but upgrader pod "+nodepod.DefaultNamespace+"/"+pod.Name+" still runs")
		require.Equal(t, observe.ReasonUpgrading, observe.InPlaceUpdateCondition(pc.node()).Reason)
		require.NotNil(t, pc.record())
	})

	t.Run("pod succeeded: done", func(t *testing.T) {
		pc, pod := start(t)
		pc.call(req)
		finishPod(t, t.Context(), pc.c, pod, "", 0)
		resp := pc.call(req)
		requireDone(t, resp)
		require.Contains(t, resp.Message, "in-place update done")
		require.Nil(t, pc.record())
		require.Equal(t, observe.ReasonSucceeded, observe.InPlaceUpdateCondition(pc.node()).Reason)
	})

	t.Run("verify fails after the kubelet reports the version: Failure", func(t *testing.T) {
		pc, pod := start(t)
		pc.call(req)
		finishPod(t, t.Context(), pc.c, pod, kubeadm.StepVerify, 7)
		for range 2 {
			resp := pc.call(req)
			require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status)
			require.Contains(t, resp.Message, observe.FailureStepFailed+": node cp-0: step verify failed with exit code 7")
		}
		require.NotNil(t, pc.record(), "a failed update keeps its record")
		require.Equal(t, observe.ReasonFailed, observe.InPlaceUpdateCondition(pc.node()).Reason)
	})
}

// TestUpdateMachineNeverStartsASecondPod: upgrader pods the record does not
// name (another extension's, a lost record's) are waited for while they run
// and deleted once finished, before the update's own pod starts.
func TestUpdateMachineNeverStartsASecondPod(t *testing.T) {
	foreign := func(name string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: nodepod.DefaultNamespace, Name: name, Labels: map[string]string{
				nodepod.LabelName: nodepod.NameValue, nodepod.LabelManagedBy: nodepod.ManagedByValue, nodepod.LabelPlan: name, nodepod.LabelNode: "cp-0"}},
			Spec:   corev1.PodSpec{NodeName: "cp-0", Containers: []corev1.Container{{Name: nodepod.StatusContainer, Image: "r/u:0"}}},
			Status: corev1.PodStatus{Phase: phase},
		}
	}
	req := updateReq("w-0", "docker:////cp-0", "v1.36.1", false)

	t.Run("a running one blocks, also once the kubelet reports the version", func(t *testing.T) {
		pc := newPodsCluster(t)
		other := foreign("other-plan", corev1.PodRunning)
		require.NoError(t, pc.c.Create(t.Context(), other))
		require.NoError(t, pc.c.Status().Update(t.Context(), other))
		requireWaiting(t, pc.call(req), "upgrader pod "+nodepod.DefaultNamespace+"/other-plan (plan other-plan) of another plan is still running on node cp-0")
		require.Len(t, pc.pods(), 1)
		pc.kubelet("v1.36.1")
		// The update started and its own plan has not run: the kubelet
		// reporting the version is no proof, so the update still waits to
		// run its plan after the other pod.
		requireWaiting(t, pc.call(req), "upgrader pod "+nodepod.DefaultNamespace+"/other-plan (plan other-plan) of another plan is still running on node cp-0")
	})

	t.Run("finished ones are deleted in our namespace only", func(t *testing.T) {
		pc := newPodsCluster(t)
		done := foreign("old-plan", corev1.PodSucceeded)
		elsewhere := foreign("elsewhere", corev1.PodFailed)
		elsewhere.Namespace = "other-tool"
		for _, p := range []*corev1.Pod{done, elsewhere} {
			require.NoError(t, pc.c.Create(t.Context(), p))
			require.NoError(t, pc.c.Status().Update(t.Context(), p))
		}
		requireWaiting(t, pc.call(req), "deleted the finished upgrader pod "+nodepod.DefaultNamespace+"/old-plan (plan old-plan)")
		requireWaiting(t, pc.call(req), "started worker upgrade")
		var names []string
		for _, p := range pc.pods() {
			names = append(names, p.Namespace+"/"+p.Name)
		}
		require.Len(t, names, 2)
		require.Contains(t, names, "other-tool/elsewhere", "not ours to delete")
	})
}

// TestUpdateMachineWaitsForItsGates: a closed maintenance window answers
// in progress with the gate's reason, and the node is untouched (no
// record, no pod) until the window opens; a started update is not
// interrupted when the window closes; a Stop is a Failure before anything
// is done.
func TestUpdateMachineWaitsForItsGates(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC))
	window, err := strategy.MaintenanceWindow("nightly", "0 2 * * *", time.Hour, "UTC")
	require.NoError(t, err)
	pc := newPodsCluster(t, withGates(window), withUpdaterClock(clk))
	req := updateReq("cp-0", "docker:////cp-0", "v1.36.1", true)

	for _, at := range []time.Time{time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC), time.Date(2026, 11, 25, 1, 59, 0, 0, time.UTC)} {
		clk.SetTime(at)
		resp := pc.call(req)
		requireWaiting(t, resp, "node cp-0 not started: Wait by nightly: outside the maintenance window")
		require.Equal(t, int32(time.Date(2026, 11, 25, 2, 0, 0, 0, time.UTC).Sub(at)/time.Second), resp.RetryAfterSeconds, "asked again when the window opens")
		require.Empty(t, pc.pods(), "no upgrader pod before the window opens")
		require.Nil(t, pc.record(), "nothing recorded on the node")
		cond := nodeCondition(t, pc.node())
		require.NotNil(t, cond)
		require.Equal(t, observe.ReasonGateClosed, cond.Reason)
	}

	clk.SetTime(time.Date(2026, 11, 25, 2, 0, 0, 0, time.UTC))
	requireWaiting(t, pc.call(req), "started first-control-plane upgrade of node cp-0")
	pod := pc.onlyPod()

	clk.SetTime(time.Date(2026, 11, 25, 3, 30, 0, 0, time.UTC)) // the window has closed
	requireWaiting(t, pc.call(req), "upgrading node cp-0")
	require.Equal(t, pod.Name, pc.onlyPod().Name, "a started update goes on")

	t.Run("stop", func(t *testing.T) {
		stop := strategy.GateFunc(func(context.Context, strategy.GateRequest) strategy.GateResult {
			return strategy.GateResult{Verdict: strategy.VerdictStop, Gate: "breaker", Reason: "3 of 10 machines of md-0 unhealthy"}
		})
		pc := newPodsCluster(t, withGates(window, stop), withUpdaterClock(clk))
		resp := pc.call(req)
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status)
		require.Contains(t, resp.Message, observe.FailureGateStopped+": node cp-0: Stop by breaker: 3 of 10 machines of md-0 unhealthy")
		require.Empty(t, pc.pods())
		require.Nil(t, pc.record())
	})
	t.Run("a nil gate is refused", func(t *testing.T) {
		_, err := capi.NewMachineUpdater(func(context.Context, types.NamespacedName) (client.Client, error) { return nil, nil }, capi.UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{nodepod.WithImage("r/u:1")}, Gates: []strategy.Gate{window, nil}})
		require.ErrorIs(t, err, capi.ErrInvalidOption)
		require.ErrorContains(t, err, "gate 1 is nil")
	})
}

// nodeCondition is the node's ConditionInPlaceUpdate, nil when absent.
func nodeCondition(t *testing.T, n *corev1.Node) *corev1.NodeCondition {
	t.Helper()
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == observe.ConditionInPlaceUpdate {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// TestUpdateMachineDoesNotTrustASquattedPod: a pod that carries the
// upgrader pod's name, labels and plan fingerprint but runs another image,
// command or security context is not the update's pod: its Succeeded is
// not taken as the update's success, neither while the plan runs nor once
// the kubelet reports the version; the answer is a Failure naming what
// differs (FailureForeignPod).
func TestUpdateMachineDoesNotTrustASquattedPod(t *testing.T) {
	for _, tc := range []struct {
		name    string
		squat   func(*corev1.Pod)
		kubelet bool // the kubelet reports the desired version already
		message string
	}{
		{"another image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "evil/upgrader:1" }, false, `runs image "evil/upgrader:1", not r/u:1`},
		{"another command", func(p *corev1.Pod) { p.Spec.InitContainers[0].Command = []string{"sh", "-c", "true"} }, false, "runs another command"},
		{"another securityContext", func(p *corev1.Pod) { p.Spec.InitContainers[0].SecurityContext = nil }, false, "has another securityContext"},
		{"another image, kubelet at the version", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "evil/upgrader:1" }, true, `runs image "evil/upgrader:1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pc := newPodsCluster(t)
			req := updateReq("cp-0", "docker:////cp-0", "v1.36.1", false)
			requireWaiting(t, pc.call(req), "started worker upgrade")
			ours := pc.onlyPod()
			squat := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ours.Namespace, Name: ours.Name, Labels: ours.Labels, Annotations: ours.Annotations},
				Spec: *ours.Spec.DeepCopy()}
			tc.squat(squat)
			require.NoError(t, pc.c.Delete(t.Context(), ours))
			require.NoError(t, pc.c.Create(t.Context(), squat))
			squat.Status.Phase = corev1.PodSucceeded
			require.NoError(t, pc.c.Status().Update(t.Context(), squat))
			if tc.kubelet {
				pc.kubelet("v1.36.1")
			}
			for range 2 {
				resp := pc.call(req)
				require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
				require.Contains(t, resp.Message, observe.FailureForeignPod+": pod upgradekit-system/"+ours.Name+" on node cp-0 is not the update's upgrader pod")
				require.Contains(t, resp.Message, tc.message)
			}
			require.Nil(t, pc.record().Succeeded, "no success recorded")
		})
	}
}
