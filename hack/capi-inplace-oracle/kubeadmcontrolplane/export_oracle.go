//go:build ignore

// This file is upgradekit's, not Cluster API's. hack/capi-inplace-oracle.sh
// copies it into a private copy of sigs.k8s.io/cluster-api (package
// controlplane/kubeadm/reconcilers/kubeadmcontrolplane) so that Cluster
// API's own unexported code runs as a test oracle. It adds nothing but
// exported names for two unexported functions.

package kubeadmcontrolplane

import (
	"context"

	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
)

// OracleApplyPatchesToRequest is applyPatchesToRequest
// (inplace_canupdatemachine.go): the CanUpdateMachine answer's patches
// applied to the request's current objects, spec only.
func OracleApplyPatchesToRequest(ctx context.Context, req *runtimehooksv1.CanUpdateMachineRequest, resp *runtimehooksv1.CanUpdateMachineResponse) error {
	return applyPatchesToRequest(ctx, req, resp)
}

// OracleMatchesMachine is matchesMachine (inplace_canupdatemachine.go):
// whether the patched current objects now match the desired ones, and the
// reasons when not.
func OracleMatchesMachine(req *runtimehooksv1.CanUpdateMachineRequest) (bool, []string, error) {
	return matchesMachine(req)
}
