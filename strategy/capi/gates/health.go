package gates

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
	"github.com/upgradekit/upgradekit/strategy/capi/workload"
)

// workloadOf returns the request's workload cluster client, or the
// GateResult to answer when there is none.
func workloadOf(ctx context.Context, workload workload.Client, gate string, req strategy.GateRequest) (client.Client, *strategy.GateResult) {
	ns, name, ok := strings.Cut(req.Cluster, "/")
	if !ok {
		return nil, &strategy.GateResult{Verdict: strategy.VerdictWait, Gate: gate, Reason: "the request names no namespace/name cluster", Err: strategy.ErrInvalidGate}
	}
	c, err := workload(ctx, types.NamespacedName{Namespace: ns, Name: name})
	if err == nil && c == nil {
		err = fmt.Errorf("%w: the workload client getter returned no client", capi.ErrInvalidOption)
	}
	if err != nil {
		return nil, &strategy.GateResult{Verdict: strategy.VerdictWait, Gate: gate, Reason: "reaching the workload cluster: " + errtext.Clip(err.Error()), Err: err}
	}
	return c, nil
}

// Workloads holds the next update until the workloads are back: every
// Deployment and StatefulSet of the workload cluster (in namespaces, or
// all when none is given) has all its replicas updated and available for
// its latest generation, so the pods evicted from the last node run
// somewhere again. A Deployment whose Available condition has been False
// for longer than timeout answers Stop (it is not coming back by itself:
// a person must look); 0 waits for ever.
func Workloads(workload workload.Client, timeout time.Duration, namespaces ...string) (strategy.Gate, error) {
	switch {
	case workload == nil:
		return nil, fmt.Errorf("%w: gates.Workloads: nil workload client", capi.ErrInvalidOption)
	case timeout < 0:
		return nil, fmt.Errorf("%w: gates.Workloads: timeout %s: must not be negative", capi.ErrInvalidOption, timeout)
	}
	if len(namespaces) == 0 {
		namespaces = []string{""}
	}
	return strategy.GateFunc(func(ctx context.Context, req strategy.GateRequest) strategy.GateResult {
		c, bad := workloadOf(ctx, workload, "workloads", req)
		if bad != nil {
			return *bad
		}
		var short, stuck []string
		for _, ns := range namespaces {
			var deps appsv1.DeploymentList
			var sts appsv1.StatefulSetList
			err := c.List(ctx, &deps, client.InNamespace(ns))
			if err == nil {
				err = c.List(ctx, &sts, client.InNamespace(ns))
			}
			if err != nil {
				return strategy.GateResult{Verdict: strategy.VerdictWait, Gate: "workloads", Reason: "reading Deployments and StatefulSets: " + errtext.Clip(err.Error()), Err: err}
			}
			for _, d := range deps.Items {
				want := int32(1)
				if d.Spec.Replicas != nil {
					want = *d.Spec.Replicas
				}
				st := d.Status
				if st.ObservedGeneration >= d.Generation && st.UpdatedReplicas >= want && st.AvailableReplicas >= want {
					continue
				}
				what := fmt.Sprintf("Deployment %s/%s (%d/%d available)", d.Namespace, d.Name, st.AvailableReplicas, want)
				if timeout > 0 {
					for _, cond := range st.Conditions {
						if cond.Type == appsv1.DeploymentAvailable && cond.Status == corev1.ConditionFalse && req.Now.Sub(cond.LastTransitionTime.Time) > timeout {
							stuck = append(stuck, fmt.Sprintf("%s, unavailable since %s", what, cond.LastTransitionTime.UTC().Format(time.RFC3339)))
						}
					}
				}
				short = append(short, what)
			}
			for _, s := range sts.Items {
				want := int32(1)
				if s.Spec.Replicas != nil {
					want = *s.Spec.Replicas
				}
				st := s.Status
				if st.ObservedGeneration >= s.Generation && st.ReadyReplicas >= want && st.AvailableReplicas >= want {
					continue
				}
				short = append(short, fmt.Sprintf("StatefulSet %s/%s (%d/%d ready)", s.Namespace, s.Name, st.ReadyReplicas, want))
			}
		}
		if len(stuck) > 0 {
			slices.Sort(stuck)
			return strategy.GateResult{Verdict: strategy.VerdictStop, Gate: "workloads",
				Reason: fmt.Sprintf("workloads unavailable for more than %s: %s", timeout, strings.Join(capList(stuck), "; "))}
		}
		if len(short) > 0 {
			slices.Sort(short)
			return strategy.GateResult{Verdict: strategy.VerdictWait, Gate: "workloads", RetryAfter: 15 * time.Second,
				Reason: "workloads not fully available: " + strings.Join(capList(short), ", ")}
		}
		return strategy.GateResult{Verdict: strategy.VerdictAllow, Gate: "workloads"}
	}), nil
}

// controlPlaneComponents are the static pods kubeadm runs on a control
// plane node (etcd only with stacked etcd).
var controlPlaneComponents = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"}

