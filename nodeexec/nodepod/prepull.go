package nodepod

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
)

// Pre-pull pods (BuildPrePull).
const (
	// PrePullNameValue is the app.kubernetes.io/name label of pre-pull
	// pods: another value than the upgrader pods' (NameValue), so that
	// Selector does not match them.
	PrePullNameValue = "upgradekit-prepull"
	// PrePullContainer is the pre-pull pod's only container.
	PrePullContainer = "upgradekit-prepull"
)

// PrePullSelector matches every pre-pull pod BuildPrePull builds.
func PrePullSelector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedByValue, LabelName: PrePullNameValue})
}

// PrePullNodeSelector matches the pre-pull pods BuildPrePull builds for
// node (PrePullSelector and the node's LabelNode value), as NodeSelector
// does the upgrader pods.
func PrePullNodeSelector(node string) labels.Selector {
	return labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedByValue, LabelName: PrePullNameValue, LabelNode: labelValue(node)})
}

// PrePullName is the name of the pre-pull pod of image on node: one per
// node and image, hash-shortened to a DNS label.
func PrePullName(node, image string) string {
	sum := sha256.Sum256([]byte(node + "\x00" + image))
	return shortName("upgradekit-prepull-" + hex.EncodeToString(sum[:])[:10] + "-" + node)
}

// BuildPrePull builds a pod that proves the upgrader image can be pulled
// and started on node before anything disruptive is done to it: one
// container of the image the options name (WithImage), with their pull
// policy, pull secrets, namespace, service account, priority class,
// tolerations (the built-in ones included: the pod is pinned with
// spec.nodeName, past any taint the upgrader pod tolerates), resources
// and labels, running a command that exits at once: the runner binary's
// "version" command (the first word of WithRunnerCommand; the upgrader
// binary has one), or, without a runner command, "nsenter --version" (the
// nsenter every raw container runs, WithNsenterPath). It has
// restartPolicy Never, no volumes, no host namespaces, no service account
// token, and no privileges: what it proves is the pull and the start, not
// what the upgrader pod is allowed to do (the API server's dry run of the
// upgrader pod proves that).
//
// The pod carries PrePullSelector's labels and LabelNode, not Selector's:
// it is not an upgrader pod.
func BuildPrePull(node string, opts ...Option) (*corev1.Pod, error) {
	o := options{
		namespace:     DefaultNamespace,
		nsenter:       "nsenter",
		extraLabels:   map[string]string{},
		priorityClass: DefaultPriorityClass,
		resources:     DefaultResources(),
	}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	bad := func(format string, args ...any) (*corev1.Pod, error) {
		return nil, fmt.Errorf("nodepod: %w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	switch {
	case o.image == "":
		return bad("image is required")
	case node == "":
		return bad("pre-pull pod: empty node name")
	}
	if msgs := validation.IsDNS1123Subdomain(node); len(msgs) > 0 {
		return bad("pre-pull pod: node name %q: %v", node, msgs)
	}
	if msgs := validation.IsDNS1123Label(o.namespace); len(msgs) > 0 {
		return bad("namespace %q: %v", o.namespace, msgs)
	}
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("nodepod: %w: %w", ErrInvalidOptions, err)
	}
	command := []string{o.nsenter, "--version"}
	if len(o.runnerCommand) > 0 {
		if o.runnerCommand[0] == "" {
			return bad("runner command: empty argv")
		}
		command = []string{o.runnerCommand[0], "version"}
	}
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      PrePullName(node, o.image),
			Namespace: o.namespace,
			Labels:    map[string]string{},
		},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			ServiceAccountName:            o.serviceAccount,
			AutomountServiceAccountToken:  ptr.To(false),
			PriorityClassName:             o.priorityClass,
			Tolerations:                   append(defaultTolerations(), o.tolerations...),
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name:                     PrePullContainer,
				Image:                    o.image,
				ImagePullPolicy:          o.pullPolicy,
				Command:                  command,
				Resources:                o.resources,
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
			}},
		},
	}
	for k, v := range o.extraLabels {
		pod.Labels[k] = v
	}
	pod.Labels[LabelName] = PrePullNameValue
	pod.Labels[LabelManagedBy] = ManagedByValue
	pod.Labels[LabelNode] = labelValue(node)
	for _, s := range o.pullSecrets {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	return pod, nil
}

// PullError is a container of a pod waiting because its image cannot be
// pulled, as the kubelet reports it.
type PullError struct {
	// Container is the container's name, Image its image.
	Container, Image string
	// Reason is the kubelet's waiting reason: ErrImagePull,
	// ImagePullBackOff or InvalidImageName.
	Reason string
	// Message is the kubelet's message (the registry's or the runtime's
	// error).
	Message string
}

// Terminal tells a pull error that retrying cannot heal (the image
// reference does not parse; pull policy Never and the image is absent)
// from one that may (a registry outage, a pull secret created late).
func (e PullError) Terminal() bool {
	return e.Reason == "InvalidImageName" || e.Reason == "ErrImageNeverPull"
}

// String says which container could not pull which image, and the
// kubelet's reason and message.
func (e PullError) String() string {
	s := fmt.Sprintf("container %s: image %s: %s", e.Container, e.Image, e.Reason)
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// pullReasons are the waiting reasons a kubelet reports for an image it
// cannot pull (k8s.io/kubernetes/pkg/kubelet/images: ErrImagePull,
// ErrImagePullBackOff, ErrInvalidImageName), and the registry-unavailable
// ones older kubelets used.
var pullReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true,
	"ErrImageNeverPull": true, "RegistryUnavailable": true,
}

// ReadPullError returns the first container (init containers first) of
// pod waiting because its image cannot be pulled, if any.
func ReadPullError(pod *corev1.Pod) (PullError, bool) {
	if pod == nil {
		return PullError{}, false
	}
	for _, cs := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && pullReasons[w.Reason] {
			return PullError{Container: cs.Name, Image: cs.Image, Reason: w.Reason, Message: w.Message}, true
		}
	}
	return PullError{}, false
}
