package capi

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/version"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ControlPlaneSkewCheck declines an in-place version change of a worker
// (a Machine without the control plane label, or a MachineSet) to a minor
// version the cluster's control plane is not going to reach: the Kubernetes
// version skew policy does not allow a kubelet newer than the API server,
// and once accepted Cluster API could not take the update back. It reads
// through mgmt (the management cluster; a manager's cached client is fine).
// Control plane machines are not checked here: their order is
// KubeadmControlPlane's job.
//
// What the control plane is going to reach is its desired version: the
// spec.version of the Cluster's spec.controlPlaneRef (a
// KubeadmControlPlane, or any provider's object with the control plane
// contract's spec.version, found through mgmt's RESTMapper when mgmt is a
// client.Client). At or above the worker's target minor the change is
// accepted even while the control plane is still upgrading: that is only a
// question of order, and MachineUpdater's UpdateMachine waits (in
// progress, nothing done to the node) until every control plane Node runs
// the target minor. Below it, the change is declined, naming the control
// plane's desired version: that does not pass by itself.
//
// Why not decline while the control plane is upgrading: Cluster API's
// MachineDeployment controller (v1.14) does not order workers after the
// control plane. For a Cluster with a managed topology (ClusterClass) the
// topology controller writes a MachineDeployment's new version only once
// the control plane is stable, so there the question never comes early;
// but when a KubeadmControlPlane and a MachineDeployment are bumped
// together by hand (or by GitOps), the MachineDeployment asks
// CanUpdateMachineSet at once, while KubeadmControlPlane writes each
// control plane Machine's new spec.version only when it triggers that
// machine. The MachineSet preflight checks (MachineSetPreflightChecks,
// ControlPlaneIsStable and KubernetesVersionSkew) hold only the creation
// of new Machines, not the move of Machines to be updated in place. And
// Cluster API remembers a CanUpdateMachineSet "no" for 24 hours per old
// and new MachineSet (machinedeployment_canupdatemachineset.go,
// util/cache), so a decline while the control plane was on its way would
// have replaced the whole MachineDeployment.
//
// Without a control plane object with a spec.version (no controlPlaneRef,
// as with standalone control plane Machines; a kind mgmt may not read, or
// whose version it cannot resolve), the check falls back to the control
// plane Machines' spec.version: a worker may not go above the lowest
// minor among them. A cluster with neither (a managed control plane
// without a version) cannot be checked and is allowed.
//
// Before it reads anything of the cluster it checks that the request's
// current Machine or MachineSet is in the management cluster, in the
// cluster the request names, at the request's current version: the answer
// names control plane objects and their versions, which a caller that
// forged a request for another cluster must not learn. A request that does
// not match is ErrRequestMismatch (a Failure that says nothing of the
// cluster).
//
// An unparsable version, or a failed read other than the fallbacks above,
// is an error that is not ErrInfeasible: the Extension answers Failure and
// Cluster API asks again.
func ControlPlaneSkewCheck(mgmt client.Reader) Check {
	return CheckFunc(func(ctx context.Context, r CheckRequest) error {
		if !r.VersionChanged() {
			return nil
		}
		ns, cluster := "", ""
		switch m := r.Desired.Machine.(type) {
		case *clusterv1.Machine:
			if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; cp {
				return nil
			}
			ns, cluster = m.Namespace, m.Spec.ClusterName
		case *clusterv1.MachineSet:
			ns, cluster = m.Namespace, m.Spec.ClusterName
		default:
			return fmt.Errorf("control plane skew: desired object is a %T, not a Machine or MachineSet", r.Desired.Machine)
		}
		to, err := version.ParseSemantic(r.ToVersion)
		if err != nil {
			return fmt.Errorf("%w: spec.version %q: %v", ErrInfeasible, r.ToVersion, err)
		}
		if err := currentMatchesCluster(ctx, mgmt, r.Current.Machine, cluster, r.FromVersion); err != nil {
			return err
		}
		desired, what, err := desiredControlPlaneVersion(ctx, mgmt, ns, cluster)
		if err != nil {
			return err
		}
		if desired != nil {
			if minorAbove(to, desired) {
				return fmt.Errorf("%w: spec.version: a kubelet at %s would be newer than the control plane, whose desired version is v%s (%s); upgrade the control plane first",
					ErrInfeasible, r.ToVersion, desired, what)
			}
			return nil
		}
		var cps clusterv1.MachineList
		if err := mgmt.List(ctx, &cps, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster},
			client.HasLabels{clusterv1.MachineControlPlaneLabel}); err != nil {
			return fmt.Errorf("control plane skew: listing the control plane machines of cluster %s/%s: %w", ns, cluster, err)
		}
		var lowest *version.Version
		var lowestName string
		for i := range cps.Items {
			m := &cps.Items[i]
			v, err := version.ParseSemantic(m.Spec.Version)
			if err != nil {
				return fmt.Errorf("control plane skew: machine %s/%s: spec.version %q: %w", m.Namespace, m.Name, m.Spec.Version, err)
			}
			if lowest == nil || v.LessThan(lowest) {
				lowest, lowestName = v, m.Name
			}
		}
		if lowest == nil {
			return nil
		}
		if minorAbove(to, lowest) {
			return fmt.Errorf("%w: spec.version: a kubelet at %s would be newer than the control plane (machine %s is at v%s); upgrade the control plane first",
				ErrInfeasible, r.ToVersion, lowestName, lowest)
		}
		return nil
	})
}

