package strategy_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/strategy"
)

// Decisions as a decider would give them, for the strategy examples.
var (
	inPlace = strategy.Decision{Outcome: strategy.OutcomeInPlace, Message: "in place by kubernetes: machine.spec.version"}
	replace = strategy.Decision{Outcome: strategy.OutcomeReplace, Message: "cannot update in place: 1 change not covered: infrastructure.spec.ami.id (InfrastructureImage)"}
)

func show(s strategy.Strategy) {
	for _, d := range []strategy.Decision{{Outcome: strategy.OutcomeNoChange}, inPlace, replace} {
		c, ok := s.Choose(d)
		if !ok {
			fmt.Printf("%-8s -> (next strategy)\n", d.Outcome)
			continue
		}
		fmt.Printf("%-8s -> %s\n", d.Outcome, c.Method)
	}
}

func ExampleInPlaceStrategy() {
	show(strategy.InPlaceStrategy())
	// Output:
	// NoChange -> Skip
	// InPlace  -> InPlace
	// Replace  -> (next strategy)
}

func ExampleRollingReplaceStrategy() {
	s, _ := strategy.RollingReplaceStrategy(strategy.RollingUpdate{
		MaxSurge:       new(intstr.FromString("25%")),
		MaxUnavailable: new(intstr.FromString("25%")),
	})
	show(s)
	surge, unavailable, _ := strategy.RollingUpdate{
		MaxSurge:       new(intstr.FromString("25%")),
		MaxUnavailable: new(intstr.FromString("25%")),
	}.Limits(10)
	fmt.Println("of 10 machines: surge", surge, "unavailable", unavailable)
	// Output:
	// NoChange -> Skip
	// InPlace  -> Replace
	// Replace  -> Replace
	// of 10 machines: surge 3 unavailable 2
}

func ExampleReplaceFirstStrategy() {
	show(strategy.ReplaceFirstStrategy())
	// Output:
	// NoChange -> Skip
	// InPlace  -> ReplaceFirst
	// Replace  -> ReplaceFirst
}

func ExampleOnDeleteStrategy() {
	show(strategy.OnDeleteStrategy())
	// Output:
	// NoChange -> Skip
	// InPlace  -> OnDelete
	// Replace  -> OnDelete
}

func ExampleFallbackStrategy() {
	s, _ := strategy.FallbackStrategy(strategy.ReplaceFirstStrategy())
	show(s)
	c, _ := s.Choose(replace)
	fmt.Println(c.Strategy+":", c.Reason)
	// Output:
	// NoChange -> Skip
	// InPlace  -> InPlace
	// Replace  -> ReplaceFirst
	// fallback(replace-first): in place not possible, falling back: cannot update in place: 1 change not covered: infrastructure.spec.ami.id (InfrastructureImage)
}

func ExampleNeverReplaceStrategy() {
	show(strategy.NeverReplaceStrategy())
	// Output:
	// NoChange -> Skip
	// InPlace  -> InPlace
	// Replace  -> Blocked
}

// An ordered list: in place when possible, never replace the rest.
func ExampleStrategies() {
	s := strategy.Strategies{strategy.InPlaceStrategy(), strategy.NeverReplaceStrategy()}
	c, _ := s.Choose(replace)
	fmt.Println(c.Method, "by", c.Strategy)
	// Output:
	// Blocked by never-replace
}

// A cluster moving from Kubernetes 1.30 to 1.31: the control plane goes
// first, one machine at a time; then workers two at a time, with a canary
// of one; a machine marked do-not-disrupt is skipped.
func ExamplePlanner_Plan() {
	k8s, _ := strategy.ForCategories("kubernetes", diff.CategoryKubernetesVersion)
	planner, _ := strategy.NewPlanner(strategy.PlannerOptions{
		Decider: strategy.Updaters(k8s),
		Canary:  1,
		Clock:   clocktesting.NewFakePassiveClock(time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)),
	})
	versionChange := diff.ChangeSet{Changes: []diff.Change{{
		Object: diff.ObjectMachine, Field: "machine.spec.version", Op: diff.OpReplace,
		Old: "v1.30.4", New: "v1.31.1", Category: diff.CategoryKubernetesVersion,
	}}}
	machine := func(name string, age int) strategy.Machine {
		return strategy.Machine{Name: name, Version: "v1.30.4", Ready: true, Changes: versionChange,
			Created: time.Date(2025, 1, age, 0, 0, 0, 0, time.UTC)}
	}
	workers := []strategy.Machine{machine("md-a", 1), machine("md-b", 2), machine("md-c", 3), machine("md-d", 4)}
	workers[3].NodeAnnotations = map[string]string{strategy.DoNotDisruptAnnotation: "true"}
	plan, err := planner.Plan(context.Background(), strategy.Cluster{
		Name:          "prod",
		TargetVersion: "v1.31.1",
		ControlPlane:  []strategy.Machine{machine("cp-2", 2), machine("cp-1", 1)},
		Workers: []strategy.Group{{
			Name: "md", Machines: workers,
			Rollout: strategy.RollingUpdate{MaxSurge: new(intstr.FromInt32(0)), MaxUnavailable: new(intstr.FromInt32(2))},
			Budgets: []strategy.Budget{{Nodes: "50%", Reasons: []strategy.Reason{strategy.ReasonDrifted}}},
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = plan.WriteTable(os.Stdout)
	// Output:
	// BATCH     MACHINE  GROUP          METHOD   VERSION             REASON
	// 1         cp-1     control-plane  InPlace  v1.30.4 -> v1.31.1  in place by kubernetes: machine.spec.version
	// 2         cp-2     control-plane  InPlace  v1.30.4 -> v1.31.1  in place by kubernetes: machine.spec.version
	// 3 canary  md-a     md             InPlace  v1.30.4 -> v1.31.1  in place by kubernetes: machine.spec.version
	// 4         md-b     md             InPlace  v1.30.4 -> v1.31.1  in place by kubernetes: machine.spec.version
	// 4         md-c     md             InPlace  v1.30.4 -> v1.31.1  in place by kubernetes: machine.spec.version
	// -         md-d     md             Skip     v1.30.4             node has karpenter.sh/do-not-disrupt
	// health gate after batch 1, 2, 3
}

// A budget that allows no disruption during weekday business hours (UTC)
// and is inactive, so unlimited, outside them.
func ExampleBudget_Allowed() {
	b := strategy.Budget{Nodes: "0", Schedule: "0 9 * * 1-5", Duration: 8 * time.Hour}
	for _, at := range []string{"2026-01-05T10:00:00Z", "2026-01-05T18:00:00Z"} {
		now, _ := time.Parse(time.RFC3339, at)
		n, _ := b.Allowed(clocktesting.NewFakePassiveClock(now), 20)
		fmt.Println(at, n == math.MaxInt32, n)
	}
	_, err := strategy.Budget{Nodes: "10%", Schedule: "every day", Duration: time.Hour}.Allowed(clocktesting.NewFakePassiveClock(time.Now()), 20)
	fmt.Println(errors.Is(err, strategy.ErrInvalidBudget))
	// Output:
	// 2026-01-05T10:00:00Z false 0
	// 2026-01-05T18:00:00Z true 2147483647
	// true
}
