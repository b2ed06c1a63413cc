package strategy

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/upgradekit/upgradekit/diff"
)

var (
	dInPlace = Decision{Outcome: OutcomeInPlace, Message: "in place"}
	dReplace = Decision{Outcome: OutcomeReplace, Message: "cannot update in place"}
	dNone    = Decision{Outcome: OutcomeNoChange, Message: "no changes"}
)

func mach(name, ver string, d Decision) Machine {
	return Machine{Name: name, Version: ver, Ready: true, Decision: &d}
}

func newTestPlanner(t *testing.T, opts ...PlannerOptions) *Planner {
	t.Helper()
	var o PlannerOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Clock == nil {
		o.Clock = at("2026-01-05T12:00:00Z")
	}
	p, err := NewPlanner(o)
	require.NoError(t, err)
	return p
}

func batchNames(p *RolloutPlan) [][]string {
	out := make([][]string, len(p.Batches))
	for i, b := range p.Batches {
		out[i] = b.Machines
	}
	return out
}

func count(n int32) *intstr.IntOrString { return new(intstr.FromInt32(n)) }

func TestPlanOrdersControlPlaneFirstOneAtATime(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	w := func(name string, age int, ready, empty bool) Machine {
		m := mach(name, "v1.30.1", dInPlace)
		m.Created, m.Ready, m.Empty = now.Add(time.Duration(age)*time.Hour), ready, empty
		return m
	}
	c := Cluster{
		TargetVersion: "v1.31.0",
		ControlPlane:  []Machine{mach("cp-b", "v1.30.1", dInPlace), mach("cp-a", "v1.30.1", dInPlace), mach("cp-c", "v1.31.0", dNone)},
		Workers: []Group{{Name: "md", Rollout: RollingUpdate{MaxSurge: count(0), MaxUnavailable: count(2)},
			Machines: []Machine{w("old", 0, true, false), w("new", 5, true, false), w("sick", 9, false, false), w("empty", 8, true, true), w("mid", 3, true, false)}}},
	}
	plan, err := newTestPlanner(t).Plan(context.Background(), c)
	require.NoError(t, err)
	want := [][]string{{"cp-a"}, {"cp-b"}, {"sick", "empty"}, {"old", "mid"}, {"new"}}
	require.Empty(t, cmp.Diff(want, batchNames(plan)))
	require.Equal(t, PhaseControlPlane, plan.Batches[1].Phase)
	require.True(t, plan.Batches[1].HealthGate)
	require.Equal(t, PhaseWorkers, plan.Batches[2].Phase)
	cp, ok := plan.Machine("cp-c")
	require.True(t, ok)
	require.Equal(t, MethodSkip, cp.Method)
	require.Equal(t, "no changes", cp.Reason)
	sick, _ := plan.Machine("sick")
	require.Equal(t, ReasonUnhealthy, sick.Disruption)
	require.Equal(t, 3, sick.Batch)
	require.Len(t, plan.Machines, 8)
}

func TestPlanRolloutLimitsAndMethods(t *testing.T) {
	machines := func(d Decision, n int) []Machine {
		var ms []Machine
		for i := range n {
			ms = append(ms, mach(string(rune('a'+i)), "", d))
		}
		return ms
	}
	tests := []struct {
		name     string
		strategy Strategy
		d        Decision
		rollout  RollingUpdate
		want     []int // batch sizes
		blocked  int
	}{
		{"replace surge 1 unavailable 0", nil, dReplace, RollingUpdate{}, []int{1, 1, 1, 1, 1}, 0},
		{"replace surge 1 unavailable 1", nil, dReplace, RollingUpdate{MaxUnavailable: count(1)}, []int{2, 2, 1}, 0},
		{"replace 40% / 20%: surge 2, unavailable 1", nil, dReplace, RollingUpdate{MaxSurge: new(intstr.FromString("40%")), MaxUnavailable: new(intstr.FromString("20%"))}, []int{3, 2}, 0},
		{"in place uses unavailable only", nil, dInPlace, RollingUpdate{MaxSurge: count(3), MaxUnavailable: count(2)}, []int{2, 2, 1}, 0},
		{"in place with maxUnavailable 0: one at a time, covered by a surge machine", nil, dInPlace, RollingUpdate{MaxSurge: count(3)}, []int{1, 1, 1, 1, 1}, 0},
		{"replace-first uses surge", ReplaceFirstStrategy(), dReplace, RollingUpdate{MaxSurge: count(2), MaxUnavailable: count(4)}, []int{2, 2, 1}, 0},
		{"replace-first with surge 0 goes one at a time", ReplaceFirstStrategy(), dReplace, RollingUpdate{MaxSurge: count(0), MaxUnavailable: count(4)}, []int{1, 1, 1, 1, 1}, 0},
		{"on-delete plans nothing", OnDeleteStrategy(), dReplace, RollingUpdate{}, nil, 0},
		{"never-replace blocks", NeverReplaceStrategy(), dReplace, RollingUpdate{}, nil, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := newTestPlanner(t).Plan(context.Background(), Cluster{Workers: []Group{{Name: "g", Machines: machines(tt.d, 5), Rollout: tt.rollout, Strategy: tt.strategy}}})
			require.NoError(t, err)
			var sizes []int
			for _, b := range plan.Batches {
				sizes = append(sizes, len(b.Machines))
			}
			require.Equal(t, tt.want, sizes)
			require.Equal(t, tt.blocked, plan.Summary()[MethodBlocked])
			for _, m := range plan.Machines {
				require.NotEmpty(t, m.Reason, m.Machine)
			}
		})
	}
}

