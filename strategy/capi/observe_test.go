package capi_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

func TestNewMetricsRegistration(t *testing.T) {
	t.Run("a second call on the same registry shares the collectors", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m1, err := capi.NewMetrics(reg, capi.MetricsOptions{})
		require.NoError(t, err)
		m2, err := capi.NewMetrics(reg, capi.MetricsOptions{})
		require.NoError(t, err, "no duplicate-registration error, no panic")
		k8s := must(strategy.ForCategories("kubernetes", diff.CategoryKubernetesVersion))
		for _, m := range []*capi.Metrics{m1, m2} {
			ext, err := capi.NewExtension(strategy.Updaters(k8s), capi.ExtensionOptions{Metrics: m})
			require.NoError(t, err)
			var resp runtimehooksv1.CanUpdateMachineResponse
			ext.CanUpdateMachine(context.Background(), versionChange(t), &resp)
			require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status, resp.Message)
		}
		require.Equal(t, 2.0, counter(t, reg, observe.MetricDecisions, "outcome", observe.HookAccept))
		require.Equal(t, map[string]uint64{"CanUpdateMachine": 2, "CanUpdateMachineSet": 0, "UpdateMachine": 0}, hookCounts(t, reg),
			"each answered call is timed, by hook")
	})

	t.Run("UpdateMachine calls are timed, refused ones too", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m, err := capi.NewMetrics(reg, capi.MetricsOptions{})
		require.NoError(t, err)
		u, err := capi.NewMachineUpdater(func(context.Context, types.NamespacedName) (client.Client, error) {
			return nil, errors.New("not reached")
		}, capi.UpdaterOptions{SkipDrain: true, Metrics: m, PodOptions: []nodepod.Option{nodepod.WithImage("registry.example/upgrader:v1@sha256:" + strings.Repeat("a", 64))}})
		require.NoError(t, err)
		var resp runtimehooksv1.UpdateMachineResponse
		u.UpdateMachine(context.Background(), &runtimehooksv1.UpdateMachineRequest{}, &resp)
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, "a request naming no Machine")
		require.Equal(t, map[string]uint64{"CanUpdateMachine": 0, "CanUpdateMachineSet": 0, "UpdateMachine": 1}, hookCounts(t, reg))
	})

	t.Run("controller-runtime's registry by default", func(t *testing.T) {
		_, err := capi.NewMetrics(nil, capi.MetricsOptions{})
		require.NoError(t, err)
		_, err = capi.NewMetrics(nil, capi.MetricsOptions{})
		require.NoError(t, err)
		n, err := testutil.GatherAndCount(ctrlmetrics.Registry, observe.MetricDecisions, observe.MetricMachinesInProgress, observe.MetricFailures, observe.MetricUpdateDuration, observe.MetricHookDuration)
		require.NoError(t, err)
		require.Equal(t, 6+6+12+1+3, n, "every series exists at zero from the start")
	})

	t.Run("another collector under one of the names is a typed error", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(prometheus.NewGauge(prometheus.GaugeOpts{Name: observe.MetricUpdateDuration, Help: "not ours"})))
		_, err := capi.NewMetrics(reg, capi.MetricsOptions{})
		require.ErrorIs(t, err, capi.ErrMetricsRegistration)
		require.ErrorContains(t, err, observe.MetricUpdateDuration)
	})

	t.Run("a negative StaleAfter is a typed error naming the field", func(t *testing.T) {
		_, err := capi.NewMetrics(prometheus.NewRegistry(), capi.MetricsOptions{StaleAfter: -time.Second})
		require.ErrorIs(t, err, capi.ErrInvalidOption)
		var oe *capi.OptionError
		require.ErrorAs(t, err, &oe)
		require.Equal(t, "MetricsOptions.StaleAfter", oe.Option)
	})
}

