package nodepod

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/upgradekit/upgradekit/nodeexec"
)

// TestBuildPrePull: the pre-pull pod has the upgrader pod's image, pull
// policy, pull secrets, namespace, tolerations and priority, is pinned to
// the node, runs a command that exits at once, and is not an upgrader pod.
func TestBuildPrePull(t *testing.T) {
	opts := []Option{WithImage("r/u:1"), WithImagePullPolicy(corev1.PullAlways), WithImagePullSecrets("regcred"), WithNamespace("upg"),
		WithTolerations(corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists}), WithPriorityClass("high")}
	upgrader, err := Build(nodeexec.Plan{Name: "p", Node: "n-1", Steps: []nodeexec.Step{{Name: "s", Argv: []string{"true"}}}}, opts...)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		opts []Option
		want []string
	}{
		{"raw layout: nsenter --version", nil, []string{"nsenter", "--version"}},
		{"nsenter path", []Option{WithNsenterPath("/usr/bin/nsenter")}, []string{"/usr/bin/nsenter", "--version"}},
		{"runner: its version command", []Option{WithRunnerCommand("/upgrader", "run")}, []string{"/upgrader", "version"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod, err := BuildPrePull("n-1", append(append([]Option{}, opts...), tc.opts...)...)
			require.NoError(t, err)
			require.Equal(t, "n-1", pod.Spec.NodeName)
			require.Equal(t, "upg", pod.Namespace)
			require.Equal(t, PrePullName("n-1", "r/u:1"), pod.Name)
			require.Equal(t, corev1.RestartPolicyNever, pod.Spec.RestartPolicy)
			require.Empty(t, cmp.Diff(upgrader.Spec.Tolerations, pod.Spec.Tolerations))
			require.Equal(t, upgrader.Spec.ImagePullSecrets, pod.Spec.ImagePullSecrets)
			require.Equal(t, upgrader.Spec.PriorityClassName, pod.Spec.PriorityClassName)
			require.Len(t, pod.Spec.Containers, 1)
			c := pod.Spec.Containers[0]
			require.Equal(t, upgrader.Spec.Containers[0].Image, c.Image)
			require.Equal(t, upgrader.Spec.Containers[0].ImagePullPolicy, c.ImagePullPolicy)
			require.Equal(t, tc.want, c.Command)
			require.False(t, pod.Spec.HostPID)
			require.Empty(t, pod.Spec.Volumes)
			require.Equal(t, []corev1.Capability{"ALL"}, c.SecurityContext.Capabilities.Drop)
			require.True(t, PrePullSelector().Matches(labels.Set(pod.Labels)))
			require.False(t, Selector().Matches(labels.Set(pod.Labels)), "not an upgrader pod")
			require.True(t, PrePullNodeSelector(pod.Spec.NodeName).Matches(labels.Set(pod.Labels)), "its node's")
			require.False(t, PrePullNodeSelector(pod.Spec.NodeName+"x").Matches(labels.Set(pod.Labels)), "not another node's")
			require.False(t, NodeSelector(pod.Spec.NodeName).Matches(labels.Set(pod.Labels)), "not an upgrader pod of its node")
		})
	}
	long := strings.Repeat("n", 200)
	pod, err := BuildPrePull(long, WithImage("r/u:1"))
	require.NoError(t, err)
	require.LessOrEqual(t, len(pod.Name), 63)
	require.True(t, PrePullNodeSelector(long).Matches(labels.Set(pod.Labels)), "a long node name's hashed label")
	require.NotEqual(t, PrePullName("n-1", "r/u:1"), PrePullName("n-1", "r/u:2"), "one pod per image")
	for _, bad := range [][]Option{nil, {WithImage("r/u:1"), WithNamespace("Bad_NS")}, {WithImage("r/u:1"), WithImagePullPolicy("Sometimes")}} {
		_, err := BuildPrePull("n-1", bad...)
		require.ErrorIs(t, err, ErrInvalidOptions)
	}
	_, err = BuildPrePull("", WithImage("r/u:1"))
	require.ErrorIs(t, err, ErrInvalidOptions)
}

// TestReadPullError reads the kubelet's pull reasons from a waiting
// container, init containers first, and nothing else.
func TestReadPullError(t *testing.T) {
	waiting := func(name, reason, msg string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, Image: "img-" + name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
	}
	for _, tc := range []struct {
		name       string
		init, main []corev1.ContainerStatus
		want       PullError
		ok         bool
		terminal   bool
	}{
		{"creating", nil, []corev1.ContainerStatus{waiting("c", "ContainerCreating", "")}, PullError{}, false, false},
		{"back-off", nil, []corev1.ContainerStatus{waiting("c", "ImagePullBackOff", "Back-off pulling image")}, PullError{"c", "img-c", "ImagePullBackOff", "Back-off pulling image"}, true, false},
		{"init first", []corev1.ContainerStatus{waiting("i", "ErrImagePull", "not found")}, []corev1.ContainerStatus{waiting("c", "PodInitializing", "")},
			PullError{"i", "img-i", "ErrImagePull", "not found"}, true, false},
		{"invalid name", nil, []corev1.ContainerStatus{waiting("c", "InvalidImageName", "couldn't parse")}, PullError{"c", "img-c", "InvalidImageName", "couldn't parse"}, true, true},
		{"crash loop is no pull error", nil, []corev1.ContainerStatus{waiting("c", "CrashLoopBackOff", "")}, PullError{}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ReadPullError(&corev1.Pod{Status: corev1.PodStatus{InitContainerStatuses: tc.init, ContainerStatuses: tc.main}})
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.terminal, got.Terminal())
		})
	}
	_, ok := ReadPullError(nil)
	require.False(t, ok)
}
