package capi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/nodeexec/drain"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// appPod creates a ReplicaSet-owned pod on node and marks it Running and
// Ready (envtest has no kubelet).
func appPod(t *testing.T, cs kubernetes.Interface, ns, name, node string, labels map[string]string) {
	t.Helper()
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: "11111111-1111-1111-1111-111111111111", Controller: ptr.To(true)}
	p, err := cs.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, OwnerReferences: []metav1.OwnerReference{owner}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.local/app:1"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	_, err = cs.CoreV1().Pods(ns).UpdateStatus(t.Context(), p, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// allowDisruptions plays the disruption controller, which envtest does not
// run: the Eviction API reads the budget's status.
func allowDisruptions(t *testing.T, cs kubernetes.Interface, ns, name string, allowed int32) {
	t.Helper()
	pdb, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	pdb.Status = policyv1.PodDisruptionBudgetStatus{
		ObservedGeneration: pdb.Generation, DisruptionsAllowed: allowed,
		CurrentHealthy: 2, DesiredHealthy: 2, ExpectedPods: 2, DisruptedPods: map[string]metav1.Time{},
	}
	_, err = cs.PolicyV1().PodDisruptionBudgets(ns).UpdateStatus(t.Context(), pdb, metav1.UpdateOptions{})
	require.NoError(t, err)
}

func podExists(t *testing.T, cs kubernetes.Interface, ns, name string) bool {
	t.Helper()
	_, err := cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	require.NoError(t, err)
	return true
}

// recorded drains the fake recorder.
func recorded(r *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// histogram returns the sample count and sum of a histogram in reg.
func histogram(t *testing.T, reg prometheus.Gatherer, name string) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0, 0
}

func record(t *testing.T, n *corev1.Node) observe.UpdateRecord {
	t.Helper()
	raw, ok := n.Annotations[observe.AnnotationInPlaceUpdate]
	require.True(t, ok, "node %s has no update record", n.Name)
	var r observe.UpdateRecord
	require.NoError(t, json.Unmarshal([]byte(raw), &r))
	return r
}

