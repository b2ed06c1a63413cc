package nodepod

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/upgradekit/upgradekit/nodeexec"
)

func testPlan() nodeexec.Plan {
	return nodeexec.Plan{
		Name: "upgrade-worker-1", Node: "worker-1.example.com", ToVersion: "v1.32.1",
		Steps: []nodeexec.Step{
			{Name: "containerd", Argv: []string{"cp", "-af", "--", "/s/containerd/.", "/"}, Backup: []string{"backup-containerd"}, Timeout: time.Minute, Idempotent: true},
			{Name: "uname", Argv: []string{"uname", "-n"}, Namespaces: []nodeexec.Namespace{nodeexec.NamespaceUTS}, Timeout: time.Minute, Idempotent: true},
			{Name: "api-call", Argv: []string{"kubectl", "get", "nodes"}, InContainer: true, Env: []nodeexec.EnvVar{{Name: "A", Value: "b"}}, Timeout: time.Minute, Idempotent: true},
		},
	}
}

func containerNames(cs []corev1.Container) []string {
	var n []string
	for _, c := range cs {
		n = append(n, c.Name)
	}
	return n
}

func env(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func TestBuildRawInitContainers(t *testing.T) {
	p := testPlan()
	pod, err := Build(p, WithImage("registry.local/upgrader:v1"), WithStageFrom("/upgradekit"),
		WithImagePullSecrets("regcred"), WithServiceAccount("upgrader"), WithPriorityClass("system-node-critical"),
		WithTolerations(corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoSchedule}),
		WithResources(corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")}}),
		WithLabels(map[string]string{"team": "infra"}), WithNsenterPath("/usr/bin/nsenter"))
	require.NoError(t, err)

	require.Equal(t, "upgradekit-upgrade-worker-1", pod.Name)
	require.Equal(t, DefaultNamespace, pod.Namespace)
	require.Equal(t, "worker-1.example.com", pod.Spec.NodeName)
	require.True(t, pod.Spec.HostPID)
	require.Equal(t, corev1.RestartPolicyNever, pod.Spec.RestartPolicy, "raw steps are never retried blindly")
	require.Equal(t, []string{StageContainer, "containerd-backup", "containerd", "uname", "api-call"}, containerNames(pod.Spec.InitContainers))
	require.Equal(t, []string{StatusContainer}, containerNames(pod.Spec.Containers))
	require.Equal(t, "containerd,uname,api-call", pod.Annotations[AnnotationSteps])
	require.Equal(t, p.Fingerprint(), pod.Annotations[AnnotationPlanFP])
	require.True(t, Selector().Matches(labels.Set(pod.Labels)))
	require.Equal(t, "infra", pod.Labels["team"])
	require.Equal(t, "worker-1.example.com", pod.Labels[LabelNode])
	require.Equal(t, []corev1.LocalObjectReference{{Name: "regcred"}}, pod.Spec.ImagePullSecrets)
	require.Equal(t, "system-node-critical", pod.Spec.PriorityClassName)
	require.Equal(t, "upgrader", pod.Spec.ServiceAccountName)
	require.Len(t, pod.Spec.Tolerations, 5)
	require.Equal(t, "dedicated", pod.Spec.Tolerations[4].Key)
	require.NotNil(t, pod.Spec.ActiveDeadlineSeconds)

	byName := map[string]corev1.Container{}
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		byName[c.Name] = c
		require.Equal(t, "registry.local/upgrader:v1", c.Image)
		require.Equal(t, "50m", c.Resources.Requests.Cpu().String())
	}
	require.Equal(t, []string{"/usr/bin/nsenter", "--target", "1", "--mount", "--uts", "--ipc", "--net", "--", "cp", "-af", "--", "/s/containerd/.", "/"}, byName["containerd"].Command)
	require.Equal(t, []string{"/usr/bin/nsenter", "--target", "1", "--uts", "--", "uname", "-n"}, byName["uname"].Command)
	require.Equal(t, []string{"kubectl", "get", "nodes"}, byName["api-call"].Command)
	require.Equal(t, "b", env(byName["api-call"], "A"))
	require.Equal(t, []string{"/usr/bin/nsenter", "--target", "1", "--mount", "--uts", "--ipc", "--net", "--", "true"}, byName[StatusContainer].Command)
	require.Equal(t, []string{"/bin/sh", "-c", stageScript, "sh", "/upgradekit", "/var/lib/upgradekit/staging"}, byName[StageContainer].Command)
}

