package strategy_test

import (
	"context"
	"fmt"
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
	d, err := strategy.DriftDiffer(diff.ListKey("spec.taints", "key", "effect"))
	require.NoError(t, err)
	ex, err := st.Explain(ctx, node, desired, drift.WithOldSpec(old, d))
	require.NoError(t, err)
	require.Equal(t, "diff", ex.Source)
	require.Equal(t, []drift.FieldChange{
		{Path: "metadata.labels.team", Kind: drift.ChangeKindModified, Old: "payments", New: "checkout"},
		{Path: "spec.taints[key=gpu,effect=NoSchedule]", Kind: drift.ChangeKindAdded, New: map[string]any{"key": "gpu", "value": "true", "effect": "NoSchedule"}},
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

// TestDriftDifferRedactsSecrets: drift evidence is read by people, logged
// and put in events; a userData token changed in a node class comes out
// as a digest, not in plain text (it did: DriftDiffer turned the
// sensitive patterns off and copied the raw values).
func TestDriftDifferRedactsSecrets(t *testing.T) {
	ctx := context.Background()
	const token = "K10abcdef0123456789::server:0123456789abcdef"
	old := map[string]any{"spec": map[string]any{"userData": "#!/bin/sh\nexport TOKEN=old\n", "amiFamily": "AL2023"}}
	desired := map[string]any{"spec": map[string]any{"userData": "#!/bin/sh\nexport TOKEN=" + token + "\n", "amiFamily": "AL2023",
		"kubelet": map[string]any{"clientSecret": token}}}
	d, err := strategy.DriftDiffer()
	require.NoError(t, err)
	changes, err := d.Diff(ctx, old, desired)
	require.NoError(t, err)
	require.Len(t, changes, 2)
	for _, c := range changes {
		require.NotContains(t, fmt.Sprint(c.Old, c.New), token, c.Path)
		require.Contains(t, fmt.Sprint(c.New), "redacted sha256:", c.Path)
	}

	shown, err := strategy.DriftDiffer(diff.ShowSecrets())
	require.NoError(t, err)
	changes, err = shown.Diff(ctx, old, desired)
	require.NoError(t, err)
	require.Contains(t, fmt.Sprint(changes[1].New), token, "ShowSecrets, and only it, shows them")
}
