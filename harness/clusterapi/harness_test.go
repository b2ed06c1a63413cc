package clusterapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/clusterapi"
	"github.com/upgradekit/upgradekit/simulator"
)

// TestClusterAPIProvisionsAndRollsOnTheHarness: Cluster API's own
// controllers create a MachineDeployment's machines on the harness's
// provider (the kubeadm bootstrap provider generating join data, the
// Machine controller finding each Node by providerID), and roll them out
// when the infrastructure template changes and no extension is there to
// update them in place: new machines, new Nodes, the old ones gone.
func TestClusterAPIProvisionsAndRollsOnTheHarness(t *testing.T) {
	h := clusterapi.NewForTest(t)
	ctx, c := t.Context(), h.Env.Client
	objs, err := clusterapi.ClusterObjects(h.Env, "default", "demo", "v1.36.3")
	require.NoError(t, err)
	require.NoError(t, clusterapi.Create(ctx, c, objs...))
	require.NoError(t, clusterapi.Create(ctx, c, clusterapi.MachineDeploymentObjects("default", "demo", "md", 3, "v1.35.4")...))

	start := time.Now()
	wait, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	before, err := clusterapi.WaitForRollout(wait, c, "default", "md", "v1.35.4")
	require.NoError(t, err, "provider: %v", h.Provider.Errors())
	t.Logf("3 machines running in %s", time.Since(start).Round(time.Millisecond))
	for name, m := range before {
		require.Equal(t, clusterapi.ProviderIDPrefix+"default/"+name, m.Spec.ProviderID)
		require.Equal(t, "v1.35.4", h.Provider.Host(name).RunningVersion(simulator.ComponentKubelet))
		var n corev1.Node
		require.NoError(t, c.Get(ctx, client.ObjectKey{Name: name}, &n))
		require.Equal(t, "v1.35.4", n.Status.NodeInfo.KubeletVersion)
	}

	// A new infrastructure template: Cluster API replaces every machine.
	tmpl := &unstructured.Unstructured{}
	tmpl.SetGroupVersionKind(clusterapi.InfraTemplateGVK)
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "md-0"}, tmpl))
	tmpl.SetResourceVersion("")
	tmpl.SetUID("")
	tmpl.SetName("md-1")
	require.NoError(t, unstructured.SetNestedField(tmpl.Object, "test-image-2", "spec", "template", "spec", "image"))
	require.NoError(t, c.Create(ctx, tmpl))
	var md clusterv1.MachineDeployment
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "md"}, &md))
	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Template.Spec.InfrastructureRef.Name = "md-1"
	require.NoError(t, c.Patch(ctx, &md, patch))

	start = time.Now()
	after, err := clusterapi.WaitForRollout(wait, c, "default", "md", "v1.35.4")
	require.NoError(t, err, "provider: %v", h.Provider.Errors())
	for name := range after {
		require.NotContains(t, before, name, "every machine replaced")
	}
	t.Logf("3 machines replaced in %s", time.Since(start).Round(time.Millisecond))
	for name := range before {
		require.Eventually(t, func() bool {
			return h.Provider.Host(name) == nil && apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Name: name}, &corev1.Node{}))
		}, 30*time.Second, 100*time.Millisecond, "the old machine %s and its Node are gone", name)
	}
	require.Empty(t, h.Provider.Errors())
}
