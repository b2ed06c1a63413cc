package nodepod

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"path"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/nodeexec"
)

// Mode selects how the plan is laid out in the pod.
type Mode string

// Modes.
const (
	// ModeInitContainers gives every step its own init container (EKS
	// Anywhere's layout, so `kubectl get pod` shows per-step progress)
	// plus a final status container. With a RunnerCommand each container
	// runs the journaled runner up to its step, so deadlines, retries,
	// checks, backups, rollback and crash-resume all apply; without one,
	// each container runs the step's argv through nsenter directly (raw
	// mode: backups still run, as their own init container, but there is
	// no journal, no retry, no check and no rollback). Only a running
	// kubelet starts the next container: no step may end with the kubelet
	// or containerd stopped (see the package documentation).
	ModeInitContainers Mode = "InitContainers"
	// ModeSingleContainer runs the whole plan in one container with the
	// journaled runner. Requires a RunnerCommand.
	ModeSingleContainer Mode = "SingleContainer"
)

// Labels and annotations put on every upgrader pod.
const (
	LabelName         = "app.kubernetes.io/name"
	LabelManagedBy    = "app.kubernetes.io/managed-by"
	LabelPlan         = "upgradekit.io/plan"
	LabelNode         = "upgradekit.io/node"
	LabelPlanHash     = "upgradekit.io/plan-hash"
	AnnotationSteps   = "upgradekit.io/steps"
	AnnotationMode    = "upgradekit.io/mode"
	AnnotationPlanFP  = "upgradekit.io/plan-fingerprint"
	NameValue         = "upgradekit-node-upgrader"
	ManagedByValue    = "upgradekit"
	StageContainer    = "upgradekit-stage"
	StatusContainer   = "upgradekit-status"
	backupSuffix      = "-backup"
	stagingVolumeName = "upgradekit-host"
)

// Defaults.
const (
	DefaultNamespace       = "upgradekit-system"
	DefaultStagingHostPath = "/var/lib/upgradekit"
	// DefaultPriorityClass is the upgrader pod's priority class unless
	// WithPriorityClass says otherwise: a pod that is upgrading its node
	// must be the last the kubelet evicts under disk or memory pressure
	// (staging writes hundreds of MB under the staging host path) and must
	// not be preempted mid-step. The API server creates this class itself.
	DefaultPriorityClass = "system-node-critical"
)

// DefaultResources are every container's resources unless WithResources
// says otherwise: requests without limits, so the pod is Burstable (not
// BestEffort, the first evicted) and kubeadm is never OOM-killed by a limit
// of ours.
func DefaultResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("100m"),
		corev1.ResourceMemory: resource.MustParse("128Mi"),
	}}
}

// ErrInvalidOptions is wrapped by builder configuration errors.
var ErrInvalidOptions = errors.New("invalid pod builder options")

// Selector matches every upgrader pod this package builds; pass it to the
// drain package so a drain never evicts the pod doing the upgrade.
func Selector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedByValue, LabelName: NameValue})
}

// NodeSelector matches the upgrader pods this package builds for node
// (Selector and the node's LabelNode value): listing with it, a client
// reads only that node's pods, which matters once every node of a large
// cluster has one (each carries its plan).
func NodeSelector(node string) labels.Selector {
	return labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedByValue, LabelName: NameValue, LabelNode: labelValue(node)})
}

type options struct {
	mode             Mode
	namespace        string
	image            string
	pullPolicy       corev1.PullPolicy
	pullSecrets      []string
	serviceAccount   string
	priorityClass    string
	tolerations      []corev1.Toleration
	stagingHostPath  string
	stageFrom        string
	resources        corev1.ResourceRequirements
	runnerCommand    []string
	nsenter          string
	privileged       bool
	statusArgv       []string
	extraLabels      map[string]string
	targetPID        int
	deadlineOverhead time.Duration
}

// Option configures Build.
type Option func(*options)

// WithMode selects the layout (default ModeInitContainers).
func WithMode(m Mode) Option { return func(o *options) { o.mode = m } }

// WithNamespace sets the pod's namespace (default DefaultNamespace).
func WithNamespace(ns string) Option { return func(o *options) { o.namespace = ns } }

