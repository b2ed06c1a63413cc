package observe_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

func TestInPlaceUpdateCondition(t *testing.T) {
	ours := corev1.NodeCondition{Type: observe.ConditionInPlaceUpdate, Status: corev1.ConditionFalse, Reason: observe.ReasonSucceeded}
	for _, tc := range []struct {
		name string
		node *corev1.Node
		want *corev1.NodeCondition
	}{
		{"nil node", nil, nil},
		{"no conditions", &corev1.Node{}, nil},
		{"only the kubelet's", &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady}}}}, nil},
		{"ours among others", &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady}, ours}}}, &ours},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Empty(t, cmp.Diff(tc.want, observe.InPlaceUpdateCondition(tc.node)))
		})
	}
	t.Run("the condition of the node, not a copy", func(t *testing.T) {
		n := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{ours}}}
		observe.InPlaceUpdateCondition(n).Message = "changed"
		require.Equal(t, "changed", n.Status.Conditions[0].Message)
	})
}

// TestUpdateRecordWireNames: the annotation is read by other replicas and
// by tools built against another version, so its JSON names are part of
// the contract; a rename must fail here first.
func TestUpdateRecordWireNames(t *testing.T) {
	at := metav1.Date(2026, 11, 28, 10, 0, 0, 0, metav1.Now().Location())
	rec := observe.UpdateRecord{Machine: "m", Version: "v1.36.3", Started: at, PrePullStarted: &at, PrePulled: &at,
		DrainStarted: &at, Drained: &at, Role: "worker", Pod: "p", FromVersion: "v1.35.4", Succeeded: &at, Reported: "r",
		KubeletArgs: "k", ControlPlaneConfig: "c", Files: "f", Attempt: 2, RetryToken: "t"}
	b, err := json.Marshal(rec)
	require.NoError(t, err)
	var fields map[string]any
	require.NoError(t, json.Unmarshal(b, &fields))
	var names []string
	for k := range fields {
		names = append(names, k)
	}
	require.ElementsMatch(t, []string{"machine", "version", "started", "prePullStarted", "prePulled", "drainStarted", "drained",
		"role", "pod", "fromVersion", "succeeded", "reported", "kubeletArgs", "controlPlaneConfig", "files", "attempt", "retryToken"}, names)
	var back observe.UpdateRecord
	require.NoError(t, json.Unmarshal(b, &back))
	require.Empty(t, cmp.Diff(rec, back, cmp.Comparer(func(a, b metav1.Time) bool { return a.Equal(&b) })))
}
