package capi_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/nodeexec/drain"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// prePullWorld is one node with an app pod on a real API server, and a
// kubelet played by the test: it pulls from a simulator.Registry and runs the
// pre-pull pod (its command exits 0 once the image is pulled).
type prePullWorld struct {
	t        *testing.T
	c        client.Client
	cs       kubernetes.Interface
	clk      *clocktesting.FakeClock
	registry *simulator.Registry
	node     *corev1.Node
	req      *runtimehooksv1.UpdateMachineRequest
}

const prePullImage = "registry.example/upgrader:v1.36.1"

// newPrePullWorld adds node (and its app pod, apps/<node>) to env.
func newPrePullWorld(t *testing.T, env *apiserver.Env, node string, registry *simulator.Registry) *prePullWorld {
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	w := &prePullWorld{t: t, c: env.Client, cs: cs, clk: clocktesting.NewFakeClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)), registry: registry,
		node: createNode(t, t.Context(), env.Client, node, "docker:////"+node, "v1.35.4"),
		req:  updateReq(node, "docker:////"+node, "v1.36.1", false)}
	appPod(t, cs, "apps", node, node, map[string]string{"app": "web"})
	return w
}

// call answers one UpdateMachine call with a new MachineUpdater: nothing
// survives in memory, as with a restarted extension.
func (w *prePullWorld) call(opts ...updOpt) runtimehooksv1.UpdateMachineResponse {
	w.t.Helper()
	u, err := capi.NewMachineUpdater(func(context.Context, types.NamespacedName) (client.Client, error) { return w.c, nil },
		updaterOpts(append([]updOpt{
			withWorkloadClientset(func(context.Context, types.NamespacedName) (kubernetes.Interface, error) { return w.cs, nil }),
			withPodOptions(nodepod.WithImage(prePullImage), nodepod.WithRunnerCommand("/upgrader", "run"),
				nodepod.WithImagePullSecrets("regcred"), nodepod.WithImagePullPolicy(corev1.PullAlways)),
			withUpdaterClock(w.clk),
			withDrainAttempt(2 * time.Second),
			withDrainOptions(drain.WithGracePeriod(0)),
		}, opts...)...))
	require.NoError(w.t, err)
	var resp runtimehooksv1.UpdateMachineResponse
	u.UpdateMachine(w.t.Context(), w.req, &resp)
	return resp
}

// podsOnNode lists the pods of sel in the upgrader namespace bound to the
// world's node.
func (w *prePullWorld) podsOnNode(sel labels.Selector) []corev1.Pod {
	w.t.Helper()
	var list corev1.PodList
	require.NoError(w.t, w.c.List(w.t.Context(), &list, client.InNamespace(nodepod.DefaultNamespace), client.MatchingLabelsSelector{Selector: sel}))
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.Spec.NodeName == w.node.Name {
			out = append(out, p)
		}
	}
	return out
}

func (w *prePullWorld) prePullPods() []corev1.Pod { return w.podsOnNode(nodepod.PrePullSelector()) }

func (w *prePullWorld) upgraderPods() []corev1.Pod { return w.podsOnNode(nodepod.Selector()) }

// kubelet plays one kubelet sync of the pre-pull pods: pull, then run the
// command, which exits 0; the deletion of a deleted pod is confirmed.
func (w *prePullWorld) kubelet() {
	w.t.Helper()
	for _, p := range w.prePullPods() {
		if p.Spec.NodeName != w.node.Name {
			continue
		}
		if p.DeletionTimestamp != nil {
			require.NoError(w.t, client.IgnoreNotFound(w.c.Delete(w.t.Context(), &p, client.GracePeriodSeconds(0))))
			continue
		}
		if p.Status.Phase == corev1.PodSucceeded {
			continue
		}
		st, ok := w.registry.PullPod(&p)
		if ok {
			st.Phase = corev1.PodSucceeded
			st.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}
		}
		p.Status = st
		require.NoError(w.t, w.c.Status().Update(w.t.Context(), &p))
	}
}