// TestPrivilegesPerContainer pins the documented privilege matrix: host
// containers get exactly the capabilities the kernel test in package
// nodeexec proved necessary and sufficient; others get none.
func TestPrivilegesPerContainer(t *testing.T) {
	pod, err := Build(testPlan(), WithImage("img"), WithStageFrom("/u"))
	require.NoError(t, err)
	byName := map[string]corev1.Container{}
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		byName[c.Name] = c
	}
	caps := func(name string) []corev1.Capability {
		sc := byName[name].SecurityContext
		if sc == nil || sc.Capabilities == nil {
			return nil
		}
		return sc.Capabilities.Add
	}
	require.Equal(t, []corev1.Capability{"SYS_ADMIN", "SYS_CHROOT", "SYS_PTRACE"}, caps("containerd"))
	require.Equal(t, []corev1.Capability{"SYS_ADMIN", "SYS_PTRACE"}, caps("uname"), "no mount namespace: no SYS_CHROOT")
	require.Empty(t, caps("api-call"), "in-container steps get no capability")
	require.Equal(t, []corev1.Capability{"ALL"}, byName["api-call"].SecurityContext.Capabilities.Drop, "and lose the runtime defaults")
	require.Equal(t, []corev1.Capability{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"}, caps(StageContainer), "only what cp -a needs")
	require.Equal(t, []corev1.Capability{"ALL"}, byName[StageContainer].SecurityContext.Capabilities.Drop)
	require.False(t, *byName[StageContainer].SecurityContext.AllowPrivilegeEscalation)
	require.False(t, *byName["api-call"].SecurityContext.AllowPrivilegeEscalation)
	for _, n := range []string{"containerd", "uname", StatusContainer} {
		sc := byName[n].SecurityContext
		require.Nil(t, sc.Privileged, n)
		require.Equal(t, int64(0), *sc.RunAsUser, n)
		require.Equal(t, corev1.AppArmorProfileTypeUnconfined, sc.AppArmorProfile.Type, n)
		require.Equal(t, "spc_t", sc.SELinuxOptions.Type, n)
	}

	priv, err := Build(testPlan(), WithImage("img"), WithPrivileged())
	require.NoError(t, err)
	require.True(t, *priv.Spec.InitContainers[1].SecurityContext.Privileged)
}

func TestBuildJournaledModes(t *testing.T) {
	p := testPlan()
	for _, mode := range []Mode{ModeInitContainers, ModeSingleContainer} {
		t.Run(string(mode), func(t *testing.T) {
			pod, err := Build(p, WithImage("img"), WithMode(mode), WithRunnerCommand("/upgrader", "run"), WithStagingHostPath("/var/lib/uk"))
			require.NoError(t, err)
			require.Equal(t, corev1.RestartPolicyOnFailure, pod.Spec.RestartPolicy, "a crashed runner restarts and resumes from the journal")
			if mode == ModeSingleContainer {
				require.Empty(t, pod.Spec.InitContainers)
			} else {
				require.Equal(t, []string{"containerd", "uname", "api-call"}, containerNames(pod.Spec.InitContainers))
				for _, c := range pod.Spec.InitContainers {
					require.Equal(t, c.Name, env(c, nodeexec.EnvStopAfter))
				}
			}
			main := pod.Spec.Containers[0]
			require.Equal(t, []string{"/upgrader", "run"}, main.Command)
			require.Empty(t, env(main, nodeexec.EnvStopAfter))
			require.Equal(t, "/var/lib/uk/journal", env(main, nodeexec.EnvJournalDir))
			// The staged bundle and the journal, not the backups (copies of
			// /etc/kubernetes): no container needs them.
			require.Equal(t, []corev1.VolumeMount{
				{Name: stagingVolumeName, MountPath: "/var/lib/uk/staging", SubPath: "staging"},
				{Name: stagingVolumeName, MountPath: "/var/lib/uk/journal", SubPath: "journal"},
			}, main.VolumeMounts)
			for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
				for _, m := range c.VolumeMounts {
					require.NotEqual(t, "", m.SubPath, "%s mounts the whole host directory, backups included", c.Name)
					require.NotContains(t, m.MountPath, "backup", c.Name)
				}
			}
			require.Equal(t, "/var/lib/uk", pod.Spec.Volumes[0].HostPath.Path)
			// The runner gets the union of what its host steps need.
			require.Equal(t, []corev1.Capability{"SYS_ADMIN", "SYS_CHROOT", "SYS_PTRACE"}, main.SecurityContext.Capabilities.Add)

			// The plan handed over through the environment round-trips.
			cfg, err := nodeexec.FromEnv(func(k string) string { return env(main, k) })
			require.NoError(t, err)
			require.Empty(t, cmp.Diff(p, cfg.Plan))
		})
	}
}

