package nodepod_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/harness/apiserver"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
)

// TestPodsAreAcceptedByAPIServer creates the pod of every layout on a real
// kube-apiserver (validation of security contexts, names, tolerations),
// then checks that CreateOrGet tolerates AlreadyExists and refuses a pod
// that runs a different plan.
func TestPodsAreAcceptedByAPIServer(t *testing.T) {
	env := apiserver.StartForTest(t)
	ctx := t.Context()
	c := env.Client
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nodepod.DefaultNamespace}}))

	plan, err := kubeadm.NewPlan(kubeadm.Config{Node: "cp-0", Role: kubeadm.RoleFirstControlPlane, FromVersion: "v1.31.4", ToVersion: "v1.32.0"})
	require.NoError(t, err)
	layouts := map[string][]nodepod.Option{
		"raw-init":   {nodepod.WithImage("registry.local/upgrader:v1"), nodepod.WithStageFrom("/upgradekit")},
		"journaled":  {nodepod.WithImage("registry.local/upgrader:v1"), nodepod.WithStageFrom("/upgradekit"), nodepod.WithRunnerCommand("/upgrader")},
		"single":     {nodepod.WithImage("registry.local/upgrader:v1"), nodepod.WithMode(nodepod.ModeSingleContainer), nodepod.WithRunnerCommand("/upgrader")},
		"privileged": {nodepod.WithImage("registry.local/upgrader:v1"), nodepod.WithPrivileged()},
		// Every option Build validates, at values it accepts: the API
		// server must accept them too (Build refuses no more than it).
		"every-option": {nodepod.WithImage("registry.local:5000/upgrader@sha256:" + strings.Repeat("a", 64)), nodepod.WithImagePullPolicy(corev1.PullIfNotPresent),
			nodepod.WithImagePullSecrets("reg-cred.v1"), nodepod.WithServiceAccount("upgrader.sa"), nodepod.WithPriorityClass("system-cluster-critical"),
			nodepod.WithTolerations(corev1.Toleration{Key: "example.com/maintenance", Operator: corev1.TolerationOpEqual, Value: "yes", Effect: corev1.TaintEffectNoExecute, TolerationSeconds: new(int64(60))},
				corev1.Toleration{Operator: corev1.TolerationOpExists}),
			nodepod.WithLabels(map[string]string{"example.com/team": "nodes", "tier": ""}),
			nodepod.WithResources(corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0"), corev1.ResourceMemory: resource.MustParse("64Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}}),
			nodepod.WithRunnerCommand("/upgrader", "run"), nodepod.WithStageFrom("/staging"), nodepod.WithNsenterPath("/usr/bin/nsenter")},
	}
	for name, opts := range layouts {
		t.Run(name, func(t *testing.T) {
			p := plan
			p.Name = "cp-0-" + name
			pod, err := nodepod.Build(p, opts...)
			require.NoError(t, err)
			got, created, err := nodepod.CreateOrGet(ctx, c, pod)
			require.NoError(t, err, "the API server accepts the pod")
			require.True(t, created)
			require.Equal(t, "cp-0", got.Spec.NodeName)

			again, created, err := nodepod.CreateOrGet(ctx, c, pod)
			require.NoError(t, err, "AlreadyExists is tolerated")
			require.False(t, created)
			require.Equal(t, got.UID, again.UID)
		})
	}

	// Same pod name, different plan content: refused.
	p := plan
	p.Name = "cp-0-raw-init"
	p.Steps = p.Steps[1:]
	pod, err := nodepod.Build(p, layouts["raw-init"]...)
	require.NoError(t, err)
	_, _, err = nodepod.CreateOrGet(ctx, c, pod)
	require.ErrorIs(t, err, nodepod.ErrPlanChanged)
}

// TestStatusRoundTripThroughAPIServer writes a crash-looping init container
// status through the status subresource and reads it back.
func TestStatusRoundTripThroughAPIServer(t *testing.T) {
	env := apiserver.StartForTest(t)
	ctx := t.Context()
	c := env.Client
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nodepod.DefaultNamespace}}))
	plan, err := kubeadm.NewPlan(kubeadm.Config{Node: "w-1", Role: kubeadm.RoleWorker, FromVersion: "v1.31.4", ToVersion: "v1.32.0", SkipContainerd: true, SkipCNIPlugins: true})
	require.NoError(t, err)
	pod, err := nodepod.Build(plan, nodepod.WithImage("img"), nodepod.WithRunnerCommand("/upgrader"))
	require.NoError(t, err)
	got, _, err := nodepod.CreateOrGet(ctx, c, pod)
	require.NoError(t, err)

	now := metav1.Now()
	got.Status.Phase = corev1.PodPending
	got.Status.InitContainerStatuses = []corev1.ContainerStatus{
		{Name: kubeadm.StepKubeadmBinary, Image: "img", ImageID: "x", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}}},
		{Name: kubeadm.StepKubeadmUpgrade, Image: "img", ImageID: "x", RestartCount: 5,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "plan failed", StartedAt: now, FinishedAt: now}}},
	}
	require.NoError(t, c.Status().Update(ctx, got))
	fresh := &corev1.Pod{}
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(got), fresh))
	st := nodepod.ReadStatus(fresh)
	require.Equal(t, nodepod.PhaseFailed, st.Phase)
	require.Equal(t, kubeadm.StepKubeadmUpgrade, st.Failed.Name)
	require.Equal(t, int32(1), st.Failed.ExitCode)
	require.Equal(t, int32(5), st.Failed.Restarts)
	require.InDelta(t, 1.0/float64(len(plan.Steps)), st.Progress, 1e-9)
	t.Logf("status read back: phase=%s progress=%.2f failed=%+v message=%q", st.Phase, st.Progress, *st.Failed, st.Message)
}