func TestPlanBudgets(t *testing.T) {
	group := func(budgets ...Budget) Cluster {
		var ms []Machine
		for i := range 10 {
			m := mach(string(rune('a'+i)), "", dReplace)
			m.Empty = i < 2 // a, b empty
			ms = append(ms, m)
		}
		return Cluster{Workers: []Group{{Name: "g", Machines: ms, Budgets: budgets, Rollout: RollingUpdate{MaxSurge: count(10), MaxUnavailable: count(0)}}}}
	}
	tests := []struct {
		name     string
		budgets  []Budget
		sizes    []int
		skipped  int
		warnings int
	}{
		{"no budget: only rollout limits", nil, []int{10}, 0, 0},
		{"25% of 10 rounds up to 3", []Budget{{Nodes: "25%"}}, []int{3, 3, 3, 1}, 0, 0},
		{"drifted budget 2, empty unlimited", []Budget{{Nodes: "2", Reasons: []Reason{ReasonDrifted}}}, []int{4, 2, 2, 2}, 0, 0},
		{"zero for drifted skips the drifted ones", []Budget{{Nodes: "0", Reasons: []Reason{ReasonDrifted}}}, []int{2}, 8, 0},
		{"inactive window does not limit", []Budget{{Nodes: "0", Schedule: "0 0 * * *", Duration: time.Hour}}, []int{10}, 0, 0},
		{"active window limits", []Budget{{Nodes: "5", Schedule: "0 9 * * *", Duration: 8 * time.Hour}}, []int{5, 5}, 0, 0},
		{"malformed budget allows nothing and warns", []Budget{{Nodes: "5", Schedule: "not cron", Duration: time.Hour}}, nil, 10, 1},
		{"malformed percentage", []Budget{{Nodes: "120%"}, {Nodes: "x%"}}, nil, 10, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := newTestPlanner(t).Plan(context.Background(), group(tt.budgets...))
			require.NoError(t, err)
			var sizes []int
			for _, b := range plan.Batches {
				sizes = append(sizes, len(b.Machines))
			}
			require.Equal(t, tt.sizes, sizes)
			require.Equal(t, tt.skipped, plan.Summary()[MethodSkip])
			require.Len(t, plan.Warnings, tt.warnings)
			for _, w := range plan.Warnings {
				require.ErrorIs(t, w, ErrInvalidBudget)
				require.True(t, strings.HasPrefix(w.Field, "workers[g].budgets["), w.Field)
			}
			for _, m := range plan.Machines {
				if m.Method == MethodSkip {
					require.Contains(t, m.Reason, "disruption budget workers[g].budgets[")
					if tt.warnings > 0 {
						require.ErrorIs(t, m.Err, ErrInvalidBudget)
					}
				}
			}
		})
	}
}

func TestPlanProtectionsAndCircuitBreaker(t *testing.T) {
	ms := []Machine{mach("a", "", dReplace), mach("b", "", dReplace), mach("c", "", dReplace), mach("d", "", dReplace), mach("e", "", dReplace)}
	ms[0].Annotations = map[string]string{DoNotDisruptAnnotation: "true"}
	ms[1].NodeAnnotations = map[string]string{DoNotDisruptAnnotation: "true"}
	ms[2].PDBBlocked = true
	ms[3].Failed = true
	c := Cluster{Workers: []Group{{Name: "g", Machines: ms}}}

	plan, err := newTestPlanner(t, PlannerOptions{MaxFailures: 2}).Plan(context.Background(), c)
	require.NoError(t, err)
	require.False(t, plan.CircuitOpen)
	reasons := map[string]string{}
	for _, m := range plan.Machines {
		reasons[m.Machine] = string(m.Method) + ": " + m.Reason
	}
	require.Empty(t, cmp.Diff(map[string]string{
		"a": "Skip: machine has karpenter.sh/do-not-disrupt",
		"b": "Skip: node has karpenter.sh/do-not-disrupt",
		"c": "Skip: a PodDisruptionBudget forbids draining the node now",
		"d": "Skip: an earlier update failed; needs attention before it is tried again",
		"e": "Replace: cannot update in place",
	}, reasons))

	plan, err = newTestPlanner(t, PlannerOptions{MaxFailures: 1}).Plan(context.Background(), c)
	require.NoError(t, err)
	require.True(t, plan.CircuitOpen)
	require.Empty(t, plan.Batches)
	e, _ := plan.Machine("e")
	require.Contains(t, e.Reason, "circuit breaker open: 1 machines failed (limit 1)")
	require.Contains(t, plan.String(), "circuit breaker open")
}