// minorAbove reports whether a's major.minor is above b's.
func minorAbove(a, b *version.Version) bool {
	return a.Major() > b.Major() || (a.Major() == b.Major() && a.Minor() > b.Minor())
}

// kubeadmControlPlaneGVK is the control plane kind whose API version the
// check knows without a RESTMapper.
var kubeadmControlPlaneGVK = schema.GroupVersionKind{Group: "controlplane.cluster.x-k8s.io", Version: "v1beta2", Kind: "KubeadmControlPlane"}

// desiredControlPlaneVersion reads the spec.version of cluster's control
// plane object, and names it ("KubeadmControlPlane demo-cp"). It returns
// nil, without error, when there is none to read (no Cluster, no
// controlPlaneRef, a kind mgmt cannot resolve or may not read, no
// spec.version): the caller falls back to the control plane Machines.
func desiredControlPlaneVersion(ctx context.Context, mgmt client.Reader, ns, name string) (*version.Version, string, error) {
	var c clusterv1.Cluster
	if err := mgmt.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &c); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			return nil, "", nil
		}
		return nil, "", fmt.Errorf("control plane skew: reading cluster %s/%s: %w", ns, name, err)
	}
	ref := c.Spec.ControlPlaneRef
	if !ref.IsDefined() {
		return nil, "", nil
	}
	gvk := schema.GroupVersionKind{Group: ref.APIGroup, Kind: ref.Kind}
	if gvk.GroupKind() == kubeadmControlPlaneGVK.GroupKind() {
		gvk = kubeadmControlPlaneGVK
	} else {
		mapped, ok := mgmt.(interface{ RESTMapper() meta.RESTMapper })
		if !ok {
			return nil, "", nil
		}
		m, err := mapped.RESTMapper().RESTMapping(gvk.GroupKind())
		if err != nil {
			return nil, "", nil
		}
		gvk = m.GroupVersionKind
	}
	cp := &unstructured.Unstructured{}
	cp.SetGroupVersionKind(gvk)
	if err := mgmt.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, cp); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || meta.IsNoMatchError(err) {
			return nil, "", nil
		}
		return nil, "", fmt.Errorf("control plane skew: reading %s %s/%s: %w", ref.Kind, ns, ref.Name, err)
	}
	s, ok, err := unstructured.NestedString(cp.Object, "spec", "version")
	if err != nil || !ok || s == "" {
		return nil, "", nil
	}
	v, err := version.ParseSemantic(s)
	if err != nil {
		return nil, "", fmt.Errorf("control plane skew: %s %s/%s: spec.version %q: %w", ref.Kind, ns, ref.Name, s, err)
	}
	return v, ref.Kind + " " + ref.Name, nil
}

// ErrRequestMismatch is matched by the Failure answered to a CanUpdate*
// request whose current Machine or MachineSet is not what the management
// cluster holds. The message says nothing more, on purpose.
var ErrRequestMismatch = errors.New("request does not match the management cluster")

// currentMatchesCluster checks that the request's current object exists in
// the management cluster under its namespace and name, belongs to cluster,
// and is at version from. Cluster API sends a copy of the live object
// (without its UID); these are what it cannot get wrong.
func currentMatchesCluster(ctx context.Context, mgmt client.Reader, cur any, cluster, from string) error {
	var live client.Object
	var liveCluster, liveVersion func() string
	key := client.ObjectKey{}
	switch m := cur.(type) {
	case *clusterv1.Machine:
		l := &clusterv1.Machine{}
		live, key = l, client.ObjectKeyFromObject(m)
		liveCluster, liveVersion = func() string { return l.Spec.ClusterName }, func() string { return l.Spec.Version }
	case *clusterv1.MachineSet:
		l := &clusterv1.MachineSet{}
		live, key = l, client.ObjectKeyFromObject(m)
		liveCluster, liveVersion = func() string { return l.Spec.ClusterName }, func() string { return l.Spec.Template.Spec.Version }
	default:
		return fmt.Errorf("%w: current object is a %T", ErrRequestMismatch, cur)
	}
	if err := mgmt.Get(ctx, key, live); err != nil {
		if apierrors.IsNotFound(err) {
			return ErrRequestMismatch
		}
		return fmt.Errorf("control plane skew: reading the current object: %w", err)
	}
	if liveCluster() != cluster || liveVersion() != from {
		return ErrRequestMismatch
	}
	return nil
}
