package capi

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/internal/errtext"
)

// ErrWouldRollOut is matched by VerifyCanUpdateMachine's and
// VerifyCanUpdateMachineSet's error when Cluster API, after applying the
// answer's patches, still finds the current and desired objects different:
// it would roll the machine out instead of updating it in place.
var ErrWouldRollOut = errors.New("would be rolled out by Cluster API, not updated in place")

// ErrNotAnAnswer is matched by the Verify functions' error for a response
// Cluster API does not take as an answer (status Failure) and for a nil
// request or response.
var ErrNotAnAnswer = errors.New("not an answer Cluster API applies")

// ErrInvalidPatch is matched by the Verify functions' error (and the
// Extension's self-check) when a patch of the answer cannot be applied to
// the request's object as Cluster API applies it: an unknown patch type, a
// patch that does not decode, a JSON patch operation that fails.
var ErrInvalidPatch = errors.New("invalid patch")

// RollOutError is the Verify functions' error when differences are left;
// it matches ErrWouldRollOut.
type RollOutError struct {
	// Fields are the fields left, as "path (Category)".
	Fields []string
}

// Error names the fields left (at most ten, then how many more).
func (e *RollOutError) Error() string {
	const show = 10
	names := e.Fields
	if len(names) > show {
		names = append(names[:show:show], fmt.Sprintf("and %d more", len(e.Fields)-show))
	}
	return errtext.Cap(ErrWouldRollOut.Error() + ": the patched objects still differ in " + strings.Join(names, ", "))
}

// Is makes a RollOutError match ErrWouldRollOut.
func (e *RollOutError) Is(target error) bool { return target == ErrWouldRollOut }

var strictDiffer = sync.OnceValues(func() (*diff.Differ, error) { return diff.New(diff.InPlaceUpdate()) })

// VerifyCanUpdateMachine says what Cluster API v1.14 does with a
// successful CanUpdateMachine answer: it applies the answer's patches to
// the request's current Machine, bootstrap config and infrastructure
// machine (JSON or merge patches; only spec is kept, as its
// ApplyPatchToObject does) and compares the result with the desired
// objects as strictly as its matchesMachine: "", [] and {} differ from an
// absent field, 8 from 8.0. It returns nil when they match (the machine is
// updated in place), a *RollOutError naming what is left when they do not,
// an error matching ErrNotAnAnswer for a Failure, and one matching
// ErrInvalidPatch when a patch does not apply.
//
// The Extension runs the same check on each of its answers before it
// sends it. Call this in your own extension's tests: an accept that does
// not verify is one Cluster API would not honour. It is checked against
// Cluster API's own code on thousands of generated requests
// (hack/capi-inplace-oracle.sh). With several extensions Cluster API
// applies all their patches; this checks one answer alone.
func VerifyCanUpdateMachine(req *runtimehooksv1.CanUpdateMachineRequest, resp *runtimehooksv1.CanUpdateMachineResponse) error {
	if req == nil || resp == nil {
		return fmt.Errorf("%w: nil request or response", ErrNotAnAnswer)
	}
	if err := notFailed(resp); err != nil {
		return err
	}
	cur := diff.State{Machine: &req.Current.Machine, Bootstrap: req.Current.BootstrapConfig, Infrastructure: req.Current.InfrastructureMachine}
	des := diff.State{Machine: &req.Desired.Machine, Bootstrap: req.Desired.BootstrapConfig, Infrastructure: req.Desired.InfrastructureMachine}
	return verify(cur, des, [3]runtimehooksv1.Patch{resp.MachinePatch, resp.BootstrapConfigPatch, resp.InfrastructureMachinePatch}, false)
}

// VerifyCanUpdateMachineSet is VerifyCanUpdateMachine for a MachineSet's
// answer: the MachineSet, bootstrap config template and infrastructure
// machine template, patched and compared as Cluster API's
// matchesMachineSet does (spec.template.spec kept from the patch).
func VerifyCanUpdateMachineSet(req *runtimehooksv1.CanUpdateMachineSetRequest, resp *runtimehooksv1.CanUpdateMachineSetResponse) error {
	if req == nil || resp == nil {
		return fmt.Errorf("%w: nil request or response", ErrNotAnAnswer)
	}
	if err := notFailed(resp); err != nil {
		return err
	}
	cur := diff.State{Machine: &req.Current.MachineSet, Bootstrap: req.Current.BootstrapConfigTemplate, Infrastructure: req.Current.InfrastructureMachineTemplate}
	des := diff.State{Machine: &req.Desired.MachineSet, Bootstrap: req.Desired.BootstrapConfigTemplate, Infrastructure: req.Desired.InfrastructureMachineTemplate}
	return verify(cur, des, [3]runtimehooksv1.Patch{resp.MachineSetPatch, resp.BootstrapConfigTemplatePatch, resp.InfrastructureMachineTemplatePatch}, true)
}

// notFailed refuses a Failure, which Cluster API does not apply.
func notFailed(resp runtimehooksv1.ResponseObject) error {
	if resp.GetStatus() == runtimehooksv1.ResponseStatusFailure {
		return fmt.Errorf("%w: status Failure: %s", ErrNotAnAnswer, errtext.Clip(resp.GetMessage()))
	}
	return nil
}

func verify(cur, des diff.State, patches [3]runtimehooksv1.Patch, templates bool) error {
	strict, err := strictDiffer()
	if err != nil {
		return err
	}
	left, err := leftAfterPatches(strict, cur, des, patches, templates)
	if err != nil {
		return err
	}
	if left.Empty() {
		return nil
	}
	return &RollOutError{Fields: fieldNames(left)}
}
