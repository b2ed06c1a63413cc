package nodepod_test

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
)

func ExampleBuild() {
	plan := nodeexec.Plan{Name: "upgrade-w-1", Node: "w-1", Steps: []nodeexec.Step{
		{Name: "kubeadm-node", Argv: []string{"kubeadm", "upgrade", "node"}, Timeout: 10 * time.Minute, Idempotent: true},
		// Replace and restart the kubelet in ONE step: each step is an init
		// container, and only a running kubelet starts the next one.
		{Name: "kubelet", Argv: nodeexec.ShellArgv(`set -eu
cp -f -- "$1" "$2.new" && mv -f -- "$2.new" "$2"
systemctl restart kubelet && systemctl is-active --quiet kubelet`, "/staging/kubelet", "/usr/bin/kubelet"),
			Timeout: time.Minute, Idempotent: true},
	}}
	pod, err := nodepod.Build(plan,
		nodepod.WithImage("registry.local/upgrader:v1.36.3"),
		nodepod.WithRunnerCommand("/upgrader"),
		nodepod.WithStageFrom("/upgradekit"),
		nodepod.WithPriorityClass("system-node-critical"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(pod.Name, "on", pod.Spec.NodeName, "hostPID:", pod.Spec.HostPID, "restart:", pod.Spec.RestartPolicy)
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		var caps []corev1.Capability
		if c.SecurityContext != nil && c.SecurityContext.Capabilities != nil {
			caps = c.SecurityContext.Capabilities.Add
		}
		fmt.Println(c.Name, caps)
	}
	// Output:
	// upgradekit-upgrade-w-1 on w-1 hostPID: true restart: OnFailure
	// upgradekit-stage [CHOWN DAC_OVERRIDE FOWNER FSETID]
	// kubeadm-node [SYS_ADMIN SYS_CHROOT SYS_PTRACE]
	// kubelet [SYS_ADMIN SYS_CHROOT SYS_PTRACE]
	// upgradekit-status [SYS_ADMIN SYS_CHROOT SYS_PTRACE]
}

func ExampleReadStatus() {
	pod := &corev1.Pod{}
	pod.Annotations = map[string]string{nodepod.AnnotationSteps: "containerd,kubeadm-upgrade"}
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{
		{Name: "containerd", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}},
		{Name: "kubeadm-upgrade", RestartCount: 4,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3}}},
	}
	st := nodepod.ReadStatus(pod)
	fmt.Println(st.Phase, st.Progress, st.Failed.Name, st.Failed.ExitCode)
	// Output:
	// Failed 0.5 kubeadm-upgrade 3
}
