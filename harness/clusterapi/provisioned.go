package clusterapi

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/desiredstate"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ProvisionedCluster is a workload cluster as Cluster API's controllers
// leave it once provisioned, written straight to an API server without
// running them (thousands of machines in seconds): a KubeadmControlPlane
// with its machines (their KubeadmConfigs computed by Cluster API's own
// controlplane/kubeadm/pkg/desiredstate, their infrastructure machines
// annotated with the template they were cloned from) and
// MachineDeployments, each with one MachineSet matching its template and
// that MachineSet's machines, each with a KubeadmConfig and an
// infrastructure machine of InfraMachineKind. It is what readers of a
// cluster (strategy/capi/preview) are tested against; nothing reconciles
// it, so status fields other than a Machine's nodeRef stay empty.
type ProvisionedCluster struct {
	// Namespace and Name name the Cluster ("default" when Namespace is
	// empty).
	Namespace, Name string
	// Version is the control plane's Kubernetes version.
	Version string
	// WorkerVersion is the MachineDeployments' version (Version when
	// empty).
	WorkerVersion string
	// ControlPlane is the KubeadmControlPlane's replicas (0: none).
	ControlPlane int
	// ControlPlaneSurge is its rollout's maxSurge.
	ControlPlaneSurge int
	// Workers maps MachineDeployment names to their replicas.
	Workers map[string]int
	// Nodes creates a Node per Machine, named as the Machine, and sets
	// the Machine's status.nodeRef.
	Nodes bool
}

