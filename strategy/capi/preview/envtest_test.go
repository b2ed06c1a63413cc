package preview_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/harness/clusterapi"
	"github.com/upgradekit/upgradekit/nodeexec/drain"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
	"github.com/upgradekit/upgradekit/strategy/capi/preview"
)

// startEnv starts envtest with Cluster API's and the test provider's CRDs.
func startEnv(t testing.TB) *apiserver.Env {
	t.Helper()
	return apiserver.StartForTest(t, apiserver.WithCRDs(clusterapi.InfrastructureCRDs()...))
}

// kubeconfigFor creates the kubeconfig secret Cluster API writes for the
// cluster default/name, reaching env: without it the extension cannot reach
// the workload cluster and declines every change (WorkloadReachableCheck).
func kubeconfigFor(t testing.TB, env *apiserver.Env, name string) {
	t.Helper()
	s, err := env.KubeconfigSecret("default", name)
	require.NoError(t, err)
	require.NoError(t, env.Client.Create(t.Context(), s))
}

// The versions of TestReadAndPredictAgainstAPIServer and
// TestAThousandMachines: the control plane takes Cluster API v1.14's
// newest supported step, v1.35 -> v1.36, and the workers, a minor behind
// it, go to its version today (a worker is never newer than its control
// plane).
const (
	cpFrom, cpTo = "v1.35.4", "v1.36.3"
	workersFrom  = "v1.34.4"
)

