package capi

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

var megabyteName = strings.Repeat("a", 1<<20)

// randomName is a name a caller may send: often a valid DNS-1123 name,
// often not, now and then a megabyte long.
func randomName(r *rand.Rand) string {
	if r.IntN(50) == 0 {
		return megabyteName
	}
	const valid, anyByte = "abcdefghijklmnopqrstuvwxyz0123456789-", "abcXYZ019-._/ \x00\xff\"\\é"
	if r.IntN(3) == 0 {
		b := make([]byte, r.IntN(300))
		for i := range b {
			b[i] = anyByte[r.IntN(len(anyByte))]
		}
		return string(b)
	}
	b := make([]byte, 1+r.IntN(60))
	for i := range b {
		b[i] = valid[r.IntN(len(valid))]
	}
	b[0], b[len(b)-1] = 'a', 'z'
	return string(b)
}

// TestUpdateMachineRemembersNothingOfRandomNames: 10,000 requests naming
// random Machines (invalid names, megabyte names, valid names of no
// Machine) leave nothing in the updater's memory (failures, node names,
// metrics) and never an answer longer than 300 bytes: a request names
// what is looked up, not what is kept.
func TestUpdateMachineRemembersNothingOfRandomNames(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clusterv1.AddToScheme(scheme))
	mgmt := crfake.NewClientBuilder().WithScheme(scheme).Build()
	metrics, err := NewMetrics(prometheus.NewRegistry(), MetricsOptions{})
	require.NoError(t, err)
	workload := func(context.Context, types.NamespacedName) (client.Client, error) {
		return nil, errors.New("no workload cluster is read for a Machine that does not exist")
	}
	u, err := NewMachineUpdater(workload, UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{nodepod.WithImage("r/u:1")}, ManagementReader: mgmt, Metrics: metrics})
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(1, 2))
	longest := ""
	for range 10000 {
		req := &runtimehooksv1.UpdateMachineRequest{}
		req.Desired.Machine.Namespace = randomName(r)
		req.Desired.Machine.Name = randomName(r)
		req.Desired.Machine.Spec = clusterv1.MachineSpec{ClusterName: randomName(r), Version: randomName(r), ProviderID: randomName(r)}
		var resp runtimehooksv1.UpdateMachineResponse
		u.UpdateMachine(t.Context(), req, &resp)
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
		if len(resp.Message) > len(longest) {
			longest = resp.Message
		}
	}
	t.Logf("10,000 requests: longest answer %d bytes", len(longest))
	require.LessOrEqual(t, len(longest), 300, "longest answer: %s", longest)
	u.mu.Lock()
	defer u.mu.Unlock()
	require.Empty(t, u.lastFailure, "failures remembered")
	require.Empty(t, u.nodeNames)
	require.Empty(t, u.missingSince)
	require.Empty(t, u.goneChecked)
	metrics.progress.mu.Lock()
	defer metrics.progress.mu.Unlock()
	require.Empty(t, metrics.progress.seen, "machines tracked in the metrics")
}

// TestRememberedFailuresAreBounded: without WithManagementReader the
// failures remembered per Machine are the request's names; they are
// bounded.
func TestRememberedFailuresAreBounded(t *testing.T) {
	u, err := NewMachineUpdater(func(context.Context, types.NamespacedName) (client.Client, error) { return nil, errors.New("unused") }, UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{nodepod.WithImage("r/u:1")}})
	require.NoError(t, err)
	for i := range 3 * maxRememberedFailures {
		req := &runtimehooksv1.UpdateMachineRequest{}
		req.Desired.Machine.Namespace, req.Desired.Machine.Name = "default", "m-"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+"-"+strconv.Itoa(i)
		req.Desired.Machine.Spec.ClusterName = "demo" // no providerID: a failure before any node
		var resp runtimehooksv1.UpdateMachineResponse
		u.UpdateMachine(t.Context(), req, &resp)
		require.Equal(t, runtimehooksv1.ResponseStatusFailure, resp.Status, resp.Message)
		require.Contains(t, resp.Message, observe.FailureInvalidMachine)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	require.Len(t, u.lastFailure, maxRememberedFailures)
}
