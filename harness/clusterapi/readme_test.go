package clusterapi_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/clusterapi"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/workload"
)

const upgraderImage = "registry.example/upgrader:v1.36.3"

// README:begin
func TestMyExtensionUnderClusterAPI(t *testing.T) {
	// envtest, Cluster API's own managers (InPlaceUpdates on), and a
	// provider whose simulated nodes run the upgrader image's bundle.
	h := clusterapi.NewForTest(t, clusterapi.WithUpgraderImage(upgraderImage,
		simulator.Staging{Kubernetes: "v1.36.3", Containerd: "2.0.5", CNI: "v1.7.1"}))
	ctx, c := t.Context(), h.Env.Client

	// A workload cluster: a control plane at v1.36.3, two workers at v1.35.4.
	cluster, err := clusterapi.ClusterObjects(h.Env, "default", "demo", "v1.36.3")
	require.NoError(t, err)
	require.NoError(t, clusterapi.Create(ctx, c, cluster...))
	require.NoError(t, clusterapi.Create(ctx, c, clusterapi.MachineDeploymentObjects("default", "demo", "md", 2, "v1.35.4")...))
	wait, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	before, err := clusterapi.WaitForRollout(wait, c, "default", "md", "v1.35.4")
	require.NoError(t, err)

	// Your extension, over HTTPS, registered as users do: an ExtensionConfig.
	url, caBundle := serveMyExtension(t, h)
	_, err = clusterapi.RegisterExtension(wait, c, "my-extension", url, caBundle)
	require.NoError(t, err)

	// Cluster API rolls the MachineDeployment to v1.36.3 through your hooks.
	var md clusterv1.MachineDeployment
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "md"}, &md))
	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Template.Spec.Version = "v1.36.3"
	require.NoError(t, c.Patch(ctx, &md, patch))
	after, err := clusterapi.WaitForRollout(wait, c, "default", "md", "v1.36.3")
	require.NoError(t, err)
	for name := range before {
		require.Contains(t, after, name, "updated in place, not replaced")
		require.Equal(t, "v1.36.3", h.Provider.Host(name).RunningVersion(simulator.ComponentKubelet))
	}
}

// README:end

// serveMyExtension serves an in-place extension built on strategy/capi
// (Kubernetes versions only) with clusterapi.ServeForTest until the test
// ends, and returns its URL and CA bundle.
func serveMyExtension(t *testing.T, h *clusterapi.Harness) (string, []byte) {
	t.Helper()
	mgmt := h.Env.Client
	kubeadm, err := strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...)
	require.NoError(t, err)
	ext, err := capi.NewExtension(strategy.Updaters(kubeadm), capi.ExtensionOptions{Checks: []capi.Check{capi.ControlPlaneSkewCheck(mgmt)}})
	require.NoError(t, err)
	// RetryAfter 1 s, not the default 15 s: Cluster API calls
	// UpdateMachine again after it, and the harness's steps take no time,
	// so the default would only make the test wait; nothing here depends
	// on its length.
	updater, err := capi.NewMachineUpdater(workload.KubeconfigClient(mgmt, h.Env.Scheme), capi.UpdaterOptions{Clientset: workload.KubeconfigClientset(mgmt), ManagementReader: mgmt, RetryAfter: 1 * time.Second, PodOptions: []nodepod.Option{nodepod.WithImage(upgraderImage), nodepod.WithStageFrom("/staging"), nodepod.WithRunnerCommand("/upgrader", "run")}})
	require.NoError(t, err)
	// The upgrader pods' namespace in the workload cluster (here: the same
	// API server).
	require.NoError(t, mgmt.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nodepod.DefaultNamespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}))

	return clusterapi.ServeForTest(t, append(ext.Handlers("my"), updater.Handler("my"))...)
}

// TestREADMEShowsTheHarnessTest: the README's harness snippet is
// TestMyExtensionUnderClusterAPI as compiled and run here, word for word.
func TestREADMEShowsTheHarnessTest(t *testing.T) {
	src, err := os.ReadFile("readme_test.go")
	require.NoError(t, err)
	begin, end := "// README:"+"begin\n", "\n// README:"+"end"
	s := string(src)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	require.True(t, i >= 0 && j > i, "markers in readme_test.go")
	snippet := strings.TrimSpace(s[i+len(begin) : j])
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	require.Contains(t, string(readme), "```go\n"+snippet+"\n```", "README.md must show TestMyExtensionUnderClusterAPI as it is in harness/clusterapi/readme_test.go")
}
