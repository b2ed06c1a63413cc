package nodepod

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

func TestCreateOrGetDoesNotReadBackACreatedPod(t *testing.T) {
	// A cached client may not see a pod right after creating it; the
	// created object is what Create filled in.
	c := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			return apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, key.Name)
		},
	}).Build()
	pod, err := Build(testPlan(), WithImage("i"), WithNamespace("ns"))
	require.NoError(t, err)
	got, created, err := CreateOrGet(t.Context(), c, pod)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, pod.Name, got.Name)
	require.NotEmpty(t, got.ResourceVersion, "filled in by Create")
	require.Equal(t, pod.Annotations[AnnotationPlanFP], got.Annotations[AnnotationPlanFP])
	require.IsType(t, &corev1.Pod{}, got)
}