func TestReadAndPredictAgainstAPIServer(t *testing.T) {
	env := startEnv(t)
	c, ctx := env.Client, t.Context()
	require.NoError(t, clusterapi.ProvisionedCluster{Name: "small", Version: cpFrom, WorkerVersion: workersFrom, ControlPlane: 3, ControlPlaneSurge: 1,
		Workers: map[string]int{"md-a": 3, "md-b": 2}, Nodes: true}.Create(ctx, c))
	kubeconfigFor(t, env, "small")
	srv, err := extensionserver.New(c, extensionserver.Options{UpgraderImage: "registry.example/upgrader:any", AllowMutableUpgraderImages: true, AllowUnverifiedBundles: true})
	require.NoError(t, err)

	snap, err := preview.Read(ctx, c, client.ObjectKey{Namespace: "default", Name: "small"})
	require.NoError(t, err)
	require.Len(t, snap.Machines, 8)
	require.Len(t, snap.KubeadmConfigs, 8)
	require.Len(t, snap.InfraMachines, 8)
	require.NotNil(t, snap.ControlPlane)

	pr, err := preview.Predict(ctx, c, snap, nil, srv.Extension())
	require.NoError(t, err)
	t.Logf("no change:\n%s", pr)
	for _, m := range pr.Machines {
		require.Equal(t, strategy.MethodSkip, m.Method, "%s: %s", m.Name, m.Reason)
	}

	// The change: the control plane to v1.36.3 (its KubeadmConfigs losing
	// the ControlPlaneKubeletLocalMode gate Cluster API sets up to v1.35),
	// md-a to v1.35.4 (the control plane's version now), md-b to a new
	// image; a pod that opted
	// out of disruption on md-a's first node and one no budget lets go on
	// md-b's.
	var kcp controlplanev1.KubeadmControlPlane
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "small-cp"}, &kcp))
	kcp.Spec.Version = cpTo
	var mdA, mdB clusterv1.MachineDeployment
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "md-a"}, &mdA))
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "md-b"}, &mdB))
	mdA.Spec.Template.Spec.Version = cpFrom
	mdB.Spec.Template.Spec.InfrastructureRef.Name = "md-b-1"
	newTemplate := &unstructured.Unstructured{}
	newTemplate.SetGroupVersionKind(clusterapi.InfraTemplateGVK)
	newTemplate.SetName("md-b-1")
	newTemplate.Object["spec"] = map[string]any{"template": map[string]any{"spec": map[string]any{"image": "test-image-2"}}}
	change := []*unstructured.Unstructured{toUnstructured(t, &kcp, "KubeadmControlPlane", controlplanev1.GroupVersion.String()),
		toUnstructured(t, &mdA, "MachineDeployment", clusterv1.GroupVersion.String()), toUnstructured(t, &mdB, "MachineDeployment", clusterv1.GroupVersion.String()), newTemplate}

	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}))
	rs := []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "44444444-4444-4444-4444-444444444444", Controller: ptr.To(true)}}
	require.NoError(t, c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "solo", Annotations: map[string]string{"karpenter.sh/do-not-disrupt": "true"}, OwnerReferences: rs},
		Spec: corev1.PodSpec{NodeName: "md-a-abcde-0000", Containers: []corev1.Container{{Name: "c", Image: "registry.example/solo:1"}}}}))
	require.NoError(t, c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "quiet", Annotations: map[string]string{"karpenter.sh/do-not-disrupt": "true"}, OwnerReferences: rs},
		Spec: corev1.PodSpec{NodeName: "md-b-abcde-0001", Containers: []corev1.Container{{Name: "c", Image: "registry.example/solo:1"}}}}))
	require.NoError(t, c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "db-0", Labels: map[string]string{"app": "db"}, OwnerReferences: rs},
		Spec: corev1.PodSpec{NodeName: "md-b-abcde-0000", Containers: []corev1.Container{{Name: "c", Image: "registry.example/db:1"}}}}))
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "db"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}
	require.NoError(t, c.Create(ctx, pdb))
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DisruptionsAllowed: 0, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	require.NoError(t, c.Status().Update(ctx, pdb))

	// Cluster API's drain rules, which both drains follow: a bare pod is
	// evicted (with a warning), a pod labelled cluster.x-k8s.io/drain=skip
	// is left alone (its opt-out annotation then stops nothing), and a
	// MachineDrainRule for md-a's Machines skips the db pods there, but
	// not on md-b.
	require.NoError(t, c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "debug"},
		Spec: corev1.PodSpec{NodeName: "md-a-abcde-0001", Containers: []corev1.Container{{Name: "c", Image: "registry.example/debug:1"}}}}))
	require.NoError(t, c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "cache", Labels: map[string]string{clusterv1.PodDrainLabel: "skip"},
		Annotations: map[string]string{"karpenter.sh/do-not-disrupt": "true"}, OwnerReferences: rs},
		Spec: corev1.PodSpec{NodeName: "md-a-abcde-0001", Containers: []corev1.Container{{Name: "c", Image: "registry.example/cache:1"}}}}))
	require.NoError(t, c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "db-1", Labels: map[string]string{"app": "db"}, OwnerReferences: rs},
		Spec: corev1.PodSpec{NodeName: "md-a-abcde-0002", Containers: []corev1.Container{{Name: "c", Image: "registry.example/db:1"}}}}))
	require.NoError(t, c.Create(ctx, &clusterv1.MachineDrainRule{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "keep-db-on-md-a"},
		Spec: clusterv1.MachineDrainRuleSpec{
			Drain:    clusterv1.MachineDrainRuleDrainConfig{Behavior: clusterv1.MachineDrainRuleDrainBehaviorSkip},
			Machines: []clusterv1.MachineDrainRuleMachineSelector{{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: "md-a"}}}},
			Pods:     []clusterv1.MachineDrainRulePodSelector{{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}},
		}}))

	snap, err = preview.Read(ctx, c, client.ObjectKey{Namespace: "default", Name: "small"},
		preview.WithWorkload(func(context.Context, client.ObjectKey) (client.Client, error) { return c, nil }))
	require.NoError(t, err)
	require.Len(t, snap.Nodes, 8)
	require.Len(t, snap.MachineDrainRules, 1)
	pr, err = preview.Predict(ctx, c, snap, change, srv.Extension(), preview.WithServerDryRun())
	require.NoError(t, err)
	t.Logf("change:\n%s", pr)
	// KubeadmControlPlane reaches the oldest first (creation time, then
	// name): the newest is the one deleted after the surge.
	cps := slices.Clone(snap.Machines[5:])
	slices.SortStableFunc(cps, func(a, b *clusterv1.Machine) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	for _, m := range cps[:2] {
		p, ok := pr.Machine(m.Name)
		require.True(t, ok, m.Name)
		require.Equal(t, strategy.MethodInPlace, p.Method, p.Reason)
		require.Equal(t, []string{"kubeadm"}, p.Updaters, "the gate's removal goes with the version")
		require.Equal(t, []string{"machine.spec.version", "bootstrap.spec.clusterConfiguration.featureGates.ControlPlaneKubeletLocalMode"}, p.InPlaceFields)
	}
	last, _ := pr.Machine(cps[2].Name)
	require.Equal(t, strategy.MethodReplace, last.Method, "maxSurge 1: the last one is deleted, not updated")
	require.Contains(t, last.Reason, "maxSurge 1")
	for _, n := range []string{"md-a-abcde-0001", "md-a-abcde-0002"} {
		m, _ := pr.Machine(n)
		require.Equal(t, strategy.MethodInPlace, m.Method, m.Reason)
		require.Equal(t, []string{"kubeadm"}, m.Updaters)
	}
	optedOut, _ := pr.Machine("md-a-abcde-0000")
	require.Equal(t, strategy.MethodBlocked, optedOut.Method, "our drain honours the opt-out")
	require.Contains(t, optedOut.Reason, "karpenter.sh/do-not-disrupt=true")
	replaced, _ := pr.Machine("md-b-abcde-0001")
	require.Equal(t, strategy.MethodReplace, replaced.Method, "Cluster API's drain does not know Karpenter's opt-out: %s", replaced.Reason)
	require.Equal(t, []string{"infrastructure.spec.template.spec.image (InfrastructureImage)"}, replaced.ReplaceFields)
	pinned, _ := pr.Machine("md-b-abcde-0000")
	require.Equal(t, strategy.MethodBlocked, pinned.Method, "a PodDisruptionBudget holds Cluster API's drain too")
	require.Contains(t, pinned.Reason, "PDB apps/db")
	require.Equal(t, map[strategy.Method]int{strategy.MethodInPlace: 4, strategy.MethodReplace: 2, strategy.MethodBlocked: 2}, pr.Count())

	// A pod labelled wait-completed: never evicted, the drain waits for
	// it to complete, by either drain.
	require.NoError(t, c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "batch", Labels: map[string]string{clusterv1.PodDrainLabel: "wait-completed"}, OwnerReferences: rs},
		Spec: corev1.PodSpec{NodeName: "md-b-abcde-0001", Containers: []corev1.Container{{Name: "c", Image: "registry.example/batch:1"}}}}))
	snap, err = preview.Read(ctx, c, client.ObjectKey{Namespace: "default", Name: "small"},
		preview.WithWorkload(func(context.Context, client.ObjectKey) (client.Client, error) { return c, nil }))
	require.NoError(t, err)
	require.Equal(t, []drain.BlockedPod{{Namespace: "apps", Name: "batch", WaitsForCompletion: true,
		Reason: "the drain waits for it to complete (label cluster.x-k8s.io/drain=wait-completed); never evicted"},
		{Namespace: "apps", Name: "quiet", Reason: "annotation karpenter.sh/do-not-disrupt=true"}}, snap.DrainBlockers["md-b-abcde-0001"])
	pr, err = preview.Predict(ctx, c, snap, change, srv.Extension(), preview.WithServerDryRun())
	require.NoError(t, err)
	waits, _ := pr.Machine("md-b-abcde-0001")
	require.Equal(t, strategy.MethodBlocked, waits.Method, "Cluster API's drain waits for it too")
	require.Contains(t, waits.Reason, "to be replaced, but the drain of node md-b-abcde-0001 will wait: apps/batch: the drain waits for it to complete")
}