// hookCounts returns MetricHookDuration's sample count by hook.
func hookCounts(t *testing.T, reg prometheus.Gatherer) map[string]uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != observe.MetricHookDuration {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "hook" {
					out[l.GetValue()] = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return out
}

// versionChange is a CanUpdateMachine request for a version change only.
func versionChange(t *testing.T) *runtimehooksv1.CanUpdateMachineRequest {
	cur, des, curCfg, desCfg, curInfra, desInfra := machinePair()
	desCfg.Spec = curCfg.Spec
	return &runtimehooksv1.CanUpdateMachineRequest{
		Current: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *cur, BootstrapConfig: raw(t, curCfg), InfrastructureMachine: raw(t, curInfra)},
		Desired: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *des, BootstrapConfig: raw(t, desCfg), InfrastructureMachine: raw(t, desInfra)},
	}
}

// TestExtensionObservesDecisions: every CanUpdate* answer is counted by
// hook and outcome, and a decline is logged with the fields it is about.
func TestExtensionObservesDecisions(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := capi.NewMetrics(reg, capi.MetricsOptions{})
	require.NoError(t, err)
	var logs []string
	log := funcr.New(func(prefix, args string) { logs = append(logs, args) }, funcr.Options{Verbosity: 1})
	k8s := must(strategy.ForCategories("kubernetes", diff.CategoryKubernetesVersion))
	ext, err := capi.NewExtension(strategy.Updaters(k8s), capi.ExtensionOptions{Metrics: m, Logger: log})
	require.NoError(t, err)
	ctx := context.Background()

	var resp runtimehooksv1.CanUpdateMachineResponse
	ext.CanUpdateMachine(ctx, versionChange(t), &resp)
	require.Equal(t, runtimehooksv1.ResponseStatusSuccess, resp.Status)

	decline := versionChange(t)
	decline.Desired.InfrastructureMachine = raw(t, map[string]any{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerMachine",
		"metadata": map[string]any{"name": "cp-1"}, "spec": map[string]any{"customImage": "kindest/node:v1.36.1", "providerID": "docker:////cp-1"}})
	resp = runtimehooksv1.CanUpdateMachineResponse{}
	ext.CanUpdateMachine(ctx, decline, &resp)
	require.False(t, resp.MachinePatch.IsDefined())

	bad := versionChange(t)
	bad.Settings = map[string]string{"upgradekit.io/typo": "x"}
	resp = runtimehooksv1.CanUpdateMachineResponse{}
	ext.CanUpdateMachine(ctx, bad, &resp)
	require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status)

	var setResp runtimehooksv1.CanUpdateMachineSetResponse
	ext.CanUpdateMachineSet(ctx, &runtimehooksv1.CanUpdateMachineSetRequest{}, &setResp)
	require.Equal(t, runtimehooksv1.ResponseStatusFailure, setResp.Status, "an empty request is incomplete, not an accept")
	require.Equal(t, "incomplete request: current.machineSet.metadata.name is missing", setResp.Message)

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP upgradekit_inplace_decisions_total CanUpdateMachine and CanUpdateMachineSet answers, by hook and outcome (accept, decline, error).
# TYPE upgradekit_inplace_decisions_total counter
upgradekit_inplace_decisions_total{hook="CanUpdateMachine",outcome="accept"} 1
upgradekit_inplace_decisions_total{hook="CanUpdateMachine",outcome="decline"} 1
upgradekit_inplace_decisions_total{hook="CanUpdateMachine",outcome="error"} 1
upgradekit_inplace_decisions_total{hook="CanUpdateMachineSet",outcome="accept"} 0
upgradekit_inplace_decisions_total{hook="CanUpdateMachineSet",outcome="decline"} 0
upgradekit_inplace_decisions_total{hook="CanUpdateMachineSet",outcome="error"} 1
`), observe.MetricDecisions))

	var declined string
	for _, l := range logs {
		if strings.Contains(l, `"msg"="declined`) {
			declined = l
		}
	}
	require.NotEmpty(t, declined, "logs: %q", logs)
	require.Contains(t, declined, `"machine"="default/cp-1"`)
	require.Contains(t, declined, `"cluster"="default/demo"`)
	require.Contains(t, declined, `"uncovered"=["infrastructure.spec.customImage (InfrastructureImage)"]`)
	require.NotContains(t, declined, "kindest/node:v1.36.1", "values stay out of logs")
}

