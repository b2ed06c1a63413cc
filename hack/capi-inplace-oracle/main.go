//go:build ignore

// Command capi-inplace-oracle is upgradekit's test oracle for Cluster API's
// in-place comparison. It is not part of upgradekit's module:
// hack/capi-inplace-oracle.sh copies it, with the two export_oracle.go
// files beside it, into a private copy of sigs.k8s.io/cluster-api (as
// cmd/upgradekit-capi-inplace-oracle) and builds it there, so it may call
// Cluster API's internal packages.
//
// It reads JSON lines {"hook", "request", "response"} on stdin, hook being
// "CanUpdateMachine" or "CanUpdateMachineSet", and writes one JSON line
// {"match", "reasons", "error"} per input line on stdout. For each line it
// does what Cluster API v1.14 does with an extension's answer and nothing
// else:
//
//   - the request's objects are made what createRequest makes them in
//     memory (patch.ConvertToRawExtension: Raw plus an Unstructured Object);
//   - CanUpdateMachine: kubeadmcontrolplane's applyPatchesToRequest, then
//     matchesMachine (inplace_canupdatemachine.go);
//   - CanUpdateMachineSet: machinedeployment's applyPatchesToRequest, then
//     matchesMachineSet (machinedeployment_canupdatemachineset.go).
//
// Those call internal/util/patch (ApplyPatchToObject,
// ApplyPatchToTypedObject), internal/util/inplace
// (CleanupMachineSpecForDiff) and internal/util/compare (Diff) themselves.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/reconcilers/kubeadmcontrolplane"
	"sigs.k8s.io/cluster-api/core/reconcilers/machinedeployment"
	"sigs.k8s.io/cluster-api/internal/util/patch"
)

type input struct {
	Hook     string          `json:"hook"`
	Request  json.RawMessage `json:"request"`
	Response json.RawMessage `json:"response"`
}

type output struct {
	Match   bool     `json:"match"`
	Reasons []string `json:"reasons,omitempty"`
	Error   string   `json:"error,omitempty"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 0, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		if len(in.Bytes()) == 0 {
			continue
		}
		o := run(in.Bytes())
		if err := out.Encode(o); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(line []byte) (o output) {
	defer func() {
		if r := recover(); r != nil {
			o = output{Error: fmt.Sprintf("panic: %v", r)}
		}
	}()
	var in input
	if err := json.Unmarshal(line, &in); err != nil {
		return output{Error: err.Error()}
	}
	ctx := context.Background()
	var (
		match   bool
		reasons []string
		err     error
	)
	switch in.Hook {
	case "CanUpdateMachine":
		req, resp := &runtimehooksv1.CanUpdateMachineRequest{}, &runtimehooksv1.CanUpdateMachineResponse{}
		if err := decode(in, req, resp); err != nil {
			return output{Error: err.Error()}
		}
		for _, r := range []*runtime.RawExtension{&req.Current.BootstrapConfig, &req.Desired.BootstrapConfig, &req.Current.InfrastructureMachine, &req.Desired.InfrastructureMachine} {
			if err := asCreateRequestMakesIt(r); err != nil {
				return output{Error: err.Error()}
			}
		}
		if err := kubeadmcontrolplane.OracleApplyPatchesToRequest(ctx, req, resp); err != nil {
			return output{Error: err.Error()}
		}
		match, reasons, err = kubeadmcontrolplane.OracleMatchesMachine(req)
	case "CanUpdateMachineSet":
		req, resp := &runtimehooksv1.CanUpdateMachineSetRequest{}, &runtimehooksv1.CanUpdateMachineSetResponse{}
		if err := decode(in, req, resp); err != nil {
			return output{Error: err.Error()}
		}
		for _, r := range []*runtime.RawExtension{&req.Current.BootstrapConfigTemplate, &req.Desired.BootstrapConfigTemplate, &req.Current.InfrastructureMachineTemplate, &req.Desired.InfrastructureMachineTemplate} {
			if err := asCreateRequestMakesIt(r); err != nil {
				return output{Error: err.Error()}
			}
		}
		if err := machinedeployment.OracleApplyPatchesToRequest(ctx, req, resp); err != nil {
			return output{Error: err.Error()}
		}
		match, reasons, err = machinedeployment.OracleMatchesMachineSet(req)
	default:
		return output{Error: fmt.Sprintf("unknown hook %q", in.Hook)}
	}
	if err != nil {
		return output{Error: err.Error()}
	}
	return output{Match: match, Reasons: reasons}
}

func decode(in input, req, resp any) error {
	if err := json.Unmarshal(in.Request, req); err != nil {
		return fmt.Errorf("request: %w", err)
	}
	if err := json.Unmarshal(in.Response, resp); err != nil {
		return fmt.Errorf("response: %w", err)
	}
	return nil
}

// asCreateRequestMakesIt gives a decoded object the in-memory form
// createRequest gives it: patch.ConvertToRawExtension of an Unstructured.
// An absent object (a MachineSet without bootstrap template) stays absent.
func asCreateRequestMakesIt(r *runtime.RawExtension) error {
	if len(r.Raw) == 0 || string(r.Raw) == "null" {
		*r = runtime.RawExtension{}
		return nil
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(r.Raw); err != nil {
		return err
	}
	ext, err := patch.ConvertToRawExtension(u)
	if err != nil {
		return err
	}
	*r = ext
	return nil
}