func toUnstructured(t *testing.T, obj client.Object, kind, apiVersion string) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	require.NoError(t, err)
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	return u
}

// TestAThousandMachines reads and plans a cluster of 1,003 machines (three
// control planes, four MachineDeployments of 250) with its Nodes, for a
// change that touches every machine, and logs how long each part takes.
// The figure is reported in BENCHMARKS.md; it is measured here, not
// asserted (this machine is shared).
func TestAThousandMachines(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: creates 4,000 objects")
	}
	env := startEnv(t)
	c, ctx := env.Client, t.Context()
	start := time.Now()
	groups := map[string]int{"md-0": 250, "md-1": 250, "md-2": 250, "md-3": 250}
	require.NoError(t, clusterapi.ProvisionedCluster{Name: "big", Version: cpFrom, WorkerVersion: workersFrom, ControlPlane: 3, Workers: groups, Nodes: true}.Create(ctx, c))
	kubeconfigFor(t, env, "big")
	t.Logf("created 1,003 machines with their KubeadmConfigs, infrastructure machines and Nodes in %s", time.Since(start).Round(time.Millisecond))
	srv, err := extensionserver.New(c, extensionserver.Options{UpgraderImage: "registry.example/upgrader:any", AllowMutableUpgraderImages: true, AllowUnverifiedBundles: true})
	require.NoError(t, err)

	var change []*unstructured.Unstructured
	var kcp controlplanev1.KubeadmControlPlane
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "big-cp"}, &kcp))
	kcp.Spec.Version = cpTo
	change = append(change, toUnstructured(t, &kcp, "KubeadmControlPlane", controlplanev1.GroupVersion.String()))
	for md := range groups {
		var d clusterv1.MachineDeployment
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: md}, &d))
		d.Spec.Template.Spec.Version = cpFrom
		change = append(change, toUnstructured(t, &d, "MachineDeployment", clusterv1.GroupVersion.String()))
	}

	var best [3]time.Duration
	for run := range 3 {
		t0 := time.Now()
		snap, err := preview.Read(ctx, c, client.ObjectKey{Namespace: "default", Name: "big"},
			preview.WithWorkload(func(context.Context, client.ObjectKey) (client.Client, error) { return c, nil }))
		require.NoError(t, err)
		t1 := time.Now()
		pr, err := preview.Predict(ctx, c, snap, change, srv.Extension())
		require.NoError(t, err)
		t2 := time.Now()
		require.Len(t, pr.Machines, 1003)
		require.Equal(t, map[strategy.Method]int{strategy.MethodInPlace: 1003}, pr.Count())
		d := [3]time.Duration{t1.Sub(t0), t2.Sub(t1), t2.Sub(t0)}
		if run == 0 || d[2] < best[2] {
			best = d
		}
	}
	t.Logf("1,003 machines, best of 3: read %s (Cluster API objects and Nodes), predict %s, total %s",
		best[0].Round(time.Millisecond), best[1].Round(time.Millisecond), best[2].Round(time.Millisecond))
}

