package simulator

import (
	"fmt"
	"sync"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Image pull reasons, as a kubelet reports them in a waiting container's
// state (k8s.io/kubernetes/pkg/kubelet/images).
const (
	reasonErrImagePull     = "ErrImagePull"
	reasonImagePullBackOff = "ImagePullBackOff"
	reasonInvalidImageName = "InvalidImageName"
)

// Registry is what the simulated kubelets can pull: a set of images that
// are present (in a registry the node reaches, with the right
// credentials), and images whose pull fails with a given error. It is
// safe for concurrent use.
//
// What it models: a kubelet pulls each container's image before it
// starts it; an image reference that does not parse fails at once with
// InvalidImageName (no pull); an image the registry does not hold, or one
// told to fail (Fail), fails with ErrImagePull on the first attempt and
// ImagePullBackOff on the next ones, the container waiting with the
// kubelet's reason and message and the pod Pending; an image Added later
// pulls on the next attempt.
//
// What it does not model: pull policies (every pull goes to the
// registry; Never and IfNotPresent are not told apart), the node's image
// cache and its garbage collection, pull secrets (a pull never fails for
// credentials unless Fail says so), tags against digests (a reference is
// matched as written), the back-off's timing (each attempt is one kubelet
// sync; the back-off is on the simulated kubelet's poll, not 10 seconds
// doubling), and how long a pull takes (no time).
type Registry struct {
	mu      sync.Mutex
	present map[string]bool
	failing map[string]string
}

// NewRegistry returns a registry holding images.
func NewRegistry(images ...string) *Registry {
	r := &Registry{present: map[string]bool{}, failing: map[string]string{}}
	r.Add(images...)
	return r
}

// Add makes images pullable (and forgets a Fail of them). The zero
// Registry holds nothing until Add; on a nil one (which pulls everything)
// Add does nothing.
func (r *Registry) Add(images ...string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.present == nil {
		r.present = map[string]bool{}
	}
	for _, i := range images {
		r.present[i] = true
		delete(r.failing, i)
	}
}

// Fail makes every pull of image fail with message, as a registry outage
// or a missing credential would.
//
// On a nil Registry (which pulls everything) Fail does nothing.
func (r *Registry) Fail(image, message string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failing == nil {
		r.failing = map[string]string{}
	}
	r.failing[image] = message
}

// Pull tries to pull image. It returns "" when the image is pulled, or the
// kubelet's waiting reason ("ErrImagePull", "InvalidImageName")
// and message; a nil registry pulls everything.
func (r *Registry) Pull(image string) (reason, message string) {
	if r == nil {
		return "", ""
	}
	if _, err := reference.ParseNormalizedNamed(image); err != nil {
		// The kubelet's message (pkg/kubelet/images.applyDefaultImageTag).
		return reasonInvalidImageName, fmt.Sprintf("Failed to apply default image tag %q: couldn't parse image name %q: %v", image, image, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if msg, ok := r.failing[image]; ok {
		return reasonErrImagePull, msg
	}
	if !r.present[image] {
		// containerd's answer for a reference the registry does not hold.
		return reasonErrImagePull, fmt.Sprintf("rpc error: code = NotFound desc = failed to pull and unpack image %q: failed to resolve reference %q: %s: not found", image, image, image)
	}
	return "", ""
}

// PullPod plays one kubelet sync's image pulls for pod, none of whose
// containers has started: it pulls each container's image (init
// containers first) and returns true when all are pulled. Otherwise it
// returns the Pending status a kubelet reports: the first container whose
// image fails waits with ErrImagePull (the first attempt, when the
// previous status shows no pull error for it) or ImagePullBackOff (later
// ones), or InvalidImageName; the others wait with PodInitializing or
// ContainerCreating. A nil pod has nothing to pull.
func (r *Registry) PullPod(pod *corev1.Pod) (corev1.PodStatus, bool) {
	if pod == nil {
		return corev1.PodStatus{}, true // no container, nothing to pull
	}
	prev := map[string]string{}
	for _, cs := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if cs.State.Waiting != nil {
			prev[cs.Name] = cs.State.Waiting.Reason
		}
	}
	st := corev1.PodStatus{Phase: corev1.PodPending, HostIP: "127.0.0.1", StartTime: pod.Status.StartTime,
		Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}}
	if st.StartTime == nil {
		now := metav1.Now()
		st.StartTime = &now
	}
	failed := false
	status := func(c corev1.Container, idle string) corev1.ContainerStatus {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: idle}}}
		if failed {
			return cs
		}
		reason, msg := r.Pull(c.Image)
		if reason == "" {
			return cs
		}
		failed = true
		if reason == reasonErrImagePull && (prev[c.Name] == reasonErrImagePull || prev[c.Name] == reasonImagePullBackOff) {
			reason, msg = reasonImagePullBackOff, fmt.Sprintf("Back-off pulling image %q: %s: %s", c.Image, reasonErrImagePull, msg)
		}
		cs.State.Waiting.Reason, cs.State.Waiting.Message = reason, msg
		return cs
	}
	for _, c := range pod.Spec.InitContainers {
		st.InitContainerStatuses = append(st.InitContainerStatuses, status(c, "PodInitializing"))
	}
	for _, c := range pod.Spec.Containers {
		idle := "ContainerCreating"
		if len(pod.Spec.InitContainers) > 0 {
			idle = "PodInitializing"
		}
		st.ContainerStatuses = append(st.ContainerStatuses, status(c, idle))
	}
	return st, !failed
}
