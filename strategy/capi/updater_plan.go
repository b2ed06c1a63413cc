package capi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy/capi/observe"
)

// updateNode moves the node's update one step. The node's observe.UpdateRecord
// pins what the update is about once it starts: the target version, the
// kubeadm role, and (before it is created) the upgrader pod, so later calls
// keep building the same plan whatever kubeadm-config says by then. The
// upgrader pods on the node are listed on every call, and:
//
//   - no upgrader pod is created while another one (of another plan: an
//     earlier desired version, an earlier extension's options) is Pending
//     or Running on the node; the answer is RetryAfterSeconds, naming it;
//   - a finished upgrader pod of another plan is deleted (in the namespace
//     this updater creates pods in) before the update's own pod starts;
//   - the update's own pod failing is a Failure (observe.FailureStepFailed).
//
// Once the kubelet reports the desired version, finish decides.
func (u *MachineUpdater) updateNode(ctx context.Context, st *call, to *version.Version) updateResult {
	m, node := st.machine, st.node
	current, want := node.Status.NodeInfo.KubeletVersion, m.Spec.Version
	rec, err := readUpdateRecord(node)
	if err != nil {
		st.log.Info("replacing an unreadable update record", "error", err.Error())
	}
	st.rec, st.recRaw = rec, node.Annotations[observe.AnnotationInPlaceUpdate]

	pods, err := upgraderPodsOn(ctx, st.c, u.podNamespace, node.Name)
	if err != nil {
		return waiting(observe.ReasonPending, "listing the upgrader pods on node %s: %v", node.Name, err)
	}
	// The kubelet's extra arguments are done when the node's annotation
	// says they were applied, or this update applied them with success.
	// A digest is applied when the Node keeps it, or this update applied
	// it with success.
	applied := func(annotation, digest, recorded string) bool {
		return digest == "" || node.Annotations[annotation] == digest ||
			(rec != nil && rec.Version == want && recorded == digest && rec.Succeeded != nil)
	}
	var recArgs, recCP, recFiles string
	if rec != nil {
		recArgs, recCP, recFiles = rec.KubeletArgs, rec.ControlPlaneConfig, rec.Files
	}
	if current == want && !u.unproven(rec, want, pods) &&
		applied(AnnotationKubeletArgs, st.args.digest, recArgs) && applied(AnnotationControlPlaneConfig, st.cp.digest, recCP) &&
		applied(AnnotationFiles, st.files.digest, recFiles) {
		return u.finish(ctx, st, rec, pods)
	}
	// Otherwise the kubelet may report the version, but an update of ours
	// to it has no recorded success and no pod to show one (the pod was
	// deleted by someone, or the record was written by an earlier version
	// of this updater): a reported version is not proof that the plan
	// verified the node, so the plan runs (again). Its pod resumes from the
	// journal on the host, re-running nothing that is done.
	switch {
	case rec == nil || rec.Version != want || rec.KubeletArgs != st.args.digest || rec.ControlPlaneConfig != st.cp.digest || rec.Files != st.files.digest:
		if res, ok := controlPlaneAhead(ctx, st, current, to); !ok {
			return res
		}
		if res, ok := u.gatesOpen(ctx, st); !ok {
			return res
		}
		role, res, ok := u.role(ctx, st, to)
		if !ok {
			return res
		}
		// A retry token already on the Machine when the update starts is
		// no request to retry this update.
		rec = &observe.UpdateRecord{Machine: m.Namespace + "/" + m.Name, Version: want, Started: st.nowMeta(), Role: string(role),
			RetryToken: m.Annotations[AnnotationRetry], KubeletArgs: st.args.digest, ControlPlaneConfig: st.cp.digest, Files: st.files.digest}
		if u.drain && !u.prePull {
			// With the pre-pull, the drain starts (drainNode records it)
			// once the image is proven.
			rec.DrainStarted = &rec.Started
		}
		if err := st.writeRecord(ctx, rec); err != nil {
			return waiting(observe.ReasonPending, "recording the update's start on node %s: %v", node.Name, err)
		}
		st.log.Info("in-place update started", "from", current, "to", want, "role", string(role), "drain", u.drain)
		u.event(m, eventNormal, observe.EventReasonUpdateStarted, "Update", "In-place update of node %s from %s to %s started", node.Name, current, want)
	case rec.Role == "":
		// A record without a role (written by an earlier version of this
		// updater): choose the role now and keep it from here on.
		role, res, ok := u.role(ctx, st, to)
		if !ok {
			return res
		}
		next := *rec
		next.Role = string(role)
		if err := st.writeRecord(ctx, &next); err != nil {
			return waiting(observe.ReasonPending, "recording the update's role on node %s: %v", node.Name, err)
		}
		rec = &next
	}
	if rec.Drained == nil && findPod(pods, rec.Pod) == nil {
		// Nothing disruptive has happened yet, or only a drain that has
		// not finished: check that the plan can be built and that the API
		// server accepts its pod before the node is (further) disrupted.
		if rec.ControlPlaneConfig != "" {
			// kubeadm renders the manifests from kubeadm-config, which
			// KubeadmControlPlane updates before it updates machines.
			why, err := kubeadmConfigMatches(ctx, st.c, st.cp)
			if err != nil {
				return waiting(observe.ReasonPending, "checking kubeadm-config before updating control plane node %s: %v", node.Name, err)
			}
			if why != "" {
				return waiting(observe.ReasonPending, "kube-system/kubeadm-config does not carry the desired control plane configuration yet (%s); KubeadmControlPlane writes it before it updates machines", why)
			}
		}
		if res, ok := u.validate(ctx, st, rec); !ok {
			return res
		}
	}
	if u.drain && u.prePull && rec.DrainStarted == nil {
		// Before the cordon: prove that the upgrader image runs on the
		// node. A record whose drain started (by an earlier version of
		// this updater, or UpdaterOptions.SkipPrePull) goes on without it.
		if res, ok := u.prePullImage(ctx, st, rec); !ok {
			res.step = "pre-pull"
			return res
		}
	}
	if u.drain && rec.Drained == nil {
		if res, ok := u.drainNode(ctx, st, rec); !ok {
			res.step = "drain"
			return res
		}
	}
	return u.runPlan(ctx, st, rec, pods)
}

