package gates_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi/gates"
)

// TestConcurrencyGatePeekTakesNothing: Peek says what Check would answer
// with an identity that may only get and list Leases, so a write would be
// refused, and no Lease changes while it answers.
func TestConcurrencyGatePeekTakesNothing(t *testing.T) {
	env := apiserver.StartForTest(t)
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

	taker, err := gates.NewConcurrency(admin, "default", 1, 30*time.Second)
	require.NoError(t, err)
	peeker, err := gates.NewConcurrency(readOnly, "default", 1, 30*time.Second)
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
	two, err := gates.NewConcurrency(admin, "default", 2, 30*time.Second)
	require.NoError(t, err)
	at := func(machine string) strategy.GateRequest {
		return strategy.GateRequest{Cluster: "default/lowered", Machine: machine, Now: now}
	}
	require.True(t, two.Check(ctx, at("m-x")).Allowed())
	require.True(t, two.Check(ctx, at("m-y")).Allowed())
	one, err := gates.NewConcurrency(admin, "default", 1, 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, "Wait by concurrency: 2 of 1 machines of cluster default/lowered are being updated already: m-x, m-y (retry after 30s)", one.Check(ctx, at("m-z")).String())
	require.Equal(t, strategy.VerdictWait, one.Peek(ctx, at("m-z")).Verdict)
	require.Equal(t, strategy.VerdictAllow, one.Peek(ctx, at("m-y")).Verdict, "a holder keeps its slot")

	// With a window that is closed, Gates asks the concurrency gate last
	// and not at all: a machine waiting for its window holds no slot.
	closed, err := strategy.MaintenanceWindow("new-year", "0 0 1 1 *", time.Minute, "UTC")
	require.NoError(t, err)
	before = leases()
	for _, gs := range []strategy.Gates{{taker, closed}, {closed, taker}} {
		require.Equal(t, strategy.VerdictWait, gs.Check(ctx, req("m-w", 50*time.Second)).Verdict)
	}
	require.Empty(t, cmp.Diff(before, leases()), "no Lease taken or renewed")

	var nilGate *gates.Concurrency
	require.ErrorIs(t, nilGate.Peek(ctx, req("m-a", 0)).Err, strategy.ErrInvalidGate)
	require.ErrorIs(t, peeker.Peek(ctx, strategy.GateRequest{}).Err, strategy.ErrInvalidGate)
}
