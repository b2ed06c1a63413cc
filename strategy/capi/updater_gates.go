package capi

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// gateRequest is what the gates are asked about m.
func gateRequest(m *clusterv1.Machine, node string, now time.Time) strategy.GateRequest {
	req := strategy.GateRequest{Cluster: m.Namespace + "/" + m.Spec.ClusterName, Role: strategy.RoleWorker, Group: m.Labels[clusterv1.MachineDeploymentNameLabel],
		Machine: m.Name, Node: node, Now: now}
	if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; cp {
		req.Role, req.Group = strategy.RoleControlPlane, ""
	}
	return req
}

// PeekGates says what UpdaterOptions.Gates' gates would answer now about an update
// of m, each gate in order (the members of a strategy.Gates given to
// UpdaterOptions.Gates each on its own), taking nothing: strategy.Gates.PeekEach. m's
// node is its status.nodeRef, where UpdateMachine finds the Node by
// spec.providerID: until Cluster API sets the nodeRef, a gate that looks
// at the machine's own node (a soak) may answer otherwise than it will.
// It returns nil without gates; an updater not built by NewMachineUpdater
// answers nothing either.
func (u *MachineUpdater) PeekGates(ctx context.Context, m *clusterv1.Machine) []strategy.GateResult {
	if u == nil || m == nil || len(u.gates) == 0 {
		return nil
	}
	now := time.Now()
	if u.clock != nil {
		now = u.clock.Now()
	}
	return flatGates(u.gates).PeekEach(ctx, gateRequest(m, m.Status.NodeRef.Name, now))
}

// flatGates lists the gates of gs, nested strategy.Gates opened.
func flatGates(gs []strategy.Gate) strategy.Gates {
	var out strategy.Gates
	for _, g := range gs {
		if inner, ok := g.(strategy.Gates); ok {
			out = append(out, flatGates(inner)...)
			continue
		}
		out = append(out, g)
	}
	return out
}

// holdGates renews what the gates hold for an update in progress and
// releases it once the update is done (a failed update keeps it: see
// ConcurrencyGate). Errors are logged: the slot's TTL bounds them.
func (u *MachineUpdater) holdGates(ctx context.Context, log logr.Logger, m *clusterv1.Machine, res updateResult) {
	h, ok := u.gate.(strategy.GateHolder)
	if !ok || m == nil {
		return
	}
	req := gateRequest(m, res.node, u.clock.Now())
	switch {
	case res.done:
		if err := h.Release(ctx, req); err != nil {
			log.Error(err, "releasing what the gates hold for the machine")
		}
	case res.err == nil && res.phase != observe.ReasonGateClosed && res.phase != "":
		if err := h.Renew(ctx, req); err != nil {
			log.Error(err, "renewing what the gates hold for the machine")
		}
	}
}

// gatesOpen asks UpdaterOptions.Gates' gates whether the update of st's machine may
// start now.
func (u *MachineUpdater) gatesOpen(ctx context.Context, st *call) (updateResult, bool) {
	if u.gate == nil {
		return updateResult{}, true
	}
	r := u.gate.Check(ctx, gateRequest(st.machine, st.node.Name, st.now))
	switch r.Verdict {
	case strategy.VerdictAllow:
		return updateResult{}, true
	case strategy.VerdictStop:
		st.log.Info("a gate stopped the update", "gate", r.Gate, "reason", r.Reason)
		return failedAs(observe.FailureGateStopped, "node %s: %s", st.node.Name, r.String()), false
	}
	st.log.V(1).Info("a gate holds the update", "gate", r.Gate, "reason", r.Reason, "retryAfter", r.RetryAfter)
	res := waiting(observe.ReasonGateClosed, "node %s not started: %s", st.node.Name, r.String())
	res.retryAfter = r.RetryAfter
	return res, false
}
