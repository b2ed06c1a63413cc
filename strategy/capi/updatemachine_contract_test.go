package capi_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/nodeexec/drain"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// The in-place contract on the UpdateMachine side: never strand a node.
// Everything that can be known to fail is found before the node is
// cordoned, and a refusal that waiting cannot heal is a Failure naming
// it, not Pending for ever.

// TestUpdateMachineValidatesBeforeDisrupting runs against a real API
// server, whose Pod Security admission refuses the privileged upgrader pod
// in a namespace enforcing "baseline".
func TestUpdateMachineValidatesBeforeDisrupting(t *testing.T) {
	env := apiserver.StartForTest(t)
	c := env.Client
	ctx := context.Background()
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "baseline-only",
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}}}))
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "privileged",
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}))
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	workload := func(context.Context, types.NamespacedName) (client.Client, error) { return c, nil }
	clientset := func(context.Context, types.NamespacedName) (kubernetes.Interface, error) { return cs, nil }
	call := func(req *runtimehooksv1.UpdateMachineRequest, namespace string) runtimehooksv1.UpdateMachineResponse {
		u, err := capi.NewMachineUpdater(workload, capi.UpdaterOptions{Clientset: clientset, SkipPrePull: true, PodOptions: []nodepod.Option{nodepod.WithImage("registry.example/upgrader:v1.36.1"), nodepod.WithNamespace(namespace)}})
		require.NoError(t, err)
		var resp runtimehooksv1.UpdateMachineResponse
		u.UpdateMachine(ctx, req, &resp)
		return resp
	}
	cordoned := func(name string) bool {
		var n corev1.Node
		require.NoError(t, c.Get(ctx, client.ObjectKey{Name: name}, &n))
		_, owned := n.Annotations[drain.AnnotationCordon]
		return n.Spec.Unschedulable || owned
	}
	pods := func(namespace string) int {
		var l corev1.PodList
		require.NoError(t, c.List(ctx, &l, client.InNamespace(namespace)))
		return len(l.Items)
	}

	for _, tc := range []struct {
		name, node, from, to, namespace string
		failure                         string
		message                         string
	}{
		{"admission refuses the pod", "w-psa", "v1.35.4", "v1.36.1", "baseline-only", observe.FailurePodRejected, "violates PodSecurity"},
		{"kubeadm refuses the plan (a skipped minor)", "w-skip", "v1.35.4", "v1.37.0", "privileged", observe.FailurePlanRejected, "skips a minor version"},
		{"kubeadm refuses the plan (a downgrade)", "w-down", "v1.36.1", "v1.35.4", "privileged", observe.FailurePlanRejected, "downgrade refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			createNode(t, ctx, c, tc.node, "docker:////"+tc.node, tc.from)
			req := updateReq(tc.node, "docker:////"+tc.node, tc.to, false)
			for range 2 { // the answer is stable: a Failure every time, never Pending
				resp := call(req, tc.namespace)
				require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
				require.Contains(t, resp.Message, tc.failure)
				require.Contains(t, resp.Message, tc.message)
				require.False(t, cordoned(tc.node), "nothing is disrupted for an update that cannot run")
			}
			require.Zero(t, pods(tc.namespace), "the dry run created nothing")
		})
	}

	t.Run("a namespace that does not exist yet waits, undisrupted", func(t *testing.T) {
		createNode(t, ctx, c, "w-nons", "docker:////w-nons", "v1.35.4")
		resp := call(updateReq("w-nons", "docker:////w-nons", "v1.36.1", false), "not-yet")
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
		require.Positive(t, resp.RetryAfterSeconds)
		require.Contains(t, resp.Message, "dry run before disrupting")
		require.False(t, cordoned("w-nons"))
	})

	t.Run("an accepted pod goes on to the drain", func(t *testing.T) {
		createNode(t, ctx, c, "w-ok", "docker:////w-ok", "v1.35.4")
		resp := call(updateReq("w-ok", "docker:////w-ok", "v1.36.1", false), "privileged")
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
		require.Positive(t, resp.RetryAfterSeconds)
		require.True(t, cordoned("w-ok"))
	})
}