// ControlPlane holds the update of a control plane machine until every
// other control plane node (LabelControlPlaneNode) is Ready and runs its
// control plane Ready: the mirror pods kube-system/<component>-<node> of
// kube-apiserver, kube-controller-manager and kube-scheduler exist and are
// Ready, and so is etcd's where the node has one (stacked etcd). An etcd
// member is judged by its static pod only: running and Ready, kubeadm's
// liveness probe restarting a member that stops answering its health
// endpoint; the member list, alarms and raft state are not read (an etcd
// client would). Workers pass: the gate guards the control plane, one
// node at a time.
func ControlPlane(workload workload.Client) (strategy.Gate, error) {
	if workload == nil {
		return nil, fmt.Errorf("%w: gates.ControlPlane: nil workload client", capi.ErrInvalidOption)
	}
	return strategy.GateFunc(func(ctx context.Context, req strategy.GateRequest) strategy.GateResult {
		if req.Role != strategy.RoleControlPlane {
			return strategy.GateResult{Verdict: strategy.VerdictAllow, Gate: "control-plane"}
		}
		c, bad := workloadOf(ctx, workload, "control-plane", req)
		if bad != nil {
			return *bad
		}
		var nodes corev1.NodeList
		var pods corev1.PodList
		err := c.List(ctx, &nodes, client.HasLabels{capi.LabelControlPlaneNode})
		if err == nil {
			err = c.List(ctx, &pods, client.InNamespace("kube-system"))
		}
		if err != nil {
			return strategy.GateResult{Verdict: strategy.VerdictWait, Gate: "control-plane", Reason: "reading the control plane: " + errtext.Clip(err.Error()), Err: err}
		}
		byName := make(map[string]*corev1.Pod, len(pods.Items))
		for i := range pods.Items {
			byName[pods.Items[i].Name] = &pods.Items[i]
		}
		var problems []string
		for i := range nodes.Items {
			n := &nodes.Items[i]
			if n.Name == req.Node || n.DeletionTimestamp != nil {
				continue
			}
			if r := readyCondition(n); r == nil || r.Status != corev1.ConditionTrue {
				problems = append(problems, n.Name+": node not Ready")
				continue
			}
			for _, comp := range controlPlaneComponents {
				p := byName[comp+"-"+n.Name]
				switch {
				case p == nil && comp == "etcd":
					// External etcd: no member on the node.
				case p == nil:
					problems = append(problems, n.Name+": no "+comp+" pod")
				case p.DeletionTimestamp != nil:
					problems = append(problems, n.Name+": "+comp+" being deleted")
				case !podReady(p):
					problems = append(problems, n.Name+": "+comp+" not Ready")
				}
			}
		}
		if len(problems) > 0 {
			slices.Sort(problems)
			return strategy.GateResult{Verdict: strategy.VerdictWait, Gate: "control-plane", RetryAfter: 15 * time.Second,
				Reason: "the other control plane nodes are not all healthy: " + strings.Join(capList(problems), ", ")}
		}
		return strategy.GateResult{Verdict: strategy.VerdictAllow, Gate: "control-plane"}
	}), nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Breaker is strategy.Breaker on the Cluster API path: before a worker
// of a MachineDeployment starts its update it counts the deployment's
// machines (Machines labelled with its name in the management cluster)
// whose update failed (their Node's ConditionInPlaceUpdate says Failed)
// or whose Node is not Ready, and answers Stop, with the breaker's reason,
// once they are more than the breaker's limit: the rest of the group is
// left alone until a person looks. Control plane machines pass (the
// ControlPlane guards them). mgmt reads Machines, workload the Nodes.
func Breaker(mgmt client.Reader, workload workload.Client, b strategy.Breaker) (strategy.Gate, error) {
	switch {
	case mgmt == nil || workload == nil:
		return nil, fmt.Errorf("%w: gates.Breaker: nil management reader or workload client", capi.ErrInvalidOption)
	}
	if _, err := b.Limit(100); err != nil {
		return nil, fmt.Errorf("%w: gates.Breaker: %w", capi.ErrInvalidOption, err)
	}
	return strategy.GateFunc(func(ctx context.Context, req strategy.GateRequest) strategy.GateResult {
		if req.Role == strategy.RoleControlPlane || req.Group == "" {
			return strategy.GateResult{Verdict: strategy.VerdictAllow, Gate: "breaker"}
		}
		c, bad := workloadOf(ctx, workload, "breaker", req)
		if bad != nil {
			return *bad
		}
		ns, _, _ := strings.Cut(req.Cluster, "/")
		var machines clusterv1.MachineList
		if err := mgmt.List(ctx, &machines, client.InNamespace(ns), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: req.Group}); err != nil {
			return strategy.GateResult{Verdict: strategy.VerdictWait, Gate: "breaker", Reason: "reading the group's machines: " + errtext.Clip(err.Error()), Err: err}
		}
		var broken []string
		for _, m := range machines.Items {
			if m.Name == req.Machine || !m.Status.NodeRef.IsDefined() {
				continue
			}
			var n corev1.Node
			if err := c.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, &n); err != nil {
				if client.IgnoreNotFound(err) != nil {
					return strategy.GateResult{Verdict: strategy.VerdictWait, Gate: "breaker", Reason: "reading node " + m.Status.NodeRef.Name + ": " + errtext.Clip(err.Error()), Err: err}
				}
				continue
			}
			failed := false
			for _, cond := range n.Status.Conditions {
				if cond.Type == observe.ConditionInPlaceUpdate && cond.Reason == observe.ReasonFailed {
					failed = true
				}
			}
			switch r := readyCondition(&n); {
			case failed:
				broken = append(broken, m.Name+" (update failed)")
			case r == nil || r.Status != corev1.ConditionTrue:
				broken = append(broken, m.Name+" (node not Ready)")
			}
		}
		tripped, why, err := b.Tripped(len(machines.Items), len(broken))
		switch {
		case err != nil:
			return strategy.GateResult{Verdict: strategy.VerdictWait, Gate: "breaker", Reason: errtext.Clip(err.Error()), Err: err}
		case tripped:
			slices.Sort(broken)
			return strategy.GateResult{Verdict: strategy.VerdictStop, Gate: "breaker", Reason: why + ": " + strings.Join(capList(broken), ", ")}
		}
		return strategy.GateResult{Verdict: strategy.VerdictAllow, Gate: "breaker"}
	}), nil
}
