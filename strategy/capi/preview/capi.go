package preview

// This file builds Cluster API's in-place hook requests the way Cluster
// API v1.14 builds them, so the extension is asked exactly what Cluster
// API will ask. Where Cluster API's code is public it is called
// (controlplane/kubeadm/pkg.UpToDate and PrepareKubeadmConfigsForDiff,
// core/reconcilers/machinedeployment/mdutil); what is unexported there is
// mirrored here, each function naming its original, and the truth tests
// (preview against Cluster API's own controllers) hold the mirror to it.

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	kcppkg "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg"
	"sigs.k8s.io/cluster-api/core/reconcilers/machinedeployment/mdutil"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kcpManagerName is KubeadmControlPlane's field manager
// (controlplane/kubeadm/reconcilers/kubeadmcontrolplane.kcpManagerName).
const kcpManagerName = "capi-kubeadmcontrolplane"

// desiredMachineSet mirrors computeDesiredMS
// (core/reconcilers/machinedeployment/machinedeployment_rollout_planner.go):
// the MachineSet a MachineDeployment wants, from an existing one (current
// non-nil: its name, template spec and replicas kept, the in-place
// propagated fields taken from the deployment) or a new one (the
// deployment's template; the name's random suffix and the template hash
// in the unique label are placeholders, which no comparison reads).
func desiredMachineSet(ctx context.Context, md *clusterv1.MachineDeployment, current *clusterv1.MachineSet) *clusterv1.MachineSet {
	var (
		name, unique string
		uid          types.UID
		finalizers   []string
		spec         clusterv1.MachineSpec
		replicas     int32
		created      metav1.Time
	)
	if current == nil {
		name = md.Name + "-preview"
		unique = "preview"
		spec = *md.Spec.Template.Spec.DeepCopy()
	} else {
		name, uid, finalizers = current.Name, current.UID, current.Finalizers
		unique = current.Labels[clusterv1.MachineDeploymentUniqueLabel]
		spec = *current.Spec.Template.Spec.DeepCopy()
		if current.Spec.Replicas != nil {
			replicas = *current.Spec.Replicas
		}
		created = current.CreationTimestamp
	}
	ms := &clusterv1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: md.Namespace, UID: uid, Finalizers: finalizers, CreationTimestamp: created,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(md, clusterv1.GroupVersion.WithKind("MachineDeployment"))}},
		Spec: clusterv1.MachineSetSpec{Replicas: &replicas, ClusterName: md.Spec.ClusterName, Template: clusterv1.MachineTemplateSpec{Spec: spec}},
	}
	ms.Labels = mdutil.CloneAndAddLabel(md.Spec.Template.Labels, clusterv1.MachineDeploymentUniqueLabel, unique)
	ms.Labels[clusterv1.MachineDeploymentNameLabel] = md.Name
	ms.Spec.Template.Labels = mdutil.CloneAndAddLabel(md.Spec.Template.Labels, clusterv1.MachineDeploymentUniqueLabel, unique)
	ms.Spec.Selector = *mdutil.CloneSelectorAndAddLabel(&md.Spec.Selector, clusterv1.MachineDeploymentUniqueLabel, unique)
	ms.Annotations = mdutil.MachineSetAnnotationsFromMachineDeployment(ctx, md)
	if md.Spec.Template.Annotations != nil {
		ms.Spec.Template.Annotations = make(map[string]string, len(md.Spec.Template.Annotations))
		for k, v := range md.Spec.Template.Annotations {
			ms.Spec.Template.Annotations[k] = v
		}
	}
	ms.Spec.Deletion.Order = md.Spec.Deletion.Order
	ms.Spec.MachineNaming = md.Spec.MachineNaming
	t := &ms.Spec.Template.Spec
	t.MinReadySeconds = md.Spec.Template.Spec.MinReadySeconds
	t.ReadinessGates = md.Spec.Template.Spec.ReadinessGates
	t.Deletion.NodeDrainTimeoutSeconds = md.Spec.Template.Spec.Deletion.NodeDrainTimeoutSeconds
	t.Deletion.NodeDeletionTimeoutSeconds = md.Spec.Template.Spec.Deletion.NodeDeletionTimeoutSeconds
	t.Deletion.NodeVolumeDetachTimeoutSeconds = md.Spec.Template.Spec.Deletion.NodeVolumeDetachTimeoutSeconds
	t.Taints = md.Spec.Template.Spec.Taints
	return ms
}

