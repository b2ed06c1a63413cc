package preview_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/clusterapi"
	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
	"github.com/upgradekit/upgradekit/strategy/capi/preview"
	"github.com/upgradekit/upgradekit/strategy/capi/workload"
)

const (
	// Cluster API v1.14's newest supported step.
	truthFrom, truthTo = "v1.35.4", "v1.36.3"
	truthImage         = "registry.example/upgrader:v1.36.3"
)

// mdMachines returns a MachineDeployment's Machines by name.
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

// running says whether n machines run with a node and none is being
// deleted.
func running(ms map[string]clusterv1.Machine, n int) bool {
	if len(ms) != n {
		return false
	}
	for _, m := range ms {
		if m.DeletionTimestamp != nil || !m.Status.NodeRef.IsDefined() || m.Status.Phase != string(clusterv1.MachinePhaseRunning) {
			return false
		}
	}
	return true
}

// TestPredictionIsWhatClusterAPIDoes is the preview's truth test: on a
// cluster run by Cluster API's own controllers, one change touching five
// MachineDeployments is previewed, then applied; every machine the
// preview says keeps its name keeps it (updated in place, or blocked on a
// PodDisruptionBudget and not updated), and every machine it says is
// replaced is gone.
func TestPredictionIsWhatClusterAPIDoes(t *testing.T) {
	h := clusterapi.NewForTest(t, clusterapi.WithUpgraderImage(truthImage, simulator.Staging{Kubernetes: truthTo, Containerd: "2.0.5", CNI: "v1.7.1"}))
	ctx, c := t.Context(), h.Env.Client
	objs, err := clusterapi.ClusterObjects(h.Env, "default", "demo", truthTo)
	require.NoError(t, err)
	require.NoError(t, clusterapi.Create(ctx, c, objs...))
	// version: a Kubernetes version bump; image: a new infrastructure
	// template (no updater covers it); kubelet: a new KubeadmConfigTemplate
	// with another kubelet argument; kubelet-empty: the same from a
	// template stored without a spec (Cluster API cannot patch it, so the
	// extension declines); both: version and image at once; pdb: a version
	// bump where one node runs a pod no budget lets go.
	groups := map[string]int{"version": 2, "image": 2, "kubelet": 2, "kubelet-empty": 1, "both": 1, "pdb": 2}
	for name, n := range groups {
		mdObjs := clusterapi.MachineDeploymentObjects("default", "demo", name, int32(n), truthFrom)
		switch name {
		case "pdb": // both at once, so the blocked one holds up only itself
			md := mdObjs[2].(*clusterv1.MachineDeployment)
			md.Spec.Rollout.Strategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(2))
		case "kubelet":
			kct := mdObjs[0].(*bootstrapv1.KubeadmConfigTemplate)
			kct.Spec.Template.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs = []bootstrapv1.Arg{{Name: "max-pods", Value: ptr.To("110")}}
		}
		require.NoError(t, clusterapi.Create(ctx, c, mdObjs...))
	}
	before := map[string]map[string]clusterv1.Machine{}
	require.Eventually(t, func() bool {
		for name, n := range groups {
			if before[name] = mdMachines(t, c, name); !running(before[name], n) {
				return false
			}
		}
		return true
	}, 3*time.Minute, 200*time.Millisecond, "machines provisioned; provider: %v", h.Provider.Errors())

	// The extension, as deployed, registered with Cluster API.
	srv, err := extensionserver.New(c, extensionserver.Options{UpgraderImage: truthImage, AllowMutableUpgraderImages: true, AllowUnverifiedBundles: true,
		UpdaterOptions: capi.UpdaterOptions{RetryAfter: time.Second, DrainTimeout: 2 * time.Second}})
	require.NoError(t, err)
	url, ca := clusterapi.ServeForTest(t, srv.Handlers()...)
	_, err = clusterapi.RegisterExtension(ctx, c, "upgradekit", url, ca)
	require.NoError(t, err)

	// A pod no PodDisruptionBudget lets go, on one node of "pdb".
	pinned := slices.Sorted(maps.Keys(before["pdb"]))[0]
	pinnedNode := before["pdb"][pinned].Status.NodeRef.Name
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "db-0", Labels: map[string]string{"app": "db"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: types.UID("33333333-3333-3333-3333-333333333333"), Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: pinnedNode, Containers: []corev1.Container{{Name: "db", Image: "registry.example/db:1"}}}}
	require.NoError(t, c.Create(ctx, pod))
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "db"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}
	require.NoError(t, c.Create(ctx, pdb))
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DisruptionsAllowed: 0, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	require.NoError(t, c.Status().Update(ctx, pdb)) // envtest runs no disruption controller

	// Cluster API's drain rules on the other node of "pdb", updated in
	// place all the same: a bare pod (evicted, with a warning), a db pod
	// labelled cluster.x-k8s.io/drain=skip (the budget allows nothing, but
	// it is never evicted), and an agent a MachineDrainRule for "pdb"'s
	// Machines skips.
	other := slices.Sorted(maps.Keys(before["pdb"]))[1]
	otherNode := before["pdb"][other].Status.NodeRef.Name
	sts := []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: types.UID("33333333-3333-3333-3333-333333333333"), Controller: ptr.To(true)}}
	for _, p := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "debug"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "db-1", Labels: map[string]string{"app": "db", clusterv1.PodDrainLabel: "skip"}, OwnerReferences: sts}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "agent", Labels: map[string]string{"app": "agent"}, OwnerReferences: sts}},
	} {
		p.Spec = corev1.PodSpec{NodeName: otherNode, Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}}}
		require.NoError(t, c.Create(ctx, p))
	}
	require.NoError(t, c.Create(ctx, &clusterv1.MachineDrainRule{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "keep-agents"},
		Spec: clusterv1.MachineDrainRuleSpec{
			Drain:    clusterv1.MachineDrainRuleDrainConfig{Behavior: clusterv1.MachineDrainRuleDrainBehaviorSkip},
			Machines: []clusterv1.MachineDrainRuleMachineSelector{{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: "pdb"}}}},
			Pods:     []clusterv1.MachineDrainRulePodSelector{{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}}}},
		}}))

	// The change: new templates and the MachineDeployments pointing at them.
	change := truthChange(t, c)

	// Preview.
	snap, err := preview.Read(ctx, c, client.ObjectKey{Namespace: "default", Name: "demo"},
		preview.WithWorkload(func(ctx context.Context, key client.ObjectKey) (client.Client, error) {
			return workload.KubeconfigClient(c, h.Env.Scheme)(ctx, key)
		}))
	require.NoError(t, err)
	// In both modes: the extension's decision side in this process, and
	// the deployed extension asked over HTTPS through its ExtensionConfig.
	preds := bothModes(t, c, snap, change, srv.Extension(), preview.WithServerDryRun())
	for _, pr := range preds {
		om, _ := pr.Machine(other)
		require.Equal(t, strategy.MethodInPlace, om.Method, "%s: Cluster API's drain rules: nothing on %s holds the drain: %s", pr.Mode, otherNode, om.Reason)
	}

	want := map[string]strategy.Method{"version": strategy.MethodInPlace, "image": strategy.MethodReplace, "kubelet": strategy.MethodInPlace,
		"kubelet-empty": strategy.MethodReplace, "both": strategy.MethodReplace}
	for _, pr := range preds {
		for group, method := range want {
			for name := range before[group] {
				m, ok := pr.Machine(name)
				require.True(t, ok, name)
				require.Equal(t, method, m.Method, "%s: %s (%s): %s", pr.Mode, name, group, m.Reason)
			}
		}
		for name := range before["pdb"] {
			m, _ := pr.Machine(name)
			if name == pinned {
				require.Equal(t, strategy.MethodBlocked, m.Method, m.Reason)
				require.Contains(t, m.Reason, "PDB apps/db")
			} else {
				require.Equal(t, strategy.MethodInPlace, m.Method, "%s: %s", pr.Mode, m.Reason)
			}
		}
	}

	// Apply the change as kubectl apply would, and let Cluster API work.
	for _, u := range change {
		require.NoError(t, c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("kubectl"), client.ForceOwnership), u.GetName())
	}
	after := map[string]map[string]clusterv1.Machine{}
	updated := func(name string) bool {
		return h.Provider.Host(name) != nil && h.Provider.Host(name).RunningVersion(simulator.ComponentKubelet) == truthTo
	}
	var waiting string
	require.Eventually(t, func() bool {
		for name, n := range groups {
			after[name] = mdMachines(t, c, name)
			if name != "pdb" && !running(after[name], n) {
				waiting = name + " not running: " + fmt.Sprint(slices.Sorted(maps.Keys(after[name])))
				return false
			}
		}
		for _, group := range []string{"version", "pdb"} {
			for name := range before[group] {
				if name != pinned && !updated(name) {
					waiting = name + " not updated"
					return false
				}
			}
		}
		for _, group := range []string{"image", "both", "kubelet-empty"} {
			for name := range after[group] {
				if _, old := before[group][name]; old {
					waiting = name + " not replaced"
					return false
				}
			}
		}
		waiting = "kubelet not settled"
		return mdSettled(t, c, "kubelet", 2)
	}, 5*time.Minute, 500*time.Millisecond, "rollouts end; waiting for %s", lazy(func() string { return waiting + "; provider: " + fmt.Sprint(h.Provider.Errors()) }))

	// The truth: names kept or not, nodes updated or not, as predicted.
	for _, pr := range preds {
		for group := range groups {
			for name := range before[group] {
				m, _ := pr.Machine(name)
				_, still := after[group][name]
				require.Equal(t, m.KeepsName(), still, "%s: %s (%s) predicted %s", pr.Mode, name, group, m.Method)
				switch m.Method {
				case strategy.MethodInPlace:
					if m.ToVersion != m.FromVersion {
						require.True(t, updated(name), "%s updated in place", name)
					}
				case strategy.MethodBlocked:
					require.False(t, updated(name), "%s waits on its PodDisruptionBudget", name)
				}
			}
		}
	}
	require.True(t, updated(other), "%s updated in place", other)
	err = c.Get(ctx, client.ObjectKey{Namespace: "apps", Name: "debug"}, &corev1.Pod{})
	require.True(t, apierrors.IsNotFound(err), "the bare pod was evicted: %v", err)
	for _, name := range []string{"db-1", "agent"} {
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "apps", Name: name}, &corev1.Pod{}), "%s is never evicted", name)
	}
	cfg := &bootstrapv1.KubeadmConfig{}
	for name := range before["kubelet"] {
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: after["kubelet"][name].Spec.Bootstrap.ConfigRef.Name}, cfg))
		require.Contains(t, fmt.Sprint(cfg.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs), "max-pods", "the kubelet argument reached the machine's KubeadmConfig")
	}
}

