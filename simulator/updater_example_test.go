package simulator_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// ExampleOptions_machineUpdater runs a rollout whose in-place machines are
// updated by capi.MachineUpdater, called as Cluster API calls it, with the
// simulated kubelets running its upgrader pods. A worker's kubelet step
// keeps failing: the hook answers Failure, and the Result says why.
func ExampleOptions_machineUpdater() {
	cl := simulator.NewCluster("demo").ControlPlane(1, "v1.35.4").MachineDeployment("md-0", 2, "v1.35.4")
	faults := simulator.NewFaults(1).FailStep("demo-md-0-1", "kubelet", 100)
	sim, err := simulator.NewSimulator(cl, simulator.Options{Faults: faults, MachineUpdater: &capi.UpdaterOptions{RetryAfter: 30 * time.Second}})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := sim.Run(context.Background(), simulator.Rollout{ToVersion: "v1.36.3"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("UpdateMachine calls:", res.UpdateCalls, "violations:", len(res.Violations))
	fmt.Println("failed:", res.Failed, "left cordoned:", res.LeftCordoned)
	reason, _, _ := strings.Cut(res.Reasons["demo-md-0-1"], " with exit code")
	fmt.Println(reason)
	for _, e := range res.Events {
		if e.Machine == "demo-md-0-0" && strings.HasPrefix(e.Step, simulator.UpdateMachineStep) {
			fmt.Println(e.Machine, e.Step, e.Outcome, e.End.Sub(e.Start))
		}
	}
	// Output:
	// UpdateMachine calls: 6 violations: 0
	// failed: [demo-md-0-1] left cordoned: [demo-md-0-1]
	// in-place update failed: StepFailed: node demo-md-0-1: step kubelet failed
	// demo-md-0-0 UpdateMachine/Upgrading Waiting 5m20s
	// demo-md-0-0 UpdateMachine/Succeeded Succeeded 0s
}
