//go:build ignore

// This file is upgradekit's, not Cluster API's. hack/capi-inplace-oracle.sh
// copies it into a private copy of sigs.k8s.io/cluster-api (package
// core/reconcilers/machinedeployment) so that Cluster API's own unexported
// code runs as a test oracle. It adds nothing but exported names for two
// unexported functions.

package machinedeployment

import (
	"context"

	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
)

// OracleApplyPatchesToRequest is applyPatchesToRequest
// (machinedeployment_canupdatemachineset.go): the CanUpdateMachineSet
// answer's patches applied to the request's current objects, spec.template.spec
// only.
func OracleApplyPatchesToRequest(ctx context.Context, req *runtimehooksv1.CanUpdateMachineSetRequest, resp *runtimehooksv1.CanUpdateMachineSetResponse) error {
	return applyPatchesToRequest(ctx, req, resp)
}

// OracleMatchesMachineSet is matchesMachineSet
// (machinedeployment_canupdatemachineset.go): whether the patched current
// objects now match the desired ones, and the reasons when not.
func OracleMatchesMachineSet(req *runtimehooksv1.CanUpdateMachineSetRequest) (bool, []string, error) {
	return matchesMachineSet(req)
}
