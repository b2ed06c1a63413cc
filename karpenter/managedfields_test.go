package karpenter

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

func TestWrittenSince(t *testing.T) {
	made := time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC)
	entry := func(manager string, at time.Time, fields, sub string) metav1.ManagedFieldsEntry {
		ts := metav1.NewTime(at)
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Time: &ts,
			FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields), Subresource: sub}
	}
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{
		entry("helm", made.Add(-time.Hour), `{"f:spec":{"f:template":{"f:spec":{"f:expireAfter":{}}}}}`, ""),
		entry("kubectl-edit", made.Add(time.Hour), `{"f:spec":{"f:template":{"f:metadata":{"f:annotations":{"f:a":{}}},"f:spec":{"f:taints":{},"f:requirements":{}}}}}`, ""),
		entry("argocd", made.Add(2*time.Hour), `{"f:spec":{"f:template":{"f:spec":{"f:taints":{}}}}}`, ""),
		entry("karpenter", made.Add(3*time.Hour), `{"f:status":{"f:conditions":{}}}`, "status"),
		entry("broken", made.Add(4*time.Hour), `not json`, ""),
	}}}
	require.Equal(t, []string{
		`metadata.annotations["a"] (by kubectl-edit at 2025-05-01T01:00:00Z)`,
		"spec.taints (by argocd at 2025-05-01T02:00:00Z)",
	}, writtenSince(np, made), "after the NodeClaim, hashed fields only, latest writer, status and garbage ignored")
	require.Empty(t, writtenSince(np, made.Add(5*time.Hour)))
}
