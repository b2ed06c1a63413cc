// Package capi is upgradekit's Cluster API runtime side: the in-place
// update hooks, built on package strategy's decisions and on package
// nodeexec's upgrader pods.
//
// Extension answers CanUpdateMachine and CanUpdateMachineSet with any
// strategy.Decider. It diffs as Cluster API compares, runs feasibility
// checks (Check, ExtensionOptions.Checks), and checks its own answer before sending
// it: it never accepts what Cluster API would roll out anyway.
// VerifyCanUpdateMachine and VerifyCanUpdateMachineSet run that check on
// any extension's answer.
//
// A decline is for good: Cluster API remembers it for 24 hours. So the
// Extension declines only what cannot pass by itself. What may pass (a
// version without an upgrader image yet, a workload cluster that times
// out) is a Failure, which Cluster API asks again about.
//
// MachineUpdater answers UpdateMachine. It drains the node, runs a kubeadm
// plan in an upgrader pod, verifies the node and uncordons it. Its
// progress lives in the workload cluster, so a restarted extension
// carries on. Every wait has a deadline and ends in a Failure with a
// stable reason: no node is stranded.
//
// Gates (UpdaterOptions.Gates) hold an update until it may start: a maintenance
// window, a concurrency limit across replicas, a soak, the workloads'
// health, blockers (package gates builds them). PeekGates says what
// they would answer now, taking nothing (package gatereport serves it).
// The clients that reach a workload cluster are in package workload.
//
// Progress shows four ways: a Node condition, Events on the Machine,
// Prometheus metrics (NewMetrics) and logr logs. Package observe names
// the condition, the reasons and the metrics, for dashboards and alerts.
//
// The contract in full (what is accepted and declined, what is applied
// and verified, the drain, observability) is in docs/capi.md in the
// repository. It is tested against Cluster API's own code.
//
// This package is not a server. Package extensionserver wires these
// handlers into one.
package capi