// WithImage sets the upgrader image (required). It must contain nsenter
// and, for the journaled modes, the runner binary.
func WithImage(image string) Option { return func(o *options) { o.image = image } }

// WithImagePullPolicy sets every container's pull policy.
func WithImagePullPolicy(p corev1.PullPolicy) Option { return func(o *options) { o.pullPolicy = p } }

// WithImagePullSecrets names pull secrets in the pod's namespace.
func WithImagePullSecrets(names ...string) Option {
	return func(o *options) { o.pullSecrets = append(o.pullSecrets, names...) }
}

// WithServiceAccount sets the pod's service account (the runner itself
// needs no API access; InContainer steps might).
func WithServiceAccount(name string) Option { return func(o *options) { o.serviceAccount = name } }

// WithPriorityClass sets the pod's priority class (default
// DefaultPriorityClass; "" for none, the cluster's default priority).
func WithPriorityClass(name string) Option { return func(o *options) { o.priorityClass = name } }

// WithTolerations adds tolerations to the built-in ones (unschedulable,
// control-plane, not-ready and unreachable).
func WithTolerations(t ...corev1.Toleration) Option {
	return func(o *options) { o.tolerations = append(o.tolerations, t...) }
}

// WithStagingHostPath sets the host directory shared by the stage
// container, the runner's journal (<path>/journal) and the staged
// components (<path>/staging). It is mounted at the same path inside the
// containers, so host and container paths agree. Default
// DefaultStagingHostPath.
func WithStagingHostPath(p string) Option { return func(o *options) { o.stagingHostPath = p } }

// WithStageFrom adds a first init container that copies the directory
// dir of the upgrader image to <staging host path>/staging, which is where
// package kubeadm expects the new binaries: air-gapped installs need
// nothing but the image.
func WithStageFrom(dir string) Option { return func(o *options) { o.stageFrom = dir } }

// WithResources sets every container's resources (default
// DefaultResources). Limits below requests are refused.
func WithResources(r corev1.ResourceRequirements) Option { return func(o *options) { o.resources = r } }

// WithRunnerCommand sets the argv of the runner binary inside the image,
// which reads the plan with nodeexec.FromEnv. Required for
// ModeSingleContainer; turns ModeInitContainers into its journaled form.
func WithRunnerCommand(argv ...string) Option {
	return func(o *options) { o.runnerCommand = append([]string(nil), argv...) }
}

// WithNsenterPath sets the nsenter binary inside the image (default
// "nsenter").
func WithNsenterPath(p string) Option { return func(o *options) { o.nsenter = p } }

// WithPrivileged runs host containers fully privileged instead of with the
// minimal capability set. Use it when steps need more than nsenter does
// (loading kernel modules, mounting); see the package documentation.
func WithPrivileged() Option { return func(o *options) { o.privileged = true } }

// WithStatusArgv sets what the final status container runs on the host in
// raw init-container mode (default: "true", which only marks completion).
func WithStatusArgv(argv ...string) Option {
	return func(o *options) { o.statusArgv = append([]string(nil), argv...) }
}

// WithLabels adds labels to the pod.
func WithLabels(l map[string]string) Option {
	return func(o *options) {
		for k, v := range l {
			o.extraLabels[k] = v
		}
	}
}

// WithTargetPID sets the host PID whose namespaces steps enter (default 1).
func WithTargetPID(pid int) Option { return func(o *options) { o.targetPID = pid } }

// WithDeadlineOverhead sets the slack added to the sum of step deadlines
// for the pod's activeDeadlineSeconds (default 10 minutes). The pod gets
// no deadline when any step has none.
func WithDeadlineOverhead(d time.Duration) Option { return func(o *options) { o.deadlineOverhead = d } }

// Name returns the deterministic pod name for a plan: "upgradekit-" plus
// the plan name, shortened with a hash suffix when that would exceed 63
// characters.
func Name(plan nodeexec.Plan) string { return shortName("upgradekit-" + plan.Name) }

// backupContainerName names the container that runs step's backup in the
// raw layout: step + "-backup", hash-shortened when that exceeds a DNS
// label (a 63-character step name would otherwise be rejected).
func backupContainerName(step string) string { return shortName(step + backupSuffix) }

