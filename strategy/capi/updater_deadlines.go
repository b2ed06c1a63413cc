package capi

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// Deadline defaults.
const (
	// DefaultUpdateTimeout bounds a whole update, from its start recorded
	// on the Node to done (UpdaterOptions.UpdateTimeout).
	DefaultUpdateTimeout = 2 * time.Hour
	// DefaultNotReadyTimeout bounds how long the node may stay NotReady
	// while its update is under way (UpdaterOptions.NotReadyTimeout).
	DefaultNotReadyTimeout = 15 * time.Minute
)

// DefaultWorkloadUnreachableTimeout bounds how long UpdateMachine waits for a
// workload cluster it cannot reach (UpdaterOptions.WorkloadUnreachableTimeout).
const DefaultWorkloadUnreachableTimeout = 30 * time.Minute

// workloadUnreachable answers a call that could not reach m's workload
// cluster (err says why): in progress, or Failure once it has been so for
// longer than the unreachable timeout.
func (u *MachineUpdater) workloadUnreachable(ctx context.Context, log logr.Logger, m *clusterv1.Machine, what string, err error) updateResult {
	key := m.Namespace + "/" + m.Name
	now := u.clock.Now()
	u.mu.Lock()
	since, ok := u.unreachableSince[key]
	if !ok {
		since = now
		if len(u.unreachableSince) >= maxRememberedFailures {
			for k := range u.unreachableSince { // forget one: it counts afresh
				delete(u.unreachableSince, k)
				break
			}
		}
		u.unreachableSince[key] = now
	}
	u.mu.Unlock()
	if started, ok := updatingSince(m); ok && started.After(since) {
		since = started
	}
	waited := max(now.Sub(since), 0)
	if u.unreachableTimeout > 0 && waited > u.unreachableTimeout {
		res := failedAs(observe.FailureWorkloadUnreachable, "%s for %s (deadline %s, counted in the management cluster): %s",
			what, waited.Truncate(time.Second), u.unreachableTimeout, errtext.Clip(err.Error()))
		u.reportWithoutNode(ctx, log, m, &res)
		return res
	}
	return waiting(observe.ReasonPending, "%s: %v (for %s)", what, err, waited.Truncate(time.Second))
}

// workloadReached forgets that the machine's workload cluster was
// unreachable.
func (u *MachineUpdater) workloadReached(key string) {
	u.mu.Lock()
	delete(u.unreachableSince, key)
	u.mu.Unlock()
}

// updatingSince is when Cluster API's Updating condition on m (the live
// Machine; a request's Machine has no status) last turned True: when it
// started the in-place update.
func updatingSince(m *clusterv1.Machine) (time.Time, bool) {
	for _, c := range m.Status.Conditions {
		if c.Type == clusterv1.MachineUpdatingCondition && c.Status == metav1.ConditionTrue && !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Time, true
		}
	}
	return time.Time{}, false
}

// deadlines turns an in-progress answer for an update recorded on the
// node into a Failure once the update or the node's NotReady spell has
// lasted too long. Answers that are done or already failures pass.
func (u *MachineUpdater) deadlines(st *call, res updateResult) updateResult {
	if res.done || res.err != nil || st.rec == nil {
		return res
	}
	if u.notReadyTimeout > 0 {
		for _, c := range st.node.Status.Conditions {
			if c.Type != corev1.NodeReady || c.Status == corev1.ConditionTrue || c.LastTransitionTime.IsZero() {
				continue
			}
			if d := st.now.Sub(c.LastTransitionTime.Time); d > u.notReadyTimeout {
				out := failedAs(observe.FailureNodeNotReady, "node %s has been NotReady (%s: %s) for %s during its update (deadline %s): its kubelet starts no further step; %s",
					st.node.Name, c.Reason, c.Message, d.Truncate(time.Second), u.notReadyTimeout, res.msg)
				out.step = res.step
				return out
			}
		}
	}
	if u.updateTimeout > 0 {
		if d := st.now.Sub(st.rec.Started.Time); d > u.updateTimeout {
			out := failedAs(observe.FailureUpdateTimeout, "node %s: update to %s not done after %s (deadline %s): %s",
				st.node.Name, st.rec.Version, d.Truncate(time.Second), u.updateTimeout, res.msg)
			out.step = res.step
			return out
		}
	}
	return res
}
