// Package capi is upgradekit's Cluster API runtime side: the handlers of
// the in-place update hooks (CanUpdateMachine, CanUpdateMachineSet and
// UpdateMachine) built on package strategy's decisions and on package
// nodeexec's upgrader pods, with drain before update, observability and
// clients for the workload clusters.
//
// Extension answers Cluster API's CanUpdateMachine and CanUpdateMachineSet
// runtime hooks with any strategy.Decider, using CAPI's real hook types,
// and registers on sigs.k8s.io/cluster-api/exp/runtime/server. It keeps
// the in-place contract stated in package strategy:
//
//   - it diffs with diff.InPlaceUpdate (what CAPI re-compares after
//     applying the patches) and, on accept, patches every change, the ones
//     applied in place and the ignored ones (SettingIgnore, a policy's
//     ActionIgnore), so that CAPI finds nothing left to roll;
//   - before accepting it runs feasibility checks: VersionCheck (always;
//     kubeadm.CheckUpgrade: no skipped minor, downgrade or major change),
//     KubeletArgsCheck (always: kubelet extra arguments it can write),
//     WithUpgraderImages (a bundle for the target version, else a
//     Failure: see What Cluster API remembers) and WithChecks
//     (for example WorkloadReachableCheck: a cluster whose kubeconfig
//     secret the extension cannot read, say in a namespace without its
//     RoleBindings, or whose API server refuses its credentials, is
//     declined as permanent, while a timeout is a Failure CAPI asks again
//     about; and ControlPlaneSkewCheck: no worker kubelet newer than its
//     control plane, declined only when the control plane's desired
//     version is below the worker's, while a control plane on its way is
//     waited for by UpdateMachine).
//     A check's ErrInfeasible declines with the reason; any other error
//     answers Failure and CAPI asks again;
//   - it honours the ExtensionConfig settings SettingDisabled and
//     SettingIgnore and rejects unknown ones;
//   - it is as strict as CAPI about empty values: CAPI compares the patched
//     objects' JSON with go-cmp, so "" , [] and {} (and null) differ from
//     an absent field, and diff.InPlaceUpdate compares them so
//     (diff.StrictEmpty), patching them in or out as desired has them; the
//     same holds for numbers: an integer differs from a float of the same
//     value (diff.StrictNumbers), and patches write floats in float form;
//   - last, it checks every answer that does not decline ("no changes"
//     included): it applies its own patches to the current objects as CAPI
//     does (spec only, spec.template.spec for MachineSets) and compares the
//     result with desired by diff.InPlaceUpdate alone. Anything left, such
//     as a field WithDiffOptions hides, turns the answer into a decline
//     naming the fields (SelfCheckMessage): it never accepts what CAPI
//     would then roll out anyway. The same check is public:
//     VerifyCanUpdateMachine and VerifyCanUpdateMachineSet tell, for any
//     extension's answer, whether CAPI would update in place or roll out
//     (*RollOutError naming the fields left);
//   - with WithInfrastructureDryRun, a MachineSet answer that accepts an
//     infrastructure template change is tried on the MachineSet's
//     infrastructure machines first (a server-side apply with dry run, as
//     Cluster API's MachineSet controller will write it): a change the
//     provider refuses is declined, not accepted into a write that fails
//     on every retry and leaves the Machine stuck.
//
// # What Cluster API remembers
//
// Cluster API v1.14 keeps a MachineDeployment's CanUpdateMachineSet
// answer in memory for 24 hours per old and new MachineSet
// (core/reconcilers/machinedeployment/machinedeployment_canupdatemachineset.go,
// util/cache): a decline is the rest of the rollout by replacement, even
// if its reason goes away meanwhile (a capi-controller-manager restart
// or a new MachineSet clears it). A Failure is not remembered: its
// runtime client turns it into an error, the MachineDeployment's (or
// KubeadmControlPlane's) reconcile fails before anything is cached or
// changed, and it asks again with backoff. KubeadmControlPlane remembers
// nothing; its decline replaces the one machine it asked about. So the
// Extension declines only what does not pass by itself, and answers
// Failure for what may:
//
//   - declined: changes no updater applies, VersionCheck, KubeletArgsCheck
//     and FilesCheck refusals, the self-check's leftovers,
//     ControlPlaneSkewCheck when the control plane's desired version is
//     below the worker's, WorkloadReachableCheck's permanent causes
//     (RBAC, a missing or unusable kubeconfig, refused credentials), and
//     SettingDisabled, which exists to make Cluster API replace;
//   - accepted and waited for in UpdateMachine: a worker above the
//     control plane's current version while the control plane is on its
//     way to the worker's (MachineUpdater holds the worker until every
//     control plane Node runs it);
//   - Failure: a version without an upgrader image or bundle checksums
//     (ErrVersionNotConfigured: it passes once configured),
//     WorkloadReachableCheck's transient causes (timeouts, refused
//     connections, 5xx, 429), a failed read, an unknown setting, a
//     malformed request, ErrRequestMismatch.
//
// With FailurePolicy Ignore (WithFailurePolicy), Cluster API takes an
// unreachable extension's silence for an empty answer, that is a "no" it
// then remembers: keep the default, Fail.
//
// The contract is tested against CAPI's own code: hack/capi-inplace-oracle.sh
// builds CAPI v1.14's applyPatchesToRequest and matchesMachine /
// matchesMachineSet into a test oracle, and the package's oracle test checks
// thousands of generated requests and answers with it.
//
// Its decisions are only as good as the executor behind them: pair it with
// a Decider whose updaters MachineUpdater (or your own UpdateMachine)
// applies, such as strategy.ForCategories("kubeadm",
// strategy.KubeadmCategories()...).
//
// MachineUpdater answers the UpdateMachine hook: it finds the Node through
// spec.providerID, upgrades it with a kubeadm plan run by an upgrader pod
// (package nodeexec), keeps all progress in the workload cluster (the pod,
// the Node) so a restarted extension carries on, and never runs two
// upgrader pods on one node. It never strands a node:
//
//   - with WithManagementReader, a request is acted on only under Cluster
//     API's own preconditions (the live Machine marked with the hook
//     pending, its KubeadmConfig and infrastructure machine marked and
//     sent), and the update acts on the live objects, never the request's
//     copy (FailureRequestMismatch otherwise, one message for every
//     mismatch, with no Event and nothing kept in memory);
//   - before anything disruptive it builds the plan and has the API server
//     dry-run the pod: a plan kubeadm refuses or a pod admission refuses is
//     a Failure (FailurePlanRejected, FailurePodRejected) on an untouched
//     node; when it drains, a pre-pull pod then proves the upgrader image
//     pulls and starts on the node before the cordon (WithPrePullTimeout,
//     WithoutPrePull), so an image that cannot be pulled is a Failure
//     (FailureImagePull, naming the kubelet's pull error) within minutes
//     on a node never cordoned; the control plane role comes from the control plane Nodes,
//     not from kubeadm-config, which KubeadmControlPlane rewrites first;
//   - it answers done only on a recorded success of the update's own pod
//     (UpdateRecord.Succeeded); a pod gone before that is created again
//     and resumes from the host's journal;
//   - every wait ends: a node gone past WithNodeGoneGrace, an update past
//     WithUpdateTimeout, a node NotReady past WithNotReadyTimeout, a drain
//     past WithDrainTimeout, a workload cluster unreachable (no client, no
//     answer) past WithWorkloadUnreachableTimeout, counted in the
//     management cluster, are Failures with stable reasons; two Nodes
//     with one providerID or two Machines on one Node are Failures too;
//   - upgrader pods are recognised by namespace and record, not labels,
//     and a pod with the upgrader pod's name is trusted only if it runs
//     the same image, command and security context (FailureForeignPod);
//   - a failed update is retried from the management cluster, never with
//     a shell on the node: a new value of the Machine's AnnotationRetry
//     starts a new attempt, whose plan has a name (and so a journal on the
//     host) of its own, with fresh deadlines. Each update, and each
//     attempt of it, runs under its own plan name: a journal left by an
//     earlier update (Failed, RolledBack, Succeeded, or written for another
//     from-version) is never resumed by a later one.
//
// What it applies is the Kubernetes version (strategy.KubeadmCategories)
// and the kubelet's extra arguments (strategy.KubeletExtraArgsPaths): pair
// it with an Extension that accepts nothing else. It verifies the version
// with the plan's verify step (kubeadm, kubelet and kubectl binaries at
// the version, containerd and kubelet active, the Node's kubelet version
// and, on control planes, the kube-apiserver image) and with the kubelet
// version the Node reports. The kubelet's extra arguments of the desired
// KubeadmConfig (the join configuration's, or the init configuration's on
// the first control plane) are written into kubeadm-flags.env as
// `kubeadm join` writes them (kubeadm.NewKubeletArgsPlan with ReplaceAll),
// by the same plan after the kubelet step or, at the same version, by a
// plan of their own; they are verified on the running kubelet's command
// line, and a digest of them is kept on the Node (AnnotationKubeletArgs)
// once done, so they are applied again only when they change. The
// Extension's KubeletArgsCheck declines arguments that cannot be written.
// On control plane machines it also applies the control plane
// configuration of the desired ClusterConfiguration
// (strategy.ControlPlaneConfigPaths: API server, controller-manager and
// scheduler extra arguments, etcd's image tag and extra arguments): once
// kube-system/kubeadm-config carries it (KubeadmControlPlane writes it
// before updating machines; until then the answer waits, nothing
// disrupted), at the same version by kubeadm.NewControlPlaneConfigPlan
// (`kubeadm upgrade node phase control-plane`), and with a version change
// by the version plan's own `kubeadm upgrade`; either way the manifests
// are checked for the expected arguments and image and the mirror pods
// for Ready before done, and a digest is kept on the Node
// (AnnotationControlPlaneConfig). The desired KubeadmConfig's files with
// inline content (strategy.FilesPaths; encodings base64, gzip and
// gzip+base64 decoded here) are written first in the plan, right after
// the bundle check, by kubeadm.NewFilesPlan: content, mode and owner,
// backed up and verified by SHA-256, mode and owner, with a digest per file
// kept on the Node (AnnotationFiles); only the files whose digest the Node
// does not list are written. Only paths under
// kubeadm.DefaultFilesAllowedDirs are written, never a setuid, setgid,
// sticky or group- or world-writable mode, and the host's scripts refuse a
// symbolic link on the way to a file or in its place. The Extension's
// FilesCheck declines a change of a file that cannot be written so
// (content from a Secret, append, a template, a path outside the allowed
// directories or kubeadm's own, such a mode, more than an upgrader pod
// carries); an unchanged one is left as the node has it. Whoever can edit
// a KubeadmConfig, its template or a KubeadmControlPlane is root on the
// node anyway (the bootstrap provider runs their commands as root when it
// makes the next machine).
// The contents of the files an update writes travel in its upgrader pod's
// spec: whoever may read pods in the upgrader namespace can read them.
//
// # Drain before in-place
//
// Cluster API does not drain a machine it updates in place, and EKS
// Anywhere does not either: pods keep running while kubeadm, containerd and
// the kubelet restart under them. MachineUpdater drains by default
// (WithoutDrain turns it off): it first proves, with a pre-pull pod pinned
// to the node, that the upgrader image pulls and starts there
// (WithPrePullTimeout; an image that does not is a Failure,
// FailureImagePull, on a node still schedulable), then it cordons the
// node as DefaultCordonOwner,
// evicts pods through the Eviction API so PodDisruptionBudgets hold
// (package nodeexec/drain; DaemonSet, mirror and upgrader pods stay), and
// starts the upgrader pod only once the node is empty. Because
// UpdateMachine is a polling hook, each call does a bounded attempt
// (WithDrainAttempt) and answers RetryAfterSeconds naming the budgets and
// pods still in the way. The drain's start is kept on the Node
// (AnnotationInPlaceUpdate), so the deadline (WithDrainTimeout) survives a
// restart; past it the answer is Failure (FailureDrainTimeout) naming the
// budgets, the node stays cordoned and later calls keep trying, so the
// update resumes by itself once a budget allows it. When the kubelet
// reports the desired version the node is uncordoned, but only if this
// updater cordoned it: a node someone else had cordoned stays cordoned,
// and so does one whose cordon record (drain.AnnotationCordon) someone
// took over during the update. A plain `kubectl cordon` of a node this
// updater has already cordoned changes nothing the API can show, so it
// cannot be told from ours: to keep such a node cordoned, write your own
// owner into drain.AnnotationCordon. A
// failed update leaves the node cordoned, so its pods do not come back to a
// half-upgraded node. On a single-node cluster evicted pods have nowhere to
// go until the node is uncordoned, and a budget that requires them
// available blocks until the deadline: use WithoutDrain there, or relax
// the budget.
//
// # Observability
//
// Everything the updater does is visible four ways, with stable names that
// are exported constants:
//
//   - a Node condition, ConditionInPlaceUpdate, with the reasons
//     ReasonPending, ReasonDraining, ReasonDrainBlocked, ReasonUpgrading,
//     ReasonWaitingForKubelet, ReasonSucceeded and ReasonFailed, written
//     with a strategic-merge patch of the status that touches only that
//     condition (no resourceVersion, so it never conflicts with the
//     kubelet's status updates, which leave foreign conditions alone);
//   - Kubernetes Events on the Machine in the management cluster
//     (WithEventRecorder; reasons EventReasonUpdateStarted,
//     EventReasonNodeDrained, EventReasonDrainBlocked,
//     EventReasonUpdateSucceeded, EventReasonUpdateFailed,
//     EventReasonUpdateRetried), recorded on
//     transitions read from the Node, so a restarted extension does not
//     repeat them;
//   - Prometheus metrics (NewMetrics, on controller-runtime's registry by
//     default): MetricDecisions for the CanUpdate* answers, and
//     MetricMachinesInProgress, MetricFailures and MetricUpdateDuration for
//     UpdateMachine; see Metrics for what the in-progress gauge means with
//     several replicas;
//   - logr logs with the keys hook, machine, cluster, node, phase and step:
//     transitions at V(0), each in-progress answer at V(1). Declines are
//     logged with the uncovered fields (names and categories, never values).
package capi
