package clusterapi_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/harness/clusterapi"
)

// TestManagersReconcileAgainstEnvtest starts Cluster API's three managers
// against a real API server and shows the core manager's own Cluster
// controller at work: a Cluster gets Cluster API's finalizer and its
// status conditions, written by Cluster API, not by us.
func TestManagersReconcileAgainstEnvtest(t *testing.T) {
	env := apiserver.StartForTest(t)
	start := time.Now()
	m := clusterapi.StartForTest(t, env)
	t.Logf("three managers ready in %s", time.Since(start).Round(time.Millisecond))

	c := env.Client
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo"},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DockerCluster", Name: "demo"}}}
	require.NoError(t, c.Create(t.Context(), cluster))
	require.Eventually(t, func() bool {
		require.NoError(t, c.Get(t.Context(), client.ObjectKeyFromObject(cluster), cluster))
		return len(cluster.Finalizers) > 0 && len(cluster.Status.Conditions) > 0
	}, 60*time.Second, 200*time.Millisecond, "Cluster API's Cluster controller reconciles the Cluster")
	require.Contains(t, cluster.Finalizers, clusterv1.ClusterFinalizer)

	log, err := os.ReadFile(m.LogPath(clusterapi.ManagerCore))
	require.NoError(t, err)
	require.Contains(t, string(log), `"Starting workers" controller="machine"`, "the Machine controller (UpdateMachine's caller) runs")
	for _, mgr := range []clusterapi.Manager{clusterapi.ManagerKubeadmBootstrap, clusterapi.ManagerKubeadmControlPlane} {
		log, err := os.ReadFile(m.LogPath(mgr))
		require.NoError(t, err)
		require.True(t, strings.Contains(string(log), `"Starting workers"`), "%s runs its controllers", mgr)
	}
	require.NoError(t, m.Stop())
}

// TestManagersAdmitThroughTheirWebhooks: the API server calls the
// managers' own admission webhooks, as in a real management cluster: a
// Machine is defaulted by Cluster API (its cluster-name label) and a
// Machine Cluster API's validation refuses is refused.
func TestManagersAdmitThroughTheirWebhooks(t *testing.T) {
	env := apiserver.StartForTest(t)
	clusterapi.StartForTest(t, env, clusterapi.WithManagers(clusterapi.ManagerCore))
	c := env.Client
	machine := func(name, version string) *clusterv1.Machine {
		return &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: clusterv1.MachineSpec{ClusterName: "demo", Version: version,
				Bootstrap:         clusterv1.Bootstrap{DataSecretName: new("bootstrap")},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DockerMachine", Name: name}}}
	}
	m := machine("m-0", "v1.36.3")
	require.NoError(t, c.Create(t.Context(), m))
	require.Equal(t, "demo", m.Labels[clusterv1.ClusterNameLabel], "defaulted by Cluster API's Machine webhook")

	err := c.Create(t.Context(), machine("m-1", "1.36"))
	require.Error(t, err, "refused by Cluster API's Machine webhook")
	require.Contains(t, err.Error(), "admission webhook")
}
