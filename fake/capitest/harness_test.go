package capitest_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/fake"
	"github.com/upgradekit/upgradekit/fake/capitest"
)

// mdMachines returns the MachineDeployment's Machines, by name.
func mdMachines(t *testing.T, c client.Client, md string) map[string]clusterv1.Machine {
	t.Helper()
	var ms clusterv1.MachineList
	require.NoError(t, c.List(t.Context(), &ms, client.InNamespace("default"), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: md}))
	out := map[string]clusterv1.Machine{}
	for _, m := range ms.Items {
		out[m.Name] = m
	}
	return out
}

// running: every machine has its Node and runs at version.
func running(ms map[string]clusterv1.Machine, n int, version string) bool {
	if len(ms) != n {
		return false
	}
	for _, m := range ms {
		if !m.Status.NodeRef.IsDefined() || m.Status.Phase != string(clusterv1.MachinePhaseRunning) || m.Spec.Version != version || m.DeletionTimestamp != nil {
			return false
		}
	}
	return true
}

// TestClusterAPIProvisionsAndRollsOnTheHarness: Cluster API's own
// controllers create a MachineDeployment's machines on the harness's
// provider (the kubeadm bootstrap provider generating join data, the
// Machine controller finding each Node by providerID), and roll them out
// when the infrastructure template changes and no extension is there to
// update them in place: new machines, new Nodes, the old ones gone.
func TestClusterAPIProvisionsAndRollsOnTheHarness(t *testing.T) {
	h := capitest.NewForTest(t)
	ctx, c := t.Context(), h.Env.Client
	objs, err := capitest.ClusterObjects(h.Env, "default", "demo", "v1.31.1")
	require.NoError(t, err)
	require.NoError(t, capitest.Create(ctx, c, objs...))
	require.NoError(t, capitest.Create(ctx, c, capitest.MachineDeploymentObjects("default", "demo", "md", 3, "v1.30.4")...))

	start := time.Now()
	var before map[string]clusterv1.Machine
	require.Eventually(t, func() bool {
		before = mdMachines(t, c, "md")
		return running(before, 3, "v1.30.4")
	}, 2*time.Minute, 200*time.Millisecond, "3 machines provisioned: %v, provider: %v", slices.Collect(mapsKeys(before)), h.Provider.Errors())
	t.Logf("3 machines running in %s", time.Since(start).Round(time.Millisecond))
	for name, m := range before {
		require.Equal(t, capitest.ProviderIDPrefix+"default/"+name, m.Spec.ProviderID)
		require.Equal(t, "v1.30.4", h.Provider.Host(name).RunningVersion(fake.Kubelet))
		var n corev1.Node
		require.NoError(t, c.Get(ctx, client.ObjectKey{Name: name}, &n))
		require.Equal(t, "v1.30.4", n.Status.NodeInfo.KubeletVersion)
	}

	// A new infrastructure template: Cluster API replaces every machine.
	tmpl := &unstructured.Unstructured{}
	tmpl.SetGroupVersionKind(capitest.InfraTemplateGVK)
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
	var after map[string]clusterv1.Machine
	require.Eventually(t, func() bool {
		after = mdMachines(t, c, "md")
		return running(after, 3, "v1.30.4") && !slices.ContainsFunc(slices.Collect(mapsKeys(after)), func(n string) bool { _, old := before[n]; return old })
	}, 3*time.Minute, 200*time.Millisecond, "every machine replaced: before %v, after %v", slices.Collect(mapsKeys(before)), slices.Collect(mapsKeys(after)))
	t.Logf("3 machines replaced in %s", time.Since(start).Round(time.Millisecond))
	for name := range before {
		require.Nil(t, h.Provider.Host(name), "the old machine %s is gone", name)
		require.Eventually(t, func() bool {
			return client.IgnoreNotFound(c.Get(ctx, client.ObjectKey{Name: name}, &corev1.Node{})) == nil &&
				c.Get(ctx, client.ObjectKey{Name: name}, &corev1.Node{}) != nil
		}, 30*time.Second, 100*time.Millisecond, "the old Node %s is deleted", name)
	}
	require.Empty(t, h.Provider.Errors())
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
