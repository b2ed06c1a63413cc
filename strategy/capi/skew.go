package capi

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/version"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ControlPlaneSkewCheck declines an in-place version change of a worker
// (a Machine without the control plane label, or a MachineSet) to a minor
// version above the lowest minor of the cluster's control plane Machines,
// read through mgmt (the management cluster; a manager's cached client is
// fine). The Kubernetes version skew policy does not allow a kubelet newer
// than the API server, and once accepted Cluster API could not take the
// update back. Control plane machines are not checked here: their order is
// KubeadmControlPlane's job.
//
// Before it reads anything of the cluster it checks that the request's
// current Machine or MachineSet is in the management cluster, in the
// cluster the request names, at the request's current version: the answer
// names control plane machines and their versions, which a caller that
// forged a request for another cluster must not learn. A request that does
// not match is ErrRequestMismatch (a Failure that says nothing of the
// cluster).
//
// A cluster whose control plane has no Machines (a managed control plane)
// cannot be checked and is allowed. A control plane Machine with an
// unparsable spec.version, or a failed list, is an error that is not
// ErrInfeasible: the Extension answers Failure and Cluster API asks again.
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
		if to.Major() > lowest.Major() || (to.Major() == lowest.Major() && to.Minor() > lowest.Minor()) {
			return fmt.Errorf("%w: spec.version: a kubelet at %s would be newer than the control plane (machine %s is at v%s); upgrade the control plane first",
				ErrInfeasible, r.ToVersion, lowestName, lowest)
		}
		return nil
	})
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
