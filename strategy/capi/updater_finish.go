package capi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/nodeexec/drain"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// finish ends an update once the kubelet reports the desired version. It
// does not answer done, nor uncordon, while any upgrader pod on the node is
// Pending or Running: the kubelet reports the new version after the
// kubelet step, before the plan's verify step has run. In order:
//
//   - another plan's upgrader pod still running: wait (observe.ReasonPending); its
//     finished pods are deleted first (only when the node has an update
//     record saying which namespace is ours), as in updateNode;
//   - the update's own pod (the record's Pod, when the record is for the
//     desired version) still running: wait (observe.ReasonUpgrading), naming the
//     step; Failed (the verify step, say): Failure (observe.FailureStepFailed),
//     the node stays cordoned and the record stays;
//   - otherwise (the pod Succeeded, and that is recorded on the Node
//     first; or a success was recorded already; or there was no update of
//     ours to this version: the node was already there, or the desired
//     version went back to the node's version before the pod of the
//     abandoned plan changed anything): uncordon (our cordon only), drop
//     the record, done. An update of ours whose pod is gone without a
//     recorded success never gets here: updateNode runs its plan again.
//
// A pod of an abandoned plan that Failed is not a Failure of this update:
// the kubelet reports the desired version, which is all the hook can check;
// whatever that plan changed before failing stays on the node (its backups
// stay under nodeexec's backup directory).
func (u *MachineUpdater) finish(ctx context.Context, st *call, rec *observe.UpdateRecord, pods []corev1.Pod) updateResult {
	node, want := st.node, st.machine.Spec.Version
	ours, deleteIn := "", ""
	if rec != nil && rec.Pod != "" {
		deleteIn, _, _ = strings.Cut(rec.Pod, "/")
		if rec.Version == want {
			ours = rec.Pod
		}
	}
	if res, ok := u.clearOtherPods(ctx, st, pods, ours, deleteIn); !ok {
		res.msg = fmt.Sprintf("kubelet reports %s, but the update is not over: %s", want, res.msg)
		return res
	}
	if p := findPod(pods, ours); p != nil {
		if res, ok := u.ownPod(ctx, st, rec, p); !ok {
			return res
		}
		ps := nodepod.ReadStatus(p)
		switch {
		case ps.Phase == nodepod.PhaseFailed:
			return stepFailed(node.Name, p, ps)
		case !podEnded(p):
			return upgrading(waiting(observe.ReasonUpgrading, "node %s: kubelet reports %s, but upgrader pod %s still runs (%.0f%% of %d steps done); not done before it ends",
				node.Name, want, ours, ps.Progress*100, len(ps.Steps)), ps)
		}
		var err error
		if rec, err = u.recordSuccess(ctx, st, rec); err != nil {
			return waiting(observe.ReasonWaitingForKubelet, "kubelet reports %s and upgrader pod %s succeeded; recording it on node %s: %v", want, ours, node.Name, err)
		}
	}
	if _, cordoned := node.Annotations[drain.AnnotationCordon]; cordoned && u.clientset != nil {
		cs, err := u.clientset(ctx, st.cluster)
		if err != nil {
			return waiting(observe.ReasonWaitingForKubelet, "kubelet reports %s; waiting for a clientset of the workload cluster to uncordon node %s: %v", want, node.Name, err)
		}
		res, err := drain.Uncordon(ctx, cs, node.Name, u.cordonOwner)
		var oe *drain.OwnershipError
		switch {
		case errors.As(err, &oe):
			st.log.V(1).Info("not uncordoning: the cordon is not ours", "holder", oe.Holder)
		case err != nil:
			return waiting(observe.ReasonWaitingForKubelet, "kubelet reports %s; uncordoning node %s: %v", want, node.Name, err)
		case res.Uncordoned:
			st.log.Info("node uncordoned", "step", "uncordon")
		default:
			st.log.Info("node left cordoned", "step", "uncordon", "reason", res.Reason)
		}
	}
	msg := fmt.Sprintf("node %s runs kubelet %s", node.Name, want)
	if rec == nil {
		res := updateResult{done: true, msg: msg}
		if st.prev != nil && st.prev.Reason != observe.ReasonSucceeded {
			res.phase = observe.ReasonSucceeded // an update ended outside our sight: say so
		}
		return res
	}
	// What the plan applied and verified is kept on the Node, so that
	// later updates know it applied.
	for _, d := range []struct{ annotation, digest string }{
		{AnnotationKubeletArgs, rec.KubeletArgs},
		{AnnotationControlPlaneConfig, rec.ControlPlaneConfig},
		{AnnotationFiles, rec.Files},
	} {
		if d.digest == "" || rec.Succeeded == nil || node.Annotations[d.annotation] == d.digest {
			continue
		}
		if err := patchNodeAnnotation(ctx, st.c, node.Name, d.annotation, d.digest); err != nil {
			return waiting(observe.ReasonWaitingForKubelet, "kubelet reports %s; recording %s on node %s: %v", want, d.annotation, node.Name, err)
		}
	}
	if err := u.forgetCertificatesExpiry(ctx, st, rec); err != nil {
		return waiting(observe.ReasonWaitingForKubelet, "kubelet reports %s; removing the stale %s annotation from the Machine's KubeadmConfig: %v",
			want, clusterv1.MachineCertificatesExpiryDateAnnotation, err)
	}
	if err := st.writeRecord(ctx, nil); err != nil {
		return waiting(observe.ReasonWaitingForKubelet, "kubelet reports %s; clearing the update record on node %s: %v", want, node.Name, err)
	}
	took := st.now.Sub(rec.Started.Time)
	u.metrics.updateDuration(took)
	u.event(st.machine, eventNormal, observe.EventReasonUpdateSucceeded, "Update", "Node %s runs kubelet %s; the in-place update took %s", node.Name, want, took.Truncate(time.Second))
	return updateResult{done: true, finished: true, phase: observe.ReasonSucceeded, msg: msg + "; in-place update done in " + took.Truncate(time.Second).String()}
}