// TestUpdateMachineDoneOnlyWithProof: "done" needs a recorded success of
// the update's own upgrader pod. A pod deleted before its success was seen
// (a cleanup job, pod GC, an operator) is created again, and a record from
// an earlier version of the updater (no pod named) runs the plan, instead
// of taking the kubelet's reported version for done.
func TestUpdateMachineDoneOnlyWithProof(t *testing.T) {
	req := updateReq("w-0", "docker:////cp-0", "v1.36.1", false)

	t.Run("our pod deleted after the kubelet step, before the verify", func(t *testing.T) {
		pc := newPodsCluster(t)
		requireWaiting(t, pc.call(req), "started worker upgrade")
		pod := pc.onlyPod()
		pc.runTo(pod, kubeadm.StepVerify)
		pc.kubelet("v1.36.1") // the kubelet step has run
		require.NoError(t, pc.c.Delete(t.Context(), pod))
		resp := pc.call(req)
		require.NotZero(t, resp.RetryAfterSeconds, "not done without the pod's success: %s", resp.Message)
		again := pc.onlyPod()
		require.Equal(t, pod.Name, again.Name, "the same plan's pod, which resumes from the host's journal")
		require.Equal(t, pod.Annotations[nodepod.AnnotationPlanFP], again.Annotations[nodepod.AnnotationPlanFP], "the same plan: built from the recorded from-version")
		require.True(t, pc.node().Spec.Unschedulable == false)
		finishPod(t, t.Context(), pc.c, again, "", 0)
		requireDone(t, pc.call(req))
		require.Nil(t, pc.record(), "the record is dropped once done")
	})

	t.Run("our pod's success is recorded before the pod can go", func(t *testing.T) {
		pc := newPodsCluster(t)
		requireWaiting(t, pc.call(req), "started worker upgrade")
		pod := pc.onlyPod()
		finishPod(t, t.Context(), pc.c, pod, "", 0)
		requireWaiting(t, pc.call(req), "waiting for the kubelet to report v1.36.1")
		require.NotNil(t, pc.record().Succeeded)
		require.NoError(t, pc.c.Delete(t.Context(), pod))
		pc.kubelet("v1.36.1")
		requireDone(t, pc.call(req))
		require.Empty(t, pc.pods(), "no pod recreated: the success was recorded")
	})

	t.Run("a record of an earlier updater version names no pod", func(t *testing.T) {
		pc := newPodsCluster(t)
		n := pc.node()
		n.Annotations = map[string]string{observe.AnnotationInPlaceUpdate: `{"machine":"default/w-0","version":"v1.36.1","started":"` + time.Now().UTC().Format(time.RFC3339) + `","role":"worker"}`}
		require.NoError(t, pc.c.Update(t.Context(), n))
		pc.kubelet("v1.36.1")
		resp := pc.call(req)
		require.NotZero(t, resp.RetryAfterSeconds, "a version reported under an old record is no proof: %s", resp.Message)
		require.Len(t, pc.pods(), 1, "the plan runs to verify the node")
	})

	t.Run("nothing started: a node already at the version is done", func(t *testing.T) {
		pc := newPodsCluster(t)
		pc.kubelet("v1.36.1")
		requireDone(t, pc.call(req))
		require.Empty(t, pc.pods())
	})
}

