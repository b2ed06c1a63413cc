package preview_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/desiredstate"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/fake/capitest"
	"github.com/upgradekit/upgradekit/fake/envtest"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi/extensionserver"
	"github.com/upgradekit/upgradekit/strategy/capi/preview"
)

// testCluster is a workload cluster written to an API server the way
// Cluster API's controllers leave it after provisioning: a
// KubeadmControlPlane with its machines (KubeadmConfigs computed by
// Cluster API's own desiredstate package, infrastructure machines
// annotated with the template they were cloned from) and
// MachineDeployments, each with one MachineSet whose machines have a
// KubeadmConfig and an infrastructure machine. No controller runs: the
// objects are what a preview reads.
type testCluster struct {
	name, version string
	mdVersion     string // the MachineDeployments' version, when not version
	cpReplicas    int
	cpSurge       int
	groups        map[string]int // MachineDeployment name -> machines
	nodes         bool           // set status.nodeRef and create Nodes
}

func (tc testCluster) create(t testing.TB, c client.Client) {
	t.Helper()
	ctx := context.Background()
	ns := "default"
	labels := func(extra ...string) map[string]string {
		l := map[string]string{clusterv1.ClusterNameLabel: tc.name}
		for i := 0; i+1 < len(extra); i += 2 {
			l[extra[i]] = extra[i+1]
		}
		return l
	}
	template := func(name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(capitest.InfraTemplateGVK)
		u.SetNamespace(ns)
		u.SetName(name)
		u.SetLabels(labels())
		u.Object["spec"] = map[string]any{"template": map[string]any{"spec": map[string]any{"image": "test-image-1"}}}
		return u
	}
	must := func(err error) {
		t.Helper()
		require.NoError(t, err)
	}
	cpName := tc.name + "-cp"
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tc.name},
		Spec: clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "10.0.0.1", Port: 6443},
			ControlPlaneRef: clusterv1.ContractVersionedObjectReference{APIGroup: controlplanev1.GroupVersion.Group, Kind: "KubeadmControlPlane", Name: cpName}}}
	must(c.Create(ctx, cluster))
	surge := intstr.FromInt32(int32(tc.cpSurge))
	kcp := &controlplanev1.KubeadmControlPlane{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cpName, Labels: labels()},
		Spec: controlplanev1.KubeadmControlPlaneSpec{Replicas: ptr.To(int32(tc.cpReplicas)), Version: tc.version,
			MachineTemplate: controlplanev1.KubeadmControlPlaneMachineTemplate{Spec: controlplanev1.KubeadmControlPlaneMachineTemplateSpec{
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: capitest.InfraGroup, Kind: capitest.InfraTemplateKind, Name: cpName + "-0"}}},
			Rollout: controlplanev1.KubeadmControlPlaneRolloutSpec{Strategy: controlplanev1.KubeadmControlPlaneRolloutStrategy{
				Type: controlplanev1.RollingUpdateStrategyType, RollingUpdate: controlplanev1.KubeadmControlPlaneRolloutStrategyRollingUpdate{MaxSurge: &surge}}}}}
	if tc.cpReplicas > 0 {
		must(c.Create(ctx, template(cpName+"-0")))
		must(c.Create(ctx, kcp))
	}

	// Everything else is created by a pool of writers.
	work := make(chan func() error, 64)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range 16 {
		wg.Go(func() {
			for f := range work {
				if err := f(); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		})
	}
	machine := func(name, version, configName string, owner metav1.OwnerReference, extraLabels map[string]string, infra *unstructured.Unstructured, cfg *bootstrapv1.KubeadmConfig) {
		work <- func() error {
			l := labels()
			for k, v := range extraLabels {
				l[k] = v
			}
			m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l, OwnerReferences: []metav1.OwnerReference{owner}},
				Spec: clusterv1.MachineSpec{ClusterName: tc.name, Version: version,
					Bootstrap:         clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: configName}},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: capitest.InfraGroup, Kind: capitest.InfraMachineKind, Name: name}}}
			if err := c.Create(ctx, m); err != nil {
				return fmt.Errorf("machine %s: %w", name, err)
			}
			infra.SetName(name)
			infra.SetNamespace(ns)
			if err := c.Create(ctx, infra); err != nil {
				return fmt.Errorf("infra machine %s: %w", name, err)
			}
			cfg.Name, cfg.Namespace, cfg.Labels = configName, ns, l
			if err := c.Create(ctx, cfg); err != nil {
				return fmt.Errorf("kubeadmconfig %s: %w", name, err)
			}
			if tc.nodes {
				if err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{}}); err != nil {
					return err
				}
				m.Status.NodeRef = clusterv1.MachineNodeReference{Name: name}
				if err := c.Status().Update(ctx, m); err != nil {
					return err
				}
			}
			return nil
		}
	}
	// Control plane machines, as KubeadmControlPlane creates them.
	if tc.cpReplicas > 0 {
		must(c.Get(ctx, client.ObjectKeyFromObject(kcp), kcp))
		owner := *metav1.NewControllerRef(kcp, controlplanev1.GroupVersion.WithKind("KubeadmControlPlane"))
		for i := range tc.cpReplicas {
			name := fmt.Sprintf("%s-%d", cpName, i)
			cfg, err := desiredstate.ComputeDesiredKubeadmConfig(kcp, cluster, i > 0, name, nil)
			must(err)
			infra := template("")
			infra.SetGroupVersionKind(capitest.InfraMachineGVK)
			infra.Object["spec"] = map[string]any{"image": "test-image-1"}
			infra.SetAnnotations(map[string]string{clusterv1.TemplateClonedFromNameAnnotation: cpName + "-0",
				clusterv1.TemplateClonedFromGroupKindAnnotation: capitest.InfraTemplateKind + "." + capitest.InfraGroup})
			machine(name, tc.version, name, owner, map[string]string{clusterv1.MachineControlPlaneLabel: "", clusterv1.MachineControlPlaneNameLabel: cpName}, infra, cfg)
		}
	}
	mdVersion := tc.version
	if tc.mdVersion != "" {
		mdVersion = tc.mdVersion
	}
	for md, n := range tc.groups {
		tmpl := md + "-0"
		must(c.Create(ctx, template(tmpl)))
		must(c.Create(ctx, &bootstrapv1.KubeadmConfigTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tmpl, Labels: labels()}}))
		zero, one := intstr.FromInt32(0), intstr.FromInt32(1)
		sel := map[string]string{clusterv1.ClusterNameLabel: tc.name, clusterv1.MachineDeploymentNameLabel: md}
		spec := clusterv1.MachineSpec{ClusterName: tc.name, Version: mdVersion,
			Bootstrap:         clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfigTemplate", Name: tmpl}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: capitest.InfraGroup, Kind: capitest.InfraTemplateKind, Name: tmpl}}
		d := &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: md, Labels: labels()},
			Spec: clusterv1.MachineDeploymentSpec{ClusterName: tc.name, Replicas: ptr.To(int32(n)), Selector: metav1.LabelSelector{MatchLabels: sel},
				Rollout: clusterv1.MachineDeploymentRolloutSpec{Strategy: clusterv1.MachineDeploymentRolloutStrategy{Type: clusterv1.RollingUpdateMachineDeploymentStrategyType,
					RollingUpdate: clusterv1.MachineDeploymentRolloutStrategyRollingUpdate{MaxSurge: &zero, MaxUnavailable: &one}}},
				Template: clusterv1.MachineTemplateSpec{ObjectMeta: clusterv1.ObjectMeta{Labels: sel}, Spec: spec}}}
		must(c.Create(ctx, d))
		msName := md + "-abcde"
		msLabels := labels(clusterv1.MachineDeploymentNameLabel, md, clusterv1.MachineDeploymentUniqueLabel, "12345")
		ms := &clusterv1.MachineSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: msName, Labels: msLabels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, clusterv1.GroupVersion.WithKind("MachineDeployment"))}},
			Spec: clusterv1.MachineSetSpec{ClusterName: tc.name, Replicas: ptr.To(int32(n)), Selector: metav1.LabelSelector{MatchLabels: msLabels},
				Template: clusterv1.MachineTemplateSpec{ObjectMeta: clusterv1.ObjectMeta{Labels: msLabels}, Spec: spec}}}
		must(c.Create(ctx, ms))
		owner := *metav1.NewControllerRef(ms, clusterv1.GroupVersion.WithKind("MachineSet"))
		for i := range n {
			name := fmt.Sprintf("%s-%04d", msName, i)
			infra := template("")
			infra.SetGroupVersionKind(capitest.InfraMachineGVK)
			infra.Object["spec"] = map[string]any{"image": "test-image-1"}
			machine(name, mdVersion, name, owner, map[string]string{clusterv1.MachineDeploymentNameLabel: md, clusterv1.MachineSetNameLabel: msName}, infra,
				&bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{Name: name}}}})
		}
	}
	close(work)
	wg.Wait()
	require.NoError(t, firstErr)
}