// TestUpdateMachineDrainsFirst drives a drain blocked by a
// PodDisruptionBudget past its deadline and then to completion, against a
// real kube-apiserver (the real Eviction API), with a new MachineUpdater
// for every call: a restarted extension keeps the drain's start, and so its
// deadline, from the Node.
func TestUpdateMachineDrainsFirst(t *testing.T) {
	env := apiserver.StartForTest(t)
	c := env.Client
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	for _, ns := range []string{"apps", nodepod.DefaultNamespace} {
		require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	node := createNode(t, ctx, c, "md-0-a", "docker:////md-0-a", "v1.35.4")
	web := map[string]string{"app": "web"}
	appPod(t, cs, "apps", "web-0", "md-0-a", web)
	appPod(t, cs, "apps", "web-1", "md-0-a", web)
	appPod(t, cs, "apps", "free", "md-0-a", map[string]string{"app": "free"})
	require.NoError(t, c.Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web-pdb"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(2)), Selector: &metav1.LabelSelector{MatchLabels: web}},
	}))
	allowDisruptions(t, cs, "apps", "web-pdb", 0)

	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	recorder := events.NewFakeRecorder(100)
	reg := prometheus.NewRegistry()
	metrics, err := capi.NewMetrics(reg, capi.MetricsOptions{Clock: clk})
	require.NoError(t, err)
	workload := func(context.Context, types.NamespacedName) (client.Client, error) { return c, nil }
	clientset := func(context.Context, types.NamespacedName) (kubernetes.Interface, error) { return cs, nil }
	call := func(req *runtimehooksv1.UpdateMachineRequest, opts ...updOpt) runtimehooksv1.UpdateMachineResponse {
		t.Helper()
		// A new updater per call: nothing survives in memory.
		u, err := capi.NewMachineUpdater(workload, updaterOpts(append([]updOpt{
			withWorkloadClientset(clientset),
			withoutPrePull(), // no kubelet here to run the pre-pull pod (prepull_test.go)
			withPodOptions(nodepod.WithImage("registry.example/upgrader:v1.36.1")),
			withRetryAfter(5),
			withDrainAttempt(2 * time.Second),
			withDrainOptions(drain.WithGracePeriod(0), drain.WithEvictionRetryDelay(200*time.Millisecond)),
			withUpdaterClock(clk),
			func(o *capi.UpdaterOptions) { o.EventRecorder = recorder },
			withUpdaterMetrics(metrics),
		}, opts...)...))
		require.NoError(t, err)
		var resp runtimehooksv1.UpdateMachineResponse
		u.UpdateMachine(ctx, req, &resp)
		return resp
	}
	get := func(n *corev1.Node) *corev1.Node {
		t.Helper()
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(n), n))
		return n
	}
	upgraderPods := func(node string) []corev1.Pod {
		t.Helper()
		var pods corev1.PodList
		require.NoError(t, c.List(ctx, &pods, client.InNamespace(nodepod.DefaultNamespace), client.MatchingLabels{nodepod.LabelNode: node}))
		return pods.Items
	}
	inProgress := func(phase string, n int) string {
		out := "# HELP upgradekit_inplace_machines_in_progress Machines whose last UpdateMachine answer from this process was in progress, by phase.\n# TYPE upgradekit_inplace_machines_in_progress gauge\n"
		for _, p := range []string{observe.ReasonDrainBlocked, observe.ReasonDraining, observe.ReasonFailed, observe.ReasonPending, observe.ReasonUpgrading, observe.ReasonWaitingForKubelet} {
			v := 0
			if p == phase {
				v = n
			}
			out += fmt.Sprintf("upgradekit_inplace_machines_in_progress{phase=%q} %d\n", p, v)
		}
		return out
	}
	req := updateReq("md-0-a", "docker:////md-0-a", "v1.36.1", false)

	// 1. Cordon, evict what may go; the PDB holds web-0 and web-1.
	resp := call(req)
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
	require.Equal(t, int32(5), resp.RetryAfterSeconds)
	require.Contains(t, resp.Message, "draining node md-0-a for 0s (deadline 30m0s): PDB apps/web-pdb (disruptionsAllowed=0")
	require.Contains(t, resp.Message, "holds apps/web-0, apps/web-1")
	t.Logf("blocked drain answer: %s", resp.Message)
	require.False(t, podExists(t, cs, "apps", "free"), "the unprotected pod was evicted")
	require.True(t, podExists(t, cs, "apps", "web-0"))
	require.Empty(t, upgraderPods("md-0-a"), "no upgrade before the node is drained")
	get(node)
	require.True(t, node.Spec.Unschedulable)
	require.Contains(t, node.Annotations[drain.AnnotationCordon], capi.DefaultCordonOwner)
	rec := record(t, node)
	require.Equal(t, "v1.36.1", rec.Version)
	require.Equal(t, "default/md-0-a", rec.Machine)
	require.True(t, rec.Started.Time.Equal(start))
	require.NotNil(t, rec.DrainStarted)
	require.True(t, rec.DrainStarted.Time.Equal(start))
	require.Nil(t, rec.Drained)
	cond := observe.InPlaceUpdateCondition(node)
	require.NotNil(t, cond)
	require.Equal(t, observe.ReasonDrainBlocked, cond.Reason)
	require.Equal(t, corev1.ConditionTrue, cond.Status)
	require.Contains(t, cond.Message, "apps/web-pdb")
	require.Equal(t, []string{
		"Normal InPlaceUpdateStarted In-place update of node md-0-a from v1.35.4 to v1.36.1 started",
		"Warning NodeDrainBlocked " + cond.Message,
	}, recorded(recorder))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(inProgress(observe.ReasonDrainBlocked, 1)), observe.MetricMachinesInProgress))

	// 2. Ten minutes later, a restarted extension: still blocked, same
	// deadline, no second event.
	clk.Step(10 * time.Minute)
	resp = call(req)
	require.Equal(t, int32(5), resp.RetryAfterSeconds)
	require.Contains(t, resp.Message, "draining node md-0-a for 10m0s (deadline 30m0s)")
	require.Empty(t, recorded(recorder))

	// 3. Past the deadline: Failure naming the PDB; the node stays cordoned.
	clk.Step(21 * time.Minute)
	resp = call(req)
	require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status)
	require.Contains(t, resp.Message, "in-place update failed: DrainTimeout: node md-0-a: drain not finished after 31m0s (deadline 30m0s): PDB apps/web-pdb")
	require.Contains(t, resp.Message, "holds apps/web-0, apps/web-1")
	t.Logf("past the deadline: %s", resp.Message)
	require.True(t, get(node).Spec.Unschedulable)
	cond = observe.InPlaceUpdateCondition(node)
	require.Equal(t, observe.ReasonFailed, cond.Reason)
	require.Equal(t, corev1.ConditionFalse, cond.Status)
	evs := recorded(recorder)
	require.Len(t, evs, 1)
	require.Contains(t, evs[0], "Warning InPlaceUpdateFailed DrainTimeout: node md-0-a: drain not finished")
	require.Equal(t, 1.0, counter(t, reg, observe.MetricFailures, "reason", observe.FailureDrainTimeout))

	// CAPI retries the failed machine: the same failure is not counted twice.
	resp = call(req)
	require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status)
	require.Empty(t, recorded(recorder))
	require.Equal(t, 1.0, counter(t, reg, observe.MetricFailures, "reason", observe.FailureDrainTimeout))

	// 4. The budget is relaxed: the drain finishes and the upgrader starts.
	allowDisruptions(t, cs, "apps", "web-pdb", 2)
	resp = call(req)
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
	require.Contains(t, resp.Message, "started worker upgrade of node md-0-a from v1.35.4 to v1.36.1")
	require.False(t, podExists(t, cs, "apps", "web-0"))
	require.False(t, podExists(t, cs, "apps", "web-1"))
	pods := upgraderPods("md-0-a")
	require.Len(t, pods, 1)
	require.Equal(t, observe.ReasonUpgrading, observe.InPlaceUpdateCondition(get(node)).Reason)
	require.NotNil(t, record(t, node).Drained)
	require.Equal(t, []string{"Normal NodeDrained Drained node md-0-a in 31m0s: 2 pod(s) evicted in the last attempt"}, recorded(recorder))

	// 5. The plan runs; the kubelet reports the version: uncordon, done.
	finishPod(t, ctx, c, &pods[0], "", 0)
	resp = call(req)
	require.Equal(t, int32(5), resp.RetryAfterSeconds)
	require.Equal(t, observe.ReasonWaitingForKubelet, observe.InPlaceUpdateCondition(get(node)).Reason)
	require.True(t, node.Spec.Unschedulable, "still cordoned until the kubelet reports the version")

	clk.Step(4 * time.Minute)
	setKubelet(t, ctx, c, node, "v1.36.1")
	resp = call(req)
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status)
	require.Equal(t, int32(0), resp.RetryAfterSeconds, resp.Message)
	require.Equal(t, "node md-0-a runs kubelet v1.36.1; in-place update done in 35m0s", resp.Message)
	get(node)
	require.False(t, node.Spec.Unschedulable)
	require.NotContains(t, node.Annotations, drain.AnnotationCordon)
	require.NotContains(t, node.Annotations, observe.AnnotationInPlaceUpdate)
	cond = observe.InPlaceUpdateCondition(node)
	require.Equal(t, observe.ReasonSucceeded, cond.Reason)
	require.Equal(t, corev1.ConditionFalse, cond.Status)
	require.Equal(t, []string{"Normal InPlaceUpdateSucceeded Node md-0-a runs kubelet v1.36.1; the in-place update took 35m0s"}, recorded(recorder))
	count, sum := histogram(t, reg, observe.MetricUpdateDuration)
	require.Equal(t, uint64(1), count)
	require.Equal(t, (35 * time.Minute).Seconds(), sum)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(inProgress("", 0)), observe.MetricMachinesInProgress))

	// Asked again: done, nothing recorded twice.
	resp = call(req)
	require.Equal(t, int32(0), resp.RetryAfterSeconds)
	require.Empty(t, recorded(recorder))
	count, _ = histogram(t, reg, observe.MetricUpdateDuration)
	require.Equal(t, uint64(1), count)

	t.Run("a node cordoned by someone else stays cordoned", func(t *testing.T) {
		n := createNode(t, ctx, c, "md-0-b", "docker:////md-0-b", "v1.35.4")
		n.Spec.Unschedulable = true // an operator's kubectl cordon
		require.NoError(t, c.Update(ctx, n))
		req := updateReq("md-0-b", "docker:////md-0-b", "v1.36.1", false)
		resp := call(req)
		require.Contains(t, resp.Message, "started worker upgrade of node md-0-b", "nothing to evict: drained at once")
		pods := upgraderPods("md-0-b")
		require.Len(t, pods, 1)
		finishPod(t, ctx, c, &pods[0], "", 0)
		setKubelet(t, ctx, c, n, "v1.36.1")
		resp = call(req)
		require.Equal(t, int32(0), resp.RetryAfterSeconds, resp.Message)
		get(n)
		require.True(t, n.Spec.Unschedulable, "the operator's cordon is not ours to lift")
		require.NotContains(t, n.Annotations, drain.AnnotationCordon, "our record is gone")
		recorded(recorder)
	})

	t.Run("a cordon taken over during the update stays", func(t *testing.T) {
		n := createNode(t, ctx, c, "md-0-t", "docker:////md-0-t", "v1.35.4")
		req := updateReq("md-0-t", "docker:////md-0-t", "v1.36.1", false)
		resp := call(req)
		require.Contains(t, resp.Message, "started worker upgrade of node md-0-t")
		require.True(t, get(n).Spec.Unschedulable, "cordoned by us")
		// An operator wants the node kept out of scheduling after the
		// update: the cordon record now names them. (A plain kubectl
		// cordon of a node already cordoned changes nothing the API can
		// show, so it cannot be told from ours; the record can.)
		n.Annotations[drain.AnnotationCordon] = `{"owner":"oncall","priorUnschedulable":true}`
		require.NoError(t, c.Update(ctx, n))
		pods := upgraderPods("md-0-t")
		require.Len(t, pods, 1)
		finishPod(t, ctx, c, &pods[0], "", 0)
		setKubelet(t, ctx, c, n, "v1.36.1")
		resp = call(req)
		require.Equal(t, int32(0), resp.RetryAfterSeconds, resp.Message)
		get(n)
		require.True(t, n.Spec.Unschedulable, "the operator's cordon, taken over mid-update, is not ours to lift")
		require.Contains(t, n.Annotations[drain.AnnotationCordon], "oncall")
		recorded(recorder)
	})

	t.Run("WithoutDrain leaves the node and its pods alone", func(t *testing.T) {
		n := createNode(t, ctx, c, "md-0-c", "docker:////md-0-c", "v1.35.4")
		appPod(t, cs, "apps", "web-2", "md-0-c", web)
		allowDisruptions(t, cs, "apps", "web-pdb", 0)
		resp := call(updateReq("md-0-c", "docker:////md-0-c", "v1.36.1", false), withoutDrain())
		require.Contains(t, resp.Message, "started worker upgrade of node md-0-c")
		require.False(t, get(n).Spec.Unschedulable)
		require.True(t, podExists(t, cs, "apps", "web-2"))
		require.Nil(t, record(t, n).DrainStarted)
		recorded(recorder)
	})

	t.Run("a pod that opted out of disruption blocks the drain, named", func(t *testing.T) {
		n := createNode(t, ctx, c, "md-0-d", "docker:////md-0-d", "v1.35.4")
		appPod(t, cs, "apps", "precious", "md-0-d", nil)
		p, err := cs.CoreV1().Pods("apps").Get(ctx, "precious", metav1.GetOptions{})
		require.NoError(t, err)
		p.Annotations = map[string]string{drain.DefaultOptOutAnnotation: "true"}
		_, err = cs.CoreV1().Pods("apps").Update(ctx, p, metav1.UpdateOptions{})
		require.NoError(t, err)
		resp := call(updateReq("md-0-d", "docker:////md-0-d", "v1.36.1", false))
		require.Equal(t, int32(5), resp.RetryAfterSeconds)
		require.Contains(t, resp.Message, "karpenter.sh/do-not-disrupt=true")
		require.Contains(t, resp.Message, "apps/precious")
		require.Equal(t, observe.ReasonDrainBlocked, observe.InPlaceUpdateCondition(get(n)).Reason)
		require.Empty(t, upgraderPods("md-0-d"))
	})

	t.Run("another owner's cordon record blocks, then fails at the deadline", func(t *testing.T) {
		n := createNode(t, ctx, c, "md-0-e", "docker:////md-0-e", "v1.35.4")
		_, err := drain.Cordon(ctx, cs, "md-0-e", "kured")
		require.NoError(t, err)
		req := updateReq("md-0-e", "docker:////md-0-e", "v1.36.1", false)
		resp := call(req)
		require.Equal(t, int32(5), resp.RetryAfterSeconds)
		require.Contains(t, resp.Message, `node md-0-e is cordoned by "kured"`)
		require.Equal(t, observe.ReasonDrainBlocked, observe.InPlaceUpdateCondition(get(n)).Reason)
		clk.Step(time.Hour)
		resp = call(req)
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status)
		require.Contains(t, resp.Message, "DrainTimeout")
	})
}

