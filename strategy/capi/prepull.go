package capi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// DefaultPrePullTimeout is how long the pre-pull pod may keep failing to
// pull the upgrader image (ErrImagePull, ImagePullBackOff) before
// UpdateMachine answers Failure (UpdaterOptions.PrePullTimeout). A kubelet retries a
// failed pull with a back-off that starts at 10 seconds and doubles, so
// five minutes see five or six attempts: enough for a registry hiccup or
// a pull secret created a moment late, short enough that a wrong image is
// a Failure within minutes, not at the two-hour update deadline.
const DefaultPrePullTimeout = 5 * time.Minute

// prePullPod builds the pre-pull pod of the update's upgrader image for
// st's node.
func (u *MachineUpdater) prePullPod(st *call, rec *observe.UpdateRecord) (*corev1.Pod, updateResult, bool) {
	opts := u.podOpts
	if u.images != nil {
		img, ok := u.images.Image(rec.Version)
		if !ok {
			return nil, failedAs(observe.FailurePodBuild, "no upgrader image for %s (have: %s)", rec.Version, strings.Join(u.images.versions(), ", ")), false
		}
		opts = append(append([]nodepod.Option(nil), u.podOpts...), nodepod.WithImage(img))
	}
	pod, err := nodepod.BuildPrePull(st.node.Name, opts...)
	if err != nil {
		return nil, failedAs(observe.FailurePodBuild, "building the pre-pull pod: %v", err), false
	}
	return pod, updateResult{}, true
}

// prePullImage proves, before the node is cordoned, that the upgrader
// image can be pulled and started on it (see UpdaterOptions.PrePullTimeout). ok means
// it is proven, recorded on the Node, and the pre-pull pod deleted.
func (u *MachineUpdater) prePullImage(ctx context.Context, st *call, rec *observe.UpdateRecord) (updateResult, bool) {
	node := st.node.Name
	want, res, ok := u.prePullPod(st, rec)
	if !ok {
		return res, false
	}
	if rec.PrePulled != nil {
		// Proven by an earlier call, which could not delete its pod.
		if err := u.deletePrePullPods(ctx, st, ""); err != nil {
			return waiting(observe.ReasonPending, "deleting the pre-pull pod on node %s: %v", node, err), false
		}
		return updateResult{}, true
	}
	// Pre-pull pods of another image (an earlier update's) go first.
	if err := u.deletePrePullPods(ctx, st, want.Name); err != nil {
		return waiting(observe.ReasonPending, "deleting an earlier pre-pull pod on node %s: %v", node, err), false
	}
	key := want.Namespace + "/" + want.Name
	image := want.Spec.Containers[0].Image
	var got corev1.Pod
	err := st.c.Get(ctx, client.ObjectKeyFromObject(want), &got)
	switch {
	case apierrors.IsNotFound(err):
		if err := recordPrePullStart(ctx, st, rec); err != nil {
			return waiting(observe.ReasonPending, "recording the pre-pull's start on node %s: %v", node, err), false
		}
		switch err := st.c.Create(ctx, want); {
		case err == nil, apierrors.IsAlreadyExists(err):
		case podRefused(err):
			return failedAs(observe.FailurePodRejected, "the API server refuses the pre-pull pod %s for node %s (before any disruption): %v", key, node, err), false
		default:
			return waiting(observe.ReasonPending, "creating the pre-pull pod %s on node %s: %v", key, node, err), false
		}
		st.log.Info("pre-pull pod created", "step", "pre-pull", "pod", key, "image", image)
		return waiting(observe.ReasonPending, "pulling the upgrader image %s on node %s before cordoning it (pod %s)", image, node, key), false
	case err != nil:
		return waiting(observe.ReasonPending, "reading the pre-pull pod %s on node %s: %v", key, node, err), false
	}
	if why := prePullDiffers(want, &got); why != "" {
		return failedAs(observe.FailureForeignPod, "pod %s on node %s is not the update's pre-pull pod (%s); delete it to go on", key, node, why), false
	}
	// A pod left by an attempt whose start was not recorded (a retry
	// whose delete failed): the timeout counts from now.
	if err := recordPrePullStart(ctx, st, rec); err != nil {
		return waiting(observe.ReasonPending, "recording the pre-pull's start on node %s: %v", node, err), false
	}
	elapsed := max(st.now.Sub(rec.PrePullStarted.Time), 0).Truncate(time.Second)
	if got.DeletionTimestamp != nil {
		if err := u.deletePrePullPods(ctx, st, ""); err != nil {
			return waiting(observe.ReasonPending, "deleting the pre-pull pod %s on node %s: %v", key, node, err), false
		}
		return waiting(observe.ReasonPending, "waiting for the pre-pull pod %s on node %s to go away", key, node), false
	}
	if pe, ok := nodepod.ReadPullError(&got); ok {
		// The back-off message repeats the image the answer names.
		pe.Message = strings.TrimPrefix(pe.Message, fmt.Sprintf("Back-off pulling image %q: ", pe.Image))
		switch {
		case pe.Terminal():
			return failedAs(observe.FailureImagePull, "node %s: upgrader image %s cannot run there: %s: %s (pre-pull pod %s; the node was not cordoned)",
				node, image, pe.Reason, errtext.Clip(pe.Message), key), false
		case elapsed > u.prePullTO:
			return failedAs(observe.FailureImagePull, "node %s: upgrader image %s cannot be pulled there: %s: %s (failing for %s, deadline %s; pre-pull pod %s; the node was not cordoned)",
				node, image, pe.Reason, errtext.Clip(pe.Message), elapsed, u.prePullTO, key), false
		}
		return waiting(observe.ReasonPending, "pulling the upgrader image %s on node %s before cordoning it: %s: %s (for %s; Failure after %s)",
			image, node, pe.Reason, errtext.Clip(pe.Message), elapsed, u.prePullTO), false
	}
	if cs := containerStatus(&got, nodepod.PrePullContainer); cs != nil {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" {
			// CreateContainerConfigError and the like: the image is
			// pulled; what keeps it from starting may heal (a secret
			// created late), within the same deadline.
			if elapsed > u.prePullTO {
				return failedAs(observe.FailureImagePull, "node %s: upgrader image %s does not start there: %s: %s (for %s, deadline %s; pre-pull pod %s; the node was not cordoned)",
					node, image, w.Reason, errtext.Clip(w.Message), elapsed, u.prePullTO, key), false
			}
			return waiting(observe.ReasonPending, "starting the upgrader image %s on node %s before cordoning it: %s: %s (for %s; Failure after %s)",
				image, node, w.Reason, errtext.Clip(w.Message), elapsed, u.prePullTO), false
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			return failedAs(observe.FailureImagePull, "node %s: upgrader image %s does not run there: %s exited with code %d: %s %s (pre-pull pod %s; the node was not cordoned)",
				node, image, strings.Join(want.Spec.Containers[0].Command, " "), t.ExitCode, t.Reason, errtext.Clip(t.Message), key), false
		}
	}
	switch got.Status.Phase {
	case corev1.PodSucceeded:
	case corev1.PodFailed:
		return failedAs(observe.FailureImagePull, "node %s: pre-pull pod %s of upgrader image %s failed: %s %s (the node was not cordoned)",
			node, key, image, got.Status.Reason, errtext.Clip(got.Status.Message)), false
	default:
		return waiting(observe.ReasonPending, "pulling the upgrader image %s on node %s before cordoning it (pod %s %s, for %s)",
			image, node, key, podPhase(&got), elapsed), false
	}
	now := st.nowMeta()
	next := *rec
	next.PrePulled = &now
	if err := st.writeRecord(ctx, &next); err != nil {
		return waiting(observe.ReasonPending, "recording the pre-pull's success on node %s: %v", node, err), false
	}
	*rec = next
	st.log.Info("upgrader image pulled and started on the node", "step", "pre-pull", "image", image, "took", elapsed)
	if err := u.deletePrePullPods(ctx, st, ""); err != nil {
		return waiting(observe.ReasonPending, "deleting the pre-pull pod on node %s: %v", node, err), false
	}
	return updateResult{}, true
}