func shortName(s string) string {
	if len(s) <= validation.DNS1123LabelMaxLength {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return s[:validation.DNS1123LabelMaxLength-11] + "-" + hex.EncodeToString(sum[:])[:10]
}

// labelValue returns v if it is a valid label value, else a hash of it.
func labelValue(v string) string {
	if len(validation.IsValidLabelValue(v)) == 0 {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return "h-" + hex.EncodeToString(sum[:])[:40]
}

// Build returns the upgrader pod for plan. The result is deterministic:
// the same plan and options give the same pod, so it can be compared with
// what exists in the cluster.
func Build(plan nodeexec.Plan, opts ...Option) (*corev1.Pod, error) {
	o := options{
		mode:             ModeInitContainers,
		namespace:        DefaultNamespace,
		stagingHostPath:  DefaultStagingHostPath,
		nsenter:          "nsenter",
		statusArgv:       []string{"true"},
		extraLabels:      map[string]string{},
		targetPID:        1,
		deadlineOverhead: 10 * time.Minute,
		priorityClass:    DefaultPriorityClass,
		resources:        DefaultResources(),
	}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	if err := plan.Validate(); err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) (*corev1.Pod, error) {
		return nil, fmt.Errorf("nodepod: %w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	switch {
	case o.image == "":
		return bad("image is required")
	case o.mode != ModeInitContainers && o.mode != ModeSingleContainer:
		return bad("unknown mode %q", o.mode)
	case o.mode == ModeSingleContainer && len(o.runnerCommand) == 0:
		return bad("%s needs a runner command", ModeSingleContainer)
	case !path.IsAbs(o.stagingHostPath) || path.Clean(o.stagingHostPath) == "/":
		return bad("staging host path %q must be an absolute path other than /", o.stagingHostPath)
	case o.targetPID < 1:
		return bad("target PID %d", o.targetPID)
	case len(o.statusArgv) == 0 || o.statusArgv[0] == "":
		return bad("status argv: empty argv")
	case o.deadlineOverhead < 0:
		return bad("deadline overhead %v: negative duration", o.deadlineOverhead)
	}
	if msgs := validation.IsDNS1123Label(o.namespace); len(msgs) > 0 {
		return bad("namespace %q: %v", o.namespace, msgs)
	}
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("nodepod: %w: %w", ErrInvalidOptions, err)
	}
	planJSON, err := nodeexec.EncodePlan(plan)
	if err != nil {
		return nil, err
	}
	fp := plan.Fingerprint()
	b := &podBuilder{o: o, plan: plan, planJSON: string(planJSON)}

	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      Name(plan),
			Namespace: o.namespace,
			Labels:    map[string]string{},
			Annotations: map[string]string{
				AnnotationSteps:  stepList(plan),
				AnnotationMode:   string(o.mode),
				AnnotationPlanFP: fp,
			},
		},
		Spec: corev1.PodSpec{
			NodeName:           plan.Node,
			HostPID:            true,
			ServiceAccountName: o.serviceAccount,
			PriorityClassName:  o.priorityClass,
			Tolerations:        append(defaultTolerations(), o.tolerations...),
			Volumes: []corev1.Volume{{
				Name: stagingVolumeName,
				VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
					Path: o.stagingHostPath, Type: ptr.To(corev1.HostPathDirectoryOrCreate),
				}},
			}},
			// The journal lives on the host, so a restarted runner container
			// resumes; without a runner nothing may be retried blindly.
			RestartPolicy:                 corev1.RestartPolicyOnFailure,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			AutomountServiceAccountToken:  ptr.To(o.serviceAccount != ""),
		},
	}
	for k, v := range o.extraLabels {
		pod.Labels[k] = v
	}
	pod.Labels[LabelName] = NameValue
	pod.Labels[LabelManagedBy] = ManagedByValue
	pod.Labels[LabelPlan] = labelValue(plan.Name)
	pod.Labels[LabelNode] = labelValue(plan.Node)
	pod.Labels[LabelPlanHash] = fp[:min(16, len(fp))]
	for _, s := range o.pullSecrets {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	if d, ok := b.deadline(); ok {
		// The API accepts 1..MaxInt32 seconds.
		secs := min(max(int64(d/time.Second), 1), math.MaxInt32)
		pod.Spec.ActiveDeadlineSeconds = ptr.To(secs)
	}
	if o.stageFrom != "" {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, b.stage())
	}
	switch {
	case o.mode == ModeSingleContainer:
		pod.Spec.Containers = []corev1.Container{b.runner(StatusContainer, "")}
	case len(o.runnerCommand) > 0:
		for _, s := range plan.Steps {
			pod.Spec.InitContainers = append(pod.Spec.InitContainers, b.runner(s.Name, s.Name))
		}
		pod.Spec.Containers = []corev1.Container{b.runner(StatusContainer, "")}
	default:
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
		for _, s := range plan.Steps {
			if len(s.Backup) > 0 {
				pod.Spec.InitContainers = append(pod.Spec.InitContainers, b.raw(backupContainerName(s.Name), s, s.Backup))
			}
			pod.Spec.InitContainers = append(pod.Spec.InitContainers, b.raw(s.Name, s, s.Argv))
		}
		pod.Spec.Containers = []corev1.Container{b.raw(StatusContainer, nodeexec.Step{}, o.statusArgv)}
	}
	seen := map[string]bool{}
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if msgs := validation.IsDNS1123Label(c.Name); len(msgs) > 0 {
			return bad("container name %q: %v", c.Name, msgs)
		}
		if seen[c.Name] {
			return bad("container name %q is used twice (a step may not be called %q, %q or end in %q)", c.Name, StageContainer, StatusContainer, backupSuffix)
		}
		seen[c.Name] = true
	}
	return pod, nil
}