// TestUpdateMachineRolesUnderKubeadmControlPlane: KubeadmControlPlane
// writes the new version into kubeadm-config before it updates any control
// plane machine in place, so the role cannot come from there. The first
// control plane node to update runs `kubeadm upgrade apply` after an etcd
// snapshot; the others run `kubeadm upgrade node`.
func TestUpdateMachineRolesUnderKubeadmControlPlane(t *testing.T) {
	pc := newPodsCluster(t)
	ctx := t.Context()
	var cm corev1.ConfigMap
	require.NoError(t, pc.c.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: "kubeadm-config"}, &cm))
	cm.Data["ClusterConfiguration"] = "kubernetesVersion: v1.36.1\n" // what KCP writes first
	require.NoError(t, pc.c.Update(ctx, &cm))
	for _, name := range []string{"cp-1", "cp-2"} {
		createNode(t, ctx, pc.c, name, "docker:////"+name, "v1.35.4")
	}
	for _, name := range []string{"cp-0", "cp-1", "cp-2"} {
		var n corev1.Node
		require.NoError(t, pc.c.Get(ctx, client.ObjectKey{Name: name}, &n))
		n.Labels = map[string]string{capi.LabelControlPlaneNode: ""}
		require.NoError(t, pc.c.Update(ctx, &n))
	}
	podOn := func(node string) *corev1.Pod {
		for _, p := range pc.pods() {
			if p.Spec.NodeName == node {
				return &p
			}
		}
		t.Fatalf("no upgrader pod on %s", node)
		return nil
	}

	requireWaiting(t, pc.call(updateReq("cp-0", "docker:////cp-0", "v1.36.1", true)), "started first-control-plane upgrade of node cp-0")
	require.Contains(t, podOn("cp-0").Annotations[nodepod.AnnotationSteps], kubeadm.StepEtcdSnapshot, "the snapshot runs before the first control plane changes")

	// KCP goes one machine at a time, but even a second call while cp-0
	// is under way must not run a second upgrade apply.
	requireWaiting(t, pc.call(updateReq("cp-1", "docker:////cp-1", "v1.36.1", true)), "started control-plane upgrade of node cp-1")
	require.NotContains(t, podOn("cp-1").Annotations[nodepod.AnnotationSteps], kubeadm.StepEtcdSnapshot)

	finishPod(t, ctx, pc.c, podOn("cp-0"), "", 0)
	pc.kubelet("v1.36.1")
	requireDone(t, pc.call(updateReq("cp-0", "docker:////cp-0", "v1.36.1", true)))
	requireWaiting(t, pc.call(updateReq("cp-2", "docker:////cp-2", "v1.36.1", true)), "started control-plane upgrade of node cp-2")
}

