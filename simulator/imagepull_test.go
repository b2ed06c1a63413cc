package simulator

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// TestRegistryPullsAsAKubeletReports: an image the registry holds pulls;
// one it does not, or one told to fail, waits with ErrImagePull on the
// first attempt and ImagePullBackOff after, the pod Pending; a reference
// that does not parse is InvalidImageName; an image added later pulls.
func TestRegistryPullsAsAKubeletReports(t *testing.T) {
	r := NewRegistry("registry.example/app:1")
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", Image: "registry.example/app:1"}},
		Containers:     []corev1.Container{{Name: "main", Image: "registry.example/missing:1"}, {Name: "side", Image: "registry.example/other:1"}},
	}}
	st, ok := r.PullPod(pod)
	require.False(t, ok)
	require.Equal(t, corev1.PodPending, st.Phase)
	require.Equal(t, "PodInitializing", st.InitContainerStatuses[0].State.Waiting.Reason)
	w := st.ContainerStatuses[0].State.Waiting
	require.Equal(t, reasonErrImagePull, w.Reason)
	require.Equal(t, `rpc error: code = NotFound desc = failed to pull and unpack image "registry.example/missing:1": failed to resolve reference "registry.example/missing:1": registry.example/missing:1: not found`, w.Message)
	require.Equal(t, "PodInitializing", st.ContainerStatuses[1].State.Waiting.Reason, "one failure at a time")

	pod.Status = st
	st, ok = r.PullPod(pod)
	require.False(t, ok)
	w = st.ContainerStatuses[0].State.Waiting
	require.Equal(t, reasonImagePullBackOff, w.Reason)
	require.Contains(t, w.Message, `Back-off pulling image "registry.example/missing:1": ErrImagePull: rpc error: code = NotFound`)

	r.Add("registry.example/missing:1", "registry.example/other:1")
	pod.Status = st
	_, ok = r.PullPod(pod)
	require.True(t, ok, "pushed since")

	r.Fail("registry.example/other:1", "pull access denied")
	st, ok = r.PullPod(pod)
	require.False(t, ok)
	require.Equal(t, "pull access denied", st.ContainerStatuses[1].State.Waiting.Message)

	reason, msg := r.Pull("registry.example/Bad:1")
	require.Equal(t, reasonInvalidImageName, reason)
	require.Contains(t, msg, "couldn't parse image name")
	reason, _ = (*Registry)(nil).Pull("anything")
	require.Empty(t, reason, "no registry: everything pulls")
}

// TestRegistryZeroAndNil: the zero Registry holds nothing until Add or
// Fail (no panic on its nil maps); a nil one pulls everything and ignores
// Add and Fail; a nil pod has nothing to pull.
func TestRegistryZeroAndNil(t *testing.T) {
	var zero Registry
	reason, _ := zero.Pull("registry.example/a:v1")
	require.Equal(t, reasonErrImagePull, reason, "the zero registry holds nothing")
	zero.Add("registry.example/a:v1")
	reason, _ = zero.Pull("registry.example/a:v1")
	require.Empty(t, reason)
	var fresh Registry
	fresh.Fail("registry.example/b:v1", "denied")
	reason, msg := fresh.Pull("registry.example/b:v1")
	require.Equal(t, []string{reasonErrImagePull, "denied"}, []string{reason, msg})

	var none *Registry
	none.Add("registry.example/a:v1")
	none.Fail("registry.example/a:v1", "denied")
	reason, _ = none.Pull("registry.example/a:v1")
	require.Empty(t, reason, "a nil registry pulls everything")
	st, ok := none.PullPod(nil)
	require.True(t, ok)
	require.Equal(t, corev1.PodStatus{}, st)
}