// validate refuses, before any request, what the API server would reject
// in the pod built from o, naming the option: names, labels, tolerations,
// pull policy, resources.
func (o options) validate() error {
	var errs []error
	add := func(field string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	subdomain := func(field, v string) {
		if msgs := validation.IsDNS1123Subdomain(v); len(msgs) > 0 {
			add(field, "%q: %s", v, strings.Join(msgs, "; "))
		}
	}
	if strings.TrimSpace(o.image) != o.image || strings.ContainsAny(o.image, " \t\n\r\x00") {
		add("image", "%q contains whitespace", o.image)
	}
	switch o.pullPolicy {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		add("imagePullPolicy", "%q (want Always, IfNotPresent or Never)", o.pullPolicy)
	}
	for i, n := range o.pullSecrets {
		subdomain(fmt.Sprintf("imagePullSecrets[%d]", i), n)
	}
	if o.serviceAccount != "" {
		subdomain("serviceAccount", o.serviceAccount)
	}
	if o.priorityClass != "" {
		subdomain("priorityClass", o.priorityClass)
	}
	for i, t := range o.tolerations {
		f := fmt.Sprintf("tolerations[%d]", i)
		if t.Key != "" {
			if msgs := validation.IsQualifiedName(t.Key); len(msgs) > 0 {
				add(f+".key", "%q: %s", t.Key, strings.Join(msgs, "; "))
			}
		}
		switch t.Operator {
		case corev1.TolerationOpExists:
			if t.Value != "" {
				add(f+".value", "must be empty with operator Exists")
			}
		case "", corev1.TolerationOpEqual:
			if t.Key == "" {
				add(f+".operator", "Equal needs a key")
			}
			if msgs := validation.IsValidLabelValue(t.Value); len(msgs) > 0 {
				add(f+".value", "%q: %s", t.Value, strings.Join(msgs, "; "))
			}
		default:
			add(f+".operator", "%q (want Exists or Equal)", t.Operator)
		}
		switch t.Effect {
		case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			add(f+".effect", "%q (want NoSchedule, PreferNoSchedule or NoExecute)", t.Effect)
		}
		if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
			add(f+".tolerationSeconds", "only with effect NoExecute")
		}
	}
	keys := make([]string, 0, len(o.extraLabels))
	for k := range o.extraLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			add("labels", "key %q: %s", k, strings.Join(msgs, "; "))
		}
		if msgs := validation.IsValidLabelValue(o.extraLabels[k]); len(msgs) > 0 {
			add("labels["+k+"]", "%q: %s", o.extraLabels[k], strings.Join(msgs, "; "))
		}
		switch k {
		case LabelName, LabelManagedBy, LabelPlan, LabelNode, LabelPlanHash:
			add("labels", "key %q is set by Build (it identifies upgrader pods)", k)
		}
	}
	for name, req := range o.resources.Requests {
		if req.Sign() < 0 {
			add("resources.requests["+string(name)+"]", "%s is negative", req.String())
		}
		if lim, ok := o.resources.Limits[name]; ok && req.Cmp(lim) > 0 {
			add("resources.requests["+string(name)+"]", "%s is above the limit %s", req.String(), lim.String())
		}
	}
	for name, lim := range o.resources.Limits {
		if lim.Sign() < 0 {
			add("resources.limits["+string(name)+"]", "%s is negative", lim.String())
		}
	}
	if o.nsenter == "" {
		add("nsenterPath", "empty")
	}
	for i, a := range o.runnerCommand {
		if a == "" || strings.ContainsRune(a, 0) {
			add(fmt.Sprintf("runnerCommand[%d]", i), "%q: empty or contains NUL", a)
		}
	}
	if o.stageFrom != "" && (!path.IsAbs(o.stageFrom) || path.Clean(o.stageFrom) == "/") {
		add("stageFrom", "%q must be an absolute path other than /", o.stageFrom)
	}
	return errors.Join(errs...)
}