// machineSetRequest mirrors createRequest
// (core/reconcilers/machinedeployment/machinedeployment_canupdatemachineset.go).
// The bootstrap templates may be nil (machines without a bootstrap
// template); the infrastructure templates may not.
func machineSetRequest(oldMS, newMS *clusterv1.MachineSet, curBootstrap, desBootstrap, curInfra, desInfra *unstructured.Unstructured, settings map[string]string) (*runtimehooksv1.CanUpdateMachineSetRequest, error) {
	req := &runtimehooksv1.CanUpdateMachineSetRequest{
		CommonRequest: runtimehooksv1.CommonRequest{Settings: settings},
		Current:       runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: *cleanupMachineSet(oldMS)},
		Desired:       runtimehooksv1.CanUpdateMachineSetRequestObjects{MachineSet: *cleanupMachineSet(newMS)},
	}
	var err error
	if curBootstrap != nil {
		if req.Current.BootstrapConfigTemplate, err = rawOf(cleanupUnstructured(curBootstrap)); err != nil {
			return nil, err
		}
	}
	if desBootstrap != nil {
		if req.Desired.BootstrapConfigTemplate, err = rawOf(cleanupUnstructured(desBootstrap)); err != nil {
			return nil, err
		}
	}
	if req.Current.InfrastructureMachineTemplate, err = rawOf(cleanupUnstructured(curInfra)); err != nil {
		return nil, err
	}
	if req.Desired.InfrastructureMachineTemplate, err = rawOf(cleanupUnstructured(desInfra)); err != nil {
		return nil, err
	}
	return req, nil
}

// machineRequest mirrors createRequest
// (controlplane/kubeadm/reconcilers/kubeadmcontrolplane/inplace_canupdatemachine.go)
// from UpToDate's result. With dryRun, the desired Machine and both
// infrastructure machines go through a server-side apply dry run first,
// as Cluster API does, so API server defaults are in; a dry run the
// server refuses as invalid or forbidden is, as in Cluster API, a reason
// not to call the extension (returned as reason).
func machineRequest(ctx context.Context, c client.Client, dryRun bool, current *clusterv1.Machine, res *kcppkg.UpToDateResult, settings map[string]string) (reason string, req *runtimehooksv1.CanUpdateMachineRequest, err error) {
	curMachine := current.DeepCopy()
	curConfig := res.CurrentKubeadmConfig.DeepCopy()
	curInfra := res.CurrentInfraMachine.DeepCopy()
	desMachine := res.DesiredMachine.DeepCopy()
	desConfig := res.DesiredKubeadmConfig.DeepCopy()
	desInfra := res.DesiredInfraMachine.DeepCopy()

	curConfig.SetLabels(desConfig.GetLabels())
	curConfig.SetAnnotations(desConfig.GetAnnotations())
	curInfra.SetLabels(desInfra.GetLabels())
	curInfra.SetAnnotations(desInfra.GetAnnotations())

	if dryRun {
		if err := applyDryRun(ctx, c, desMachine); err != nil {
			return "", nil, fmt.Errorf("server side apply dry-run for desired Machine %s: %w", current.Name, err)
		}
		for _, u := range []*unstructured.Unstructured{curInfra, desInfra} {
			if err := applyDryRun(ctx, c, u); err != nil {
				if isInvalidOrForbidden(err) {
					return fmt.Sprintf("server side apply dry-run for %s %s failed: %s", u.GetKind(), u.GetName(), err), nil, nil
				}
				return "", nil, fmt.Errorf("server side apply dry-run for %s %s: %w", u.GetKind(), u.GetName(), err)
			}
		}
	}
	desConfig, curConfig = kcppkg.PrepareKubeadmConfigsForDiff(desConfig, curConfig, true)

	req = &runtimehooksv1.CanUpdateMachineRequest{
		CommonRequest: runtimehooksv1.CommonRequest{Settings: settings},
		Current:       runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *cleanupMachine(curMachine)},
		Desired:       runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *cleanupMachine(desMachine)},
	}
	if req.Current.BootstrapConfig, err = rawOf(cleanupKubeadmConfig(curConfig)); err != nil {
		return "", nil, err
	}
	if req.Desired.BootstrapConfig, err = rawOf(cleanupKubeadmConfig(desConfig)); err != nil {
		return "", nil, err
	}
	if req.Current.InfrastructureMachine, err = rawOf(cleanupUnstructured(curInfra)); err != nil {
		return "", nil, err
	}
	if req.Desired.InfrastructureMachine, err = rawOf(cleanupUnstructured(desInfra)); err != nil {
		return "", nil, err
	}
	return "", req, nil
}