// planName names the plan of one attempt of one update: a new update (a
// new record, started at another time) or a retry never meets the journal
// an earlier one left on the host, whose steps may have ended Failed,
// RolledBack or Succeeded for other binaries; calls within one attempt
// name the same plan, so a recreated pod resumes from its journal.
// UpdaterOptions.PlanConfig may set another name (then retries share a journal).
func planName(node string, rec *observe.UpdateRecord) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00%s\x00%d\x00%d\x00%s\x00%s\x00%s", node, rec.Version, rec.Role, rec.Started.Unix(), rec.Attempt, rec.KubeletArgs, rec.ControlPlaneConfig, rec.Files)))
	return "kubeadm-" + hex.EncodeToString(sum[:])[:12]
}

// buildPod builds the update's kubeadm plan and its upgrader pod from the
// kubelet version from. Its errors cannot heal by waiting: they are
// Failures (observe.FailurePlanRejected, observe.FailurePodBuild).
func (u *MachineUpdater) buildPod(st *call, rec *observe.UpdateRecord, from string) (*corev1.Pod, updateResult, bool) {
	node := st.node.Name
	cfg := kubeadm.Config{Node: node, Role: kubeadm.Role(rec.Role), FromVersion: from, ToVersion: rec.Version, PlanName: planName(node, rec),
		// External etcd has no member on this node to snapshot: backing
		// it up is its operator's job (UpdaterOptions.PlanConfig may say otherwise).
		SkipEtcdSnapshot: st.cp.externalEtcd || st.externalEtcd}
	if u.planHook != nil {
		u.planHook(&cfg)
	}
	var plan nodeexec.Plan
	var err error
	argsOnly := false
	switch {
	case rec.ControlPlaneConfig != "" && from == rec.Version:
		// Same version on a control plane: the static pod manifests
		// (then, below, the kubelet's extra arguments).
		if plan, err = controlPlaneConfigPlan(node, cfg.PlanName, st.cp); err != nil {
			return nil, failedAs(observe.FailurePlanRejected, "node %s: control plane configuration: %v", node, err), false
		}
	case rec.KubeletArgs != "" && from == rec.Version:
		argsOnly = true
		// Same version: only the kubelet's extra arguments.
		plan, err = kubeadm.NewKubeletArgsPlan(kubeletArgsConfig(node, cfg.PlanName, "", st.args.args))
		if err != nil {
			return nil, failedAs(observe.FailurePlanRejected, "node %s: kubelet extra arguments: %v", node, err), false
		}
	default:
		if plan, err = kubeadm.NewPlan(cfg); err != nil {
			return nil, failedAs(observe.FailurePlanRejected, "node %s from %s to %s: %v", node, from, rec.Version, err), false
		}
		if rec.ControlPlaneConfig != "" {
			// `kubeadm upgrade` rendered the manifests; check them.
			if plan, err = withControlPlaneVerify(plan, st.cp); err != nil {
				return nil, failedAs(observe.FailurePlanRejected, "node %s: control plane configuration: %v", node, err), false
			}
		}
	}
	if rec.KubeletArgs != "" && !argsOnly {
		if plan, err = withKubeletArgs(plan, st.args.args); err != nil {
			return nil, failedAs(observe.FailurePlanRejected, "node %s: kubelet extra arguments: %v", node, err), false
		}
	}
	if rec.Files != "" {
		if plan, err = withFiles(plan, st.files, st.node.Annotations[AnnotationFiles]); err != nil {
			return nil, failedAs(observe.FailurePlanRejected, "node %s: files: %v", node, err), false
		}
	}
	opts := u.podOpts
	if u.images != nil {
		img, ok := u.images.Image(rec.Version)
		if !ok {
			return nil, failedAs(observe.FailurePodBuild, "no upgrader image for %s (have: %s); the extension's CanUpdate* should have refused it (capi.ExtensionOptions.Images with the same map)",
				rec.Version, strings.Join(u.images.versions(), ", ")), false
		}
		opts = append(append([]nodepod.Option(nil), u.podOpts...), nodepod.WithImage(img))
	}
	pod, err := nodepod.Build(plan, opts...)
	if err != nil {
		return nil, failedAs(observe.FailurePodBuild, "building the upgrader pod: %v", err), false
	}
	return pod, updateResult{}, true
}