func stepList(p nodeexec.Plan) string {
	names := make([]string, len(p.Steps))
	for i, st := range p.Steps {
		names[i] = st.Name
	}
	return strings.Join(names, ",") // linear, where += in the loop was quadratic
}

// defaultTolerations let the pod run on a cordoned node, on control plane
// nodes, and keep running while the kubelet restart makes the node briefly
// NotReady (without them the taint manager would evict the upgrader after
// the default 300 seconds, in the middle of a step).
func defaultTolerations() []corev1.Toleration {
	return []corev1.Toleration{
		{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	}
}

type podBuilder struct {
	o        options
	plan     nodeexec.Plan
	planJSON string
}

// mount is what the runner and step containers see of the host
// directory: the staged bundle and the journal. Backups (copies of
// /etc/kubernetes among them) are not mounted: host steps reach them
// through nsenter, and nothing in a container needs them.
func (b *podBuilder) mount() []corev1.VolumeMount {
	return []corev1.VolumeMount{
		{Name: stagingVolumeName, MountPath: path.Join(b.o.stagingHostPath, "staging"), SubPath: "staging"},
		{Name: stagingVolumeName, MountPath: path.Join(b.o.stagingHostPath, "journal"), SubPath: "journal"},
	}
}

// stageMount is what the stage container sees: the staging directory
// only.
func (b *podBuilder) stageMount() []corev1.VolumeMount {
	return []corev1.VolumeMount{{Name: stagingVolumeName, MountPath: path.Join(b.o.stagingHostPath, "staging"), SubPath: "staging"}}
}

func (b *podBuilder) base(name string) corev1.Container {
	return corev1.Container{
		Name:                     name,
		Image:                    b.o.image,
		ImagePullPolicy:          b.o.pullPolicy,
		Resources:                b.o.resources,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// hostSecurityContext is what a container that nsenters namespaces needs:
// uid 0, the capabilities nodeexec.RequiredCapabilities lists (added to
// the runtime's defaults, which host-side commands such as cp -a still
// need), and no LSM confinement (AppArmor's container profile forbids
// ptrace-reading PID 1; SELinux's container_t cannot act on host files).
func (b *podBuilder) hostSecurityContext(namespaces []nodeexec.Namespace) *corev1.SecurityContext {
	if b.o.privileged {
		return &corev1.SecurityContext{Privileged: ptr.To(true), RunAsUser: ptr.To[int64](0)}
	}
	caps := nodeexec.RequiredCapabilities(namespaces)
	sc := &corev1.SecurityContext{
		RunAsUser:    ptr.To[int64](0),
		RunAsNonRoot: ptr.To(false),
		Capabilities: &corev1.Capabilities{},
		AppArmorProfile: &corev1.AppArmorProfile{
			Type: corev1.AppArmorProfileTypeUnconfined,
		},
		SELinuxOptions: &corev1.SELinuxOptions{Type: "spc_t"},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	for _, c := range caps {
		sc.Capabilities.Add = append(sc.Capabilities.Add, corev1.Capability(c))
	}
	return sc
}

// unionNamespaces is every namespace any host step of the plan enters.
func (b *podBuilder) unionNamespaces() []nodeexec.Namespace {
	seen := map[nodeexec.Namespace]bool{}
	var all []nodeexec.Namespace
	for _, s := range b.plan.Steps {
		for _, n := range s.EffectiveNamespaces() {
			if !seen[n] {
				seen[n] = true
				all = append(all, n)
			}
		}
	}
	return all
}

func (b *podBuilder) stage() corev1.Container {
	c := b.base(StageContainer)
	dst := path.Join(b.o.stagingHostPath, "staging")
	// The previous bundle's tree goes first: a file the new bundle does not
	// carry (a containerd tree, say) must not be installed from it. Only
	// the directory's contents go: the directory itself is this
	// container's subPath mount point, which a real kubelet's mount makes
	// impossible to remove ("Device or resource busy").
	c.Command = []string{"/bin/sh", "-c", stageScript, "sh", path.Clean(b.o.stageFrom), dst}
	c.VolumeMounts = b.stageMount()
	c.SecurityContext = &corev1.SecurityContext{
		RunAsUser:                ptr.To[int64](0),
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: stageCapabilities()},
	}
	return c
}

// stageScript copies the image's bundle ($1) into the staging directory
// ($2), after emptying it (hidden entries too) without removing it.
const stageScript = `set -eu
mkdir -p "$2"
for f in "$2"/* "$2"/.[!.]* "$2"/..?*; do
  if [ -e "$f" ] || [ -L "$f" ]; then rm -rf -- "$f"; fi
done
cp -a -- "$1"/. "$2"/`

// stageCapabilities are all the stage copy (cp -a as root into the
// hostPath) needs: CHOWN to keep owners, FOWNER to set modes and times on
// files it just gave away, FSETID to keep setuid/setgid bits, and
// DAC_OVERRIDE to replace files a previous stage left owned by another
// user. Everything else is dropped.
func stageCapabilities() []corev1.Capability {
	return []corev1.Capability{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"}
}

// runner is a container running the journaled runner, up to stopAfter.
func (b *podBuilder) runner(name, stopAfter string) corev1.Container {
	c := b.base(name)
	c.Command = b.o.runnerCommand
	c.Env = []corev1.EnvVar{
		{Name: nodeexec.EnvPlan, Value: b.planJSON},
		{Name: nodeexec.EnvJournalDir, Value: path.Join(b.o.stagingHostPath, "journal")},
		{Name: nodeexec.EnvTargetPID, Value: fmt.Sprint(b.o.targetPID)},
		{Name: nodeexec.EnvNsenter, Value: b.o.nsenter},
		// The kubelet copies this file into the container status when the
		// container exits, killed or not: per-step progress for ReadStatus.
		{Name: nodeexec.EnvSummaryFile, Value: corev1.TerminationMessagePathDefault},
	}
	if stopAfter != "" {
		c.Env = append(c.Env, corev1.EnvVar{Name: nodeexec.EnvStopAfter, Value: stopAfter})
	}
	c.VolumeMounts = b.mount()
	c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	c.SecurityContext = b.hostSecurityContext(b.unionNamespaces())
	return c
}

// raw is a container running argv for step s through nsenter (or directly
// for InContainer steps), with no runner.
func (b *podBuilder) raw(name string, s nodeexec.Step, argv []string) corev1.Container {
	c := b.base(name)
	ns := s.EffectiveNamespaces()
	if s.Name == "" { // the status container
		ns = nodeexec.DefaultNamespaces()
	}
	for _, e := range s.Env {
		c.Env = append(c.Env, corev1.EnvVar{Name: e.Name, Value: e.Value})
	}
	if len(ns) == 0 { // an InContainer step: no host access, no capability
		c.Command = argv
		c.SecurityContext = &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		}
		return c
	}
	c.Command = nodeexec.NsenterArgv(b.o.nsenter, nodeexec.Target{PID: b.o.targetPID, Namespaces: ns}, argv)
	c.SecurityContext = b.hostSecurityContext(ns)
	return c
}

// deadline is an upper bound of the plan's run time: per step, every
// attempt (timeout x attempts plus the longest wait between them), the
// check and backup, and, when the step may be rolled back (plan rollback
// on failure, or the Rollback interrupt policy), the rollback with the
// same budget; plus the overhead. ok is false when a step has no timeout.
// The arithmetic saturates, so absurd budgets give a long deadline, never
// a wrapped-around short one; Build caps it at what the API accepts.
func (b *podBuilder) deadline() (time.Duration, bool) {
	total := b.o.deadlineOverhead
	for _, s := range b.plan.Steps {
		if s.Timeout <= 0 {
			return 0, false
		}
		n := int64(max(s.Retry.Attempts, 1))
		// The longest wait between attempts: the one before the last,
		// Backoff doubled n-2 times, capped at MaxBackoff.
		wait := satShift(s.Retry.Backoff, max(n-2, 0))
		if s.Retry.MaxBackoff > 0 {
			wait = min(wait, s.Retry.MaxBackoff)
		}
		budget := satAdd(satMul(s.Timeout, n), satMul(wait, n-1))
		total = satAdd(total, budget)
		if len(s.Backup) > 0 || len(s.Check) > 0 {
			total = satAdd(total, satMul(s.Timeout, 2))
		}
		if len(s.Rollback) > 0 && (b.plan.RollbackOnFailure || s.EffectiveInterruptPolicy() == nodeexec.InterruptPolicyRollback) {
			total = satAdd(total, budget) // rollback runs with the same retry budget
		}
	}
	return total, true
}

func satAdd(a, b time.Duration) time.Duration {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func satMul(d time.Duration, n int64) time.Duration {
	if d <= 0 || n <= 0 {
		return 0
	}
	if d > math.MaxInt64/time.Duration(n) {
		return math.MaxInt64
	}
	return d * time.Duration(n)
}

// satShift is d doubled k times, saturating.
func satShift(d time.Duration, k int64) time.Duration {
	for ; k > 0 && d > 0; k-- {
		if d > math.MaxInt64/2 {
			return math.MaxInt64
		}
		d *= 2
	}
	return d
}

// CreateOrGet creates pod, or returns the existing pod of the same name if
// one exists (AlreadyExists is not an error: the caller reconciles again
// and reads status from what is there). The existing pod's plan
// fingerprint annotation is compared and ErrPlanChanged returned when it
// differs, so a changed plan never silently reuses an old pod.
func CreateOrGet(ctx context.Context, c client.Client, pod *corev1.Pod) (*corev1.Pod, bool, error) {
	if c == nil || pod == nil {
		return nil, false, fmt.Errorf("nodepod: %w: CreateOrGet needs a client and a pod", ErrInvalidOptions)
	}
	// Create fills in the object from the API server's answer; reading it
	// back with Get could miss it on a cached client.
	created := pod.DeepCopy()
	err := c.Create(ctx, created)
	if err == nil {
		return created, true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, false, fmt.Errorf("nodepod: create pod %s: %w", errtext.Quote(pod.Namespace+"/"+pod.Name), err)
	}
	got := &corev1.Pod{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}, got); err != nil {
		return nil, false, fmt.Errorf("nodepod: get existing pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if want, have := pod.Annotations[AnnotationPlanFP], got.Annotations[AnnotationPlanFP]; want != have {
		return got, false, fmt.Errorf("nodepod: pod %s/%s runs plan fingerprint %.12s, want %.12s: %w", got.Namespace, got.Name, have, want, ErrPlanChanged)
	}
	return got, false, nil
}

// ErrPlanChanged: a pod with the plan's name exists but runs another
// version of the plan. Delete it (after it finishes) and create the new one.
var ErrPlanChanged = errors.New("existing upgrader pod runs a different plan")