func TestPlanCanary(t *testing.T) {
	var ms []Machine
	for i := range 6 {
		ms = append(ms, mach(string(rune('a'+i)), "", dReplace))
	}
	c := Cluster{Workers: []Group{{Name: "g1", Machines: ms[:4], Rollout: RollingUpdate{MaxSurge: count(3)}}, {Name: "g2", Machines: ms[4:], Rollout: RollingUpdate{MaxSurge: count(3)}}}}
	plan, err := newTestPlanner(t, PlannerOptions{Canary: 2}).Plan(context.Background(), c)
	require.NoError(t, err)
	require.Equal(t, [][]string{{"a", "b"}, {"c", "d"}, {"e", "f"}}, batchNames(plan))
	require.True(t, plan.Batches[0].Canary)
	require.True(t, plan.Batches[0].HealthGate)
	require.False(t, plan.Batches[1].Canary)
	require.False(t, plan.Batches[2].HealthGate)
}

func TestPlanVersionSkew(t *testing.T) {
	tests := []struct {
		name    string
		c       Cluster
		blocked map[string]bool
	}{
		{"one minor: fine", Cluster{TargetVersion: "v1.31.0",
			ControlPlane: []Machine{mach("cp", "v1.30.5", dReplace)},
			Workers:      []Group{{Name: "g", Machines: []Machine{mach("w", "v1.30.5", dReplace)}}}}, nil},
		{"control plane skipping a minor is blocked, so are workers", Cluster{TargetVersion: "v1.32.0",
			ControlPlane: []Machine{mach("cp", "v1.30.5", dReplace)},
			Workers:      []Group{{Name: "g", Machines: []Machine{mach("w", "v1.30.5", dReplace)}}}}, map[string]bool{"cp": true, "w": true}},
		{"a protected control plane machine holds workers back", Cluster{TargetVersion: "v1.31.0",
			ControlPlane: []Machine{mach("cp1", "v1.30.5", dReplace), {Name: "cp2", Version: "v1.30.5", Ready: true, Decision: &dReplace, Annotations: map[string]string{DoNotDisruptAnnotation: "true"}}},
			Workers:      []Group{{Name: "g", Machines: []Machine{mach("w", "v1.30.5", dReplace), mach("w-done", "v1.31.0", dNone)}}}}, map[string]bool{"w": true}},
		{"kubelet 3 minors behind the target blocks the control plane", Cluster{TargetVersion: "v1.31.0",
			ControlPlane: []Machine{mach("cp", "v1.30.5", dReplace)},
			Workers:      []Group{{Name: "g", Machines: []Machine{mach("w", "v1.30.5", dReplace), mach("ancient", "v1.27.3", dReplace)}}}}, map[string]bool{"cp": true, "w": true, "ancient": true}},
		{"workers may trail by 3 minors", Cluster{TargetVersion: "v1.31.0",
			ControlPlane: []Machine{mach("cp", "v1.30.5", dReplace)},
			Workers:      []Group{{Name: "g", Machines: []Machine{mach("old", "v1.28.3", dReplace)}}}}, nil},
		{"in place cannot skip a worker minor", Cluster{TargetVersion: "v1.31.0",
			ControlPlane: []Machine{mach("cp", "v1.31.0", dNone)},
			Workers:      []Group{{Name: "g", Rollout: RollingUpdate{MaxUnavailable: count(1)}, Machines: []Machine{mach("old", "v1.29.3", dInPlace), mach("new", "v1.29.3", dReplace)}}}}, map[string]bool{"old": true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := newTestPlanner(t).Plan(context.Background(), tt.c)
			require.NoError(t, err)
			got := map[string]bool{}
			for _, m := range plan.Machines {
				if m.Method == MethodBlocked {
					got[m.Machine] = true
					require.ErrorIs(t, m.Err, ErrVersionSkew)
					require.Equal(t, m.FromVersion, m.ToVersion, "a blocked machine keeps its version")
				}
			}
			if tt.blocked == nil {
				tt.blocked = map[string]bool{}
			}
			require.Equal(t, tt.blocked, got)
		})
	}
}