func TestBuildIsDeterministic(t *testing.T) {
	a, err := Build(testPlan(), WithImage("img"), WithLabels(map[string]string{"a": "1", "b": "2"}))
	require.NoError(t, err)
	b, err := Build(testPlan(), WithImage("img"), WithLabels(map[string]string{"b": "2", "a": "1"}))
	require.NoError(t, err)
	require.Empty(t, cmp.Diff(a, b))
}

func TestNamesAndLabelsStayValid(t *testing.T) {
	p := testPlan()
	p.Name = strings.Repeat("a", 63)
	p.Node = strings.Repeat("n", 100) + ".example.com"
	pod, err := Build(p, WithImage("img"))
	require.NoError(t, err)
	require.LessOrEqual(t, len(pod.Name), 63)
	require.Equal(t, pod.Name, Name(p), "same plan, same name")
	require.True(t, strings.HasPrefix(pod.Labels[LabelNode], "h-"))
	require.LessOrEqual(t, len(pod.Labels[LabelNode]), 63)
}

// TestNodeSelector: NodeSelector matches the pods built for that node,
// a long node name's (its label value hashed) included, and not another
// node's, nor a pod without the upgrader labels.
func TestNodeSelector(t *testing.T) {
	for _, node := range []string{"worker-0", strings.Repeat("n", 100) + ".example.com"} {
		p := testPlan()
		p.Node = node
		pod, err := Build(p, WithImage("img"))
		require.NoError(t, err)
		require.True(t, NodeSelector(node).Matches(labels.Set(pod.Labels)), node)
		require.True(t, Selector().Matches(labels.Set(pod.Labels)), node)
		require.False(t, NodeSelector(node+"x").Matches(labels.Set(pod.Labels)), "another node's selector")
		delete(pod.Labels, LabelManagedBy)
		require.False(t, NodeSelector(node).Matches(labels.Set(pod.Labels)), "not an upgrader pod")
	}
}

