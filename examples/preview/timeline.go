package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/simulator/timeline"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi/preview"
)

// writeTimeline draws the prediction with simulator/timeline, laid out as the
// estimate reads: the groups at the same time (the control plane first
// when the prediction says so), each wave after the last, an in-place
// machine as its drain then one bar per updater, a replaced one as one
// bar, and a blocked one as its drain, marked, in the group's first wave.
func writeTimeline(w io.Writer, pr *preview.Prediction, t preview.Timings) error {
	start := pr.At
	res := &simulator.Result{Plan: &strategy.RolloutPlan{Cluster: pr.Cluster}, Start: start, End: start}
	var cpEnd time.Time
	for _, g := range pr.Groups {
		from := start
		if pr.ControlPlaneFirst && g.Kind == "MachineDeployment" && !cpEnd.IsZero() {
			from = cpEnd
		}
		for wave := 1; wave <= max(g.Waves, 1); wave++ {
			end := from
			for _, m := range pr.Machines {
				inWave := m.Wave == wave || (wave == 1 && m.Method == strategy.MethodBlocked)
				if m.Group != g.Name || !inWave {
					continue
				}
				res.Plan.Machines = append(res.Plan.Machines, strategy.PlannedMachine{Machine: m.Name, Group: group(g), Method: m.Method, Batch: wave})
				for _, e := range events(m, wave, from, t) {
					res.Events = append(res.Events, e)
					end = later(end, e.End)
				}
			}
			from = end
		}
		if g.Kind == "KubeadmControlPlane" {
			cpEnd = from
		}
		res.End = later(res.End, from)
	}
	counts := pr.Count()
	order := "the groups roll at the same time"
	if pr.ControlPlaneFirst {
		order = "the control plane first, then the workers at the same time"
	}
	return timeline.Write(w, res, timeline.WithTitle("upgradekit preview of "+pr.Cluster), timeline.WithTimeAxis("estimated time"),
		timeline.WithoutBatchBands(), timeline.WithBatchName("wave"),
		timeline.WithSummary(fmt.Sprintf("%d in place, %d replaced, %d blocked, %d unchanged; about %s (%s)",
			counts[strategy.MethodInPlace], counts[strategy.MethodReplace], counts[strategy.MethodBlocked], counts[strategy.MethodSkip],
			strings.TrimSuffix(pr.Estimate.Round(time.Minute).String(), "0s"), order)))
}

// group is the timeline's group name: "" for the control plane.
func group(g preview.Group) string {
	if g.Kind == "KubeadmControlPlane" {
		return ""
	}
	return g.Name
}

// events are one machine's bars from from.
func events(m preview.Machine, batch int, from time.Time, t preview.Timings) []simulator.Event {
	ev := func(step string, d time.Duration, outcome string) simulator.Event {
		e := simulator.Event{Machine: m.Name, Batch: batch, Method: m.Method, Step: step, Start: from, End: from.Add(d), Outcome: outcome}
		from = e.End
		return e
	}
	switch m.Method {
	case strategy.MethodInPlace:
		out := []simulator.Event{ev("drain", t.Drain, "Succeeded")}
		for _, u := range m.Updaters {
			d, ok := t.Updaters[u]
			if !ok {
				d = t.Updater
			}
			out = append(out, ev(u, d, "Succeeded"))
		}
		return out
	case strategy.MethodReplace:
		return []simulator.Event{ev("replace", t.Replace, "Replaced")}
	case strategy.MethodBlocked:
		return []simulator.Event{ev("drain (blocked)", t.Drain, "Blocked")}
	}
	return nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