// TestUpdateMachineFailuresWithoutANode: a request that names no node
// fails; the failure is counted and recorded once per episode, and the
// machine shows in the in-progress gauge until it goes stale.
func TestUpdateMachineFailuresWithoutANode(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	m, err := capi.NewMetrics(reg, capi.MetricsOptions{Clock: clk, StaleAfter: 10 * time.Minute})
	require.NoError(t, err)
	rec := events.NewFakeRecorder(10)
	workload := func(context.Context, types.NamespacedName) (client.Client, error) {
		t.Fatal("a request without providerID must not reach the workload cluster")
		return nil, nil
	}
	var logs []string
	log := funcr.New(func(prefix, args string) { logs = append(logs, args) }, funcr.Options{Verbosity: 1})
	newUpdater := func() *capi.MachineUpdater {
		u, err := capi.NewMachineUpdater(workload, capi.UpdaterOptions{SkipDrain: true, Metrics: m, EventRecorder: rec, Logger: log, PodOptions: []nodepod.Option{nodepod.WithImage("r/u:1")}})
		require.NoError(t, err)
		return u
	}
	u := newUpdater()
	req := updateReq("md-0-x", "", "v1.36.1", false)
	for range 3 {
		var resp runtimehooksv1.UpdateMachineResponse
		u.UpdateMachine(context.Background(), req, &resp)
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status)
		require.Equal(t, "in-place update failed: InvalidMachine: desired Machine has no spec.providerID: the node cannot be found", resp.Message)
	}
	require.Equal(t, 1.0, counter(t, reg, observe.MetricFailures, "reason", observe.FailureInvalidMachine))
	// One error log for the failure, V(1) lines for its repeats, all with
	// the stable keys.
	require.Len(t, logs, 3)
	for i, l := range logs {
		require.Contains(t, l, `"hook"="UpdateMachine" "machine"="default/md-0-x" "cluster"="default/demo" "phase"="Failed"`)
		require.Contains(t, l, `"reason"="InvalidMachine"`)
		if i == 0 {
			require.Contains(t, l, `"msg"="in-place update failed" "error"=`)
		} else {
			require.Contains(t, l, `"level"=1 "msg"="in-place update still failing"`)
		}
	}
	require.Equal(t, []string{"Warning InPlaceUpdateFailed InvalidMachine: desired Machine has no spec.providerID: the node cannot be found"}, recorded(rec))
	gauge := func(v string) string {
		return `
# HELP upgradekit_inplace_machines_in_progress Machines whose last UpdateMachine answer from this process was in progress, by phase.
# TYPE upgradekit_inplace_machines_in_progress gauge
upgradekit_inplace_machines_in_progress{phase="DrainBlocked"} 0
upgradekit_inplace_machines_in_progress{phase="Draining"} 0
upgradekit_inplace_machines_in_progress{phase="Failed"} ` + v + `
upgradekit_inplace_machines_in_progress{phase="Pending"} 0
upgradekit_inplace_machines_in_progress{phase="Upgrading"} 0
upgradekit_inplace_machines_in_progress{phase="WaitingForKubelet"} 0
`
	}
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(gauge("1")), observe.MetricMachinesInProgress))
	clk.Step(11 * time.Minute)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(gauge("0")), observe.MetricMachinesInProgress), "not asked for a while: forgotten")

	// This memory is per process, as documented: a restarted extension
	// records the failure once more.
	var resp runtimehooksv1.UpdateMachineResponse
	newUpdater().UpdateMachine(context.Background(), req, &resp)
	require.Equal(t, 2.0, counter(t, reg, observe.MetricFailures, "reason", observe.FailureInvalidMachine))
	require.Len(t, recorded(rec), 1)
}