// TestTopologyVersionAndChecks: a managed topology's new version reaches
// the control plane and the MachineDeployments it owns (the control plane
// first), other topology changes are refused; the extension's checks show
// as Cluster API will see them: a worker above its control plane and a
// version without an upgrader image are declined, so replaced.
func TestTopologyVersionAndChecks(t *testing.T) {
	env := startEnv(t)
	c, ctx := env.Client, t.Context()
	require.NoError(t, clusterapi.ProvisionedCluster{Name: "topo", Version: cpFrom, ControlPlane: 1,
		Workers: map[string]int{"managed": 2, "own": 1}, Nodes: true}.Create(ctx, c))
	kubeconfigFor(t, env, "topo")
	var cluster clusterv1.Cluster
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "topo"}, &cluster))
	cluster.Spec.Topology = clusterv1.Topology{ClassRef: clusterv1.ClusterClassRef{Name: "quick-start"}, Version: cpFrom}
	require.NoError(t, c.Update(ctx, &cluster))
	var managed clusterv1.MachineDeployment
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "managed"}, &managed))
	managed.Labels[clusterv1.ClusterTopologyOwnedLabel] = ""
	require.NoError(t, c.Update(ctx, &managed))
	snap, err := preview.Read(ctx, c, client.ObjectKey{Namespace: "default", Name: "topo"})
	require.NoError(t, err)
	images := capi.ImagesByVersion{cpTo: "registry.example/upgrader:" + cpTo}
	srv, err := extensionserver.New(c, extensionserver.Options{AllowMutableUpgraderImages: true, AllowUnverifiedBundles: true, UpdaterOptions: capi.UpdaterOptions{Images: images}})
	require.NoError(t, err)

	bumped := cluster.DeepCopy()
	bumped.Spec.Topology.Version = cpTo
	change := []*unstructured.Unstructured{toUnstructured(t, bumped, "Cluster", clusterv1.GroupVersion.String())}
	inProcess, err := preview.NewInProcess(c, func(mgmt client.Reader) (preview.Answerer, error) {
		srv, err := extensionserver.New(mgmt, extensionserver.Options{AllowMutableUpgraderImages: true, AllowUnverifiedBundles: true, UpdaterOptions: capi.UpdaterOptions{Images: images}})
		if err != nil {
			return nil, err
		}
		return srv.Extension(), nil
	})
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		ans    preview.Answerer
		worker strategy.Method
		says   string
	}{
		// Rebuilt over the cluster as it will be when Cluster API asks:
		// the topology controller moves the MachineDeployment once the
		// control plane runs v1.36.3, so the skew check passes.
		{"in-process", inProcess, strategy.MethodInPlace, "CanUpdateMachineSet accepts"},
		// Asked over today's cluster, the skew check sees the control
		// plane at v1.35.4 and declines; the reason says the answer may
		// differ when Cluster API asks.
		{"as-is", srv.Extension(), strategy.MethodReplace, "newer than the control plane"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr, err := preview.Predict(ctx, c, snap, change, tc.ans)
			require.NoError(t, err)
			t.Logf("topology version:\n%s", pr)
			require.True(t, pr.ControlPlaneFirst)
			cp, _ := pr.Machine("topo-cp-0")
			require.Equal(t, strategy.MethodInPlace, cp.Method, cp.Reason)
			require.Equal(t, cpTo, cp.ToVersion)
			require.Empty(t, cp.Steps, "one minor: one step")
			require.Contains(t, cp.InPlaceFields, "bootstrap.spec.clusterConfiguration.featureGates.ControlPlaneKubeletLocalMode", "v1.35 -> v1.36 drops the gate, in place with the version")
			workers := 0
			for _, m := range pr.Machines {
				switch m.Group {
				case "managed":
					workers++
					require.Equal(t, cpTo, m.ToVersion, "the topology controller writes the version to the MachineDeployments it owns")
					require.Equal(t, tc.worker, m.Method, m.Reason)
					require.Contains(t, m.Reason, tc.says)
					if tc.ans != inProcess {
						require.Contains(t, m.Reason, "answered over the cluster as it is now")
					}
				case "own":
					require.Equal(t, strategy.MethodSkip, m.Method, "not owned by the topology")
				}
			}
			require.Equal(t, 2, workers)
			require.Equal(t, pr.Groups[0].Estimate+pr.Groups[1].Estimate, pr.Estimate, "control plane, then the workers")
			require.Contains(t, pr.Groups[0].OnFailure, "KubeadmControlPlane waits for that machine and touches no other", "what a failed update does")
			require.Contains(t, strings.Join(pr.Notes, "\n"), "ClusterClass default/quick-start not found")
		})
	}

	reshaped := cluster.DeepCopy()
	reshaped.Spec.Topology.Workers.MachineDeployments = []clusterv1.MachineDeploymentTopology{{Class: "default-worker", Name: "md-0"}}
	_, err = preview.Predict(ctx, c, snap, []*unstructured.Unstructured{toUnstructured(t, reshaped, "Cluster", clusterv1.GroupVersion.String())}, srv.Extension())
	require.ErrorIs(t, err, preview.ErrInvalidChange)
	require.ErrorContains(t, err, "only spec.topology.version")

	// A version no upgrader image is listed for: a Failure at CanUpdate*
	// (Cluster API waits and asks again, goes on in place once the image
	// is listed), not a decline it would remember.
	var own clusterv1.MachineDeployment
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "own"}, &own))
	own.Spec.Template.Spec.Version = "v1.35.5"
	pr, err := preview.Predict(ctx, c, snap, []*unstructured.Unstructured{toUnstructured(t, &own, "MachineDeployment", clusterv1.GroupVersion.String())}, srv.Extension())
	require.NoError(t, err)
	m, _ := pr.Machine("own-abcde-0000")
	require.Equal(t, strategy.MethodBlocked, m.Method)
	require.Contains(t, m.Reason, "no upgrader image for v1.35.5", m.Reason)
}