func TestBuildRejects(t *testing.T) {
	tests := []struct {
		name string
		plan func(*nodeexec.Plan)
		opts []Option
		want error
	}{
		{"no image", nil, nil, ErrInvalidOptions},
		{"single without runner", nil, []Option{WithImage("i"), WithMode(ModeSingleContainer)}, ErrInvalidOptions},
		{"unknown mode", nil, []Option{WithImage("i"), WithMode("Parallel")}, ErrInvalidOptions},
		{"relative staging", nil, []Option{WithImage("i"), WithStagingHostPath("var/lib")}, ErrInvalidOptions},
		{"root staging", nil, []Option{WithImage("i"), WithStagingHostPath("/")}, ErrInvalidOptions},
		{"bad namespace", nil, []Option{WithImage("i"), WithNamespace("Kube_System")}, ErrInvalidOptions},
		{"empty status argv", nil, []Option{WithImage("i"), WithStatusArgv()}, ErrInvalidOptions},
		{"step clashes with status container", func(p *nodeexec.Plan) { p.Steps[1].Name = StatusContainer }, []Option{WithImage("i")}, ErrInvalidOptions},
		{"step clashes with backup container", func(p *nodeexec.Plan) { p.Steps[1].Name = "containerd-backup" }, []Option{WithImage("i")}, ErrInvalidOptions},
		{"invalid plan", func(p *nodeexec.Plan) { p.Steps[0].Argv = nil }, []Option{WithImage("i")}, nodeexec.ErrInvalidPlan},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testPlan()
			if tt.plan != nil {
				tt.plan(&p)
			}
			_, err := Build(p, tt.opts...)
			require.ErrorIs(t, err, tt.want)
			if tt.want == nodeexec.ErrInvalidPlan {
				var verr *nodeexec.ValidationError
				require.ErrorAs(t, err, &verr)
				require.Equal(t, "steps[0].argv", verr.Field)
			}
		})
	}
}

func TestDeadline(t *testing.T) {
	p := testPlan()
	pod, err := Build(p, WithImage("i"), WithDeadlineOverhead(time.Minute))
	require.NoError(t, err)
	// 3 steps x 1m, + 2m for the step with a backup, + 1m overhead.
	require.Equal(t, int64(6*60), *pod.Spec.ActiveDeadlineSeconds)
	p.Steps[0].Timeout = 0
	pod, err = Build(p, WithImage("i"))
	require.NoError(t, err)
	require.Nil(t, pod.Spec.ActiveDeadlineSeconds, "a step without a deadline means no pod deadline")
}

func TestDeadlineIncludesRollbackAndSaturates(t *testing.T) {
	p := testPlan()
	p.Steps[1].Rollback = []string{"undo"}
	p.Steps[1].Retry = nodeexec.RetryPolicy{Attempts: 2, Backoff: 30 * time.Second}
	pod, err := Build(p, WithImage("i"), WithDeadlineOverhead(time.Minute))
	require.NoError(t, err)
	// 6m as above, + 1m and a 30s wait for the second attempt of "uname".
	require.Equal(t, int64(7*60+30), *pod.Spec.ActiveDeadlineSeconds)

	p.RollbackOnFailure = true
	pod, err = Build(p, WithImage("i"), WithDeadlineOverhead(time.Minute))
	require.NoError(t, err)
	// + the rollback of "uname" with the same budget (2m30s).
	require.Equal(t, int64(10*60), *pod.Spec.ActiveDeadlineSeconds)

	for name, mutate := range map[string]func(*nodeexec.Step){
		"attempts x timeout": func(s *nodeexec.Step) { s.Timeout = time.Duration(math.MaxInt64 / 2); s.Retry.Attempts = 1 << 30 },
		"backoff shift":      func(s *nodeexec.Step) { s.Retry = nodeexec.RetryPolicy{Attempts: 200, Backoff: time.Hour} },
		"sum of steps":       func(s *nodeexec.Step) { s.Timeout = time.Duration(math.MaxInt64 / 2) },
	} {
		t.Run(name, func(t *testing.T) {
			p := testPlan()
			for i := range p.Steps {
				mutate(&p.Steps[i])
			}
			pod, err := Build(p, WithImage("i"))
			require.NoError(t, err)
			require.Equal(t, int64(math.MaxInt32), *pod.Spec.ActiveDeadlineSeconds, "saturates at the API maximum, never wraps")
		})
	}
}