// forgetCertificatesExpiry removes, after a control plane's update to a
// new version succeeded, KubeadmControlPlane's certificate expiry
// annotation (clusterv1.MachineCertificatesExpiryDateAnnotation) from the
// Machine's KubeadmConfig. `kubeadm upgrade` renewed the node's
// certificates (the plan sets certificateRenewal), so the date KubeadmControlPlane
// wrote when the machine was created is stale; KubeadmControlPlane writes
// the annotation only when it is absent, then from the certificate the
// node's API server presents, and Cluster API copies it to the Machine's
// status.certificatesExpiryDate, which rollout.before.certificatesExpiryDays
// is judged by. Left in place, it would have the machine replaced for
// certificates that were renewed. An annotation set on the Machine itself
// takes precedence in Cluster API and is left alone: it is the user's.
//
// It needs a management client that can write (UpdaterOptions.ManagementReader given
// a client.Client) and patch on KubeadmConfigs; without one, nothing is
// done and the log says so.
func (u *MachineUpdater) forgetCertificatesExpiry(ctx context.Context, st *call, rec *observe.UpdateRecord) error {
	if rec.Succeeded == nil || rec.Role == string(kubeadm.RoleWorker) || rec.Role == "" ||
		rec.FromVersion == "" || rec.FromVersion == rec.Version {
		return nil // kubeadm upgrade did not run: nothing was renewed
	}
	ref := st.machine.Spec.Bootstrap.ConfigRef
	if u.mgmt == nil || !ref.IsDefined() || ref.Kind != "KubeadmConfig" || ref.APIGroup != bootstrapv1.GroupVersion.Group {
		return nil
	}
	// Unstructured, as checkBootstrapConfig reads it: a manager's client
	// reads it from the API server, with get only.
	cfg := &unstructured.Unstructured{}
	cfg.SetGroupVersionKind(bootstrapv1.GroupVersion.WithKind("KubeadmConfig"))
	key := types.NamespacedName{Namespace: st.machine.Namespace, Name: ref.Name}
	if err := u.mgmt.Get(ctx, key, cfg); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	if _, ok := cfg.GetAnnotations()[clusterv1.MachineCertificatesExpiryDateAnnotation]; !ok {
		return nil
	}
	w, ok := u.mgmt.(client.Writer)
	if !ok {
		st.log.Info("certificates renewed, but the management client cannot write: KubeadmConfig keeps its stale expiry date",
			"kubeadmConfig", key.String(), "annotation", clusterv1.MachineCertificatesExpiryDateAnnotation)
		return nil
	}
	patch := []byte(`{"metadata":{"annotations":{"` + clusterv1.MachineCertificatesExpiryDateAnnotation + `":null}}}`)
	if err := w.Patch(ctx, cfg, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	st.log.Info("certificates renewed by kubeadm upgrade: removed the KubeadmConfig's expiry date for KubeadmControlPlane to read again",
		"kubeadmConfig", key.String())
	return nil
}
