package timeline_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/simulator/timeline"
	"github.com/upgradekit/upgradekit/strategy"
)

// A two-machine rollout: one updated in place in two steps, one the
// rollout would wait at.
func ExampleWrite() {
	start := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return start.Add(time.Duration(m) * time.Minute) }
	res := &simulator.Result{
		Plan: &strategy.RolloutPlan{Cluster: "demo", Machines: []strategy.PlannedMachine{
			{Machine: "md-0-a", Group: "md-0", Method: strategy.MethodInPlace, Batch: 1},
			{Machine: "md-0-b", Group: "md-0", Method: strategy.MethodInPlace, Batch: 2},
		}},
		Events: []simulator.Event{
			{Machine: "md-0-a", Batch: 1, Method: strategy.MethodInPlace, Step: "drain", Start: at(0), End: at(2), Outcome: "Succeeded"},
			{Machine: "md-0-a", Batch: 1, Method: strategy.MethodInPlace, Step: "kubeadm", Start: at(2), End: at(8), Outcome: "Succeeded"},
			{Machine: "md-0-b", Batch: 2, Method: strategy.MethodInPlace, Step: "drain", Start: at(8), End: at(10), Outcome: "Blocked"},
		},
		Start: start, End: at(10),
	}
	var page strings.Builder
	if err := timeline.Write(&page, res, timeline.WithTitle("preview of demo"), timeline.WithTimeAxis("estimated time")); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(strings.Count(page.String(), "<rect"), "bars")
	fmt.Println(strings.Contains(page.String(), "blocked (‖)"))
	fmt.Println(timeline.Write(&page, nil))
	// Output:
	// 7 bars
	// true
	// timeline: no result to draw
}