// TestUpdateMachineNodeIdentity: a node that goes away is waited for only
// up to a grace, two Nodes with one providerID or two Machines on one Node
// are Failures naming them, never a record flipping between machines.
func TestUpdateMachineNodeIdentity(t *testing.T) {
	newUpdater := func(t *testing.T, c client.Client, clk *clocktesting.FakeClock) *capi.MachineUpdater {
		workload := func(context.Context, types.NamespacedName) (client.Client, error) { return c, nil }
		u, err := capi.NewMachineUpdater(workload, capi.UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{nodepod.WithImage("r/u:1")}, Clock: clk, NodeGoneGrace: 10 * time.Minute})
		require.NoError(t, err)
		return u
	}
	call := func(u *capi.MachineUpdater, req *runtimehooksv1.UpdateMachineRequest) runtimehooksv1.UpdateMachineResponse {
		var resp runtimehooksv1.UpdateMachineResponse
		u.UpdateMachine(context.Background(), req, &resp)
		return resp
	}

	t.Run("the node is gone past the grace", func(t *testing.T) {
		pc := newPodsCluster(t)
		clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		u := newUpdater(t, pc.c, clk)
		req := updateReq("w-0", "docker:////cp-0", "v1.36.1", false)
		requireWaiting(t, call(u, req), "started worker upgrade")
		require.NoError(t, pc.c.Delete(t.Context(), pc.node()))
		requireWaiting(t, call(u, req), "waiting for the node")
		clk.Step(9 * time.Minute)
		requireWaiting(t, call(u, req), "waiting for the node")
		clk.Step(2 * time.Minute)
		resp := call(u, req)
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
		require.Contains(t, resp.Message, observe.FailureNodeGone)
		require.Contains(t, resp.Message, `spec.providerID "docker:////cp-0"`)
	})

	t.Run("the node is gone past the grace, across extension restarts", func(t *testing.T) {
		pc := newPodsCluster(t)
		clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		req := updateReq("w-0", "docker:////cp-0", "v1.36.1", false)
		requireWaiting(t, call(newUpdater(t, pc.c, clk), req), "started worker upgrade")
		require.NoError(t, pc.c.Delete(t.Context(), pc.node()))
		for range 10 {
			requireWaiting(t, call(newUpdater(t, pc.c, clk), req), "waiting for the node")
			clk.Step(time.Minute)
		}
		clk.Step(time.Minute)
		resp := call(newUpdater(t, pc.c, clk), req)
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
		require.Contains(t, resp.Message, observe.FailureNodeGone)
	})

	t.Run("two nodes with one providerID", func(t *testing.T) {
		pc := newPodsCluster(t)
		createNode(t, t.Context(), pc.c, "cp-0-twin", "docker:////cp-0", "v1.35.4")
		u := newUpdater(t, pc.c, clocktesting.NewFakeClock(time.Now()))
		resp := call(u, updateReq("w-0", "docker:////cp-0", "v1.36.1", false))
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
		require.Contains(t, resp.Message, observe.FailureAmbiguousNode)
		require.Contains(t, resp.Message, "cp-0, cp-0-twin")
		require.Empty(t, pc.pods())
	})

	t.Run("two machines on one node", func(t *testing.T) {
		pc := newPodsCluster(t)
		u := newUpdater(t, pc.c, clocktesting.NewFakeClock(time.Now()))
		requireWaiting(t, call(u, updateReq("w-0", "docker:////cp-0", "v1.36.1", false)), "started worker upgrade")
		before := pc.record()
		resp := call(u, updateReq("w-1", "docker:////cp-0", "v1.36.1", false))
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
		require.Contains(t, resp.Message, observe.FailureNodeClaimed)
		require.Contains(t, resp.Message, "being updated for machine default/w-0")
		require.Equal(t, before, pc.record(), "the first machine's record, and its deadlines, are untouched")
	})
}

