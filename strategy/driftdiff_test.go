package strategy_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/drift"
	"github.com/upgradekit/upgradekit/strategy"
)

// TestDriftDifferExplainsFieldByField: with the old spec at hand, drift's
// Explain names the exact fields, list elements by key, with values.
func TestDriftDifferExplainsFieldByField(t *testing.T) {
	ctx := context.Background()
	h, err := drift.NewHasher("v1")
	require.NoError(t, err)
	st, err := drift.NewStamper("example.com", h)
	require.NoError(t, err)
	old := map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"team": "payments"}},
		"spec": map[string]any{"taints": []any{
			map[string]any{"key": "dedicated", "value": "payments", "effect": "NoSchedule"},
		}, "expireAfter": "720h"},
	}
	node := &metav1.ObjectMeta{Name: "node-1"}
	_, err = st.Stamp(node, old)
	require.NoError(t, err)
	desired := map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"team": "checkout"}},
		"spec": map[string]any{"taints": []any{
			map[string]any{"key": "dedicated", "value": "payments", "effect": "NoSchedule"},
			map[string]any{"key": "gpu", "value": "true", "effect": "NoSchedule"},
		}, "expireAfter": "720h"},
	}
	d, err := strategy.DriftDiffer(diff.ListKey("infrastructure.spec.spec.taints", "key", "effect"))
	require.NoError(t, err)
	ex, err := st.Explain(ctx, node, desired, drift.WithOldSpec(old, d))
	require.NoError(t, err)
	require.Equal(t, "diff", ex.Source)
	require.Equal(t, []drift.FieldChange{
		{Path: "metadata.labels.team", Kind: drift.ChangeModified, Old: "payments", New: "checkout"},
		{Path: "spec.taints[key=gpu,effect=NoSchedule]", Kind: drift.ChangeAdded, New: map[string]any{"key": "gpu", "value": "true", "effect": "NoSchedule"}},
	}, ex.Changes)

	// Without the old spec, the fingerprints still name the fields.
	ex, err = st.Explain(ctx, node, desired)
	require.NoError(t, err)
	require.Equal(t, "fingerprints", ex.Source)
	var paths []string
	for _, c := range ex.Changes {
		paths = append(paths, c.Path)
	}
	require.ElementsMatch(t, []string{"metadata.labels", "spec.taints"}, paths)

	_, err = d.Diff(ctx, make(chan int), desired)
	require.Error(t, err)
}
