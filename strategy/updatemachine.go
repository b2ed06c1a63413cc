package strategy

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/version"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/cluster-api/exp/runtime/server"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
)

// WorkloadClient returns a client for the workload cluster a Machine
// belongs to (in a real extension: built from the <cluster>-kubeconfig
// secret, or CAPI's ClusterCache).
type WorkloadClient func(ctx context.Context, cluster types.NamespacedName) (client.Client, error)

// MachineUpdater answers CAPI's UpdateMachine hook by upgrading the
// machine's node in place with a kubeadm plan (nodeexec/kubeadm) run by an
// upgrader pod (nodeexec/nodepod) on that node.
//
// It keeps no state in memory: the Node (found through spec.providerID,
// since CAPI strips status from the request), the kubeadm-config ConfigMap
// and the upgrader pod, whose name is derived from the plan, are the state.
// A restarted extension therefore continues where the last one was. It
// answers RetryAfterSeconds > 0 while the update runs, 0 only once the
// node's kubelet reports the desired version, and Failure (with the failed
// step and its exit code) on a terminal failure.
type MachineUpdater struct {
	workload   WorkloadClient
	podOpts    []nodepod.Option
	planHook   func(*kubeadm.Config)
	retryAfter int32
	log        logr.Logger
}

// MachineUpdaterOption configures a MachineUpdater.
type MachineUpdaterOption func(*MachineUpdater)

// WithPodOptions passes options to the upgrader pod builder (image, mode,
// runner command, tolerations...). nodepod.WithImage is required.
func WithPodOptions(opts ...nodepod.Option) MachineUpdaterOption {
	return func(u *MachineUpdater) { u.podOpts = append(u.podOpts, opts...) }
}

// WithPlanConfig lets the caller adjust each kubeadm plan's configuration
// (staging paths, skipped components) before it is built.
func WithPlanConfig(f func(*kubeadm.Config)) MachineUpdaterOption {
	return func(u *MachineUpdater) { u.planHook = f }
}

// WithRetryAfter sets the RetryAfterSeconds answered while an update runs
// (default 15).
func WithRetryAfter(seconds int32) MachineUpdaterOption {
	return func(u *MachineUpdater) { u.retryAfter = seconds }
}

// WithUpdaterLogger sets the logger (default: the request context's).
func WithUpdaterLogger(l logr.Logger) MachineUpdaterOption {
	return func(u *MachineUpdater) { u.log = l }
}

// NewMachineUpdater builds the UpdateMachine handler.
func NewMachineUpdater(workload WorkloadClient, opts ...MachineUpdaterOption) (*MachineUpdater, error) {
	if workload == nil {
		return nil, fmt.Errorf("%w: nil workload client getter", ErrInvalidRule)
	}
	u := &MachineUpdater{workload: workload, retryAfter: 15}
	for _, o := range opts {
		o(u)
	}
	if u.retryAfter <= 0 {
		return nil, fmt.Errorf("%w: retry after %d seconds: must be positive", ErrInvalidRule, u.retryAfter)
	}
	return u, nil
}

// Handler returns the handler to register on CAPI's runtime server.
func (u *MachineUpdater) Handler(namePrefix string) server.ExtensionHandler {
	return server.ExtensionHandler{Hook: runtimehooksv1.UpdateMachine, Name: namePrefix + "-update-machine", HandlerFunc: u.UpdateMachine}
}

// UpdateMachine answers the hook. It is idempotent and driven by the desired
// Machine only.
func (u *MachineUpdater) UpdateMachine(ctx context.Context, req *runtimehooksv1.UpdateMachineRequest, resp *runtimehooksv1.UpdateMachineResponse) {
	m := &req.Desired.Machine
	log := u.log
	if log.GetSink() == nil {
		log = logr.FromContextOrDiscard(ctx)
	}
	log = log.WithValues("hook", "UpdateMachine", "machine", m.Namespace+"/"+m.Name)
	res := u.update(ctx, m)
	switch {
	case res.err != nil:
		log.Error(res.err, "in-place update failed")
		resp.SetStatus(runtimehooksv1.ResponseStatusFailure)
		resp.SetMessage(res.err.Error())
	case res.done:
		log.Info("in-place update done", "message", res.msg)
		resp.SetStatus(runtimehooksv1.ResponseStatusSuccess)
		resp.SetMessage(res.msg)
		resp.RetryAfterSeconds = 0
	default:
		log.V(1).Info("in-place update in progress", "message", res.msg)
		resp.SetStatus(runtimehooksv1.ResponseStatusSuccess)
		resp.SetMessage(res.msg)
		resp.RetryAfterSeconds = u.retryAfter
	}
}

// ErrUpdateFailed is matched by terminal update failures.
var ErrUpdateFailed = errors.New("in-place update failed")

type updateResult struct {
	done bool
	msg  string
	err  error // terminal
}

func waiting(format string, args ...any) updateResult {
	return updateResult{msg: fmt.Sprintf(format, args...)}
}