// validate builds the plan and the pod and has the API server check the
// pod with a server-side dry run, so that an update that cannot run is
// refused before the node is cordoned and drained, not after: a plan
// kubeadm refuses, or a pod that admission refuses (Pod Security, a
// policy webhook, an invalid field), is a Failure and the node is left as
// it is. A dry run that fails for a reason that may pass (the namespace
// does not exist yet, the API server is unreachable) is answered Pending,
// still before any disruption.
func (u *MachineUpdater) validate(ctx context.Context, st *call, rec *observe.UpdateRecord) (updateResult, bool) {
	if res, ok := etcdTopology(ctx, st, rec); !ok {
		return res, false
	}
	pod, res, ok := u.buildPod(st, rec, st.node.Status.NodeInfo.KubeletVersion)
	if !ok {
		return res, false
	}
	err := st.c.Create(ctx, pod.DeepCopy(), client.DryRunAll)
	switch {
	case err == nil, apierrors.IsAlreadyExists(err):
		return updateResult{}, true
	case podRefused(err):
		return failedAs(observe.FailurePodRejected, "the API server refuses the upgrader pod %s/%s for node %s (dry run, before any disruption): %v",
			pod.Namespace, pod.Name, st.node.Name, err), false
	}
	return waiting(observe.ReasonPending, "checking the upgrader pod %s/%s with a dry run before disrupting node %s: %v", pod.Namespace, pod.Name, st.node.Name, err), false
}

// podRefused tells an API refusal that waiting will not heal (admission,
// validation) from a transient error.
func podRefused(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)
}

// unproven reports whether rec is an update of ours to want that has no
// recorded success and whose own pod is not on the node: "done" needs a
// success of the update's own pod, seen and recorded.
func (u *MachineUpdater) unproven(rec *observe.UpdateRecord, want string, pods []corev1.Pod) bool {
	if rec == nil || rec.Version != want || rec.Succeeded != nil {
		return false
	}
	return rec.Pod == "" || findPod(pods, rec.Pod) == nil
}

// recordSuccess writes, once, that the update's own pod succeeded: the
// proof finish needs, which stays on the Node if the pod goes away.
func (u *MachineUpdater) recordSuccess(ctx context.Context, st *call, rec *observe.UpdateRecord) (*observe.UpdateRecord, error) {
	if rec.Succeeded != nil {
		return rec, nil
	}
	next := *rec
	now := st.nowMeta()
	next.Succeeded = &now
	if err := st.writeRecord(ctx, &next); err != nil {
		return rec, err
	}
	return &next, nil
}

