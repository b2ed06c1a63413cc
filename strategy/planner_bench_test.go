package strategy

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/upgradekit/upgradekit/diff"
)

const benchMachines = 10_000

// benchStates builds n small typed machine pairs: 3 control plane
// machines and 20 groups of workers; the version changes everywhere, the
// image changes on every third worker (so those need replacing).
func benchStates(n int) (cur, des []diff.State) {
	for i := range n {
		ami := "ami-1"
		if i%3 == 0 {
			ami = "ami-2"
		}
		mk := func(ver, ami string) diff.State {
			return diff.State{
				Machine: &clusterv1.Machine{Spec: clusterv1.MachineSpec{Version: ver, ClusterName: "c"}},
				Infrastructure: map[string]any{"kind": "AWSMachine", "spec": map[string]any{
					"ami": map[string]any{"id": ami}, "instanceType": "m5.large"}},
			}
		}
		cur = append(cur, mk("v1.30.4", "ami-1"))
		des = append(des, mk("v1.31.1", ami))
	}
	return cur, des
}

// benchCluster builds the planner's input around the change sets, as a
// controller would from its cache: slices are sized up front.
func benchCluster(changes []diff.ChangeSet) Cluster {
	const groups = 20
	n := len(changes)
	c := Cluster{Name: "big", TargetVersion: "v1.31.1", ControlPlane: make([]Machine, 0, 3), Workers: make([]Group, 0, groups)}
	epoch := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	per := (n - 3) / groups
	for i := range n {
		m := Machine{Name: fmt.Sprintf("m-%05d", i), Version: "v1.30.4", Ready: i%50 != 0, Empty: i%17 == 0,
			Created: epoch.Add(time.Duration((i*7919)%n) * time.Minute), Changes: changes[i]}
		if i < 3 {
			c.ControlPlane = append(c.ControlPlane, m)
			continue
		}
		g := min((i-3)/per, groups-1)
		if len(c.Workers) <= g {
			size := per
			if g == groups-1 {
				size = n - 3 - per*(groups-1)
			}
			c.Workers = append(c.Workers, Group{Name: fmt.Sprintf("md-%02d", g), Machines: make([]Machine, 0, size),
				Rollout: RollingUpdate{MaxSurge: new(intstr.FromString("10%")), MaxUnavailable: new(intstr.FromString("5%"))},
				Budgets: []Budget{{Nodes: "20%"}, {Nodes: "5", Reasons: []Reason{ReasonUnhealthy}, Schedule: "0 9 * * *", Duration: 8 * time.Hour}}})
		}
		c.Workers[g].Machines = append(c.Workers[g].Machines, m)
	}
	return c
}

func benchPlanner(b *testing.B) *Planner {
	k8s, err := ForCategories("kubernetes", diff.CategoryKubernetesVersion)
	if err != nil {
		b.Fatal(err)
	}
	fb, _ := FallbackStrategy(ReplaceFirstStrategy())
	p, err := NewPlanner(PlannerOptions{Decider: Updaters(k8s), Strategy: fb, Canary: 10, MaxFailures: 5,
		Clock: clocktesting.NewFakePassiveClock(time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC))})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkPlan plans a 10,000-machine cluster: decision per machine,
// strategy, skew rules, ordering and batching under rollout limits and
// budgets. The change sets are built once in setup. There is no in-process
// peer that plans CAPI/Karpenter rollouts as a library (Karpenter's and
// CAPI's planning live inside their controllers), so only upgradekit runs.
func BenchmarkPlan(b *testing.B) {
	cur, des := benchStates(benchMachines)
	changes := make([]diff.ChangeSet, benchMachines)
	for i := range cur {
		cs, err := diff.Machines(cur[i], des[i])
		if err != nil {
			b.Fatal(err)
		}
		changes[i] = cs
	}
	p := benchPlanner(b)
	b.Run("upgradekit", func(b *testing.B) {
		b.ReportAllocs()
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		for b.Loop() {
			plan, err := p.Plan(context.Background(), benchCluster(changes))
			if err != nil || len(plan.Machines) != benchMachines {
				b.Fatal(err)
			}
		}
		runtime.ReadMemStats(&ms1)
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchMachines, "ns/machine")
		b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(b.N)/benchMachines, "B/machine")
	})
}

// BenchmarkPlanWithDiff is BenchmarkPlan with diff.Machines run for every
// machine inside the loop: the whole path from typed objects to a plan.
// No in-process peer either (see BenchmarkPlan).
func BenchmarkPlanWithDiff(b *testing.B) {
	b.Run("upgradekit", func(b *testing.B) { benchPlanWithDiff(b, benchMachines) })
}

// BenchmarkPlanGrowth is BenchmarkPlanWithDiff at 100, 1,000 and 10,000
// machines, to check that the cost per machine (ns/machine, B/machine)
// stays flat as the cluster grows. No peer (see BenchmarkPlan).
func BenchmarkPlanGrowth(b *testing.B) {
	for _, n := range []int{100, 1_000, 10_000} {
		b.Run(fmt.Sprintf("upgradekit/machines=%d", n), func(b *testing.B) { benchPlanWithDiff(b, n) })
	}
}

func benchPlanWithDiff(b *testing.B, n int) {
	cur, des := benchStates(n)
	p := benchPlanner(b)
	d, err := diff.New()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	changes := make([]diff.ChangeSet, n)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	for b.Loop() {
		for i := range cur {
			cs, err := d.Machines(cur[i], des[i])
			if err != nil {
				b.Fatal(err)
			}
			changes[i] = cs
		}
		plan, err := p.Plan(context.Background(), benchCluster(changes))
		if err != nil || len(plan.Machines) != n {
			b.Fatal(err)
		}
	}
	runtime.ReadMemStats(&ms1)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/machine")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(b.N)/float64(n), "B/machine")
}