// TestUpdateMachineKnowsItsOwnPods: an upgrader pod is ours by namespace
// and record, not by labels, which anyone can copy: a tenant pod carrying
// the upgrader labels in its own namespace does not block the update.
func TestUpdateMachineKnowsItsOwnPods(t *testing.T) {
	pc := newPodsCluster(t)
	lookalike := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "lookalike", Labels: map[string]string{
			nodepod.LabelName: nodepod.NameValue, nodepod.LabelManagedBy: nodepod.ManagedByValue, nodepod.LabelNode: "cp-0"}},
		Spec:   corev1.PodSpec{NodeName: "cp-0", Containers: []corev1.Container{{Name: "app", Image: "tenant/app"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	require.NoError(t, pc.c.Create(t.Context(), lookalike))
	require.NoError(t, pc.c.Status().Update(t.Context(), lookalike))
	requireWaiting(t, pc.call(updateReq("w-0", "docker:////cp-0", "v1.36.1", false)), "started worker upgrade")
	var got corev1.Pod
	require.NoError(t, pc.c.Get(t.Context(), client.ObjectKeyFromObject(lookalike), &got), "not ours to delete either")
}

// TestUpdateMachineImagePerVersion: each update's pod runs the bundle of
// its target version; a version without one fails before anything runs.
func TestUpdateMachineImagePerVersion(t *testing.T) {
	images := capi.ImagesByVersion{"v1.36.1": "registry.example/upgrader:v1.36.1", "v1.36.2": "registry.example/upgrader:v1.36.2"}
	call := func(pc *podsCluster, v string) runtimehooksv1.UpdateMachineResponse {
		workload := func(context.Context, types.NamespacedName) (client.Client, error) { return pc.c, nil }
		u, err := capi.NewMachineUpdater(workload, capi.UpdaterOptions{SkipDrain: true, Images: images})
		require.NoError(t, err, "no nodepod.WithImage needed: the map has them")
		var resp runtimehooksv1.UpdateMachineResponse
		u.UpdateMachine(t.Context(), updateReq("w-0", "docker:////cp-0", v, false), &resp)
		return resp
	}
	pc := newPodsCluster(t)
	requireWaiting(t, call(pc, "v1.36.2"), "started worker upgrade")
	pod := pc.onlyPod()
	for _, ct := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		require.Equal(t, "registry.example/upgrader:v1.36.2", ct.Image, ct.Name)
	}

	pc = newPodsCluster(t)
	resp := call(pc, "v1.36.3")
	require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
	require.Contains(t, resp.Message, "no upgrader image for v1.36.3 (have: v1.36.1, v1.36.2)")
	require.Empty(t, pc.pods())

	workload := func(context.Context, types.NamespacedName) (client.Client, error) { return nil, nil }
	_, err := capi.NewMachineUpdater(workload, capi.UpdaterOptions{SkipDrain: true, Images: capi.ImagesByVersion{"v1.36": "img"}})
	require.ErrorIs(t, err, capi.ErrInvalidOption)
}

// TestUpdateMachineDeadlines: an update that outlives its deadline, or a
// node NotReady for too long during it, is a Failure naming it, not an
// endless "still working"; the update itself is not interrupted.
func TestUpdateMachineDeadlines(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	newCall := func(pc *podsCluster, clk *clocktesting.FakeClock) func() runtimehooksv1.UpdateMachineResponse {
		workload := func(context.Context, types.NamespacedName) (client.Client, error) { return pc.c, nil }
		return func() runtimehooksv1.UpdateMachineResponse {
			u, err := capi.NewMachineUpdater(workload, capi.UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{nodepod.WithImage("r/u:1")}, Clock: clk, UpdateTimeout: time.Hour, NotReadyTimeout: 10 * time.Minute})
			require.NoError(t, err)
			var resp runtimehooksv1.UpdateMachineResponse
			u.UpdateMachine(t.Context(), updateReq("w-0", "docker:////cp-0", "v1.36.1", false), &resp)
			return resp
		}
	}

	t.Run("the update outlives its deadline, then finishes", func(t *testing.T) {
		pc := newPodsCluster(t)
		clk := clocktesting.NewFakeClock(start)
		call := newCall(pc, clk)
		requireWaiting(t, call(), "started worker upgrade")
		clk.Step(59 * time.Minute)
		requireWaiting(t, call(), "upgrading node cp-0")
		clk.Step(2 * time.Minute)
		resp := call()
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
		require.Contains(t, resp.Message, observe.FailureUpdateTimeout)
		require.Contains(t, resp.Message, "not done after 1h1m0s (deadline 1h0m0s)")
		finishPod(t, t.Context(), pc.c, pc.onlyPod(), "", 0)
		pc.kubelet("v1.36.1")
		requireDone(t, call())
	})

	t.Run("the node stays NotReady", func(t *testing.T) {
		pc := newPodsCluster(t)
		clk := clocktesting.NewFakeClock(start)
		call := newCall(pc, clk)
		requireWaiting(t, call(), "started worker upgrade")
		n := pc.node()
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown",
			Message: "Kubelet stopped posting node status.", LastTransitionTime: metav1.NewTime(start.Add(time.Minute))}}
		require.NoError(t, pc.c.Status().Update(t.Context(), n))
		clk.Step(10 * time.Minute)
		requireWaiting(t, call(), "upgrading node cp-0")
		clk.Step(2 * time.Minute)
		resp := call()
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
		require.Contains(t, resp.Message, observe.FailureNodeNotReady)
		require.Contains(t, resp.Message, "Kubelet stopped posting node status.")
	})
}

// uidRecorder keeps the UID of every object an Event is recorded on.
type uidRecorder struct{ uids []types.UID }

func (r *uidRecorder) Eventf(regarding runtime.Object, _ runtime.Object, _, _, _, _ string, _ ...interface{}) {
	if o, ok := regarding.(metav1.Object); ok {
		r.uids = append(r.uids, o.GetUID())
	}
}