// applyDryRun is internal/util/ssa.Patch with WithDryRun: obj is applied
// by KubeadmControlPlane's field manager with dryRun=All, and replaced
// by what the server would store.
func applyDryRun(ctx context.Context, c client.Client, obj client.Object) error {
	u := &unstructured.Unstructured{}
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		u = o.DeepCopy()
	default:
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return err
		}
		u.Object = m
		u.SetAPIVersion(clusterv1.GroupVersion.String())
		u.SetKind("Machine")
	}
	unstructured.RemoveNestedField(u.Object, "metadata", "managedFields")
	unstructured.RemoveNestedField(u.Object, "metadata", "resourceVersion")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "status")
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(kcpManagerName), client.ForceOwnership, client.DryRunAll); err != nil {
		return err
	}
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		u.DeepCopyInto(o)
		return nil
	default:
		return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj)
	}
}

// cleanupMachineSet mirrors the MachineDeployment controller's
// cleanupMachineSet.
func cleanupMachineSet(ms *clusterv1.MachineSet) *clusterv1.MachineSet {
	return &clusterv1.MachineSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineSet"},
		ObjectMeta: metav1.ObjectMeta{Name: ms.Name, Namespace: ms.Namespace, Labels: ms.Labels, Annotations: ms.Annotations},
		Spec:       *ms.Spec.DeepCopy(),
	}
}

// cleanupMachine mirrors KubeadmControlPlane's cleanupMachine.
func cleanupMachine(m *clusterv1.Machine) *clusterv1.Machine {
	return &clusterv1.Machine{
		TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"},
		ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, Labels: m.Labels, Annotations: m.Annotations},
		Spec:       *m.Spec.DeepCopy(),
	}
}

// cleanupKubeadmConfig mirrors KubeadmControlPlane's cleanupKubeadmConfig.
func cleanupKubeadmConfig(c *bootstrapv1.KubeadmConfig) *bootstrapv1.KubeadmConfig {
	return &bootstrapv1.KubeadmConfig{
		TypeMeta:   metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfig"},
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: c.Namespace, Labels: c.Labels, Annotations: c.Annotations},
		Spec:       *c.Spec.DeepCopy(),
	}
}

// cleanupUnstructured mirrors both controllers' cleanupUnstructured:
// apiVersion, kind, name, namespace, labels, annotations and spec.
func cleanupUnstructured(u *unstructured.Unstructured) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(), "spec": u.Object["spec"]}}
	out.SetName(u.GetName())
	out.SetNamespace(u.GetNamespace())
	out.SetLabels(u.GetLabels())
	out.SetAnnotations(u.GetAnnotations())
	return out
}

// rawOf is patch.ConvertToRawExtension, as the extension receives it over
// the wire: the object's JSON.
func rawOf(obj runtime.Object) (runtime.RawExtension, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return runtime.RawExtension{}, err
	}
	return runtime.RawExtension{Raw: raw}, nil
}

// overTheWire returns req as the extension's handler decodes it: Cluster
// API sends JSON, so what a Go value holds beyond its JSON (raw
// extensions' decoded Object) never reaches the extension.
func overTheWire[T any](req *T) (*T, error) {
	raw, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	out := new(T)
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, err
	}
	return out, nil
}

func isInvalidOrForbidden(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsForbidden(err)
}
