package simulator

import (
	"time"

	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// Options configure NewSimulator. The zero value of every field is its
// default, so Options{} simulates with the default planner, no faults,
// no circuit breaker and no gates, stalls where Cluster API would after
// a failure (FailurePolicyStall), and runs the in-place machines' kubeadm
// plans itself (no MachineUpdater).
type Options struct {
	// Planner plans the rollout (default: in place for Kubernetes
	// version, etcd and kubeadm/kubelet configuration changes, else
	// rolling replace). It overrides Strategy.
	Planner *strategy.Planner

	// Strategy keeps the default planner's decider (kubeadm's in-place
	// categories) but plans with this strategy (strategy.InPlaceStrategy(),
	// RollingReplaceStrategy, FallbackStrategy...). Planner overrides it.
	// Default nil: in place where the decider allows it, else rolling
	// replace (strategy.FallbackStrategy over
	// strategy.RollingReplaceStrategy).
	Strategy strategy.Strategy

	// Faults injects host and API faults, and runner crashes
	// (Faults.CrashRunner). Default nil: none.
	Faults *Faults

	// OnEvent is called for every timeline event as it completes (live
	// progress). Default nil: none.
	OnEvent func(Event)

	// Breaker trips a circuit breaker per group during the run: once more
	// than Breaker.MaxUnhealthy machines of a group failed or went
	// unhealthy after their update (Faults.UnhealthyAfterUpdate), no
	// further machine of the group starts (each is Held with the
	// breaker's reason, and the trip is in Result.Breakers). NewSimulator
	// keeps a copy. Default nil: no breaker.
	Breaker *strategy.Breaker

	// Gates are asked before each machine starts, at the virtual time:
	// Wait advances the clock by its RetryAfter (a minute when 0) and asks
	// again, for at most GateMaxWait of virtual time, after which the
	// machine is Held; Stop holds the machine and the rest of its group.
	// The gates see the simulated cluster when built on Simulator.Client
	// (a workload client getter returning it). Several gates combine with
	// strategy.Gates. The time machines waited is in Result.GateWaits.
	// Default nil: none.
	Gates strategy.Gate

	// GateMaxWait is how long, in virtual time, a machine waits for Gates
	// that answer Wait: a wait that would take it past GateMaxWait is not
	// taken, and the machine is Held ("gates still closed after ...").
	// Default 0, as any value below the gates' first RetryAfter: no
	// waiting, a machine whose gates answer Wait is Held at once. Unused
	// without Gates.
	GateMaxWait time.Duration

	// OnFailure is what the simulated controllers do once a machine's
	// update has failed: FailurePolicyStall (the default, also "": as
	// Cluster API, the group stalls where its limit is used up) or
	// FailurePolicyContinue. NewSimulator refuses any other value (an
	// error wrapping ErrInvalidCluster). Result.OnFailure is the policy
	// the run followed.
	OnFailure FailurePolicy

	// MachineUpdater, when set, makes the Simulator update every in-place
	// machine the way Cluster API drives an in-place update extension: a
	// real capi.MachineUpdater (built with these options, a new one for
	// every call, as after an extension restart) answers UpdateMachine
	// calls for the desired Machine, and between two calls the node's
	// simulated kubelet (PodRunner) runs the upgrader pods the updater
	// created and writes their status through the simulator's client,
	// while the virtual clock moves by the RetryAfterSeconds answered. See
	// the package documentation for what this mode models and what it
	// does not. NewSimulator checks the options once (capi.NewMachineUpdater's
	// errors, wrapped).
	//
	// The simulator puts its pod options (an upgrader image that is never
	// pulled, staged from the simulated host) before PodOptions, its
	// virtual clock in Clock unless that is set, and sets SkipDrain: the
	// simulator's client has no Eviction API, so the simulator cordons the node
	// around the update as in the default mode. NewSimulator keeps a
	// copy; the caller's options are not changed.
	//
	// Default nil: the simulator runs each in-place machine's kubeadm plan
	// through nodeexec's Runner on its host itself.
	MachineUpdater *capi.UpdaterOptions

	// The fields below are set by the package's own tests only
	// (export_test.go).

	// maxRestarts is how many times a crashed runner is restarted on one
	// machine before the machine counts as failed (nil: 3; a negative
	// count is refused).
	maxRestarts *int
	// upgraderPodOptions, when not nil (even empty), replace
	// defaultSimulatorPodOptions in MachineUpdater mode (for example,
	// without nodepod.WithRunnerCommand, the raw init-container layout,
	// which has no journal and does not restart a failed container).
	upgraderPodOptions []nodepod.Option
	// updateCallBudget is how many UpdateMachine calls one machine may
	// take in MachineUpdater mode (nil: defaultUpdateCallBudget; below 1
	// is refused). A machine neither done nor failed after that many
	// calls fails, and the Result carries a violation naming it endless
	// waiting.
	updateCallBudget *int
}

// apply sets o on s, over the defaults NewSimulator gave it.
func (o Options) apply(s *Simulator) {
	s.planner, s.strategy, s.faults, s.onEvent = o.Planner, o.Strategy, o.Faults, o.OnEvent
	if o.Breaker != nil {
		b := *o.Breaker
		s.breaker = &b
	}
	s.gates, s.gateWait = o.Gates, o.GateMaxWait
	s.onFailure = o.OnFailure
	if o.MachineUpdater != nil {
		s.updater, s.updaterOpts = true, *o.MachineUpdater
	}
	if o.maxRestarts != nil {
		s.maxRestarts = *o.maxRestarts
	}
	if o.upgraderPodOptions != nil {
		s.podOpts = append([]nodepod.Option(nil), o.upgraderPodOptions...)
	}
	if o.updateCallBudget != nil {
		s.callBudget = *o.updateCallBudget
	}
}