func TestPlanBadInput(t *testing.T) {
	ok := func() Machine { return mach("m", "v1.30.0", dReplace) }
	tests := []struct {
		name  string
		c     Cluster
		field string
	}{
		{"bad target", Cluster{TargetVersion: "one"}, "targetVersion"},
		{"bad machine version", Cluster{ControlPlane: []Machine{mach("cp", "x.y", dReplace)}}, "controlPlane[cp].version"},
		{"empty machine name", Cluster{ControlPlane: []Machine{mach("", "", dReplace)}}, "controlPlane.name"},
		{"duplicate machine", Cluster{ControlPlane: []Machine{ok()}, Workers: []Group{{Name: "g", Machines: []Machine{ok()}}}}, "workers[g].machines[m]: name also used by controlPlane[m]"},
		{"duplicate group", Cluster{Workers: []Group{{Name: "g"}, {Name: "g"}}}, "workers[1].name"},
		{"negative maxUnavailable", Cluster{Workers: []Group{{Name: "g", Rollout: RollingUpdate{MaxUnavailable: count(-1)}}}}, "workers[g].rollout"},
		{"bad percentage", Cluster{Workers: []Group{{Name: "g", Rollout: RollingUpdate{MaxSurge: new(intstr.FromString("lots"))}}}}, "maxSurge"},
		{"downgrade", Cluster{TargetVersion: "v1.29.0", ControlPlane: []Machine{ok()}}, "controlPlane[m].version"},
		{"changes and decision", Cluster{ControlPlane: []Machine{{Name: "m", Decision: &dReplace, Changes: mustChanges()}}}, "both changes and a decision"},
		{"version differs but no changes", Cluster{TargetVersion: "v1.31.0", ControlPlane: []Machine{mach("m", "v1.30.0", dNone)}}, "no changes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newTestPlanner(t).Plan(context.Background(), tt.c)
			require.ErrorIs(t, err, ErrInvalidCluster)
			require.Contains(t, err.Error(), tt.field)
		})
	}
	for field, o := range map[string]PlannerOptions{"PlannerOptions.Canary": {Canary: -1}, "PlannerOptions.MaxFailures": {MaxFailures: -3}} {
		_, err := NewPlanner(o)
		require.ErrorIs(t, err, ErrInvalidStrategy)
		require.ErrorContains(t, err, field)
	}
	// The zero value is the default planner: in place where a decider
	// allows it (none here, so every change replaces), the real clock.
	p, err := NewPlanner(PlannerOptions{})
	require.NoError(t, err)
	plan, err := p.Plan(context.Background(), Cluster{Name: "c", Workers: []Group{{Name: "md-0", Machines: []Machine{{Name: "m", Ready: true, Changes: mustChanges()}}}}})
	require.NoError(t, err)
	require.Len(t, plan.Machines, 1)
	require.Equal(t, MethodReplace, plan.Machines[0].Method)
	var nilPlanner *Planner
	_, err = nilPlanner.Plan(context.Background(), Cluster{})
	require.ErrorIs(t, err, ErrInvalidStrategy)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = newTestPlanner(t).Plan(ctx, Cluster{ControlPlane: []Machine{ok()}})
	require.ErrorIs(t, err, context.Canceled)
}

func TestPreviewOutputs(t *testing.T) {
	c := Cluster{Name: "c1", Workers: []Group{{Name: "g", Machines: []Machine{mach("a", "", dReplace), mach("b", "", dNone)},
		Budgets: []Budget{{Nodes: "1", Schedule: "bad", Duration: time.Hour, Reasons: []Reason{ReasonEmpty}}}}}}
	plan, err := newTestPlanner(t).Plan(context.Background(), c)
	require.NoError(t, err)
	js, err := plan.JSON()
	require.NoError(t, err)
	var back map[string]any
	require.NoError(t, json.Unmarshal(js, &back))
	require.Equal(t, "c1", back["cluster"])
	ms := back["machines"].([]any)
	require.Len(t, ms, 2)
	require.Equal(t, "Replace", ms[0].(map[string]any)["method"])
	require.Equal(t, float64(1), ms[0].(map[string]any)["batch"])
	require.Equal(t, "workers[g].budgets[0]", back["warnings"].([]any)[0].(map[string]any)["field"])
	want := `BATCH  MACHINE  GROUP  METHOD   VERSION  REASON
1      a        g      Replace  -        cannot update in place
-      b        g      Skip     -        no changes
warning: workers[g].budgets[0]: invalid disruption budget: schedule: "bad": expected exactly 5 fields, found 1: [bad]; allowing no disruption
`
	require.Empty(t, cmp.Diff(want, plan.String()))
}

func mustChanges() diff.ChangeSet {
	return diff.ChangeSet{Changes: []diff.Change{{Field: "machine.spec.version"}}}
}
