// Package nodepod builds the privileged pod that runs a nodeexec plan on
// its node, creates it idempotently, and reads per-step status back from
// the pod.
//
// # Layouts
//
//   - ModeInitContainers with WithRunnerCommand (recommended): one init
//     container per step, each running the journaled runner up to its step
//     (nodeexec.RunnerOptions.StopAfter), then a status container that runs the rest
//     (nothing) and exits. `kubectl get pod` shows per-step progress and the
//     journal on the host keeps deadlines, retries, checks, backups,
//     rollback and crash-resume. restartPolicy OnFailure: a crashed runner
//     restarts and resumes.
//   - ModeInitContainers without a runner (raw, EKS Anywhere's layout):
//     each step's argv runs through nsenter in its own init container, its
//     backup (if any) in a "<step>-backup" container before it. No journal,
//     retries, checks or rollback; restartPolicy Never so nothing re-runs
//     blindly. Only the pod's activeDeadlineSeconds bounds time.
//   - ModeSingleContainer: one container runs the whole plan with the
//     journaled runner.
//
// In both init-container forms the kubelet is what starts each next
// container, with containerd running it; a container already running is
// not stopped when either goes down. A step therefore must never end with
// the kubelet or containerd stopped: one that replaces either installs it,
// restarts it and checks it runs, all in the same step (as package kubeadm
// does), and its rollback restarts it too. A plan that stops the kubelet
// in one step and starts it in a later one leaves the pod stuck for ever,
// its stopping container still shown Running, with the node NotReady.
// simulator.PodRunner simulates exactly that, to test plans against it.
//
// An optional first init container (WithStageFrom) copies a directory of
// the image to <staging host path>/staging, where package kubeadm expects
// the new binaries, so nothing is downloaded on the node (air-gapped).
//
// # Privileges, per container (the least that works)
//
// Host containers (steps entering host namespaces, the runner, the raw
// status container):
//
//   - pod hostPID: true, so that PID 1 of the host is visible;
//   - runAsUser 0;
//   - capabilities added: nodeexec.RequiredCapabilities of the namespaces
//     entered: SYS_ADMIN and SYS_PTRACE, plus SYS_CHROOT when the mount
//     namespace is entered (the default). nodeexec's tests prove this set
//     against the kernel: nsenter under setpriv works with exactly it and
//     fails with any one removed. The runtime's default capabilities are
//     kept, because host commands run with the container's bounding set
//     (cp -a needs CHOWN/FOWNER, for instance);
//   - appArmorProfile Unconfined: the container runtime's default profile
//     only allows ptrace between processes of the same profile, so nsenter
//     could not open /proc/1/ns/* of the unconfined host init;
//   - seLinuxOptions type spc_t: a confined container_t process may not act
//     on host files (ignored on hosts without SELinux);
//   - seccomp RuntimeDefault is kept: it allows setns once SYS_ADMIN is
//     granted.
//
// That is not "privileged: true": no host devices, no writable /sys, no
// full capability set. It is nonetheless root on the node in all but
// name: a process that has entered the host's mount namespace with
// SYS_ADMIN can read and write every host file (kubelet credentials,
// /etc/kubernetes/pki, the etcd data directory) and start anything
// through systemd. Treat whoever can create pods in the upgrader
// namespace, or choose the plan such a pod runs, as node administrators. The AppArmor and SELinux settings are derived from
// the runtimes' default profiles, not tested here (this machine has
// neither). Steps that need more than nsenter itself (loading modules,
// mounting filesystems) need WithPrivileged. Processes started on the host
// this way stay in the pod's cgroup: a step that must outlive the pod
// should go through systemd (systemctl), as the kubeadm plans do.
//
// The stage container drops ALL capabilities and adds back only what
// cp -a as root needs to reproduce the tree in the hostPath (CHOWN,
// DAC_OVERRIDE, FOWNER, FSETID), with allowPrivilegeEscalation false. In
// the raw init-container layout an InContainer step has its own container
// with ALL capabilities dropped and allowPrivilegeEscalation false; in the
// runner layouts (WithRunnerCommand, ModeSingleContainer) InContainer
// steps run inside the runner's container and so share its privileges.
// Of the host directory (WithStagingHostPath) containers mount only the
// "staging" and "journal" subdirectories (the stage container only
// "staging"): the plans' backups, copies of /etc/kubernetes among them,
// are not mounted into any container. Because of hostPID, hostPath and the
// added capabilities, the namespace must admit the "privileged" Pod
// Security Standard.
//
// By default the pod has priority class DefaultPriorityClass
// (system-node-critical) and every container DefaultResources (requests,
// no limits): a BestEffort pod would be the kubelet's first victim under
// the disk pressure that staging hundreds of MB invites, in the middle of
// a step. Build refuses options the API server would reject (names,
// labels, tolerations, pull policy, resources), naming the option, so
// that a bad option fails before a node is drained rather than after.
//
// Built-in tolerations keep the pod schedulable on a cordoned node and on
// control planes, and tolerate not-ready/unreachable NoExecute without a
// time limit, so the kubelet restart step does not get the upgrader
// evicted.
//
// # Status
//
// ReadStatus maps container statuses to steps: terminated with 0 is
// Succeeded, terminated otherwise is Failed with the exit code, and a
// container waiting after repeated non-zero exits (CrashLoopBackOff) is
// Failed with the exit code from LastTerminationState, never "waiting".
package nodepod