func (w *prePullWorld) requireUndisturbed() {
	w.t.Helper()
	n := &corev1.Node{}
	require.NoError(w.t, w.c.Get(w.t.Context(), client.ObjectKeyFromObject(w.node), n))
	require.False(w.t, n.Spec.Unschedulable, "the node is never cordoned")
	require.NotContains(w.t, n.Annotations, drain.AnnotationCordon)
	require.True(w.t, podExists(w.t, w.cs, "apps", w.node.Name), "the node's pods are never evicted")
	require.Empty(w.t, w.upgraderPods(), "no upgrader pod")
}

// TestUpdateMachinePrePullsTheUpgraderImage: before the node is cordoned,
// a pre-pull pod pinned to it proves the upgrader image pulls and starts
// there. An image that does not pull is a Failure naming the kubelet's
// pull error within the pre-pull timeout, on a node never cordoned nor
// drained, with no upgrader pod; one that pulls has its pre-pull pod
// deleted and the update goes on to the cordon, the drain and the
// upgrader pod. Every call is a new MachineUpdater: the pre-pull (its pod,
// its start) is resumed from the cluster, never repeated.
func TestUpdateMachinePrePullsTheUpgraderImage(t *testing.T) {
	// One API server, a node per case.
	env := apiserver.StartForTest(t)
	for _, ns := range []string{"apps", nodepod.DefaultNamespace} {
		require.NoError(t, env.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	t.Run("an image that does not pull fails the update before the cordon", func(t *testing.T) {
		w := newPrePullWorld(t, env, "md-0-a", simulator.NewRegistry()) // the registry does not hold the image
		resp := w.call()
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
		require.Positive(t, resp.RetryAfterSeconds)
		require.Contains(t, resp.Message, "pulling the upgrader image "+prePullImage+" on node "+w.node.Name+" before cordoning it")
		pods := w.prePullPods()
		require.Len(t, pods, 1)
		pp := pods[0]
		require.Equal(t, "md-0-a", pp.Spec.NodeName, "pinned to the node")
		require.Equal(t, []corev1.LocalObjectReference{{Name: "regcred"}}, pp.Spec.ImagePullSecrets, "the upgrader pod's pull secrets")
		require.Equal(t, corev1.PullAlways, pp.Spec.Containers[0].ImagePullPolicy, "the upgrader pod's pull policy")
		require.Equal(t, prePullImage, pp.Spec.Containers[0].Image)
		require.Equal(t, []string{"/upgrader", "version"}, pp.Spec.Containers[0].Command)
		require.Contains(t, pp.Spec.Tolerations, corev1.Toleration{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
		require.NoError(t, w.c.Get(t.Context(), client.ObjectKeyFromObject(w.node), w.node))
		rec := record(t, w.node)
		require.NotNil(t, rec.PrePullStarted)
		require.True(t, rec.PrePullStarted.Time.Equal(w.clk.Now()))
		require.Nil(t, rec.DrainStarted, "no drain before the image is proven")
		w.requireUndisturbed()

		w.kubelet() // ErrImagePull
		w.clk.Step(time.Minute)
		resp = w.call()
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
		require.Contains(t, resp.Message, "ErrImagePull: rpc error: code = NotFound")
		require.Contains(t, resp.Message, "(for 1m0s; Failure after 5m0s)")
		cond := observe.InPlaceUpdateCondition(w.getNode())
		require.Equal(t, observe.ReasonPending, cond.Reason)
		require.Contains(t, cond.Message, "ErrImagePull")

		w.kubelet() // ImagePullBackOff
		w.clk.Step(3 * time.Minute)
		resp = w.call()
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
		require.Contains(t, resp.Message, "ImagePullBackOff: ErrImagePull: rpc error: code = NotFound")
		require.Contains(t, resp.Message, "(for 4m0s; Failure after 5m0s)", "the restarted updater counts from the recorded start")
		require.Equal(t, pp.UID, w.prePullPods()[0].UID, "the same pre-pull pod, not a new one")

		w.kubelet()
		w.clk.Step(2 * time.Minute)
		resp = w.call()
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
		require.Contains(t, resp.Message, observe.FailureImagePull+": node "+w.node.Name+": upgrader image "+prePullImage+" cannot be pulled there: ImagePullBackOff")
		require.Contains(t, resp.Message, "failed to resolve reference")
		require.Contains(t, resp.Message, "the node was not cordoned")
		cond = observe.InPlaceUpdateCondition(w.getNode())
		require.Equal(t, observe.ReasonFailed, cond.Reason)
		require.Contains(t, cond.Message, "ImagePullBackOff")
		w.requireUndisturbed()

		// The image is pushed, and an operator retries: a new pre-pull
		// pod, with a new deadline, then the update goes on.
		w.registry.Add(prePullImage)
		w.req.Desired.Machine.Annotations = map[string]string{capi.AnnotationRetry: "1"}
		resp = w.call()
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
		require.Contains(t, resp.Message, "retrying the update")
		w.kubelet() // confirms the deletion of the failed pre-pull pod
		for i := 0; i < 10 && len(w.upgraderPods()) == 0; i++ {
			resp = w.call()
			require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
			w.kubelet()
		}
		require.Len(t, w.upgraderPods(), 1, "the retry pulled the image and went on: %s", resp.Message)
		require.True(t, w.getNode().Spec.Unschedulable, "cordoned once the image is proven")
	})

	t.Run("an invalid image reference fails at once", func(t *testing.T) {
		w := newPrePullWorld(t, env, "md-1-a", simulator.NewRegistry())
		bad := withPodOptions(nodepod.WithImage("registry.example/Upgrader:v1"))
		resp := w.call(bad)
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
		w.kubelet()
		resp = w.call(bad)
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
		require.Contains(t, resp.Message, observe.FailureImagePull+": node "+w.node.Name+": upgrader image registry.example/Upgrader:v1 cannot run there: InvalidImageName")
		w.requireUndisturbed()
	})

	t.Run("an image that pulls is proven, its pod deleted, then cordon, drain, upgrade", func(t *testing.T) {
		w := newPrePullWorld(t, env, "md-2-a", simulator.NewRegistry(prePullImage))
		resp := w.call()
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
		require.Len(t, w.prePullPods(), 1)
		w.requireUndisturbed()
		resp = w.call()
		require.Contains(t, resp.Message, "pulling the upgrader image", "nothing goes on before the kubelet reports the pod")
		w.requireUndisturbed()

		w.kubelet() // pulled, ran, Succeeded
		w.clk.Step(10 * time.Second)
		resp = w.call()
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
		n := w.getNode()
		rec := record(t, n)
		require.NotNil(t, rec.PrePulled)
		require.True(t, rec.PrePulled.Time.Equal(w.clk.Now()))
		require.NotNil(t, rec.DrainStarted, "the drain starts once the image is proven")
		require.True(t, rec.DrainStarted.Time.Equal(w.clk.Now()), "the drain deadline counts from the drain, not the pre-pull")
		require.True(t, n.Spec.Unschedulable, "cordoned in the same call")
		require.Empty(t, w.prePullPods(), "the pre-pull pod is deleted (at once: it ran nothing left to stop) once it succeeded")
		for i := 0; i < 10 && len(w.upgraderPods()) == 0; i++ {
			resp = w.call()
			require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
		}
		require.Len(t, w.upgraderPods(), 1, resp.Message)
		require.False(t, podExists(t, w.cs, "apps", w.node.Name), "drained")
		require.Empty(t, w.prePullPods(), "never pulled again")
	})

	t.Run("WithoutPrePull cordons at once", func(t *testing.T) {
		w := newPrePullWorld(t, env, "md-3-a", simulator.NewRegistry())
		resp := w.call(withoutPrePull())
		require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
		require.Empty(t, w.prePullPods())
		require.True(t, w.getNode().Spec.Unschedulable)
	})
}

func (w *prePullWorld) getNode() *corev1.Node {
	w.t.Helper()
	n := &corev1.Node{}
	require.NoError(w.t, w.c.Get(w.t.Context(), client.ObjectKeyFromObject(w.node), n))
	return n
}