func TestLongStepNameBackupContainer(t *testing.T) {
	// A step name may use all 63 characters of a DNS label; its backup
	// container name must still be one, and ReadStatus must find it.
	p := testPlan()
	long := strings.Repeat("c", 63)
	p.Steps[0].Name = long
	pod, err := Build(p, WithImage("i"))
	require.NoError(t, err)
	name := pod.Spec.InitContainers[0].Name
	require.Len(t, name, 63)
	require.NotEqual(t, long, name)
	require.Equal(t, long, pod.Spec.InitContainers[1].Name)

	pod.Status.Phase = corev1.PodFailed
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 4, Reason: "Error"}}}}
	s := ReadStatus(pod)
	require.Equal(t, PhaseFailed, s.Phase)
	require.Equal(t, name, s.Failed.Name)
	require.Equal(t, int32(4), s.Failed.ExitCode)
}

// TestBuildDefaultsKeepTheUpgraderFromEviction: by default the pod is
// system-node-critical and Burstable (requests, no limits), so disk or
// memory pressure evicts it last, and a limit of ours never OOM-kills
// kubeadm; both can be overridden.
func TestBuildDefaultsKeepTheUpgraderFromEviction(t *testing.T) {
	pod, err := Build(testPlan(), WithImage("img"), WithRunnerCommand("/upgrader", "run"))
	require.NoError(t, err)
	require.Equal(t, DefaultPriorityClass, pod.Spec.PriorityClassName)
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		require.Empty(t, cmp.Diff(DefaultResources(), c.Resources), c.Name)
		require.Empty(t, c.Resources.Limits, c.Name)
	}
	pod, err = Build(testPlan(), WithImage("img"), WithPriorityClass(""), WithResources(corev1.ResourceRequirements{}))
	require.NoError(t, err)
	require.Empty(t, pod.Spec.PriorityClassName)
	require.Empty(t, pod.Spec.Containers[0].Resources.Requests)
}

// TestBuildRefusesWhatTheAPIServerWould: options the API server would
// reject (so an update would be refused only after the node was drained)
// are an ErrInvalidOptions naming the option.
func TestBuildRefusesWhatTheAPIServerWould(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opt   Option
		field string
	}{
		{"image with a space", WithImage("registry/upgrader :v1"), "image"},
		{"pull policy", WithImagePullPolicy("Sometimes"), "imagePullPolicy"},
		{"pull secret name", WithImagePullSecrets("Reg_Cred"), "imagePullSecrets[0]"},
		{"service account", WithServiceAccount("Upgrader!"), "serviceAccount"},
		{"priority class", WithPriorityClass("Critical Class"), "priorityClass"},
		{"toleration key", WithTolerations(corev1.Toleration{Key: "bad key", Operator: corev1.TolerationOpExists}), "tolerations[0].key"},
		{"toleration operator", WithTolerations(corev1.Toleration{Key: "k", Operator: "Maybe"}), "tolerations[0].operator"},
		{"toleration Exists with a value", WithTolerations(corev1.Toleration{Key: "k", Operator: corev1.TolerationOpExists, Value: "v"}), "tolerations[0].value"},
		{"toleration effect", WithTolerations(corev1.Toleration{Key: "k", Operator: corev1.TolerationOpExists, Effect: "NoWay"}), "tolerations[0].effect"},
		{"toleration seconds without NoExecute", WithTolerations(corev1.Toleration{Key: "k", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule, TolerationSeconds: new(int64(5))}), "tolerations[0].tolerationSeconds"},
		{"label key", WithLabels(map[string]string{"bad key": "v"}), "labels"},
		{"label value", WithLabels(map[string]string{"team": "a b"}), "labels[team]"},
		{"our own label", WithLabels(map[string]string{LabelManagedBy: "me"}), "labels"},
		{"requests above limits", WithResources(corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}}), "resources.requests[memory]"},
		{"negative request", WithResources(corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("-1")}}), "resources.requests[cpu]"},
		{"empty nsenter", WithNsenterPath(""), "nsenterPath"},
		{"empty runner argument", WithRunnerCommand("/upgrader", ""), "runnerCommand[1]"},
		{"relative stage-from", WithStageFrom("staging"), "stageFrom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(testPlan(), WithImage("registry/upgrader:v1"), tc.opt)
			require.ErrorIs(t, err, ErrInvalidOptions)
			require.Contains(t, err.Error(), tc.field+":")
		})
	}
}
