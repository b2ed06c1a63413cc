package gates

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
	"github.com/upgradekit/upgradekit/strategy/capi/workload"
)

// Soak holds the next update until every other node of the cluster
// (those matching selector; nil: all) has been Ready for at least soak
// without a break: its Ready condition is True and last changed at least
// soak ago. A node updated a moment ago, one whose kubelet flapped
// NotReady since, and one NotReady now all hold it; the node about to be
// updated and nodes being deleted do not. It reads Nodes through workload
// (the cluster's kubeconfig Secret, as MachineUpdater does); a read that
// fails answers Wait with the error.
func Soak(workload workload.Client, soak time.Duration, selector labels.Selector) (strategy.Gate, error) {
	switch {
	case workload == nil:
		return nil, fmt.Errorf("%w: gates.Soak: nil workload client", capi.ErrInvalidOption)
	case soak <= 0:
		return nil, fmt.Errorf("%w: gates.Soak: soak %s: must be positive", capi.ErrInvalidOption, soak)
	}
	if selector == nil {
		selector = labels.Everything()
	}
	return strategy.GateFunc(func(ctx context.Context, req strategy.GateRequest) strategy.GateResult {
		c, bad := workloadOf(ctx, workload, "soak", req)
		if bad != nil {
			return *bad
		}
		var nodes corev1.NodeList
		if err := c.List(ctx, &nodes, client.MatchingLabelsSelector{Selector: selector}); err != nil {
			return strategy.GateResult{Verdict: strategy.VerdictWait, Gate: "soak", Reason: "reading the workload cluster's nodes: " + errtext.Clip(err.Error()), Err: err}
		}
		var waiting []string
		var longest time.Duration
		for i := range nodes.Items {
			n := &nodes.Items[i]
			if n.Name == req.Node || n.DeletionTimestamp != nil {
				continue
			}
			ready := readyCondition(n)
			switch {
			case ready == nil || ready.Status != corev1.ConditionTrue:
				waiting = append(waiting, n.Name+" (not Ready)")
				longest = max(longest, soak)
			case req.Now.Sub(ready.LastTransitionTime.Time) < soak:
				left := soak - req.Now.Sub(ready.LastTransitionTime.Time)
				waiting = append(waiting, fmt.Sprintf("%s (Ready for %s)", n.Name, req.Now.Sub(ready.LastTransitionTime.Time).Round(time.Second)))
				longest = max(longest, left)
			}
		}
		res := strategy.GateResult{Gate: "soak"}
		if len(waiting) == 0 {
			res.Verdict = strategy.VerdictAllow
			return res
		}
		slices.Sort(waiting)
		res.Verdict, res.RetryAfter = strategy.VerdictWait, longest
		res.Reason = fmt.Sprintf("nodes not yet Ready for %s: %s", soak, strings.Join(capList(waiting), ", "))
		return res
	}), nil
}

func readyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}
