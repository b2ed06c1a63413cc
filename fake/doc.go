// Package fake builds Cluster API clusters and simulated nodes for tests of
// upgrade code: a fluent builder for a CAPI v1beta2 cluster (Cluster), one
// simulated host per node that runs nodeexec plans (Host, Fleet), and
// deterministic fault injection into hosts and API clients (Faults).
//
// # Cluster
//
// NewCluster("demo").ControlPlane(3, "v1.35.4").MachineDeployment("md-0",
// 5, "v1.35.4") describes a KubeadmControlPlane with its Machines, a
// MachineDeployment with one MachineSet and its Machines, a KubeadmConfig
// and an infrastructure machine (DockerMachine, AWSMachine or any
// Infrastructure) per Machine, and a Node per Machine whose spec.providerID
// matches, with status.nodeInfo.kubeletVersion and a Ready condition. Pods
// and PodDisruptionBudgets are added by name. Names and UIDs are
// deterministic (see Cluster). The same builder backs a controller-runtime
// fake client (Client) or is written into a real API server (Apply, which
// also writes statuses through the status subresource).
//
// # Hosts
//
// A Host has component versions (kubelet, kubeadm, kubectl, containerd,
// CNI plugins, etcd and the control plane static pods), an in-memory
// filesystem and systemd unit states. It implements nodeexec.Executor and
// interprets exactly the commands the nodeexec/kubeadm step library emits,
// so a whole kubeadm plan runs through nodeexec's real Runner: staging
// trees are installed and backed up, `kubeadm upgrade apply|node` checks
// versions and kubeadm's ordering (a Fleet shares the cluster's kubeadm
// configuration between hosts; with a node client, kube-system/kubeadm-config's
// kubernetesVersion is that configuration: `upgrade node` follows it and
// `upgrade apply` writes it, as kubeadm does), a kubelet restart reports the new version
// on the Node, and rollbacks restore what the backups saved. The
// kubelet-args plan (kubeadm.NewKubeletArgsPlan) runs too: the host keeps
// a kubeadm-flags.env (DefaultKubeadmFlags at first), rewrites it with the
// library's own model (kubeadm.KubeadmFlags), and a kubelet start reads it
// (Host.KubeletArgs is what the running kubelet got). The files plan
// (kubeadm.NewFilesPlan) writes files with their mode and owner
// (Host.FileAttrs). The images step (kubeadm.Config.ImportImages) imports
// the staged images/*.tar while containerd runs and fails, as its script
// does, without an archive; the host keeps no image store. On control plane
// hosts the static pod manifests are YAML rendered as kubeadm renders them
// (sigs.k8s.io/yaml, so a value YAML must quote comes out quoted) from
// kube-system/kubeadm-config's ClusterConfiguration, read through the
// node client, by `kubeadm upgrade apply|node` and by the control plane
// configuration plan's `kubeadm upgrade node phase control-plane`
// (kubeadm.NewControlPlaneConfigPlan); the kubelet then keeps the mirror
// pods kube-system/<component>-<node> in step (Host.StaticPodCommand and
// Host.StaticPodImage read the manifests on disk). Anything else
// fails with ExitUnknownCommand; nothing unknown succeeds silently. The
// host learns the library's scripts from a plan the library generates, so
// a changed script is reported as unknown rather than half-understood.
//
// # Pods
//
// PodRunner plays a Host's kubelet for an upgrader pod built by
// nodepod.Build: it starts the init containers one after the other, then
// the main container, running raw containers' argvs on the Host and
// runner containers' journaled nodeexec Runner (plan and stop-after step
// from the container's environment). The kubelet is what starts
// containers: a container starts only while the Host's kubelet and
// containerd units are active, a running one is never killed by their
// stop or restart, and a pod whose next container cannot start is
// reported as PodStuck at once. That is how a plan that stops the kubelet
// in one init container and restarts it in a later one shows up: stuck
// with the kubelet down, the stopping container still "running" in the
// status the kubelet last reported. The pod status it keeps reads with
// nodepod.ReadStatus. PodRunner's documentation lists what it does not
// model (back-off, deadlines, reboots and sandbox loss, among others).
//
// Registry is what a simulated kubelet can pull: PullPod reports a pod
// whose image it does not hold (or is told to fail) as a kubelet does,
// Pending with the container waiting in ErrImagePull, then
// ImagePullBackOff, or InvalidImageName for a reference that does not
// parse; capitest's kubelets pull from one (capitest.WithRegistry).
// PodRunner itself pulls nothing. Registry's documentation lists what it
// does not model (pull policies, the image cache, credentials, time).
//
// # Faults
//
// Faults fails a step on a node k times (or randomly, from a seed), marks
// a node NotReady after a step, makes a step slow on a virtual clock
// (k8s.io/utils/clock/testing.FakeClock, so deadlines are tested without
// sleeping; SkipAheadClock or DriveClock make a Runner's backoff waits
// instant), crashes the runner during or between steps (CrashRunner) or
// the controller between batches (CrashController: its plan is lost and a
// new one is made from the cluster), and makes chosen API verbs fail with conflicts, timeouts or throttling
// through controller-runtime's interceptor.
//
// # Simulator
//
// NewSimulator(cluster) plans a Rollout with a strategy.Planner (or just
// a strategy.Strategy: in place, rolling, fallback, replace-first, never
// replace) and runs it to completion on a virtual clock: in-place machines
// are cordoned, run the real kubeadm plans through nodeexec's Runner on
// their hosts (a crashed runner is replaced by a new one on the same
// journal, as a restarted upgrader pod would be; failures roll back) and
// are uncordoned; replaced machines are swapped for new ones. The Result
// is the plan, a timeline of events, every host command, and the broken
// invariants. Control plane machines change as KubeadmControlPlane
// (Cluster API v1.14) changes them: going from below v1.31 to v1.31 or
// later their KubeadmConfig gains kubeadm's ControlPlaneKubeletLocalMode
// feature gate, a ControlPlaneConfig change no kubeadm plan applies in
// place, so they are replaced, as Cluster API replaces them; its removal
// at v1.36 comes with the version. A replaced control plane moves the
// cluster's kubeadm version, as KubeadmControlPlane writes it into
// kubeadm-config first. The invariants are reusable: CheckSkew (no kubelet newer
// than the control plane), CheckDisruption (no group over its maxSurge +
// maxUnavailable at any instant, control plane one at a time),
// CheckNoRerun (no completed step run again), CheckCordons (no node left
// cordoned, nobody else's cordon lifted), CheckStall (below), plus
// converged versions. A 1,000-node in-place upgrade simulates in a few
// seconds (BENCHMARKS.md).
//
// After a failed update the simulator stalls where Cluster API v1.14 does
// (FailureStall, the default): Cluster API keeps the Machine Updating
// (InPlaceUpdateFailed), so unavailable, and calls UpdateMachine again for
// as long as it fails; the MachineDeployment counts it against maxSurge +
// maxUnavailable, so the group goes on only in the slots left (none with
// the default maxSurge 1, maxUnavailable 0), and KubeadmControlPlane waits
// for the failed update before it touches another control plane machine.
// The machines not started are Result.Held with the reason, and the failed
// machine has a StallStep event ("Blocked") to the end of the run.
// CheckStall checks that nothing started that Cluster API would not have.
// WithOnFailure(FailureContinue) carries on instead, as if each failed
// machine had been fixed at once (only machines left cordoned hold their
// group), to show the rest of the rollout.
//
// Gates (WithSimGates) are asked before each machine at the virtual
// time, against the simulated cluster (a gate built on Simulator.Client
// sees the simulated nodes): Wait advances the clock, Stop holds the rest
// of the group. A circuit breaker (WithBreaker) trips during the run once
// more than its limit of a group's machines failed or went bad after
// their update (Faults.UnhealthyAfterUpdate), and holds the rest of the
// group; CheckBreaker is then among the invariants (it tripped at the
// first machine above the limit, and nothing of the group started after).
//
// # Simulator with the MachineUpdater
//
// By default the simulator runs each in-place machine's kubeadm plan
// through nodeexec's Runner itself, which tests the planner and the plans
// but not the code that drives them in a cluster. WithMachineUpdater
// updates each in-place machine with a real capi.MachineUpdater instead,
// called the way Cluster API calls an UpdateMachine extension: a request
// with the desired Machine (spec.version the rollout's, its providerID,
// clusterName and, for the control plane, the control-plane label; no
// status) and its infrastructure machine, a new updater for every call
// (as after an extension restart: all state is in the cluster), until it
// answers done (RetryAfterSeconds 0) or Failure. Between two calls the
// node's kubelet is played by a PodRunner on the node's Host: it runs the
// upgrader pods the updater created (with the staging the simulator
// provides), writes their status through the simulator's client, and the
// virtual clock moves by the RetryAfterSeconds answered (or further, when
// the pod's commands took longer: each host command takes the step time).
// It checks, besides the invariants above: "done" only for a verified
// node (the kubelet runs the target version, kubelet and containerd
// active), never a node whose kubelet is stopped after its update, and no
// endless waiting: a machine neither done nor failed within the call
// budget (WithUpdateCallBudget) fails and is a violation. The timeline
// has one event per plan step (from the journals on the host, or the pod's
// container statuses when the layout has no runner), the runner restarts,
// and one "UpdateMachine/<phase>" event per run of answers in the same
// phase (capi.Reason*, as the node's condition says). A Failure is in
// Result.Failed and Result.Reasons (the hook's message, with its
// capi.Failure* reason) and stops the rollout as any failure does; the
// node is left cordoned unless nothing ran on it or its plan rolled back.
// Faults apply: step failures, slow steps and NotReady nodes through the
// Host, runner crashes through the PodRunner's restart of a
// restartPolicy OnFailure container (resumed from the journal; the raw
// layout's pod fails instead), API faults through the client's
// interceptor (the updater's, the kubelet's and the hosts' calls alike),
// and controller crashes between batches.
//
// What that mode does not model: the drain (the fake client has no
// Eviction API: the updater runs WithoutDrain and the simulator cordons
// around the update, as in the default mode; drains are tested against a
// real API server in strategy/capi), Cluster API's management cluster
// (no update-in-progress annotation and no spec.version change on the live
// Machine before the update, so capi.WithManagementReader would refuse
// every request; the Machine gets its new version once done), calls in
// the middle of a pod (the kubelet runs a pod's containers to their end,
// or until one cannot start, between two calls, so an answer never sees a
// pod half-way), several machines of a batch at the same instant (they
// run one after the other from the batch's start in virtual time), and
// the retry annotation (no operator retries a Failure).
//
// # fake client or fake/envtest?
//
// The fake client is fast (no processes; WithoutServerSideApply makes its
// writes several times cheaper still) and is right for logic that only
// reads and writes objects: deciding what to upgrade next, reacting to
// Node versions and conditions, retrying on injected errors. Prefer
// fake/envtest's real API server (Cluster.Apply into envtest.StartForTest)
// whenever the test depends on what the API server does: CRD validation and
// defaulting, status subresource semantics, resourceVersion conflicts
// between real writers, field selectors, server-side apply, and above all
// evictions: the fake client's eviction just deletes the pod, while the
// real Eviction API enforces PodDisruptionBudgets (the builder writes the
// PDB status the disruption controller would, because no controller runs
// in envtest). Install the infrastructure machine CRD with
// envtest.WithCRDs(cluster.InfrastructureCRD()).
//
// What it is not: a simulation of controllers. Nothing reconciles: no
// Machine is created when a MachineDeployment changes, no Pod is
// rescheduled, and Node status changes only when a Host or the test writes
// it. The hosts model the kubeadm library's commands, not Linux: for the
// kubelet-args plan, the kubelet accepts any flag (inject a failure with
// Faults to test a kubelet that refuses one), the settle wait and
// /proc/<MainPID>/cmdline are not modelled (the host remembers the
// arguments the kubelet read at its last start), and the kubelet always
// reads kubeadm.DefaultKubeadmFlagsFile, whatever FlagsFile a plan names.
// For files (kubeadm.NewFilesPlan): modes and owners are kept as the plan
// set them (other files are 644 root:root), root is the only account (its
// name and ID 0 agree), and no directory has a mode of its own.
// For the control plane configuration: a static pod runs whatever its
// manifest says (no crash loop on a bad flag, no image pull failure:
// inject a failed step with Faults instead), a mirror pod is Ready exactly
// while the kubelet runs, a host without a node client or a cluster
// without kubeadm-config renders kubeadm's defaults where real kubeadm
// would refuse, only extra arguments and etcd's image tag are rendered
// (not certSANs, volumes or feature gates), and kubeadm's wait for the
// static pod hash to change is modelled only as "fails while the kubelet
// is stopped". For `kubeadm upgrade apply`: its preflight checks are not
// run, in particular CreateJob, which on a real cluster runs a Job with the
// target version's pause image on any schedulable node and fails the
// upgrade after a minute when that node cannot get the image (an
// air-gapped worker; fake/nodetest's real nodes showed it at v1.35 ->
// v1.36). For containerd's configuration (kubeadm.Config.ContainerdConfig):
// the containerd step's decision to migrate it is modelled, the migrated
// content is not (it becomes "version = 3" and a comment).
package fake
