// Package preview answers, before you apply a change to a Cluster API
// cluster, the question Cluster API itself cannot: which machines will be
// updated in place, which replaced, which will hold the rollout up, and
// why (kubernetes-sigs/cluster-api#13863).
//
// Read reads one cluster from the management cluster (the Cluster, its
// KubeadmControlPlane, MachineDeployments, MachineSets, Machines,
// KubeadmConfigs and infrastructure machines, one List per kind) and,
// WithWorkload, from the workload cluster its Nodes, Pods and
// PodDisruptionBudgets, whose drain blockers nodeexec/drain.Blockers works
// out. ParseChange reads the objects you are about to apply (YAML or JSON,
// as kubectl apply -f takes them). Predict lays the change over the
// snapshot and plays Cluster API v1.14's part:
//
//   - for a KubeadmControlPlane, Cluster API's own UpToDate
//     (controlplane/kubeadm/pkg) says which machines are out of date and
//     computes their desired Machine, KubeadmConfig and infrastructure
//     machine; the CanUpdateMachine request is built as Cluster API builds
//     it; with maxSurge above 0 the last outdated machines are deleted, not
//     updated, as KubeadmControlPlane does;
//   - for a MachineDeployment, Cluster API's mdutil finds the new and old
//     MachineSets, and the CanUpdateMachineSet request carries the desired
//     MachineSets and templates as the rollout planner sends them;
//   - the Answerer answers each request: the extension Cluster API will
//     ask, found through the ExtensionConfigs and asked over HTTPS as
//     Cluster API's runtime client asks it (FindDeployed; any in-place
//     extension, its deployed configuration deciding), or one in process
//     (extensionserver.Server.Extension, a *capi.Extension) for a cluster
//     with no extension yet; Prediction.Mode says which answered. Several
//     in-place extensions registered are a *SeveralExtensionsError, as
//     Cluster API v1.14 refuses the hooks then;
//   - capi.Verify* applies an accept's patches as Cluster API does: in
//     place only when nothing is left to roll;
//   - a machine to update whose node a drain would stop on (a
//     PodDisruptionBudget that allows no disruption; for in-place updates
//     also a pod opted out with karpenter.sh/do-not-disrupt or without a
//     controller, which the extension's drain refuses) is Blocked: the
//     rollout waits there;
//   - a managed topology's spec.topology.version is played as Cluster
//     API's topology controller plays it: the upgrade plan (one minor at a
//     time for the control plane, through the ClusterClass's
//     spec.kubernetesVersions; the fewest steps for the workers, each
//     taken once the control plane runs it) is computed as Cluster API
//     computes it, and each step is a question of its own (Machine.Steps).
//     An InProcess answerer is built again over the cluster as it will be
//     at each step, so a check that reads the control plane's version
//     answers as it will then; any other answerer, a deployed extension
//     included, is asked over the cluster as it is now, and the reason of
//     each answer given early says so;
//   - strategy.Planner orders each group's machines into waves within its
//     maxSurge and maxUnavailable, and Timings turn them into estimates;
//   - with a deployed extension, its gates (a maintenance window, a soak,
//     a concurrency limit, blockers) are asked what they would answer now
//     about each machine updated in place, through the extension's gate
//     report (gatereport; Deployed.ReportGates), which takes no
//     concurrency slot: Machine.Gates and Group.Gates. In process,
//     WithGateReporter takes an extensionserver.Server configured as the
//     extension will be; an extension that serves no report leaves a
//     note.
//
// The Prediction renders as a table (WriteTable), JSON, or per machine
// (Machine, KeepsName). examples/preview is the command line over it,
// usable as a kubectl plugin.
//
// Its truth test runs Cluster API's own controllers (harness/clusterapi): one
// change touching six MachineDeployments is previewed, then applied, and
// every machine the preview says keeps its name keeps it and every one it
// says is replaced is gone.
//
// What it is not: it does not apply anything (WithServerDryRun sends dry
// runs only), and it predicts from the cluster as it is now, except for
// what InProcess answerers read at a topology's later steps: the names of
// machines Cluster API will create are unknown, and so is which machine a
// MachineDeployment deletes when it scales a surge back down. MachinePools,
// MachineHealthCheck remediation during the rollout, upgrade plans from a
// GenerateUpgradePlan extension, the topology's lifecycle hooks
// (BeforeClusterUpgrade and the like, which only delay) and ClusterClass
// changes other than spec.topology.version are out of scope.
//
// Nor does it predict failures of the updates themselves: waves and
// estimates assume every update succeeds, and each Group's OnFailure
// (a line under the group in the table) says what Cluster API does with
// the group when one fails. Where one fails (UpdateMachine
// answers Failure, a step failed on the node), Cluster API v1.14 stalls:
// it keeps the Machine Updating (InPlaceUpdateFailed), so unavailable, and
// calls UpdateMachine again for as long as it fails; the MachineDeployment
// goes on only within maxSurge+maxUnavailable (with the defaults, maxSurge
// 1 and maxUnavailable 0, not at all), and KubeadmControlPlane touches no
// other control plane machine until the failed one is through. The only
// failure predicted is a CanUpdate hook answering Failure now (Blocked).
// simulator.Simulator plays failures as Cluster API does (simulator.FailurePolicyStall).
package preview
