package capi

import (
	"context"
	"fmt"

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