// TestUpdateMachineChecksTheRequestAgainstTheMachine: with a management
// cluster reader, a request is acted on only if the live Machine exists,
// Cluster API marked it for an in-place update, and it names the same
// cluster, providerID and version, and carries the Machine's KubeadmConfig
// spec; every mismatch gets the same answer; its Events carry the
// Machine's UID.
func TestUpdateMachineChecksTheRequestAgainstTheMachine(t *testing.T) {
	mismatch := "in-place update failed: " + observe.FailureRequestMismatch + ": the request does not match a Machine that Cluster API is updating in place; the extension's log says why"
	withArgs := func(args ...string) func(*bootstrapv1.KubeadmConfigSpec) {
		return func(s *bootstrapv1.KubeadmConfigSpec) {
			for _, a := range args {
				n, v, _ := strings.Cut(a, "=")
				s.JoinConfiguration.NodeRegistration.KubeletExtraArgs = append(s.JoinConfiguration.NodeRegistration.KubeletExtraArgs, bootstrapv1.Arg{Name: n, Value: ptrTo(v)})
			}
		}
	}
	for _, tc := range []struct {
		name  string
		live  func(*liveMachine)
		req   func(*testing.T, *runtimehooksv1.UpdateMachineRequest)
		match bool
	}{
		{name: "the live objects", match: true},
		{name: "the live KubeadmConfig's kubelet arguments", match: true,
			live: func(l *liveMachine) { withArgs("max-pods=200")(&l.kc.Spec) },
			req: func(t *testing.T, r *runtimehooksv1.UpdateMachineRequest) {
				r.Desired.BootstrapConfig = kubeadmConfigRaw(t, "cp-0", withArgs("max-pods=200"))
			}},
		{name: "no such Machine", req: func(_ *testing.T, r *runtimehooksv1.UpdateMachineRequest) { r.Desired.Machine.Name = "w-0" }},
		{name: "not asked for by Cluster API", live: func(l *liveMachine) { l.machine.Annotations = nil }},
		{name: "another node", live: func(l *liveMachine) { l.machine.Spec.ProviderID = "docker:////elsewhere" }},
		{name: "another version", live: func(l *liveMachine) { l.machine.Spec.Version = "v1.36.2" }},
		{name: "kubelet arguments the KubeadmConfig does not have",
			req: func(t *testing.T, r *runtimehooksv1.UpdateMachineRequest) {
				r.Desired.BootstrapConfig = kubeadmConfigRaw(t, "cp-0", withArgs("v=9"))
			}},
		{name: "a KubeadmConfig Cluster API has not marked", live: func(l *liveMachine) { l.kc.Annotations = nil }},
		{name: "no such KubeadmConfig", live: func(l *liveMachine) { l.kc.Name = "gone" }},
		{name: "another KubeadmConfig", req: func(t *testing.T, r *runtimehooksv1.UpdateMachineRequest) {
			r.Desired.BootstrapConfig = kubeadmConfigRaw(t, "other", nil)
		}},
		{name: "a Machine without a KubeadmConfig", live: func(l *liveMachine) {
			l.machine.Spec.Bootstrap.ConfigRef = clusterv1.ContractVersionedObjectReference{}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pc := newPodsCluster(t)
			live := newLiveMachine(false)
			req := live.request(t)
			if tc.live != nil {
				tc.live(live)
			}
			if tc.req != nil {
				tc.req(t, req)
			}
			rec := &uidRecorder{}
			workload := func(context.Context, types.NamespacedName) (client.Client, error) { return pc.c, nil }
			u, err := capi.NewMachineUpdater(workload, capi.UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{nodepod.WithImage("r/u:1")}, ManagementReader: live.client(t), EventRecorder: rec})
			require.NoError(t, err)
			var resp runtimehooksv1.UpdateMachineResponse
			u.UpdateMachine(t.Context(), req, &resp)
			if tc.match {
				requireWaiting(t, resp, "started worker upgrade")
				require.Equal(t, []types.UID{"uid-cp-0"}, rec.uids, "Events on the live Machine")
				return
			}
			require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
			require.Equal(t, mismatch, resp.Message)
			require.Empty(t, pc.pods(), "nothing done for a request the cluster does not back")
			require.Nil(t, pc.record())
			require.Empty(t, rec.uids, "no Event")
		})
	}
}

