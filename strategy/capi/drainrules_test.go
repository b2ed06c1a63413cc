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
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/nodeexec/drain"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// TestUpdateMachineDrainFollowsClusterAPIRules: UpdateMachine's drain
// (workload cluster: a real API server) follows Cluster API's drain rules
// for the Machine, read from the management cluster: the
// MachineDrainRules of the Machine's namespace, matched against the
// Machine and its Cluster, and the pod label cluster.x-k8s.io/drain. A
// bare pod is evicted instead of blocking the drain until its deadline.
func TestUpdateMachineDrainFollowsClusterAPIRules(t *testing.T) {
	env := apiserver.StartForTest(t)
	c := env.Client
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	for name, lbl := range map[string]map[string]string{"apps": nil, "monitoring": {"team": "obs"}, nodepod.DefaultNamespace: nil} {
		require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl}}))
	}
	createNode(t, ctx, c, "cp-0", "docker:////cp-0", "v1.35.4")
	appPod(t, cs, "apps", "web", "cp-0", map[string]string{"app": "web"})
	appPod(t, cs, "apps", "cache", "cp-0", map[string]string{"app": "cache", clusterv1.PodDrainLabel: "skip"})
	appPod(t, cs, "apps", "batch", "cp-0", map[string]string{"app": "batch", clusterv1.PodDrainLabel: "wait-completed"})
	appPod(t, cs, "monitoring", "agent", "cp-0", map[string]string{"app": "agent"})
	bare := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "debug"},
		Spec:       corev1.PodSpec{NodeName: "cp-0", Containers: []corev1.Container{{Name: "c", Image: "registry.local/debug:1"}}},
	}
	require.NoError(t, c.Create(ctx, bare))

	// The management cluster: the worker Machine as Cluster API marks it,
	// its Cluster (env=prod), and a MachineDrainRule that keeps the
	// monitoring namespace's pods on prod clusters' nodes.
	live := newLiveMachine(false)
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo", Labels: map[string]string{"env": "prod"}}}
	rule := &clusterv1.MachineDrainRule{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "keep-monitoring"},
		Spec: clusterv1.MachineDrainRuleSpec{
			Drain:    clusterv1.MachineDrainRuleDrainConfig{Behavior: clusterv1.MachineDrainRuleDrainBehaviorSkip},
			Machines: []clusterv1.MachineDrainRuleMachineSelector{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}},
			Pods:     []clusterv1.MachineDrainRulePodSelector{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "obs"}}}},
		},
	}
	mgmt := live.client(t)
	require.NoError(t, mgmt.Create(ctx, cluster))
	require.NoError(t, mgmt.Create(ctx, rule))

	call := func() runtimehooksv1.UpdateMachineResponse {
		t.Helper()
		u, err := capi.NewMachineUpdater(func(context.Context, types.NamespacedName) (client.Client, error) { return c, nil }, capi.UpdaterOptions{Clientset: func(context.Context, types.NamespacedName) (kubernetes.Interface, error) { return cs, nil }, SkipPrePull: true, PodOptions: []nodepod.Option{nodepod.WithImage("registry.example/upgrader:v1.36.1")}, ManagementReader: mgmt, DrainAttempt: 2 * time.Second, DrainOptions: []drain.Option{drain.WithGracePeriod(0), drain.WithEvictionRetryDelay(200 * time.Millisecond)}})
		require.NoError(t, err)
		var resp runtimehooksv1.UpdateMachineResponse
		u.UpdateMachine(ctx, live.request(t), &resp)
		return resp
	}

	resp := call()
	requireWaiting(t, resp, "pods left: apps/batch (waiting for it to complete (label cluster.x-k8s.io/drain=wait-completed); never evicted)")
	t.Logf("answer: %s", resp.Message)
	require.Contains(t, resp.Message, "draining node cp-0")
	require.False(t, podExists(t, cs, "apps", "debug"), "the bare pod is evicted, as Cluster API does")
	require.False(t, podExists(t, cs, "apps", "web"))
	for _, p := range [][2]string{{"apps", "cache"}, {"apps", "batch"}, {"monitoring", "agent"}} {
		require.True(t, podExists(t, cs, p[0], p[1]), "%s/%s is not evicted", p[0], p[1])
	}
	var n corev1.Node
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "cp-0"}, &n))
	require.Nil(t, record(t, &n).Drained, "not drained while batch runs")

	// batch completes: the node is drained, nothing else evicted.
	batch, err := cs.CoreV1().Pods("apps").Get(ctx, "batch", metav1.GetOptions{})
	require.NoError(t, err)
	batch.Status.Phase = corev1.PodSucceeded
	_, err = cs.CoreV1().Pods("apps").UpdateStatus(ctx, batch, metav1.UpdateOptions{})
	require.NoError(t, err)
	resp = call()
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
	t.Logf("answer: %s", resp.Message)
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "cp-0"}, &n))
	require.NotNil(t, record(t, &n).Drained, "drained")
	for _, p := range [][2]string{{"apps", "cache"}, {"apps", "batch"}, {"monitoring", "agent"}} {
		require.True(t, podExists(t, cs, p[0], p[1]), "%s/%s is never evicted", p[0], p[1])
	}
}
