package capi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/nodeexec/drain"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// DefaultCordonOwner is the owner MachineUpdater records when it cordons a
// node (drain.AnnotationCordon); it only ever uncordons a node whose cordon
// record names this owner, and leaves a node that was already cordoned
// before it came cordoned.
const DefaultCordonOwner = "upgradekit-inplace-update"

// Drain defaults.
const (
	// DefaultDrainTimeout is how long a drain may stay unfinished, counted
	// from its start recorded on the Node, before UpdateMachine answers
	// Failure (observe.FailureDrainTimeout).
	DefaultDrainTimeout = 30 * time.Minute
	// DefaultDrainAttempt bounds the eviction work done in one
	// UpdateMachine call. Cluster API waits 10 seconds for a hook by
	// default, so the call must come back well within that.
	DefaultDrainAttempt = 5 * time.Second
)

// drainNode cordons the node and makes one bounded drain attempt. It
// returns ok when the node is drained (and the record says so); otherwise
// the result to answer.
func (u *MachineUpdater) drainNode(ctx context.Context, st *call, rec *observe.UpdateRecord) (updateResult, bool) {
	node := st.node.Name
	cs, err := u.clientset(ctx, st.cluster)
	if err != nil {
		return waiting(observe.ReasonDraining, "waiting for a clientset of the workload cluster: %v", err), false
	}
	if rec.DrainStarted == nil {
		started := st.nowMeta()
		rec.DrainStarted = &started
		if err := st.writeRecord(ctx, rec); err != nil {
			return waiting(observe.ReasonDraining, "recording the drain's start on node %s: %v", node, err), false
		}
	}
	elapsed := st.now.Sub(rec.DrainStarted.Time).Truncate(time.Second)
	overdue := u.drainTimeout > 0 && elapsed > u.drainTimeout

	if _, err := drain.Cordon(ctx, cs, node, u.cordonOwner); err != nil {
		var oe *drain.OwnershipError
		if !errors.As(err, &oe) {
			return waiting(observe.ReasonDraining, "cordoning node %s: %v", node, err), false
		}
		what := fmt.Sprintf("node %s is cordoned by %q (annotation %s), not by %q", node, oe.Holder, drain.AnnotationCordon, u.cordonOwner)
		if overdue {
			return failedAs(observe.FailureDrainTimeout, "%s: drain not started after %s (deadline %s)", what, elapsed, u.drainTimeout), false
		}
		return waiting(observe.ReasonDrainBlocked, "%s; waiting for it to be released", what), false
	}

	log := st.log.WithValues("step", "drain")
	rules, err := u.drainRules(ctx, st)
	if err != nil {
		return waiting(observe.ReasonDraining, "reading the drain rules of machine %s: %v", st.machine.Name, err), false
	}
	opts := append([]drain.Option{drain.WithEvictionRetryDelay(time.Second), drain.WithLogger(log.V(1))}, u.drainOpts...)
	opts = append(opts, drain.WithTimeout(u.drainAttempt), drain.WithSkip(nodepod.Selector()), drain.WithSkipNamespace(u.podNamespace),
		drain.WithClusterAPIRules(rules))
	rep, err := drain.Drain(ctx, cs, node, opts...)
	if len(rep.Evicted) > 0 {
		log.V(1).Info("evicted pods", "pods", rep.Evicted)
	}
	if rep.Warnings != "" {
		log.Info("drain warning", "warning", rep.Warnings)
	}
	if err == nil {
		drained := st.nowMeta()
		rec.Drained = &drained
		if err := st.writeRecord(ctx, rec); err != nil {
			return waiting(observe.ReasonDraining, "recording the end of the drain on node %s: %v", node, err), false
		}
		log.Info("node drained", "evicted", len(rep.Evicted), "took", elapsed.String())
		u.event(st.machine, eventNormal, observe.EventReasonNodeDrained, "Drain", "Drained node %s in %s: %d pod(s) evicted in the last attempt", node, elapsed, len(rep.Evicted))
		return updateResult{}, true
	}
	var de *drain.DrainError
	if !errors.As(err, &de) {
		return waiting(observe.ReasonDraining, "draining node %s: %v", node, err), false
	}
	what := describeDrain(de)
	if overdue {
		return failedAs(observe.FailureDrainTimeout, "node %s: drain not finished after %s (deadline %s): %s; the node stays cordoned and the drain resumes on the next call", node, elapsed, u.drainTimeout, what), false
	}
	reason := observe.ReasonDraining
	if drainBlocked(de) {
		reason = observe.ReasonDrainBlocked
	}
	deadline := "no deadline"
	if u.drainTimeout > 0 {
		deadline = "deadline " + u.drainTimeout.String()
	}
	return waiting(reason, "draining node %s for %s (%s): %s", node, elapsed, deadline, what), false
}

