package capi

import (
	"context"
	"fmt"

	"github.com/upgradekit/upgradekit/strategy/capi/observe"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// AnnotationRetry is the Machine annotation (in the management cluster)
// with which an operator retries a failed in-place update: set it, or
// change its value, to any new string (a date, say):
//
//	kubectl annotate machine NAME upgradekit.io/retry-update="$(date +%s)" --overwrite
//
// When an update recorded on the node is answered Failure (a failed step,
// a refused pod, a deadline) and the Machine's value differs from the one
// the update last consumed, the next answer starts a new attempt instead:
// the failed upgrader pod is deleted, the attempt's plan gets a name of its
// own, so it runs with a new journal on the host (a failed, rolled back or
// stale journal from another from-version cannot stop it), and the update
// deadline and, if the drain had not finished, the drain deadline start
// again. The node stays cordoned while the drain had finished. One value
// is one retry: a new attempt that fails again needs a new value. A value
// present when the update starts, or set while it goes well, asks for
// nothing. While the update's own upgrader pod still runs (a deadline
// passed), the Failure stays and the retry waits for that pod to end.
//
// With UpdaterOptions.ManagementReader the value is read from the live Machine; the
// request's copy is not trusted. Failures with no update recorded on a
// node (the node is gone, ambiguous or claimed; the request does not
// match) are not retried this way: they end when their cause does.
const AnnotationRetry = "upgradekit.io/retry-update"

// retry turns a Failure of an update recorded on the node into the start
// of a new attempt when the Machine asks for one (AnnotationRetry).
func (u *MachineUpdater) retry(ctx context.Context, st *call, res updateResult) updateResult {
	if res.err == nil || st.rec == nil {
		return res
	}
	token := st.machine.Annotations[AnnotationRetry]
	if token == "" || token == st.rec.RetryToken {
		return res
	}
	pods, err := upgraderPodsOn(ctx, st.c, u.podNamespace, st.node.Name)
	if err != nil {
		return res
	}
	failed := findPod(pods, st.rec.Pod)
	if failed != nil && !podEnded(failed) {
		res.err = fmt.Errorf("%w; a retry is asked for (%s=%q), and starts once upgrader pod %s ends", res.err, AnnotationRetry, token, st.rec.Pod)
		return res
	}
	next := *st.rec
	next.Attempt++
	next.RetryToken = token
	next.Pod, next.FromVersion = "", ""
	next.Succeeded = nil
	next.Reported = ""
	next.Started = st.nowMeta()
	if next.Drained == nil && next.DrainStarted != nil {
		next.DrainStarted = &next.Started
	}
	prePullFailed := next.PrePulled == nil && next.DrainStarted == nil
	if prePullFailed {
		// The pre-pull failed: the new attempt pulls again, with a new
		// deadline, from a new pod.
		next.PrePullStarted = nil
	}
	if err := st.writeRecord(ctx, &next); err != nil {
		return res
	}
	if failed != nil && failed.Namespace == u.podNamespace {
		if err := st.c.Delete(ctx, failed); err != nil && !apierrors.IsNotFound(err) {
			st.log.Info("deleting the failed upgrader pod for a retry; the next call deletes it", "pod", failed.Namespace+"/"+failed.Name, "error", err.Error())
		}
	}
	if prePullFailed {
		if err := u.deletePrePullPods(ctx, st, ""); err != nil {
			st.log.Info("deleting the failed pre-pull pod for a retry; the next call deletes it", "error", err.Error())
		}
	}
	st.log.Info("in-place update retried", "attempt", next.Attempt, "after", res.failure)
	u.event(st.machine, eventNormal, observe.EventReasonUpdateRetried, "Update", "Attempt %d of the in-place update of node %s to %s, asked for by %s=%q after %s",
		next.Attempt+1, st.node.Name, next.Version, AnnotationRetry, token, res.failure)
	return waiting(observe.ReasonPending, "retrying the update of node %s to %s (attempt %d, %s=%q) after: %v", st.node.Name, next.Version, next.Attempt+1, AnnotationRetry, token, res.err)
}