// truthChange builds the change: two new templates and four edited
// MachineDeployments, as a user would write them (objects of the kind
// kubectl get -o yaml prints, edited).
func truthChange(t *testing.T, c client.Client) []*unstructured.Unstructured {
	t.Helper()
	ctx := t.Context()
	var out []*unstructured.Unstructured
	add := func(obj client.Object) {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		require.NoError(t, err)
		u := &unstructured.Unstructured{Object: m}
		unstructured.RemoveNestedField(u.Object, "metadata", "managedFields")
		unstructured.RemoveNestedField(u.Object, "metadata", "resourceVersion")
		unstructured.RemoveNestedField(u.Object, "status")
		out = append(out, u)
	}
	// A new infrastructure template with another image.
	img := &unstructured.Unstructured{}
	img.SetGroupVersionKind(clusterapi.InfraTemplateGVK)
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "image-0"}, img))
	img = img.DeepCopy()
	img.SetName("image-1")
	img.SetUID("")
	require.NoError(t, unstructured.SetNestedField(img.Object, "test-image-2", "spec", "template", "spec", "image"))
	add(img)
	// New KubeadmConfigTemplates with another kubelet argument.
	for _, name := range []string{"kubelet", "kubelet-empty"} {
		var kct bootstrapv1.KubeadmConfigTemplate
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name + "-0"}, &kct))
		kct.TypeMeta = metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfigTemplate"}
		kct.ObjectMeta = metav1.ObjectMeta{Namespace: "default", Name: name + "-1", Labels: kct.Labels}
		kct.Spec.Template.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs = []bootstrapv1.Arg{{Name: "max-pods", Value: ptr.To("50")}}
		add(&kct)
	}
	edit := func(name string, mutate func(*clusterv1.MachineDeployment)) {
		var md clusterv1.MachineDeployment
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &md))
		md.TypeMeta = metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineDeployment"}
		mutate(&md)
		add(&md)
	}
	edit("version", func(md *clusterv1.MachineDeployment) { md.Spec.Template.Spec.Version = truthTo })
	edit("pdb", func(md *clusterv1.MachineDeployment) { md.Spec.Template.Spec.Version = truthTo })
	edit("image", func(md *clusterv1.MachineDeployment) { md.Spec.Template.Spec.InfrastructureRef.Name = "image-1" })
	edit("both", func(md *clusterv1.MachineDeployment) {
		md.Spec.Template.Spec.Version = truthTo
		md.Spec.Template.Spec.InfrastructureRef.Name = "image-1"
	})
	edit("kubelet", func(md *clusterv1.MachineDeployment) { md.Spec.Template.Spec.Bootstrap.ConfigRef.Name = "kubelet-1" })
	edit("kubelet-empty", func(md *clusterv1.MachineDeployment) {
		md.Spec.Template.Spec.Bootstrap.ConfigRef.Name = "kubelet-empty-1"
	})
	return out
}