// drainBlocked tells a drain that cannot progress on its own (a PDB, an
// opt-out, an unmanaged pod) from one that is only slow (pods terminating).
func drainBlocked(de *drain.DrainError) bool {
	if errors.Is(de, drain.ErrOptedOut) || errors.Is(de, drain.ErrDrainBlocked) {
		return true
	}
	for _, b := range de.Blocked {
		if len(b.PDBs) > 0 {
			return true
		}
	}
	return false
}

// describeDrain says what keeps the drain from finishing: each blocking
// PodDisruptionBudget with the pods it holds, then the other pods left.
func describeDrain(de *drain.DrainError) string {
	const maxPods = 5
	type pdbPods struct {
		pdb  drain.PDBStatus
		pods []string
	}
	if (errors.Is(de, drain.ErrOptedOut) || errors.Is(de, drain.ErrDrainBlocked)) && de.Detail != "" {
		return de.Detail // kubectl's list of every pod it will not evict, and why
	}
	var pdbs []*pdbPods
	byName := map[string]*pdbPods{}
	var others []string
	for _, b := range de.Blocked {
		pod := b.Namespace + "/" + b.Name
		if len(b.PDBs) == 0 {
			others = append(others, pod+" ("+b.Reason+")")
			continue
		}
		for _, p := range b.PDBs {
			key := p.Namespace + "/" + p.Name
			e, ok := byName[key]
			if !ok {
				e = &pdbPods{pdb: p}
				byName[key] = e
				pdbs = append(pdbs, e)
			}
			e.pods = append(e.pods, pod)
		}
	}
	list := func(pods []string) string {
		if len(pods) > maxPods {
			return strings.Join(pods[:maxPods], ", ") + fmt.Sprintf(" and %d more", len(pods)-maxPods)
		}
		return strings.Join(pods, ", ")
	}
	var parts []string
	for _, e := range pdbs {
		parts = append(parts, fmt.Sprintf("%s holds %s", e.pdb, list(e.pods)))
	}
	if len(others) > 0 {
		parts = append(parts, "pods left: "+list(others))
	}
	if len(parts) == 0 {
		if de.Detail != "" {
			return fmt.Sprintf("%v: %s", de.Err, de.Detail)
		}
		return de.Err.Error()
	}
	return strings.Join(parts, "; ")
}

// drainRules are Cluster API's drain rules for the Machine: the
// MachineDrainRules of its namespace, read through the management reader
// (UpdaterOptions.ManagementReader; without it there are none, and only the pod
// label cluster.x-k8s.io/drain applies), with its Cluster, read only when
// a rule selects Machines by their Cluster's labels.
func (u *MachineUpdater) drainRules(ctx context.Context, st *call) (drain.ClusterAPIRules, error) {
	r := drain.ClusterAPIRules{Machine: st.machine}
	if u.mgmt == nil {
		return r, nil
	}
	var list clusterv1.MachineDrainRuleList
	if err := u.mgmt.List(ctx, &list, client.InNamespace(st.machine.Namespace)); err != nil {
		return r, fmt.Errorf("list MachineDrainRules in namespace %s: %w", st.machine.Namespace, err)
	}
	r.Rules = list.Items
	for _, mdr := range list.Items {
		for _, ms := range mdr.Spec.Machines {
			if ms.ClusterSelector == nil || (len(ms.ClusterSelector.MatchLabels) == 0 && len(ms.ClusterSelector.MatchExpressions) == 0) {
				continue
			}
			cl := &clusterv1.Cluster{}
			if err := u.mgmt.Get(ctx, types.NamespacedName{Namespace: st.machine.Namespace, Name: st.machine.Spec.ClusterName}, cl); err != nil {
				return r, fmt.Errorf("get Cluster %s/%s for MachineDrainRule %s: %w", st.machine.Namespace, st.machine.Spec.ClusterName, mdr.Name, err)
			}
			r.Cluster = cl
			return r, nil
		}
	}
	return r, nil
}
