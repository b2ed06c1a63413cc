package simulator_test

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/upgradekit/upgradekit/simulator"
)

// BenchmarkSimulateInPlace simulates an in-place upgrade of a whole cluster
// (3 control plane machines, the rest workers in two machine deployments,
// v1.35.4 -> v1.36.3, CAPI's default one-at-a-time rollout): planning, the
// real kubeadm plans through nodeexec's journaled Runner against simulated
// hosts, cordons, Node updates through the simulator's in-memory API
// server and every invariant check. There is no peer that simulates
// rollouts in process, so only upgradekit runs; ns/machine is the figure
// to compare across sizes.
func BenchmarkSimulateInPlace(b *testing.B) {
	for _, nodes := range []int{100, 1000} {
		b.Run(fmt.Sprintf("upgradekit/nodes=%d", nodes), func(b *testing.B) { benchSimulate(b, nodes) })
	}
}

// BenchmarkSimulateInPlaceGrowth is BenchmarkSimulateInPlace at 100, 1,000
// and 10,000 nodes, to show how a simulation grows with the cluster: the
// per-machine figures (ns/machine, allocs/machine, B/machine) stay flat
// when it grows linearly. 10,000 nodes take tens of seconds per run: run
// it with -benchtime 1x.
func BenchmarkSimulateInPlaceGrowth(b *testing.B) {
	for _, nodes := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) { benchSimulate(b, nodes) })
	}
}

func benchSimulate(b *testing.B, nodes int) {
	b.ReportAllocs()
	workers := nodes - 3
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu0 := cpuTime(b)
	for b.Loop() {
		cl := simulator.NewCluster("bench").ControlPlane(3, "v1.35.4").
			MachineDeployment("md-0", workers/2, "v1.35.4").MachineDeployment("md-1", workers-workers/2, "v1.35.4")
		sim, err := simulator.NewSimulator(cl, simulator.Options{})
		if err != nil {
			b.Fatal(err)
		}
		res, err := sim.Run(context.Background(), simulator.Rollout{ToVersion: "v1.36.3"})
		if err != nil || len(res.Violations) > 0 || len(res.Failed) > 0 || len(res.Plan.Batches) != nodes {
			b.Fatal(err, res.Violations, res.Failed)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(nodes), "ns/machine")
	// CPU time of the whole process (GC included) is steadier than wall
	// time on a machine shared with other work.
	b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/float64(b.N)/float64(nodes), "cpu-ns/machine")
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N)/float64(nodes), "allocs/machine")
}

// cpuTime is the user and system CPU time the process has used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