// recordPrePullStart records on the Node, once, when the pre-pull
// started: the pre-pull timeout counts from there.
func recordPrePullStart(ctx context.Context, st *call, rec *observe.UpdateRecord) error {
	if rec.PrePullStarted != nil {
		return nil
	}
	started := st.nowMeta()
	next := *rec
	next.PrePullStarted = &started
	if err := st.writeRecord(ctx, &next); err != nil {
		return err
	}
	*rec = next
	return nil
}

// podPhase is the pod's phase as shown ("Pending" when unset).
func podPhase(p *corev1.Pod) string {
	if p.Status.Phase == "" {
		return string(corev1.PodPending)
	}
	return string(p.Status.Phase)
}

// containerStatus returns the status of the pod's container name, or nil.
func containerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == name {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// prePullDiffers compares an existing pod with the pre-pull pod the update
// builds on what its status proves: its node, image and command.
func prePullDiffers(want, got *corev1.Pod) string {
	switch {
	case want.Spec.NodeName != got.Spec.NodeName:
		return "another node"
	case len(got.Spec.InitContainers) > 0 || len(got.Spec.Containers) != 1:
		return "other containers"
	case got.Spec.Containers[0].Image != want.Spec.Containers[0].Image:
		return fmt.Sprintf("image %s, not %s", errtext.Quote(got.Spec.Containers[0].Image), want.Spec.Containers[0].Image)
	case strings.Join(got.Spec.Containers[0].Command, "\x00") != strings.Join(want.Spec.Containers[0].Command, "\x00") || len(got.Spec.Containers[0].Args) > 0:
		return "another command"
	}
	return ""
}

// deletePrePullPods deletes the pre-pull pods on st's node in the
// upgrader namespace, but keep (a name; "" keeps none).
func (u *MachineUpdater) deletePrePullPods(ctx context.Context, st *call, keep string) error {
	var list corev1.PodList
	if err := st.c.List(ctx, &list, client.InNamespace(u.podNamespace), client.MatchingLabelsSelector{Selector: nodepod.PrePullNodeSelector(st.node.Name)}); err != nil {
		return err
	}
	var errs []error
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.NodeName != st.node.Name || p.Name == keep {
			continue
		}
		// At once (grace 0): its command has exited, or never started
		// (a failed pull), so there is nothing to stop gracefully, and a
		// pod still terminating would be in the drain's way.
		if err := st.c.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
			continue
		}
		st.log.V(1).Info("pre-pull pod deleted", "step", "pre-pull", "pod", p.Namespace+"/"+p.Name)
	}
	return errors.Join(errs...)
}