// TestTopologyChainedUpgrade: a managed topology whose ClusterClass lists
// v1.35.4, v1.36.3 and v1.37.2 is bumped two minors. Cluster API plans the
// control plane through v1.36.3 and the workers in one step to v1.37.2
// once the control plane runs it (the plan TestUpgradePlanIsClusterAPIs
// holds to Cluster API's). Answered in process over the cluster as it will
// be, the control plane machine is updated in place twice and the
// workers' step, which skips a minor, is declined: replaced. That is what
// Cluster API's own managers do in examples/inplace-extension's
// TestClusterAPIChainsATopologyUpgrade, which runs the same preview.
func TestTopologyChainedUpgrade(t *testing.T) {
	const skip = "v1.37.2"
	env := startEnv(t)
	c, ctx := env.Client, t.Context()
	require.NoError(t, clusterapi.ProvisionedCluster{Name: "chain", Version: cpFrom, ControlPlane: 1, Workers: map[string]int{"managed": 2}, Nodes: true}.Create(ctx, c))
	kubeconfigFor(t, env, "chain")
	class := &clusterv1.ClusterClass{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "chain-class"}}
	class.Spec.KubernetesVersions = []string{cpFrom, cpTo, skip}
	class.Spec.Infrastructure.TemplateRef = clusterv1.ClusterClassTemplateReference{APIVersion: "infrastructure.cluster.x-k8s.io/v1beta2", Kind: "TestClusterTemplate", Name: "unused"}
	class.Spec.ControlPlane.TemplateRef = clusterv1.ClusterClassTemplateReference{APIVersion: controlplanev1.GroupVersion.String(), Kind: "KubeadmControlPlaneTemplate", Name: "unused"}
	require.NoError(t, c.Create(ctx, class))
	var cluster clusterv1.Cluster
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "chain"}, &cluster))
	cluster.Spec.Topology = clusterv1.Topology{ClassRef: clusterv1.ClusterClassRef{Name: class.Name}, Version: cpFrom}
	require.NoError(t, c.Update(ctx, &cluster))
	var managed clusterv1.MachineDeployment
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "managed"}, &managed))
	managed.Labels[clusterv1.ClusterTopologyOwnedLabel] = ""
	require.NoError(t, c.Update(ctx, &managed))
	snap, err := preview.Read(ctx, c, client.ObjectKey{Namespace: "default", Name: "chain"})
	require.NoError(t, err)
	images := capi.ImagesByVersion{cpTo: "registry.example/upgrader:" + cpTo, skip: "registry.example/upgrader:" + skip}
	build := func(mgmt client.Reader) (preview.Answerer, error) {
		srv, err := extensionserver.New(mgmt, extensionserver.Options{AllowMutableUpgraderImages: true, AllowUnverifiedBundles: true, UpdaterOptions: capi.UpdaterOptions{Images: images}})
		if err != nil {
			return nil, err
		}
		return srv.Extension(), nil
	}
	inProcess, err := preview.NewInProcess(c, build)
	require.NoError(t, err)
	bumped := cluster.DeepCopy()
	bumped.Spec.Topology.Version = skip
	change := []*unstructured.Unstructured{toUnstructured(t, bumped, "Cluster", clusterv1.GroupVersion.String())}

	pr, err := preview.Predict(ctx, c, snap, change, inProcess)
	require.NoError(t, err)
	t.Logf("chained:\n%s", pr)
	cp, _ := pr.Machine("chain-cp-0")
	require.Equal(t, strategy.MethodInPlace, cp.Method, cp.Reason)
	require.Equal(t, cpFrom, cp.FromVersion)
	require.Equal(t, skip, cp.ToVersion)
	require.Len(t, cp.Steps, 2, "one step per minor")
	for i, want := range [][2]string{{cpFrom, cpTo}, {cpTo, skip}} {
		st := cp.Steps[i]
		require.Equal(t, want, [2]string{st.FromVersion, st.ToVersion})
		require.Equal(t, strategy.MethodInPlace, st.Method, st.Reason)
		require.Contains(t, st.Updaters, "kubeadm")
	}
	require.Contains(t, cp.Reason, "in place 2 times ("+cpFrom+" -> "+cpTo+" -> "+skip+")")
	workers := 0
	for _, m := range pr.Machines {
		if m.Group != "managed" {
			continue
		}
		workers++
		require.Equal(t, strategy.MethodReplace, m.Method, "the workers' one step skips a minor: %s", m.Reason)
		require.Contains(t, m.Reason, "CanUpdateMachineSet declines")
		require.NotContains(t, m.Reason, "newer than the control plane", "asked with the control plane at %s", skip)
		require.Empty(t, m.Steps, "the workers go in one step")
		require.Equal(t, skip, m.ToVersion)
	}
	require.Equal(t, 2, workers)
	require.Contains(t, strings.Join(pr.Notes, "\n"), "through "+cpTo+", "+skip+", one minor at a time")
	d := preview.DefaultTimings()
	require.Equal(t, 2*(d.Drain+d.Updaters["kubeadm"]), cp.Estimate, "two drains and two kubeadm upgrades")
	require.Equal(t, pr.Groups[0].Estimate+pr.Groups[1].Estimate, pr.Estimate, "the control plane's steps, then the workers")
	var table strings.Builder
	require.NoError(t, pr.WriteTable(&table))
	require.Contains(t, table.String(), cpFrom+" -> "+cpTo+" -> "+skip, "the table shows the steps")
	js, err := pr.JSON()
	require.NoError(t, err)
	require.Contains(t, string(js), `"steps":`, "and JSON")

	// Asked as things are now (as a deployed extension is): the control
	// plane's steps are answered alike, the second one with the caveat
	// that it was asked over today's cluster; the workers' step is
	// declined (it skips a minor), with the same caveat.
	plain, err := build(c)
	require.NoError(t, err)
	pr, err = preview.Predict(ctx, c, snap, change, plain)
	require.NoError(t, err)
	t.Logf("chained, asked as things are now:\n%s", pr)
	cp, _ = pr.Machine("chain-cp-0")
	require.Len(t, cp.Steps, 2)
	require.Equal(t, strategy.MethodInPlace, cp.Steps[0].Method, cp.Steps[0].Reason)
	require.NotContains(t, cp.Steps[0].Reason, "answered over the cluster as it is now", "the first step is asked of today's cluster")
	require.Equal(t, strategy.MethodInPlace, cp.Steps[1].Method, cp.Steps[1].Reason)
	require.Contains(t, cp.Steps[1].Reason, "answered over the cluster as it is now")
	w, _ := pr.Machine("managed-abcde-0000")
	require.Equal(t, strategy.MethodReplace, w.Method, w.Reason)
	require.Contains(t, w.Reason, "skips a minor")
	require.Contains(t, w.Reason, "answered over the cluster as it is now")
	require.Contains(t, strings.Join(pr.Notes, "\n"), "--mode in-process answers over the cluster as it will be")

	// The control plane's first step blocked (no upgrader image for
	// v1.36.3: CanUpdateMachine answers a Failure, Cluster API waits): its
	// later step waits, and so do the workers, which Cluster API moves only
	// once the control plane runs their version.
	noFirst, err := preview.NewInProcess(c, func(mgmt client.Reader) (preview.Answerer, error) {
		srv, err := extensionserver.New(mgmt, extensionserver.Options{AllowMutableUpgraderImages: true, AllowUnverifiedBundles: true,
			UpdaterOptions: capi.UpdaterOptions{Images: capi.ImagesByVersion{skip: images[skip]}}})
		if err != nil {
			return nil, err
		}
		return srv.Extension(), nil
	})
	require.NoError(t, err)
	pr, err = preview.Predict(ctx, c, snap, change, noFirst)
	require.NoError(t, err)
	cp, _ = pr.Machine("chain-cp-0")
	require.Equal(t, strategy.MethodBlocked, cp.Method, cp.Reason)
	require.Len(t, cp.Steps, 1, "the step to v1.37.2 is never asked")
	w, _ = pr.Machine("managed-abcde-0000")
	require.Equal(t, strategy.MethodBlocked, w.Method, w.Reason)
	require.Contains(t, w.Reason, "waits for the control plane, blocked at its step to "+cpTo)
	require.Contains(t, strings.Join(pr.Notes, "\n"), "the control plane's step to "+cpTo+" is blocked: its later steps ("+skip+") wait")

	// An InProcess not made by NewInProcess is refused.
	_, err = preview.Predict(ctx, c, snap, change, &preview.InProcess{})
	require.ErrorIs(t, err, preview.ErrInvalidArgument)

	// A control plane rollout in progress (the KubeadmControlPlane at
	// v1.36.3, its machine still at v1.35.4) ends before the topology
	// controller moves it on: the machine steps to v1.36.3 first, then
	// v1.37.2, never two minors at once.
	var kcp controlplanev1.KubeadmControlPlane
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "chain-cp"}, &kcp))
	kcp.Spec.Version = cpTo
	require.NoError(t, c.Update(ctx, &kcp))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(&cluster), &cluster))
	cluster.Spec.Topology.Version = cpTo
	require.NoError(t, c.Update(ctx, &cluster))
	midway, err := preview.Read(ctx, c, client.ObjectKey{Namespace: "default", Name: "chain"})
	require.NoError(t, err)
	bumped = cluster.DeepCopy()
	bumped.Spec.Topology.Version = skip
	pr, err = preview.Predict(ctx, c, midway, []*unstructured.Unstructured{toUnstructured(t, bumped, "Cluster", clusterv1.GroupVersion.String())}, inProcess)
	require.NoError(t, err)
	cp, _ = pr.Machine("chain-cp-0")
	require.Equal(t, strategy.MethodInPlace, cp.Method, cp.Reason)
	require.Len(t, cp.Steps, 2, "%+v", cp.Steps)
	require.Equal(t, [2]string{cpFrom, cpTo}, [2]string{cp.Steps[0].FromVersion, cp.Steps[0].ToVersion})
	require.Equal(t, [2]string{cpTo, skip}, [2]string{cp.Steps[1].FromVersion, cp.Steps[1].ToVersion})

	// Without the ClusterClass's list, Cluster API cannot plan two minors:
	// neither can the preview.
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(class), class))
	class.Spec.KubernetesVersions = nil
	require.NoError(t, c.Update(ctx, class))
	_, err = preview.Predict(ctx, c, snap, change, inProcess)
	require.ErrorIs(t, err, preview.ErrInvalidChange)
	require.ErrorContains(t, err, "one minor at a time")

	// A plan from a GenerateUpgradePlan extension is not guessed.
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(class), class))
	class.Spec.Upgrade.External.GenerateUpgradePlanExtension = "plans.example"
	require.NoError(t, c.Update(ctx, class))
	_, err = preview.Predict(ctx, c, snap, change, inProcess)
	require.ErrorIs(t, err, preview.ErrInvalidChange)
	require.ErrorContains(t, err, `GenerateUpgradePlan extension "plans.example"`)
}
