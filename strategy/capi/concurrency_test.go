package capi_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/gates"
)

// TestConcurrencyGateAcrossReplicas: two extension replicas (two
// MachineUpdaters, each with its own Concurrency) on one API server
// update at most one machine of the cluster at a time; the slot is
// released when the update is done, the next machine then starts, and a
// slot its holder stopped renewing is free once its TTL ends.
func TestConcurrencyGateAcrossReplicas(t *testing.T) {
	env := apiserver.StartForTest(t)
	c, ctx := env.Client, t.Context()
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nodepod.DefaultNamespace}}))
	require.NoError(t, c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubeadm-config"},
		Data: map[string]string{"ClusterConfiguration": "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: v1.36.1\n"}}))
	for _, n := range []string{"w-0", "w-1", "w-2"} {
		createNode(t, ctx, c, n, "docker:////"+n, "v1.35.4")
	}
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	workload := func(context.Context, types.NamespacedName) (client.Client, error) { return c, nil }
	replica := func() (*capi.MachineUpdater, *gates.Concurrency) {
		gate, err := gates.NewConcurrency(c, "default", 1, 30*time.Second)
		require.NoError(t, err)
		u, err := capi.NewMachineUpdater(workload, capi.UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{nodepod.WithImage("registry.example/upgrader:v1.36.1")}, Gates: []strategy.Gate{gate}, Clock: clk})
		require.NoError(t, err)
		return u, gate
	}
	a, _ := replica()
	b, _ := replica()
	call := func(u *capi.MachineUpdater, node string) runtimehooksv1.UpdateMachineResponse {
		var resp runtimehooksv1.UpdateMachineResponse
		u.UpdateMachine(ctx, updateReq(node, "docker:////"+node, "v1.36.1", false), &resp)
		return resp
	}
	podOn := func(node string) *corev1.Pod {
		var pods corev1.PodList
		require.NoError(t, c.List(ctx, &pods, client.InNamespace(nodepod.DefaultNamespace), client.MatchingLabelsSelector{Selector: nodepod.Selector()}))
		for i := range pods.Items {
			if pods.Items[i].Spec.NodeName == node {
				return &pods.Items[i]
			}
		}
		return nil
	}

	requireWaiting(t, call(a, "w-0"), "started worker upgrade of node w-0")
	resp := call(b, "w-1")
	requireWaiting(t, resp, "node w-1 not started: Wait by concurrency: 1 of 1 machines of cluster default/demo are being updated already: w-0")
	require.Nil(t, podOn("w-1"), "the other replica started nothing")
	require.Equal(t, int32(30), resp.RetryAfterSeconds, "asked again when the slot would expire")

	// Replica b serves w-0's next call: it renews the slot a took.
	clk.SetTime(clk.Now().Add(20 * time.Second))
	requireWaiting(t, call(b, "w-0"), "upgrading node w-0")
	clk.SetTime(clk.Now().Add(20 * time.Second)) // 40 s after the start, 20 s after the renewal
	requireWaiting(t, call(a, "w-1"), "are being updated already: w-0")

	// w-0 done: the slot is released, w-1 starts.
	finishPod(t, ctx, c, podOn("w-0"), "", 0)
	setKubelet(t, ctx, c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w-0"}}, "v1.36.1")
	requireDone(t, call(a, "w-0"))
	requireWaiting(t, call(b, "w-1"), "started worker upgrade of node w-1")

	// The replica updating w-1 dies: nobody renews its slot. Until the TTL
	// ends w-2 waits; then it takes the slot.
	clk.SetTime(clk.Now().Add(29 * time.Second))
	requireWaiting(t, call(a, "w-2"), "are being updated already: w-1")
	clk.SetTime(clk.Now().Add(2 * time.Second))
	requireWaiting(t, call(a, "w-2"), "started worker upgrade of node w-2")
	var leases coordinationv1.LeaseList
	require.NoError(t, c.List(ctx, &leases, client.InNamespace("default")))
	require.Len(t, leases.Items, 1, "one slot for a limit of 1")
	require.Equal(t, "default/demo/w-2", *leases.Items[0].Spec.HolderIdentity)

	t.Run("two replicas asking at once", func(t *testing.T) {
		other, err := gates.NewConcurrency(c, "default", 2, 30*time.Second)
		require.NoError(t, err)
		mine, err := gates.NewConcurrency(c, "default", 2, 30*time.Second)
		require.NoError(t, err)
		allowed := 0
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i, g := range []*gates.Concurrency{other, mine, other, mine, other, mine} {
			wg.Go(func() {
				r := g.Check(ctx, strategy.GateRequest{Cluster: "default/race", Machine: "m-" + string(rune('a'+i)), Now: clk.Now()})
				mu.Lock()
				defer mu.Unlock()
				if r.Allowed() {
					allowed++
				}
			})
		}
		wg.Wait()
		require.Equal(t, 2, allowed, "never more machines than slots, whichever replica asks")
	})

	for _, bad := range []struct {
		limit int
		ttl   time.Duration
		ns    string
	}{{0, time.Minute, "default"}, {1, time.Millisecond, "default"}, {1, time.Minute, "Not_A_Namespace"}} {
		_, err := gates.NewConcurrency(c, bad.ns, bad.limit, bad.ttl)
		require.ErrorIs(t, err, capi.ErrInvalidOption, bad)
	}
	_, err := gates.NewConcurrency(nil, "default", 1, time.Minute)
	require.ErrorIs(t, err, capi.ErrInvalidOption)
}
