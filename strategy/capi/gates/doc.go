// Package gates builds the gates a Cluster API in-place extension asks
// before an update starts (capi.UpdaterOptions.Gates): each is a strategy.Gate that
// answers Allow, Wait (with a reason and when to ask again) or Stop.
//
// Concurrency limits the machines of a cluster updated at once, across
// replicas, with Leases in the management cluster. Soak, Workloads,
// ControlPlane and Breaker read the workload cluster through a
// workload.Client: nodes Ready long enough, Deployments and StatefulSets
// available again, the other control plane nodes healthy, not too many
// broken machines in a MachineDeployment. Alert asks Prometheus for
// firing alerts; PodBlockers waits while a pod matching a selector runs.
//
// A gate that cannot read what it needs answers Wait with the error: an
// update never starts blind. A constructor given a bad argument returns
// an error matching capi.ErrInvalidOption.
//
// It does not update anything and is not a scheduler: capi.MachineUpdater
// asks the gates, and strategy.MaintenanceWindow and strategy.Gates (in
// package strategy) need no cluster at all.
package gates
