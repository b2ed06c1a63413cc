package strategy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// FuzzPlan feeds user-written strings (versions, rollout limits, budget
// counts and schedules) into a small cluster: the planner never panics,
// rejects input only with ErrInvalidCluster, and otherwise lists every
// machine once with a reason.
func FuzzPlan(f *testing.F) {
	f.Add("v1.31.0", "v1.30.2", "25%", "1", "10%", "0 9 * * 1-5", int64(8*time.Hour))
	f.Add("", "", "0", "0", "3", "", int64(0))
	f.Add("1.31", "v1.32.0", "-1", "150%", "-1", "61 * * * *", int64(-1))
	f.Add("v1.40.0", "v1.29.0", "abc", "%", "%", "@daily", int64(time.Minute))
	f.Add("v2", "v1.30", "100%", "100%", "100%", "TZ=UTC @hourly", int64(time.Hour))
	f.Fuzz(func(t *testing.T, target, ver, surge, unavail, nodes, schedule string, dur int64) {
		intOrStr := func(s string) *intstr.IntOrString { v := intstr.Parse(s); return &v }
		var ms []Machine
		for _, n := range []string{"a", "b", "c"} {
			ms = append(ms, Machine{Name: n, Version: ver, Ready: n != "b", Decision: &dReplace})
		}
		c := Cluster{
			TargetVersion: target,
			ControlPlane:  []Machine{{Name: "cp", Version: ver, Ready: true, Decision: &dInPlace}},
			Workers: []Group{{Name: "g", Machines: ms,
				Rollout: RollingUpdate{MaxSurge: intOrStr(surge), MaxUnavailable: intOrStr(unavail)},
				Budgets: []Budget{{Nodes: nodes, Schedule: schedule, Duration: time.Duration(dur)}}}},
		}
		plan, err := newFuzzPlanner(t).Plan(context.Background(), c)
		if err != nil {
			require.True(t, errors.Is(err, ErrInvalidCluster), "%v", err)
			return
		}
		require.Len(t, plan.Machines, 4)
		for _, m := range plan.Machines {
			require.NotEmpty(t, m.Reason)
		}
		for _, w := range plan.Warnings {
			require.ErrorIs(t, w, ErrInvalidBudget)
		}
	})
}

func newFuzzPlanner(t *testing.T) *Planner {
	p, err := NewPlanner(PlannerOptions{Clock: at("2026-01-05T12:00:00Z")})
	require.NoError(t, err)
	return p
}