func failed(format string, args ...any) updateResult {
	return updateResult{err: fmt.Errorf("%w: %s", ErrUpdateFailed, fmt.Sprintf(format, args...))}
}

func (u *MachineUpdater) update(ctx context.Context, m *clusterv1.Machine) updateResult {
	switch {
	case m.Spec.ProviderID == "":
		return failed("desired Machine has no spec.providerID: the node cannot be found")
	case m.Spec.Version == "":
		return failed("desired Machine has no spec.version")
	case m.Spec.ClusterName == "":
		return failed("desired Machine has no spec.clusterName")
	}
	to, err := version.ParseSemantic(m.Spec.Version)
	if err != nil {
		return failed("spec.version %q: %v", m.Spec.Version, err)
	}
	c, err := u.workload(ctx, types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.ClusterName})
	if err != nil {
		return waiting("waiting for the workload cluster: %v", err)
	}
	node, err := nodeByProviderID(ctx, c, m.Spec.ProviderID)
	if err != nil {
		return waiting("waiting for the node: %v", err)
	}
	current := node.Status.NodeInfo.KubeletVersion
	if current == m.Spec.Version {
		return updateResult{done: true, msg: fmt.Sprintf("node %s runs kubelet %s", node.Name, current)}
	}

	role := kubeadm.RoleWorker
	if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; cp {
		role = kubeadm.RoleControlPlane
		clusterVersion, err := kubeadmClusterVersion(ctx, c)
		if err != nil {
			return waiting("waiting for the kubeadm-config ConfigMap: %v", err)
		}
		if clusterVersion.LessThan(to) {
			role = kubeadm.RoleFirstControlPlane
		}
	}
	cfg := kubeadm.Config{Node: node.Name, Role: role, FromVersion: current, ToVersion: m.Spec.Version}
	if u.planHook != nil {
		u.planHook(&cfg)
	}
	plan, err := kubeadm.NewPlan(cfg)
	if err != nil {
		return failed("node %s from %s to %s: %v", node.Name, current, m.Spec.Version, err)
	}
	pod, err := nodepod.Build(plan, u.podOpts...)
	if err != nil {
		return failed("building the upgrader pod: %v", err)
	}
	got, created, err := nodepod.CreateOrGet(ctx, c, pod)
	switch {
	case errors.Is(err, nodepod.ErrPlanChanged):
		if st := nodepod.ReadStatus(got); st.Phase == nodepod.PhaseRunning || st.Phase == nodepod.PhasePending {
			return waiting("an upgrader pod for an earlier plan is still running on %s", node.Name)
		}
		if err := c.Delete(ctx, got); err != nil && !apierrors.IsNotFound(err) {
			return waiting("replacing the finished upgrader pod of an earlier plan: %v", err)
		}
		return waiting("replaced the finished upgrader pod of an earlier plan on %s", node.Name)
	case err != nil:
		return waiting("upgrader pod: %v", err)
	case created:
		return waiting("started %s upgrade of node %s from %s to %s (pod %s/%s)", role, node.Name, current, m.Spec.Version, got.Namespace, got.Name)
	}
	st := nodepod.ReadStatus(got)
	switch st.Phase {
	case nodepod.PhaseFailed:
		step := "pod"
		var code int32
		if st.Failed != nil {
			step, code = st.Failed.Name, st.Failed.ExitCode
		}
		return failed("node %s: step %s failed with exit code %d: %s %s (pod %s/%s)", node.Name, step, code, st.Reason, st.Message, got.Namespace, got.Name)
	case nodepod.PhaseSucceeded:
		return waiting("upgrade steps done on %s; waiting for the kubelet to report %s (reports %s)", node.Name, m.Spec.Version, current)
	}
	return waiting("upgrading node %s: %.0f%% of %d steps done", node.Name, st.Progress*100, len(st.Steps))
}

// nodeByProviderID finds the Node whose spec.providerID is id.
func nodeByProviderID(ctx context.Context, c client.Client, id string) (*corev1.Node, error) {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return nil, err
	}
	for i := range nodes.Items {
		if nodes.Items[i].Spec.ProviderID == id {
			return &nodes.Items[i], nil
		}
	}
	return nil, fmt.Errorf("no node with providerID %q", id)
}

// kubeadmClusterVersion reads kubernetesVersion from kube-system/kubeadm-config:
// kubeadm upgrade apply raises it, so the first control plane machine to
// reach a version is the one whose cluster version is still older.
func kubeadmClusterVersion(ctx context.Context, c client.Client) (*version.Version, error) {
	var cm corev1.ConfigMap
	if err := c.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: "kubeadm-config"}, &cm); err != nil {
		return nil, err
	}
	var cc struct {
		KubernetesVersion string `json:"kubernetesVersion"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["ClusterConfiguration"]), &cc); err != nil {
		return nil, fmt.Errorf("ClusterConfiguration: %w", err)
	}
	v, err := version.ParseSemantic(cc.KubernetesVersion)
	if err != nil {
		return nil, fmt.Errorf("ClusterConfiguration.kubernetesVersion %q: %w", cc.KubernetesVersion, err)
	}
	return v, nil
}