// Create writes the cluster through c, sixteen requests at a time, and
// returns the first error.
func (tc ProvisionedCluster) Create(ctx context.Context, c client.Client) error {
	if c == nil || tc.Name == "" || tc.Version == "" {
		return errors.New("capitest: ProvisionedCluster.Create: a client, Name and Version are required")
	}
	ns := tc.Namespace
	if ns == "" {
		ns = "default"
	}
	labels := func(extra ...string) map[string]string {
		l := map[string]string{clusterv1.ClusterNameLabel: tc.Name}
		for i := 0; i+1 < len(extra); i += 2 {
			l[extra[i]] = extra[i+1]
		}
		return l
	}
	template := func(name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(InfraTemplateGVK)
		u.SetNamespace(ns)
		u.SetName(name)
		u.SetLabels(labels())
		u.Object["spec"] = map[string]any{"template": map[string]any{"spec": map[string]any{"image": "test-image-1"}}}
		return u
	}
	cpName := tc.Name + "-cp"
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tc.Name},
		Spec: clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "10.0.0.1", Port: 6443}}}
	if tc.ControlPlane > 0 {
		cluster.Spec.ControlPlaneRef = clusterv1.ContractVersionedObjectReference{APIGroup: controlplanev1.GroupVersion.Group, Kind: "KubeadmControlPlane", Name: cpName}
	}
	if err := c.Create(ctx, cluster); err != nil {
		return err
	}
	surge := intstr.FromInt32(int32(tc.ControlPlaneSurge))
	kcp := &controlplanev1.KubeadmControlPlane{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cpName, Labels: labels()},
		Spec: controlplanev1.KubeadmControlPlaneSpec{Replicas: ptr.To(int32(tc.ControlPlane)), Version: tc.Version,
			MachineTemplate: controlplanev1.KubeadmControlPlaneMachineTemplate{Spec: controlplanev1.KubeadmControlPlaneMachineTemplateSpec{
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: InfraGroup, Kind: InfraTemplateKind, Name: cpName + "-0"}}},
			Rollout: controlplanev1.KubeadmControlPlaneRolloutSpec{Strategy: controlplanev1.KubeadmControlPlaneRolloutStrategy{
				Type: controlplanev1.RollingUpdateStrategyType, RollingUpdate: controlplanev1.KubeadmControlPlaneRolloutStrategyRollingUpdate{MaxSurge: &surge}}}}}
	if tc.ControlPlane > 0 {
		if err := c.Create(ctx, template(cpName+"-0")); err != nil {
			return err
		}
		if err := c.Create(ctx, kcp); err != nil {
			return err
		}
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
	stop := sync.OnceFunc(func() { close(work); wg.Wait() })
	defer stop()
	machine := func(name, version, configName string, owner metav1.OwnerReference, extraLabels map[string]string, infra *unstructured.Unstructured, cfg *bootstrapv1.KubeadmConfig) {
		work <- func() error {
			l := labels()
			for k, v := range extraLabels {
				l[k] = v
			}
			m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l, OwnerReferences: []metav1.OwnerReference{owner}},
				Spec: clusterv1.MachineSpec{ClusterName: tc.Name, Version: version,
					Bootstrap:         clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: configName}},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: InfraGroup, Kind: InfraMachineKind, Name: name}}}
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
			if tc.Nodes {
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
	if tc.ControlPlane > 0 {
		if err := c.Get(ctx, client.ObjectKeyFromObject(kcp), kcp); err != nil {
			return err
		}
		owner := *metav1.NewControllerRef(kcp, controlplanev1.GroupVersion.WithKind("KubeadmControlPlane"))
		for i := range tc.ControlPlane {
			name := fmt.Sprintf("%s-%d", cpName, i)
			cfg, err := desiredstate.ComputeDesiredKubeadmConfig(kcp, cluster, i > 0, name, nil)
			if err != nil {
				return err
			}
			infra := template("")
			infra.SetGroupVersionKind(InfraMachineGVK)
			infra.Object["spec"] = map[string]any{"image": "test-image-1"}
			infra.SetAnnotations(map[string]string{clusterv1.TemplateClonedFromNameAnnotation: cpName + "-0",
				clusterv1.TemplateClonedFromGroupKindAnnotation: InfraTemplateKind + "." + InfraGroup})
			machine(name, tc.Version, name, owner, map[string]string{clusterv1.MachineControlPlaneLabel: "", clusterv1.MachineControlPlaneNameLabel: cpName}, infra, cfg)
		}
	}
	mdVersion := tc.Version
	if tc.WorkerVersion != "" {
		mdVersion = tc.WorkerVersion
	}
	for md, n := range tc.Workers {
		tmpl := md + "-0"
		if err := c.Create(ctx, template(tmpl)); err != nil {
			return err
		}
		if err := c.Create(ctx, &bootstrapv1.KubeadmConfigTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tmpl, Labels: labels()}}); err != nil {
			return err
		}
		zero, one := intstr.FromInt32(0), intstr.FromInt32(1)
		sel := map[string]string{clusterv1.ClusterNameLabel: tc.Name, clusterv1.MachineDeploymentNameLabel: md}
		spec := clusterv1.MachineSpec{ClusterName: tc.Name, Version: mdVersion,
			Bootstrap:         clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfigTemplate", Name: tmpl}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: InfraGroup, Kind: InfraTemplateKind, Name: tmpl}}
		d := &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: md, Labels: labels()},
			Spec: clusterv1.MachineDeploymentSpec{ClusterName: tc.Name, Replicas: ptr.To(int32(n)), Selector: metav1.LabelSelector{MatchLabels: sel},
				Rollout: clusterv1.MachineDeploymentRolloutSpec{Strategy: clusterv1.MachineDeploymentRolloutStrategy{Type: clusterv1.RollingUpdateMachineDeploymentStrategyType,
					RollingUpdate: clusterv1.MachineDeploymentRolloutStrategyRollingUpdate{MaxSurge: &zero, MaxUnavailable: &one}}},
				Template: clusterv1.MachineTemplateSpec{ObjectMeta: clusterv1.ObjectMeta{Labels: sel}, Spec: spec}}}
		if err := c.Create(ctx, d); err != nil {
			return err
		}
		msName := md + "-abcde"
		msLabels := labels(clusterv1.MachineDeploymentNameLabel, md, clusterv1.MachineDeploymentUniqueLabel, "12345")
		ms := &clusterv1.MachineSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: msName, Labels: msLabels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, clusterv1.GroupVersion.WithKind("MachineDeployment"))}},
			Spec: clusterv1.MachineSetSpec{ClusterName: tc.Name, Replicas: ptr.To(int32(n)), Selector: metav1.LabelSelector{MatchLabels: msLabels},
				Template: clusterv1.MachineTemplateSpec{ObjectMeta: clusterv1.ObjectMeta{Labels: msLabels}, Spec: spec}}}
		if err := c.Create(ctx, ms); err != nil {
			return err
		}
		owner := *metav1.NewControllerRef(ms, clusterv1.GroupVersion.WithKind("MachineSet"))
		for i := range n {
			name := fmt.Sprintf("%s-%04d", msName, i)
			infra := template("")
			infra.SetGroupVersionKind(InfraMachineGVK)
			infra.Object["spec"] = map[string]any{"image": "test-image-1"}
			machine(name, mdVersion, name, owner, map[string]string{clusterv1.MachineDeploymentNameLabel: md, clusterv1.MachineSetNameLabel: msName}, infra,
				&bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{Name: name}}}})
		}
	}
	stop()
	return firstErr
}
