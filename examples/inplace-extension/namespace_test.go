package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
)

func TestWithNamespace(t *testing.T) {
	cluster := types.NamespacedName{Namespace: "default", Name: "demo"}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, "upgradekit-system", nil)
	for _, tc := range []struct {
		name       string
		existing   *corev1.Namespace
		getErr     error // the first Get's error
		wantLabels map[string]string
		wantErr    string
	}{
		{name: "missing: created for privileged pods", wantLabels: map[string]string{
			"pod-security.kubernetes.io/enforce": "privileged", "app.kubernetes.io/managed-by": "upgradekit",
		}},
		{name: "existing and upgradekit's: left as it is",
			existing: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nodepod.DefaultNamespace,
				Labels: map[string]string{"team": "ops", "app.kubernetes.io/managed-by": "upgradekit"}}},
			wantLabels: map[string]string{"team": "ops", "app.kubernetes.io/managed-by": "upgradekit"}},
		{name: "unreadable: no client until it can be read", getErr: forbidden,
			wantErr: "namespace upgradekit-system for the upgrader pods in cluster default/demo: namespaces \"upgradekit-system\" is forbidden",
			wantLabels: map[string]string{
				"pod-security.kubernetes.io/enforce": "privileged", "app.kubernetes.io/managed-by": "upgradekit",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fakeclient.NewClientBuilder().WithScheme(clientgoscheme.Scheme)
			if tc.existing != nil {
				b = b.WithObjects(tc.existing)
			}
			gets, getErr := 0, tc.getErr
			c := b.WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*corev1.Namespace); ok {
					gets++
					if err := getErr; err != nil {
						getErr = nil // the next attempt works
						return err
					}
				}
				return c.Get(ctx, key, obj, opts...)
			}}).Build()
			get := extensionserver.EnsureNamespace(func(_ context.Context, got types.NamespacedName) (client.Client, error) {
				require.Equal(t, cluster, got)
				return c, nil
			}, nodepod.DefaultNamespace)

			wc, err := get(context.Background(), cluster)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				require.True(t, apierrors.IsForbidden(err), "the API error stays inspectable")
				require.Nil(t, wc)
				wc, err = get(context.Background(), cluster) // a failure is not remembered
			}
			require.NoError(t, err)
			var ns corev1.Namespace
			require.NoError(t, wc.Get(context.Background(), types.NamespacedName{Name: nodepod.DefaultNamespace}, &ns))
			require.Equal(t, tc.wantLabels, ns.Labels)

			before := gets
			_, err = get(context.Background(), cluster)
			require.NoError(t, err)
			require.Equal(t, before, gets, "checked once per cluster")
		})
	}
}

// TestWithNamespaceRefusesASquattedNamespace: an upgrader namespace that
// exists without upgradekit's managed-by label (made by someone else, who
// may have put a pod named like an upgrader pod in it) is refused, with
// the reason, and stays refused: no client for that cluster, so nothing is
// drained and no upgrader pod runs there.
func TestWithNamespaceRefusesASquattedNamespace(t *testing.T) {
	cluster := types.NamespacedName{Namespace: "default", Name: "demo"}
	squatted := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nodepod.DefaultNamespace, Labels: map[string]string{"team": "ops"}}}
	for _, tc := range []struct {
		name     string
		existing *corev1.Namespace
		race     bool // the namespace is made by someone else between Get and Create
	}{
		{name: "existing without the label", existing: squatted},
		{name: "made by someone else meanwhile", race: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fakeclient.NewClientBuilder().WithScheme(clientgoscheme.Scheme)
			if tc.existing != nil {
				b = b.WithObjects(tc.existing.DeepCopy())
			}
			if tc.race {
				b = b.WithInterceptorFuncs(interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					if _, ok := obj.(*corev1.Namespace); ok {
						require.NoError(t, c.Create(ctx, squatted.DeepCopy()))
					}
					return c.Create(ctx, obj, opts...)
				}})
			}
			c := b.Build()
			get := extensionserver.EnsureNamespace(func(context.Context, types.NamespacedName) (client.Client, error) { return c, nil }, nodepod.DefaultNamespace)
			for range 2 {
				wc, err := get(context.Background(), cluster)
				require.ErrorIs(t, err, extensionserver.ErrNamespaceNotManaged)
				require.ErrorContains(t, err, "namespace upgradekit-system for the upgrader pods in cluster default/demo: namespace not managed by upgradekit: it exists without the label app.kubernetes.io/managed-by=upgradekit")
				require.Nil(t, wc)
			}
			var ns corev1.Namespace
			require.NoError(t, c.Get(context.Background(), types.NamespacedName{Name: nodepod.DefaultNamespace}, &ns))
			require.Equal(t, map[string]string{"team": "ops"}, ns.Labels, "left as it is")
		})
	}
}
