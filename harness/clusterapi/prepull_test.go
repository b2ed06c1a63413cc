package clusterapi_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/clusterapi"
	"github.com/upgradekit/upgradekit/nodeexec/drain"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
	"github.com/upgradekit/upgradekit/strategy/capi/workload"
)

// TestAnUnpullableUpgraderImageFailsBeforeTheDrain: a MachineDeployment
// updated in place under Cluster API's own controllers, with an upgrader
// image the nodes' registry does not hold. The pre-pull pod on the node
// fails to pull it (ErrImagePull, then ImagePullBackOff, as the simulated
// kubelet reports them), and UpdateMachine answers Failure naming the
// pull error while the Machine's Node is still schedulable: never
// cordoned, never drained, no upgrader pod, the Machine kept (not
// replaced) and still at its old version.
//
// The pre-pull timeout is 3 s here, not the default 5 minutes: this test
// is about what happens once it passes, and the harness's kubelets report
// a pull failure on their first sync.
func TestAnUnpullableUpgraderImageFailsBeforeTheDrain(t *testing.T) {
	const missing = "registry.example/upgrader:v1.36.3-missing"
	h := clusterapi.NewForTest(t, clusterapi.WithRegistry(simulator.NewRegistry()),
		clusterapi.WithUpgraderImage(upgraderImage, simulator.Staging{Kubernetes: "v1.36.3", Containerd: "2.0.5", CNI: "v1.7.1"}))
	ctx, c := t.Context(), h.Env.Client
	cluster, err := clusterapi.ClusterObjects(h.Env, "default", "demo", "v1.36.3")
	require.NoError(t, err)
	require.NoError(t, clusterapi.Create(ctx, c, cluster...))
	require.NoError(t, clusterapi.Create(ctx, c, clusterapi.MachineDeploymentObjects("default", "demo", "md", 1, "v1.35.4")...))
	wait, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	before, err := clusterapi.WaitForRollout(wait, c, "default", "md", "v1.35.4")
	require.NoError(t, err, "provider: %v", h.Provider.Errors())
	require.Len(t, before, 1)
	var name string
	for n := range before {
		name = n
	}

	mgmt := h.Env.Client
	kubeadm, err := strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...)
	require.NoError(t, err)
	ext, err := capi.NewExtension(strategy.Updaters(kubeadm), capi.ExtensionOptions{Checks: []capi.Check{capi.ControlPlaneSkewCheck(mgmt)}})
	require.NoError(t, err)
	// RetryAfter 1 s instead of 15 s, as in serveMyExtension.
	updater, err := capi.NewMachineUpdater(workload.KubeconfigClient(mgmt, h.Env.Scheme), capi.UpdaterOptions{Clientset: workload.KubeconfigClientset(mgmt), ManagementReader: mgmt, RetryAfter: 1 * time.Second, PrePullTimeout: 3 * time.Second, PodOptions: []nodepod.Option{nodepod.WithImage(missing), nodepod.WithStageFrom("/staging"), nodepod.WithRunnerCommand("/upgrader", "run")}})
	require.NoError(t, err)
	require.NoError(t, mgmt.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nodepod.DefaultNamespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}))
	url, caBundle := clusterapi.ServeForTest(t, append(ext.Handlers("my"), updater.Handler("my"))...)
	_, err = clusterapi.RegisterExtension(wait, c, "my-extension", url, caBundle)
	require.NoError(t, err)

	var md clusterv1.MachineDeployment
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "md"}, &md))
	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Template.Spec.Version = "v1.36.3"
	require.NoError(t, c.Patch(ctx, &md, patch))

	// Poll the Node's condition until the update has failed; meanwhile
	// the node is never cordoned and no upgrader pod is created.
	var cond *corev1.NodeCondition
	for cond == nil || cond.Reason != observe.ReasonFailed {
		select {
		case <-wait.Done():
			t.Fatalf("no Failure on node %s: condition %+v; provider: %v", name, cond, h.Provider.Errors())
		case <-time.After(200 * time.Millisecond):
		}
		var n corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
			continue
		}
		if n.Spec.Unschedulable {
			t.Fatalf("node %s cordoned (annotation %q) with an unpullable upgrader image", name, n.Annotations[drain.AnnotationCordon])
		}
		var pods corev1.PodList
		require.NoError(t, c.List(ctx, &pods, client.MatchingLabelsSelector{Selector: nodepod.Selector()}))
		require.Empty(t, pods.Items, "no upgrader pod")
		cond = observe.InPlaceUpdateCondition(&n)
	}
	t.Logf("node condition: %s", cond.Message)
	require.Contains(t, cond.Message, observe.FailureImagePull+": node "+name+": upgrader image "+missing+" cannot be pulled there:")
	require.Regexp(t, `(ErrImagePull|ImagePullBackOff): .*failed to resolve reference "`+regexp.QuoteMeta(missing)+`": .*: not found`, cond.Message)

	var n corev1.Node
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: name}, &n))
	require.False(t, n.Spec.Unschedulable, "the Machine's Node stays schedulable")
	require.NotContains(t, n.Annotations, drain.AnnotationCordon)
	require.Equal(t, "v1.35.4", h.Provider.Host(name).RunningVersion(simulator.ComponentKubelet))
	var m clusterv1.Machine
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &m), "the Machine is kept, not replaced")
	require.Empty(t, h.Provider.Errors())
}
