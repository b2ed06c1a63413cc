package gates_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/gates"
)

// TestSoakGateAgainstAPIServer: the next update waits until every other
// node has been Ready for the soak time without a break; a NotReady flap
// starts the count again; the node about to be updated does not count.
func TestSoakGateAgainstAPIServer(t *testing.T) {
	env := apiserver.StartForTest(t)
	c, ctx := env.Client, t.Context()
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	setReady := func(name string, status corev1.ConditionStatus, since time.Time) {
		n := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			n = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "md-0"}}}
			require.NoError(t, c.Create(ctx, n))
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(since), LastHeartbeatTime: metav1.NewTime(since)}}
		require.NoError(t, c.Status().Update(ctx, n))
	}
	setReady("a", corev1.ConditionTrue, t0.Add(-time.Hour))
	setReady("b", corev1.ConditionTrue, t0.Add(-2*time.Minute)) // just updated
	setReady("c", corev1.ConditionFalse, t0.Add(-time.Hour))    // the next to update
	workload := func(_ context.Context, key types.NamespacedName) (client.Client, error) {
		require.Equal(t, types.NamespacedName{Namespace: "default", Name: "demo"}, key)
		return c, nil
	}
	gate, err := gates.Soak(workload, 5*time.Minute, nil)
	require.NoError(t, err)
	ask := func(node string, now time.Time) strategy.GateResult {
		return gate.Check(ctx, strategy.GateRequest{Cluster: "default/demo", Machine: node, Node: node, Now: now})
	}

	r := ask("c", t0)
	require.Equal(t, strategy.VerdictWait, r.Verdict, r.String())
	require.Equal(t, "nodes not yet Ready for 5m0s: b (Ready for 2m0s)", r.Reason, "c itself does not count")
	require.Equal(t, 3*time.Minute, r.RetryAfter)
	require.Equal(t, strategy.VerdictAllow, ask("c", t0.Add(3*time.Minute)).Verdict)

	// b flaps: NotReady, then Ready again a minute later; the soak starts over.
	setReady("b", corev1.ConditionFalse, t0.Add(4*time.Minute))
	r = ask("c", t0.Add(4*time.Minute))
	require.Contains(t, r.Reason, "b (not Ready)")
	setReady("b", corev1.ConditionTrue, t0.Add(5*time.Minute))
	r = ask("c", t0.Add(8*time.Minute))
	require.Equal(t, strategy.VerdictWait, r.Verdict)
	require.Equal(t, 2*time.Minute, r.RetryAfter)
	require.Equal(t, strategy.VerdictAllow, ask("c", t0.Add(10*time.Minute)).Verdict)

	// A selector narrows the nodes that count; c NotReady holds a's update.
	r = ask("a", t0.Add(10*time.Minute))
	require.Contains(t, r.Reason, "c (not Ready)")
	sel, err := labels.Parse("pool=other")
	require.NoError(t, err)
	narrow, err := gates.Soak(workload, 5*time.Minute, sel)
	require.NoError(t, err)
	require.Equal(t, strategy.VerdictAllow, narrow.Check(ctx, strategy.GateRequest{Cluster: "default/demo", Node: "a", Now: t0.Add(10 * time.Minute)}).Verdict)

	_, err = gates.Soak(nil, time.Minute, nil)
	require.ErrorIs(t, err, capi.ErrInvalidOption)
	_, err = gates.Soak(workload, 0, nil)
	require.ErrorIs(t, err, capi.ErrInvalidOption)
	r = gate.Check(ctx, strategy.GateRequest{Cluster: "no-slash", Now: t0})
	require.ErrorIs(t, r.Err, strategy.ErrInvalidGate)
}