func mdSettled(t *testing.T, c client.Client, name string, n int32) bool {
	t.Helper()
	var md clusterv1.MachineDeployment
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: name}, &md))
	st := md.Status
	return st.ObservedGeneration == md.Generation && ptr.Deref(st.Replicas, -1) == n && ptr.Deref(st.UpToDateReplicas, -1) == n && ptr.Deref(st.AvailableReplicas, -1) == n
}

// lazy prints what its function returns when printed, so a failure
// message says how things stood when the wait ended.
type lazy func() string

func (l lazy) String() string { return l() }

// TestPredictionIsWhatKubeadmControlPlaneDoes: the same for a
// KubeadmControlPlane of three, taken from v1.35.4 to v1.36.3 with
// maxSurge raised to 1 in the same change: KubeadmControlPlane creates a
// machine first, updates the two oldest in place and deletes the newest;
// the preview says which. The step drops the ControlPlaneKubeletLocalMode
// gate Cluster API sets on v1.35 KubeadmConfigs, which the extension
// accepts with the version.
func TestPredictionIsWhatKubeadmControlPlaneDoes(t *testing.T) {
	const from, to, image = truthFrom, truthTo, truthImage
	h := clusterapi.NewForTest(t, clusterapi.WithUpgraderImage(image, simulator.Staging{Kubernetes: to, Containerd: "2.0.5", CNI: "v1.7.1"}))
	ctx, c := t.Context(), h.Env.Client
	objs, err := clusterapi.KubeadmControlPlaneObjects(h.Env, "default", "demo", 3, from)
	require.NoError(t, err)
	require.NoError(t, clusterapi.Create(ctx, c, objs...))
	cpMachines := func() map[string]clusterv1.Machine {
		var list clusterv1.MachineList
		require.NoError(t, c.List(ctx, &list, client.InNamespace("default"), client.HasLabels{clusterv1.MachineControlPlaneLabel}))
		out := map[string]clusterv1.Machine{}
		for _, m := range list.Items {
			out[m.Name] = m
		}
		return out
	}
	var before map[string]clusterv1.Machine
	require.Eventually(t, func() bool {
		before = cpMachines()
		return running(before, 3) && kcpReady(t, c, 3)
	}, 4*time.Minute, 500*time.Millisecond, "KubeadmControlPlane provisioned; provider: %v", h.Provider.Errors())

	srv, err := extensionserver.New(c, extensionserver.Options{AllowMutableUpgraderImages: true, AllowUnverifiedBundles: true,
		UpdaterOptions: capi.UpdaterOptions{Images: capi.ImagesByVersion{to: image}, RetryAfter: time.Second}})
	require.NoError(t, err)
	url, ca := clusterapi.ServeForTest(t, srv.Handlers()...)
	_, err = clusterapi.RegisterExtension(ctx, c, "upgradekit", url, ca)
	require.NoError(t, err)

	var kcp controlplanev1.KubeadmControlPlane
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "demo-cp"}, &kcp))
	kcp.TypeMeta = metav1.TypeMeta{APIVersion: controlplanev1.GroupVersion.String(), Kind: "KubeadmControlPlane"}
	kcp.Spec.Version = to
	kcp.Spec.Rollout.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(1))
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&kcp)
	require.NoError(t, err)
	u := &unstructured.Unstructured{Object: m}
	unstructured.RemoveNestedField(u.Object, "metadata", "managedFields")
	unstructured.RemoveNestedField(u.Object, "metadata", "resourceVersion")
	unstructured.RemoveNestedField(u.Object, "status")

	snap, err := preview.Read(ctx, c, client.ObjectKey{Namespace: "default", Name: "demo"})
	require.NoError(t, err)
	preds := bothModes(t, c, snap, []*unstructured.Unstructured{u}, srv.Extension(), preview.WithServerDryRun())
	for _, pr := range preds {
		require.Equal(t, map[strategy.Method]int{strategy.MethodInPlace: 2, strategy.MethodReplace: 1}, pr.Count(), "%s", pr)
	}

	require.NoError(t, c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("kubectl"), client.ForceOwnership))
	var after map[string]clusterv1.Machine
	require.Eventually(t, func() bool {
		after = cpMachines()
		if !running(after, 3) || !kcpReady(t, c, 3) {
			return false
		}
		for name := range after {
			if h.Provider.Host(name) == nil || h.Provider.Host(name).RunningVersion(simulator.ComponentKubelet) != to {
				return false
			}
		}
		return true
	}, 6*time.Minute, 500*time.Millisecond, "KubeadmControlPlane updated; provider: %v", h.Provider.Errors())
	for _, pr := range preds {
		for name := range before {
			m, _ := pr.Machine(name)
			_, still := after[name]
			require.Equal(t, m.KeepsName(), still, "%s: %s predicted %s: %s", pr.Mode, name, m.Method, m.Reason)
		}
	}
}

