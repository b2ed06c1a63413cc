package capi_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/fake/envtest"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// TestConcurrencyGateAcrossReplicas: two extension replicas (two
// MachineUpdaters, each with its own ConcurrencyGate) on one API server
// update at most one machine of the cluster at a time; the slot is
// released when the update is done, the next machine then starts, and a
// slot its holder stopped renewing is free once its TTL ends.
func TestConcurrencyGateAcrossReplicas(t *testing.T) {
	env := envtest.StartForTest(t)
	c, ctx := env.Client, t.Context()
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nodepod.DefaultNamespace}}))
	require.NoError(t, c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubeadm-config"},
		Data: map[string]string{"ClusterConfiguration": "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: v1.36.1\n"}}))
	for _, n := range []string{"w-0", "w-1", "w-2"} {
		createNode(t, ctx, c, n, "docker:////"+n, "v1.35.4")
	}
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	workload := func(context.Context, types.NamespacedName) (client.Client, error) { return c, nil }
	replica := func() (*capi.MachineUpdater, *capi.ConcurrencyGate) {
		gate, err := capi.NewConcurrencyGate(c, "default", 1, 30*time.Second)
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
		other, err := capi.NewConcurrencyGate(c, "default", 2, 30*time.Second)
		require.NoError(t, err)
		mine, err := capi.NewConcurrencyGate(c, "default", 2, 30*time.Second)
		require.NoError(t, err)
		allowed := 0
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i, g := range []*capi.ConcurrencyGate{other, mine, other, mine, other, mine} {
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
		_, err := capi.NewConcurrencyGate(c, bad.ns, bad.limit, bad.ttl)
		require.ErrorIs(t, err, capi.ErrInvalidOption, bad)
	}
	_, err := capi.NewConcurrencyGate(nil, "default", 1, time.Minute)
	require.ErrorIs(t, err, capi.ErrInvalidOption)
}

// TestConcurrencyGatePeekTakesNothing: Peek says what Check would answer
// with an identity that may only get and list Leases, so a write would be
// refused, and no Lease changes while it answers.
func TestConcurrencyGatePeekTakesNothing(t *testing.T) {
	env := envtest.StartForTest(t)
	admin, ctx := env.Client, t.Context()
	const user = "upgradekit-peek-test"
	require.NoError(t, admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: user},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{coordinationv1.GroupName}, Resources: []string{"leases"}, Verbs: []string{"get", "list"}}}}))
	require.NoError(t, admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}))
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	readOnly, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	require.NoError(t, err)
	require.Eventually(t, func() bool { // the authorizer learns the binding
		return readOnly.List(ctx, &coordinationv1.LeaseList{}, client.InNamespace("default")) == nil
	}, 2*time.Minute, 200*time.Millisecond)

	taker, err := capi.NewConcurrencyGate(admin, "default", 1, 30*time.Second)
	require.NoError(t, err)
	peeker, err := capi.NewConcurrencyGate(readOnly, "default", 1, 30*time.Second)
	require.NoError(t, err)
	now := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	req := func(machine string, at time.Duration) strategy.GateRequest {
		return strategy.GateRequest{Cluster: "default/demo", Machine: machine, Now: now.Add(at)}
	}
	leases := func() []coordinationv1.Lease {
		var l coordinationv1.LeaseList
		require.NoError(t, admin.List(ctx, &l, client.InNamespace("default")))
		return l.Items
	}

	r := peeker.Peek(ctx, req("m-a", 0))
	require.Equal(t, "Allow by concurrency: 1 of 1 slots of cluster default/demo free", r.String())
	require.Empty(t, leases(), "Peek took no slot")

	// The read-only identity cannot take one: Check would fail closed.
	r = peeker.Check(ctx, req("m-a", 0))
	require.Equal(t, strategy.VerdictWait, r.Verdict)
	require.True(t, apierrors.IsForbidden(r.Err), r.String())

	require.True(t, taker.Check(ctx, req("m-a", 0)).Allowed())
	before := leases()
	require.Len(t, before, 1)
	for _, tc := range []struct {
		machine string
		at      time.Duration
		want    string
	}{
		{"m-b", 10 * time.Second, "Wait by concurrency: 1 of 1 machines of cluster default/demo are being updated already: m-a (retry after 20s)"},
		{"m-a", 10 * time.Second, "Allow by concurrency: holds slot " + before[0].Name},
		// m-a's slot expires 30 s after the renewal at 10 s, by Check below.
		{"m-b", 41 * time.Second, "Allow by concurrency: 1 of 1 slots of cluster default/demo free"},
	} {
		require.Equal(t, tc.want, peeker.Peek(ctx, req(tc.machine, tc.at)).String())
		// Check agrees where it takes nothing: on the machine that holds
		// the slot (renewing it), or another one while it is held.
		if tc.at < 40*time.Second {
			require.Equal(t, peeker.Peek(ctx, req(tc.machine, tc.at)).Verdict, taker.Check(ctx, req(tc.machine, tc.at)).Verdict)
		}
	}
	after := leases()
	require.Len(t, after, 1)
	require.Equal(t, "default/demo/m-a", *after[0].Spec.HolderIdentity, "Peek changed no holder")

	// A limit lowered while slots above it are held: they count.
	two, err := capi.NewConcurrencyGate(admin, "default", 2, 30*time.Second)
	require.NoError(t, err)
	at := func(machine string) strategy.GateRequest {
		return strategy.GateRequest{Cluster: "default/lowered", Machine: machine, Now: now}
	}
	require.True(t, two.Check(ctx, at("m-x")).Allowed())
	require.True(t, two.Check(ctx, at("m-y")).Allowed())
	one, err := capi.NewConcurrencyGate(admin, "default", 1, 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, "Wait by concurrency: 2 of 1 machines of cluster default/lowered are being updated already: m-x, m-y (retry after 30s)", one.Check(ctx, at("m-z")).String())
	require.Equal(t, strategy.VerdictWait, one.Peek(ctx, at("m-z")).Verdict)
	require.Equal(t, strategy.VerdictAllow, one.Peek(ctx, at("m-y")).Verdict, "a holder keeps its slot")

	// With a window that is closed, Gates asks the concurrency gate last
	// and not at all: a machine waiting for its window holds no slot.
	closed, err := strategy.MaintenanceWindow("new-year", "0 0 1 1 *", time.Minute, "UTC")
	require.NoError(t, err)
	before = leases()
	for _, gates := range []strategy.Gates{{taker, closed}, {closed, taker}} {
		require.Equal(t, strategy.VerdictWait, gates.Check(ctx, req("m-w", 50*time.Second)).Verdict)
	}
	require.Empty(t, cmp.Diff(before, leases()), "no Lease taken or renewed")

	var nilGate *capi.ConcurrencyGate
	require.ErrorIs(t, nilGate.Peek(ctx, req("m-a", 0)).Err, strategy.ErrInvalidGate)
	require.ErrorIs(t, peeker.Peek(ctx, strategy.GateRequest{}).Err, strategy.ErrInvalidGate)
}