// etcdTopology reads, for the first control plane of an update, whether
// the cluster's etcd is external, from kube-system/kubeadm-config's
// ClusterConfiguration in the workload cluster: what kubeadm itself reads.
// The Machine's KubeadmConfig is not enough: KubeadmControlPlane gives a
// joined control plane's KubeadmConfig no ClusterConfiguration. A missing
// ConfigMap means stacked etcd; a failed read is answered Pending, so the
// plan is never built two different ways.
func etcdTopology(ctx context.Context, st *call, rec *observe.UpdateRecord) (updateResult, bool) {
	if rec.Role != string(kubeadm.RoleFirstControlPlane) || st.cp.externalEtcd {
		return updateResult{}, true
	}
	var cm corev1.ConfigMap
	err := st.c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "kubeadm-config"}, &cm)
	if apierrors.IsNotFound(err) {
		return updateResult{}, true
	}
	if err != nil {
		return waiting(observe.ReasonPending, "reading kube-system/kubeadm-config for the etcd topology: %v", err), false
	}
	var cc struct {
		Etcd struct {
			External *struct {
				Endpoints []string `json:"endpoints"`
			} `json:"external"`
		} `json:"etcd"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["ClusterConfiguration"]), &cc); err != nil {
		return failedAs(observe.FailurePlanRejected, "kube-system/kubeadm-config: ClusterConfiguration: %v", err), false
	}
	st.externalEtcd = cc.Etcd.External != nil && len(cc.Etcd.External.Endpoints) > 0
	return updateResult{}, true
}

// LabelControlPlaneNode is the label kubeadm puts on control plane Nodes;
// MachineUpdater reads the control plane's state from the Nodes carrying it.
const LabelControlPlaneNode = "node-role.kubernetes.io/control-plane"

// role is the kubeadm role of the machine's node for an update to version
// to. Only called when an update starts: the answer changes during the
// update, so the record pins it.
//
// A control plane node runs `kubeadm upgrade apply` (first control plane:
// etcd snapshot first) unless the upgrade to this version already ran or
// runs on another control plane node: another control plane Node whose
// kubelet reports to or later, or whose observe.UpdateRecord goes to to with the
// first-control-plane role. kube-system/kubeadm-config is not evidence:
// KubeadmControlPlane writes the new version there before it updates any
// machine in place, so reading it would make every node "other control
// plane" and the apply, and the snapshot, would never run.
func (u *MachineUpdater) role(ctx context.Context, st *call, to *version.Version) (kubeadm.Role, updateResult, bool) {
	if _, cp := st.machine.Labels[clusterv1.MachineControlPlaneLabel]; !cp {
		return kubeadm.RoleWorker, updateResult{}, true
	}
	var nodes corev1.NodeList
	if err := st.c.List(ctx, &nodes, client.HasLabels{LabelControlPlaneNode}); err != nil {
		return "", waiting(observe.ReasonPending, "listing the control plane nodes to choose the kubeadm role: %v", err), false
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if n.Name == st.node.Name {
			continue
		}
		if v, err := version.ParseSemantic(n.Status.NodeInfo.KubeletVersion); err == nil && !v.LessThan(to) {
			st.log.V(1).Info("upgrade node: another control plane node is at the version already", "other", n.Name)
			return kubeadm.RoleControlPlane, updateResult{}, true
		}
		if rec, _ := readUpdateRecord(n); rec != nil && rec.Role == string(kubeadm.RoleFirstControlPlane) && rec.Version == st.machine.Spec.Version {
			st.log.V(1).Info("upgrade node: another control plane node runs the upgrade apply", "other", n.Name)
			return kubeadm.RoleControlPlane, updateResult{}, true
		}
	}
	return kubeadm.RoleFirstControlPlane, updateResult{}, true
}

// controlPlaneAhead holds the start of a worker's version change until
// every control plane Node of the workload cluster (LabelControlPlaneNode)
// runs a kubelet at the target minor or above, with no in-place update of
// ours unfinished on it: the skew policy allows no kubelet newer than the
// API server, and ControlPlaneSkewCheck accepts a worker's change while
// the control plane is still on its way to the version (Cluster API's
// MachineDeployment does not wait for it). The answer is in progress
// (observe.ReasonPending, naming the control plane node), with nothing done to the
// node. Control plane machines, a change within the node's minor and a
// cluster without control plane Nodes (a managed control plane) are not
// held.
func controlPlaneAhead(ctx context.Context, st *call, current string, to *version.Version) (updateResult, bool) {
	if _, cp := st.machine.Labels[clusterv1.MachineControlPlaneLabel]; cp {
		return updateResult{}, true
	}
	if from, err := version.ParseSemantic(current); err == nil && !minorAbove(to, from) {
		return updateResult{}, true
	}
	var nodes corev1.NodeList
	if err := st.c.List(ctx, &nodes, client.HasLabels{LabelControlPlaneNode}); err != nil {
		return waiting(observe.ReasonPending, "node %s not started: listing the control plane nodes to check their version first: %v", st.node.Name, err), false
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		kv := n.Status.NodeInfo.KubeletVersion
		v, err := version.ParseSemantic(kv)
		switch {
		case err != nil || minorAbove(to, v):
			st.log.V(1).Info("waiting for the control plane", "controlPlaneNode", n.Name, "kubeletVersion", kv)
			return waiting(observe.ReasonPending, "node %s not started: waiting for the control plane to run %s first: control plane node %s runs %s (a kubelet may not be newer than its API server)",
				st.node.Name, st.machine.Spec.Version, n.Name, errtext.Quote(kv)), false
		case updateUnfinished(n):
			return waiting(observe.ReasonPending, "node %s not started: waiting for the control plane to run %s first: the in-place update of control plane node %s is unfinished",
				st.node.Name, st.machine.Spec.Version, n.Name), false
		}
	}
	return updateResult{}, true
}

// updateUnfinished tells whether n's observe.ConditionInPlaceUpdate says an
// update of ours is under way on it.
func updateUnfinished(n *corev1.Node) bool {
	c := observe.InPlaceUpdateCondition(n)
	return c != nil && c.Status == corev1.ConditionTrue && c.Reason != observe.ReasonGateClosed && c.Reason != observe.ReasonPending
}

// runPlan builds the update's plan and pod, waits for or clears the other
// upgrader pods on the node, creates the pod and reads its status.
func (u *MachineUpdater) runPlan(ctx context.Context, st *call, rec *observe.UpdateRecord, pods []corev1.Pod) updateResult {
	c, node := st.c, st.node.Name
	current, want, role := st.node.Status.NodeInfo.KubeletVersion, rec.Version, kubeadm.Role(rec.Role)
	from := current
	if rec.Pod != "" && rec.FromVersion != "" {
		// The plan the update's pod runs, or ran before it went away:
		// rebuilt the same, its pod resumes from the host's journal.
		from = rec.FromVersion
	}
	if res, ok := etcdTopology(ctx, st, rec); !ok {
		return res
	}
	pod, res, ok := u.buildPod(st, rec, from)
	if !ok {
		return res
	}
	key := pod.Namespace + "/" + pod.Name
	if res, ok := u.clearOtherPods(ctx, st, pods, key, pod.Namespace); !ok {
		return res
	}
	if rec.Pod != key || rec.FromVersion != from {
		// Recorded before the pod exists, so that every later call knows
		// which upgrader pod on the node is this update's.
		next := *rec
		next.Pod, next.FromVersion = key, from
		if err := st.writeRecord(ctx, &next); err != nil {
			return waiting(observe.ReasonPending, "recording the upgrader pod on node %s: %v", node, err)
		}
	}
	got, created, err := nodepod.CreateOrGet(ctx, c, pod)
	switch {
	case errors.Is(err, nodepod.ErrPlanChanged):
		if !podEnded(got) {
			return waiting(observe.ReasonPending, "an upgrader pod for an earlier plan is still running on %s", node)
		}
		if err := c.Delete(ctx, got); err != nil && !apierrors.IsNotFound(err) {
			return waiting(observe.ReasonPending, "replacing the finished upgrader pod of an earlier plan: %v", err)
		}
		return waiting(observe.ReasonPending, "replaced the finished upgrader pod of an earlier plan on %s", node)
	case err != nil && podRefused(err):
		// Accepted by the dry run before the drain, refused now (a policy
		// changed meanwhile): waiting will not heal it.
		return failedAs(observe.FailurePodRejected, "the API server refuses the upgrader pod %s for node %s: %v", key, node, err)
	case err != nil:
		return waiting(observe.ReasonPending, "upgrader pod: %v", err)
	case created:
		st.log.Info("upgrader pod created", "pod", key, "role", string(role))
		return waiting(observe.ReasonUpgrading, "started %s upgrade of node %s from %s to %s (pod %s)", role, node, from, want, key)
	}
	if why := podDiffers(pod, got); why != "" {
		return failedAs(observe.FailureForeignPod, "pod %s on node %s is not the update's upgrader pod (%s); delete it to go on", key, node, why)
	}
	ps := nodepod.ReadStatus(got)
	switch ps.Phase {
	case nodepod.PhaseFailed:
		return stepFailed(node, got, ps)
	case nodepod.PhaseSucceeded:
		if _, err := u.recordSuccess(ctx, st, rec); err != nil {
			return waiting(observe.ReasonWaitingForKubelet, "upgrade steps done on %s; recording their success: %v", node, err)
		}
		return waiting(observe.ReasonWaitingForKubelet, "upgrade steps done on %s; waiting for the kubelet to report %s (reports %s)", node, want, current)
	}
	return upgrading(waiting(observe.ReasonUpgrading, "upgrading node %s: %.0f%% of %d steps done", node, ps.Progress*100, len(ps.Steps)), ps)
}

// ownPod checks that p, the pod on the node with the name of the update's
// upgrader pod, is the pod the update would build (podDiffers) before its
// status is trusted.
func (u *MachineUpdater) ownPod(ctx context.Context, st *call, rec *observe.UpdateRecord, p *corev1.Pod) (updateResult, bool) {
	from := st.node.Status.NodeInfo.KubeletVersion
	if rec.FromVersion != "" {
		from = rec.FromVersion
	}
	if res, ok := etcdTopology(ctx, st, rec); !ok {
		return res, false
	}
	want, res, ok := u.buildPod(st, rec, from)
	if !ok {
		return res, false
	}
	if why := podDiffers(want, p); why != "" {
		return failedAs(observe.FailureForeignPod, "pod %s/%s on node %s is not the update's upgrader pod (%s); delete it to go on", p.Namespace, p.Name, st.node.Name, why), false
	}
	return updateResult{}, true
}

// podDiffers compares an existing pod with the upgrader pod the update
// builds (want) on what makes it the updater's: its node, host PID
// namespace, security contexts, and each container's name, image, command
// and arguments. A plan fingerprint annotation is anyone's to copy. It
// returns the first difference, or "".
func podDiffers(want, got *corev1.Pod) string {
	podSC := func(sc *corev1.PodSecurityContext) *corev1.PodSecurityContext {
		if sc == nil {
			return &corev1.PodSecurityContext{} // the API server's default
		}
		return sc
	}
	switch {
	case want.Spec.NodeName != got.Spec.NodeName:
		return "another node"
	case want.Spec.HostPID != got.Spec.HostPID:
		return "another spec.hostPID"
	case !apiequality.Semantic.DeepEqual(podSC(want.Spec.SecurityContext), podSC(got.Spec.SecurityContext)):
		return "another spec.securityContext"
	}
	for _, cs := range []struct {
		field     string
		want, got []corev1.Container
	}{{"spec.initContainers", want.Spec.InitContainers, got.Spec.InitContainers}, {"spec.containers", want.Spec.Containers, got.Spec.Containers}} {
		if len(cs.want) != len(cs.got) {
			return fmt.Sprintf("%d %s, not %d", len(cs.got), cs.field, len(cs.want))
		}
		for i := range cs.want {
			w, g := &cs.want[i], &cs.got[i]
			switch {
			case w.Name != g.Name:
				return fmt.Sprintf("%s[%d] is named %s, not %s", cs.field, i, errtext.Quote(g.Name), w.Name)
			case w.Image != g.Image:
				return fmt.Sprintf("%s[%d] (%s) runs image %s, not %s", cs.field, i, w.Name, errtext.Quote(g.Image), w.Image)
			case !apiequality.Semantic.DeepEqual(w.Command, g.Command) || !apiequality.Semantic.DeepEqual(w.Args, g.Args):
				return fmt.Sprintf("%s[%d] (%s) runs another command", cs.field, i, w.Name)
			case !apiequality.Semantic.DeepEqual(w.SecurityContext, g.SecurityContext):
				return fmt.Sprintf("%s[%d] (%s) has another securityContext", cs.field, i, w.Name)
			}
		}
	}
	return ""
}

// stepFailed is the Failure for the update's own upgrader pod failing.
func stepFailed(node string, pod *corev1.Pod, ps nodepod.Status) updateResult {
	step := "pod"
	var code int32
	if ps.Failed != nil {
		step, code = ps.Failed.Name, ps.Failed.ExitCode
	}
	res := failedAs(observe.FailureStepFailed, "node %s: step %s failed with exit code %d: %s %s (pod %s/%s)", node, step, code, ps.Reason, ps.Message, pod.Namespace, pod.Name)
	res.step = step
	return res
}

// upgrading sets res.step to the first step of ps not yet done.
func upgrading(res updateResult, ps nodepod.Status) updateResult {
	for _, s := range ps.Steps {
		if s.Phase != nodepod.PhaseSucceeded {
			res.step = s.Name
			break
		}
	}
	return res
}

// upgraderPodsOn lists the upgrader pods (nodepod.NodeSelector) bound to node
// in namespace, where this updater creates them. Labels alone are anyone's
// to set: a pod carrying them in another namespace is not an upgrader pod
// of ours, blocks nothing and is drained like any other pod.
func upgraderPodsOn(ctx context.Context, c client.Client, namespace, node string) ([]corev1.Pod, error) {
	var list corev1.PodList
	// Only the node's pods are read (its LabelNode): with every node's
	// pod listed, each carrying its plan, a hundred updates held hundreds
	// of MiB at once (make e2e-scale). spec.nodeName stays the authority.
	if err := c.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: nodepod.NodeSelector(node)}); err != nil {
		return nil, err
	}
	out := list.Items[:0]
	for _, p := range list.Items {
		if p.Spec.NodeName == node {
			out = append(out, p)
		}
	}
	return out, nil
}

// findPod returns the pod namespace/name key among pods, or nil.
func findPod(pods []corev1.Pod, key string) *corev1.Pod {
	for i := range pods {
		if pods[i].Namespace+"/"+pods[i].Name == key {
			return &pods[i]
		}
	}
	return nil
}

// podEnded: the pod runs no step any more and will not run one again. A
// pod being deleted counts as running until its containers have stopped.
func podEnded(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return true
	}
	if p.DeletionTimestamp != nil {
		return false
	}
	ph := nodepod.ReadStatus(p).Phase // a crash loop is Failed while the pod is Running
	return ph == nodepod.PhaseSucceeded || ph == nodepod.PhaseFailed
}

// clearOtherPods deals with the upgrader pods on the node other than ours
// (namespace/name; "" when the update has none): it answers "wait" while
// any of them runs, and deletes the finished ones in namespace deleteIn
// ("" deletes nothing), answering "wait" once more so that the next call
// starts from a node with no other upgrader pod. ok means there is none
// left that matters.
func (u *MachineUpdater) clearOtherPods(ctx context.Context, st *call, pods []corev1.Pod, ours, deleteIn string) (updateResult, bool) {
	var running, deleted []string
	for i := range pods {
		p := &pods[i]
		key := p.Namespace + "/" + p.Name
		if key == ours {
			continue
		}
		what := key
		if plan := p.Labels[nodepod.LabelPlan]; plan != "" {
			what += " (plan " + plan + ")"
		}
		if !podEnded(p) {
			running = append(running, what)
			continue
		}
		if deleteIn == "" || p.Namespace != deleteIn || p.DeletionTimestamp != nil {
			continue
		}
		if err := st.c.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
			return waiting(observe.ReasonPending, "deleting the finished upgrader pod %s of an abandoned plan on node %s: %v", what, st.node.Name, err), false
		}
		st.log.Info("deleted the finished upgrader pod of an abandoned plan", "pod", key)
		deleted = append(deleted, what)
	}
	if len(running) > 0 {
		return waiting(observe.ReasonPending, "upgrader pod %s of another plan is still running on node %s; waiting for it to end before going on (never two upgrader pods on one node)", strings.Join(running, ", "), st.node.Name), false
	}
	if len(deleted) > 0 {
		return waiting(observe.ReasonPending, "deleted the finished upgrader pod %s of an abandoned plan on node %s", strings.Join(deleted, ", "), st.node.Name), false
	}
	return updateResult{}, true
}
