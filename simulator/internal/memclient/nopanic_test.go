package memclient_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/simulator/internal/memclient"
)

// TestUnusualInput: what a caller may pass is answered with an error or
// stored, never a panic.
func TestUnusualInput(t *testing.T) {
	s := runtime.NewScheme()
	require.NoError(t, corev1.AddToScheme(s))
	ctx := context.Background()
	withInt := func(kind string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": kind,
			"metadata": map[string]any{"name": "a", "namespace": "ns"}, "data": map[string]any{"k": "v"}, "x": 1}}
	}
	c, err := memclient.New(memclient.Options{Scheme: s}, withInt("ConfigMap"))
	require.NoError(t, err)
	thing := withInt("Thing")
	thing.SetAPIVersion("example.com/v1")
	thing.Object["spec"] = map[string]any{"replicas": 3, "list": []any{int32(1), uint(2)}}
	require.NoError(t, c.Create(ctx, thing))
	thing.Object["spec"] = map[string]any{"replicas": 4}
	require.NoError(t, c.Update(ctx, thing))
	got := &unstructured.Unstructured{}
	got.SetAPIVersion("example.com/v1")
	got.SetKind("Thing")
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(thing), got))
	require.Equal(t, map[string]any{"replicas": int64(4)}, got.Object["spec"])

	for _, kind := range []string{"ConfigMapList", "DeleteOptions", "Status", "List"} {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind(kind)
		u.SetNamespace("ns")
		u.SetName("x")
		require.ErrorContains(t, c.Create(ctx, u), "no kind of object", kind)
		require.ErrorContains(t, c.Update(ctx, u), "no kind of object", kind)
		_, err := memclient.New(memclient.Options{Scheme: s}, u)
		require.ErrorIs(t, err, memclient.ErrInvalidOptions, kind)
	}
}