// counter returns the value of the counter name{label=value} in reg.
func counter(t *testing.T, reg prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no metric %s{%s=%q}", name, label, value)
	return 0
}

func TestNewMachineUpdaterRefusesBadDrainOptions(t *testing.T) {
	workload := func(context.Context, types.NamespacedName) (client.Client, error) { return nil, nil }
	clientset := func(context.Context, types.NamespacedName) (kubernetes.Interface, error) { return nil, nil }
	cases := []struct {
		name string
		opts []updOpt
		want string
	}{
		{"drain needs a clientset", nil, "UpdaterOptions.Clientset: draining (on by default) needs it"},
		{"attempt not negative", []updOpt{withWorkloadClientset(clientset), withDrainAttempt(-time.Second)}, "UpdaterOptions.DrainAttempt: -1s"},
		{"a pod that can never be built", []updOpt{withoutDrain()}, "UpdaterOptions.PodOptions: upgrader pod: nodepod: invalid pod builder options: image is required"},
		{"pre-pull timeout not negative", []updOpt{withWorkloadClientset(clientset), withPrePullTimeout(-time.Second)}, "UpdaterOptions.PrePullTimeout: -1s: must not be negative"},
		{"retry after whole seconds", []updOpt{withoutDrain(), func(o *capi.UpdaterOptions) { o.RetryAfter = 1500 * time.Millisecond }}, "UpdaterOptions.RetryAfter: 1.5s: must be whole seconds"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := capi.NewMachineUpdater(workload, updaterOpts(tc.opts...))
			require.ErrorIs(t, err, capi.ErrInvalidOption)
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, err := capi.NewMachineUpdater(workload, capi.UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{nodepod.WithImage("r/u:1")}})
	require.NoError(t, err, "no clientset needed without draining")
}