// bothModes predicts the change twice: with the in-process answerer, and
// with the extension registered with Cluster API (preview.FindDeployed,
// over HTTPS); both predictions are returned, the in-process one first.
func bothModes(t *testing.T, c client.Client, snap *preview.Snapshot, change []*unstructured.Unstructured, inProcess preview.Answerer, opts ...preview.Option) []*preview.Prediction {
	t.Helper()
	ctx := t.Context()
	local, err := preview.Predict(ctx, c, snap, change, inProcess, opts...)
	require.NoError(t, err)
	require.Equal(t, preview.ModeInProcess, local.Mode)
	t.Logf("prediction, in process:\n%s", local)
	d, err := preview.FindDeployed(ctx, c, snap.Cluster.Namespace)
	require.NoError(t, err)
	remote, err := preview.Predict(ctx, c, snap, change, d, opts...)
	require.NoError(t, err)
	require.Equal(t, preview.ModeExtension, remote.Mode)
	require.Equal(t, []string{"upgradekit"}, remote.Extensions)
	t.Logf("prediction, asking the deployed extension:\n%s", remote)
	return []*preview.Prediction{local, remote}
}

// kcpReady says whether demo-cp has n replicas, all up to date and
// available, for its latest generation.
func kcpReady(t *testing.T, c client.Client, n int32) bool {
	t.Helper()
	var kcp controlplanev1.KubeadmControlPlane
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: "demo-cp"}, &kcp))
	st := kcp.Status
	return st.ObservedGeneration == kcp.Generation && ptr.Deref(st.Replicas, -1) == n && ptr.Deref(st.UpToDateReplicas, -1) == n && ptr.Deref(st.AvailableReplicas, -1) == n
}