// kubeadmConfigRaw is a request's KubeadmConfig named name.
func kubeadmConfigRaw(t *testing.T, name string, mutate func(*bootstrapv1.KubeadmConfigSpec)) runtime.RawExtension {
	t.Helper()
	kc := newLiveMachine(false).kc
	kc.Name = name
	if mutate != nil {
		mutate(&kc.Spec)
	}
	b, err := json.Marshal(kc)
	require.NoError(t, err)
	return runtime.RawExtension{Raw: b}
}

// TestUpdateMachineSkipsTheSnapshotOfExternalEtcd: with external etcd no
// control plane node holds an etcd member, so the first control plane's
// plan has no etcd snapshot step; it still runs `kubeadm upgrade apply`.
// External etcd is read from the desired KubeadmConfig or, since
// KubeadmControlPlane gives a joined control plane's KubeadmConfig no
// ClusterConfiguration, from kube-system/kubeadm-config.
func TestUpdateMachineSkipsTheSnapshotOfExternalEtcd(t *testing.T) {
	external := bootstrapv1.Etcd{External: bootstrapv1.ExternalEtcd{
		Endpoints: []string{"https://etcd.example:2379"}, CAFile: "/etc/etcd/ca.crt", CertFile: "/etc/etcd/client.crt", KeyFile: "/etc/etcd/client.key"}}
	for _, tc := range []struct {
		name        string
		machineEtcd *bootstrapv1.Etcd // the Machine's KubeadmConfig's clusterConfiguration.etcd; nil: none
		configMap   string            // kubeadm-config's ClusterConfiguration
		snapshot    bool
	}{
		{name: "external in the KubeadmConfig", machineEtcd: &external, configMap: "kubernetesVersion: v1.36.1\n"},
		{name: "external in kubeadm-config only", configMap: "kubernetesVersion: v1.36.1\netcd:\n  external:\n    endpoints:\n    - https://etcd.example:2379\n"},
		{name: "stacked", configMap: "kubernetesVersion: v1.36.1\netcd:\n  local:\n    dataDir: /var/lib/etcd\n", snapshot: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pc := newPodsCluster(t)
			ctx := t.Context()
			var cm corev1.ConfigMap
			require.NoError(t, pc.c.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: "kubeadm-config"}, &cm))
			cm.Data["ClusterConfiguration"] = tc.configMap
			require.NoError(t, pc.c.Update(ctx, &cm))
			var n corev1.Node
			require.NoError(t, pc.c.Get(ctx, client.ObjectKey{Name: "cp-0"}, &n))
			n.Labels = map[string]string{capi.LabelControlPlaneNode: ""}
			require.NoError(t, pc.c.Update(ctx, &n))
			req := updateReq("cp-0", "docker:////cp-0", "v1.36.1", true)
			if tc.machineEtcd != nil {
				cfg := &bootstrapv1.KubeadmConfig{TypeMeta: metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfig"},
					Spec: bootstrapv1.KubeadmConfigSpec{ClusterConfiguration: bootstrapv1.ClusterConfiguration{Etcd: *tc.machineEtcd}}}
				raw, err := json.Marshal(cfg)
				require.NoError(t, err)
				req.Desired.BootstrapConfig = runtime.RawExtension{Raw: raw}
			}
			requireWaiting(t, pc.call(req), "started first-control-plane upgrade of node cp-0")
			pods := pc.pods()
			require.Len(t, pods, 1)
			steps := pods[0].Annotations[nodepod.AnnotationSteps]
			require.Equal(t, tc.snapshot, strings.Contains(steps, kubeadm.StepEtcdSnapshot), "steps: %s", steps)
			require.Contains(t, steps, kubeadm.StepKubeadmUpgrade)
		})
	}
}
