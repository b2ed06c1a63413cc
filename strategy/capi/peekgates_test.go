package capi_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// TestPeekGates: each gate in UpdaterOptions.Gates answers on its own (a
// strategy.Gates opened), about the machine's node and cluster at the
// updater's clock, and nothing is asked with Check.
func TestPeekGates(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	var asked []strategy.GateRequest
	gate := func(name string, v strategy.Verdict) strategy.Gate {
		return strategy.GateFunc(func(_ context.Context, req strategy.GateRequest) strategy.GateResult {
			asked = append(asked, req)
			return strategy.GateResult{Verdict: v, Gate: name}
		})
	}
	holder := &countingHolder{}
	workload := func(context.Context, types.NamespacedName) (client.Client, error) { return nil, errors.New("not used") }
	u, err := capi.NewMachineUpdater(workload, capi.UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{nodepod.WithImage("registry.example/upgrader:v1")}, Clock: clocktesting.NewFakePassiveClock(now), Gates: []strategy.Gate{gate("window", strategy.VerdictAllow), strategy.Gates{gate("soak", strategy.VerdictWait), holder}}})
	require.NoError(t, err)
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo-md-0-x", Labels: map[string]string{clusterv1.MachineDeploymentNameLabel: "md-0"}},
		Spec: clusterv1.MachineSpec{ClusterName: "demo"}}
	m.Status.NodeRef = clusterv1.MachineNodeReference{Name: "node-x"}

	var got []string
	for _, r := range u.PeekGates(t.Context(), m) {
		got = append(got, r.String())
	}
	require.Equal(t, []string{"Allow by window", "Wait by soak", "Wait by gates[2]: not asked: it holds what its Check allows, and it cannot peek (no GatePeeker)"}, got)
	require.Equal(t, strategy.GateRequest{Cluster: "default/demo", Group: "md-0", Role: strategy.RoleWorker, Machine: "demo-md-0-x", Node: "node-x", Now: now}, asked[0])
	require.Zero(t, holder.checked, "a holder is never asked with Check")

	plain, err := capi.NewMachineUpdater(workload, capi.UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{nodepod.WithImage("registry.example/upgrader:v1")}})
	require.NoError(t, err)
	require.Nil(t, plain.PeekGates(t.Context(), m), "no gates, nothing to say")
	var zero *capi.MachineUpdater
	require.Nil(t, zero.PeekGates(t.Context(), m))
}

type countingHolder struct{ checked int }

func (h *countingHolder) Check(context.Context, strategy.GateRequest) strategy.GateResult {
	h.checked++
	return strategy.GateResult{Verdict: strategy.VerdictAllow, Gate: "holder"}
}
func (h *countingHolder) Renew(context.Context, strategy.GateRequest) error   { return nil }
func (h *countingHolder) Release(context.Context, strategy.GateRequest) error { return nil }
