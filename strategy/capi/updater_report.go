package capi

import (
	"context"
	"errors"
	"strings"

	"github.com/go-logr/logr"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
	corev1 "k8s.io/api/core/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// report writes the node condition when it changed, and records what
// starts with this answer: a failure, a blocked drain. Whether it starts
// here is read from the observe.UpdateRecord's Reported, which is written with a
// compare-and-swap, so restarted or parallel extensions do not repeat it,
// even when the condition (a best-effort status write) cannot be written.
// Without a record, the condition as read decides.
func (u *MachineUpdater) report(ctx context.Context, st *call, res *updateResult) {
	if res.phase == "" {
		return
	}
	msg := res.msg
	if res.err != nil {
		msg = strings.TrimPrefix(res.err.Error(), ErrUpdateFailed.Error()+": ")
	}
	msg = truncate(msg, maxConditionMessage)
	prev := st.prev
	status := conditionStatus(res.phase)
	if prev == nil || prev.Reason != res.phase || prev.Message != msg || prev.Status != status {
		now := st.nowMeta()
		cond := corev1.NodeCondition{Type: observe.ConditionInPlaceUpdate, Status: status, Reason: res.phase, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
		if prev != nil && prev.Status == status {
			cond.LastTransitionTime = prev.LastTransitionTime
		}
		if err := patchCondition(ctx, st.c, st.node, cond); err != nil {
			// Best effort: the answer to CAPI is what matters; the next
			// call writes it again.
			st.log.V(1).Info("could not write the node condition", "error", err.Error())
		}
	}
	var key string
	var condNew bool // the condition as read says it starts here
	switch {
	case res.err != nil:
		key, condNew = reportedFailed+res.failure, prev == nil || prev.Reason != observe.ReasonFailed
	case res.phase == observe.ReasonDrainBlocked:
		key, condNew = observe.ReasonDrainBlocked, prev == nil || prev.Reason != observe.ReasonDrainBlocked
	}
	if !u.starts(ctx, st, key, condNew) {
		return
	}
	if res.err != nil {
		res.newFailure = true
		u.metrics.failure(res.failure)
		u.event(st.machine, eventWarning, observe.EventReasonUpdateFailed, "Update", "%s", msg)
		u.ownerEvent(ctx, st.log, st.machine, msg)
		return
	}
	st.log.Info("drain blocked", "step", "drain", "message", msg)
	u.event(st.machine, eventWarning, observe.EventReasonDrainBlocked, "Drain", "%s", msg)
}

// reportedFailed prefixes a Failure* reason in observe.UpdateRecord.Reported.
const reportedFailed = "Failed/"

// starts tells whether the reportable state key ("" for none) starts with
// this answer, and records it in the node's observe.UpdateRecord. condNew is the
// answer the condition as read gives, used when there is no record, and
// when the record cannot be written and does not already say key.
func (u *MachineUpdater) starts(ctx context.Context, st *call, key string, condNew bool) bool {
	if st.rec == nil {
		return key != "" && condNew
	}
	if st.rec.Reported == key {
		return false
	}
	next := *st.rec
	next.Reported = key
	raw, err := swapUpdateRecord(ctx, st.c, st.node.Name, st.recRaw, &next)
	if err == nil {
		st.rec, st.recRaw = &next, raw
		return key != ""
	}
	// Refused (another writer changed the record since it was read) or
	// failed: the record may already say it.
	st.log.V(1).Info("could not record the reported state on the node", "reported", key, "error", err.Error())
	if key == "" {
		return false
	}
	var n corev1.Node
	if err := st.c.Get(ctx, client.ObjectKeyFromObject(st.node), &n); err == nil {
		if r, _ := readUpdateRecord(&n); r != nil && r.Reported == key {
			return false
		}
	}
	return condNew
}

// maxRememberedFailures bounds the failures reportWithoutNode remembers.
// With UpdaterOptions.ManagementReader only live Machines get there; without it, the
// names a request gives do, and this keeps what a caller can make the
// process hold.
const maxRememberedFailures = 4096

// reportWithoutNode records a failure found before any node is known,
// remembering it in memory (at most maxRememberedFailures) so that
// retries do not repeat it.
func (u *MachineUpdater) reportWithoutNode(ctx context.Context, log logr.Logger, m *clusterv1.Machine, res *updateResult) {
	key := m.Namespace + "/" + m.Name
	u.mu.Lock()
	prev, known := u.lastFailure[key]
	repeat := known && prev == res.failure
	if !known && len(u.lastFailure) >= maxRememberedFailures {
		for k := range u.lastFailure { // forget one: a repeat may be reported again
			delete(u.lastFailure, k)
			break
		}
	}
	u.lastFailure[key] = res.failure
	u.mu.Unlock()
	if repeat {
		return
	}
	res.newFailure = true
	u.metrics.failure(res.failure)
	note := strings.TrimPrefix(res.err.Error(), ErrUpdateFailed.Error()+": ")
	u.event(m, eventWarning, observe.EventReasonUpdateFailed, "Update", "%s", note)
	u.ownerEvent(ctx, log, m, note)
}

func (u *MachineUpdater) forgetFailure(m *clusterv1.Machine) {
	u.mu.Lock()
	delete(u.lastFailure, m.Namespace+"/"+m.Name)
	u.mu.Unlock()
}

const (
	eventNormal  = corev1.EventTypeNormal
	eventWarning = corev1.EventTypeWarning
)

// event records an Event on the Machine, if a recorder is set.
func (u *MachineUpdater) event(m *clusterv1.Machine, typ, reason, action, note string, args ...any) {
	if u.recorder == nil {
		return
	}
	obj := m.DeepCopy()
	obj.SetGroupVersionKind(clusterv1.GroupVersion.WithKind("Machine"))
	u.recorder.Eventf(obj, nil, typ, reason, action, note, args...)
}

// Errors of findNode.
var (
	errNoNode        = errors.New("no node")
	errAmbiguousNode = errors.New("more than one node")
)