// startEnv starts envtest with Cluster API's and the test provider's CRDs.
func startEnv(t testing.TB) *envtest.Env {
	t.Helper()
	env, err := envtest.Start(context.Background(), envtest.WithCRDs(capitest.InfrastructureCRDs()...))
	if err != nil {
		t.Fatalf("envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return env
}

func TestReadAndPredictAgainstAPIServer(t *testing.T) {
	env := startEnv(t)
	c, ctx := env.Client, t.Context()
	testCluster{name: "small", version: "v1.31.4", mdVersion: "v1.30.4", cpReplicas: 3, cpSurge: 1, groups: map[string]int{"md-a": 3, "md-b": 2}, nodes: true}.create(t, c)
	srv, err := extensionserver.New(c, extensionserver.DecideOnly())
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

	// The change: the control plane to v1.32.0, md-a to v1.31.4 (the
	// control plane's version now), md-b to a new image; a pod that opted
	// out of disruption on md-a's first node and one no budget lets go on
	// md-b's.
	var kcp controlplanev1.KubeadmControlPlane
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "small-cp"}, &kcp))
	kcp.Spec.Version = "v1.32.0"
	var mdA, mdB clusterv1.MachineDeployment
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "md-a"}, &mdA))
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "md-b"}, &mdB))
	mdA.Spec.Template.Spec.Version = "v1.31.4"
	mdB.Spec.Template.Spec.InfrastructureRef.Name = "md-b-1"
	newTemplate := &unstructured.Unstructured{}
	newTemplate.SetGroupVersionKind(capitest.InfraTemplateGVK)
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

	snap, err = preview.Read(ctx, c, client.ObjectKey{Namespace: "default", Name: "small"},
		preview.WithWorkload(func(context.Context, client.ObjectKey) (client.Client, error) { return c, nil }))
	require.NoError(t, err)
	require.Len(t, snap.Nodes, 8)
	pr, err = preview.Predict(ctx, c, snap, change, srv.Extension(), preview.WithServerDryRun())
	require.NoError(t, err)
	t.Logf("change:\n%s", pr)
	method := func(name string) strategy.Method {
		m, ok := pr.Machine(name)
		require.True(t, ok, name)
		return m.Method
	}
	require.Equal(t, strategy.MethodInPlace, method("small-cp-0"))
	require.Equal(t, strategy.MethodInPlace, method("small-cp-1"))
	last, _ := pr.Machine("small-cp-2")
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
