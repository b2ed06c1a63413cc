package strategy

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

// randomCluster builds a cluster whose starting state respects the version
// skew policy (kubelets at most 3 minors behind and never ahead of the API
// server), so any violation found afterwards is the plan's doing.
func randomCluster(r *rand.Rand) (Cluster, PlannerOptions) {
	pick := func(xs ...string) string { return xs[r.Intn(len(xs))] }
	decision := func(changesVersion bool) *Decision {
		ds := []Decision{dInPlace, dReplace}
		if !changesVersion {
			ds = append(ds, dNone, dNone)
		}
		d := ds[r.Intn(len(ds))]
		return &d
	}
	c := Cluster{Name: "random", TargetVersion: pick("", "v1.31.0", "v1.31.0", "v1.32.1")}
	cpVer := pick("v1.30.2", "v1.31.0", "v1.29.9", "")
	if c.TargetVersion == "v1.32.1" && cpVer == "" {
		cpVer = "v1.31.0"
	}
	epoch := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	n := 0
	machine := func(ver string) Machine {
		n++
		m := Machine{
			Name: fmt.Sprintf("m-%04d", n), Version: ver, Ready: r.Intn(8) != 0, Empty: r.Intn(6) == 0,
			Created:    epoch.Add(time.Duration(r.Intn(1000)) * time.Hour),
			PDBBlocked: r.Intn(25) == 0, Failed: r.Intn(40) == 0,
		}
		if r.Intn(20) == 0 {
			m.Annotations = map[string]string{DoNotDisruptAnnotation: "true"}
		}
		if r.Intn(20) == 0 {
			m.NodeAnnotations = map[string]string{DoNotDisruptAnnotation: "true"}
		}
		changes := false
		if c.TargetVersion != "" && ver != "" {
			changes = ver != c.TargetVersion
			if version.MustParseGeneric(ver).GreaterThan(version.MustParseGeneric(c.TargetVersion)) {
				m.Version = c.TargetVersion
				changes = false
			}
		}
		m.Decision = decision(changes)
		return m
	}
	upgradedOK := cpVer != "" && c.TargetVersion != "" &&
		version.MustParseGeneric(c.TargetVersion).Minor() <= version.MustParseGeneric(cpVer).Minor()+1
	newest := cpVer
	for range 1 + r.Intn(5) {
		v := cpVer
		if upgradedOK && r.Intn(3) == 0 {
			v, newest = c.TargetVersion, c.TargetVersion // already upgraded
		}
		c.ControlPlane = append(c.ControlPlane, machine(v))
	}
	// Workers never newer than the oldest API server, at most 3 minors
	// behind the newest; one 4 minors behind the target forces a CP block.
	workerVers := []string{""}
	if cpVer != "" {
		lo, hi := version.MustParseGeneric(newest).Minor()-3, version.MustParseGeneric(cpVer).Minor()
		for m := lo; m <= hi; m++ {
			workerVers = append(workerVers, fmt.Sprintf("v1.%d.0", m))
		}
	}
	pct := func() *intstr.IntOrString {
		if r.Intn(2) == 0 {
			return new(intstr.FromInt32(int32(r.Intn(4))))
		}
		return new(intstr.FromString(fmt.Sprintf("%d%%", r.Intn(101))))
	}
	rolling, _ := RollingReplaceStrategy(RollingUpdate{})
	fallback, _ := FallbackStrategy(ReplaceFirstStrategy())
	strategies := []Strategy{nil, InPlaceStrategy(), rolling, ReplaceFirstStrategy(), OnDeleteStrategy(), fallback, NeverReplaceStrategy(),
		Strategies{InPlaceStrategy(), ReplaceFirstStrategy()}}
	for gi := range r.Intn(5) {
		g := Group{Name: fmt.Sprintf("g%d", gi), Strategy: strategies[r.Intn(len(strategies))]}
		g.Rollout = RollingUpdate{MaxSurge: pct(), MaxUnavailable: pct()}
		if isZero(g.Rollout.MaxSurge) && isZero(g.Rollout.MaxUnavailable) {
			g.Rollout.MaxSurge = new(intstr.FromInt32(1))
		}
		for range r.Intn(30) {
			g.Machines = append(g.Machines, machine(workerVers[r.Intn(len(workerVers))]))
		}
		for range r.Intn(3) {
			b := Budget{Nodes: pick("0", "1", "2", "5", "10%", "34%", "100%", "bad", "-1", "150%")}
			if r.Intn(2) == 0 {
				b.Schedule, b.Duration = pick("0 9 * * *", "0 * * * *", "@daily", "0 0 * * 0", "99 * * * *"), time.Duration(1+r.Intn(10))*time.Hour
			}
			if r.Intn(2) == 0 {
				b.Reasons = []Reason{[]Reason{ReasonDrifted, ReasonEmpty, ReasonUnhealthy}[r.Intn(3)]}
			}
			g.Budgets = append(g.Budgets, b)
		}
		c.Workers = append(c.Workers, g)
	}
	now := time.Date(2026, 1, 4, r.Intn(24), r.Intn(60), 0, 0, time.UTC)
	return c, PlannerOptions{Clock: clocktesting.NewFakePassiveClock(now), Canary: r.Intn(4), MaxFailures: r.Intn(6)}
}

// planRand is a random source seeded from the clock, or from PLAN_SEED to
// replay a failure, and its seed (logged, and for failure messages).
func planRand(t *testing.T) (*rand.Rand, int64) {
	t.Helper()
	seed := time.Now().UnixNano()
	if s := os.Getenv("PLAN_SEED"); s != "" { // replay a failure: PLAN_SEED=<seed>
		var err error
		seed, err = strconv.ParseInt(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d (replay with PLAN_SEED=%d)", seed, seed)
	return rand.New(rand.NewSource(seed)), seed
}

func TestPlanProperties(t *testing.T) {
	r, seed := planRand(t)
	const clusters = 1500
	var machines, batches, blocked, skipped, orders int
	for i := range clusters {
		c, opts := randomCluster(r)
		p, err := NewPlanner(opts)
		require.NoError(t, err)
		plan, err := p.Plan(context.Background(), c)
		require.NoError(t, err, "cluster %d (seed %d)", i, seed)
		checkPlan(t, p, c, plan, fmt.Sprintf("cluster %d (seed %d)", i, seed))
		if i%5 == 0 { // the same cluster with its machines listed in another order plans the same batches
			shuffled := c
			shuffled.ControlPlane = slices.Clone(c.ControlPlane)
			r.Shuffle(len(shuffled.ControlPlane), func(a, b int) {
				shuffled.ControlPlane[a], shuffled.ControlPlane[b] = shuffled.ControlPlane[b], shuffled.ControlPlane[a]
			})
			shuffled.Workers = slices.Clone(c.Workers)
			for gi := range shuffled.Workers {
				ms := slices.Clone(shuffled.Workers[gi].Machines)
				r.Shuffle(len(ms), func(a, b int) { ms[a], ms[b] = ms[b], ms[a] })
				shuffled.Workers[gi].Machines = ms
			}
			again, err := p.Plan(context.Background(), shuffled)
			require.NoError(t, err)
			require.Equal(t, batchNames(plan), batchNames(again), "cluster %d (seed %d): order of input changed the plan", i, seed)
			orders++
		}
		machines += len(plan.Machines)
		batches += len(plan.Batches)
		s := plan.Summary()
		blocked += s[MethodBlocked]
		skipped += s[MethodSkip]
	}
	t.Logf("%d random clusters (%d replanned shuffled): %d machines, %d batches, %d blocked, %d skipped", clusters, orders, machines, batches, blocked, skipped)
}

func checkPlan(t *testing.T, p *Planner, c Cluster, plan *RolloutPlan, where string) {
	t.Helper()
	in := map[string]*Machine{}
	groupOf := map[string]int{}
	for i := range c.ControlPlane {
		in[c.ControlPlane[i].Name], groupOf[c.ControlPlane[i].Name] = &c.ControlPlane[i], -1
	}
	for gi := range c.Workers {
		for i := range c.Workers[gi].Machines {
			m := &c.Workers[gi].Machines[i]
			in[m.Name], groupOf[m.Name] = m, gi
		}
	}
	// Every machine once, with a reason; batched exactly when disrupted.
	planned := map[string]PlannedMachine{}
	for _, m := range plan.Machines {
		_, dup := planned[m.Machine]
		require.False(t, dup, "%s: %s listed twice", where, m.Machine)
		planned[m.Machine] = m
		require.NotEmpty(t, m.Reason, "%s: %s has no reason", where, m.Machine)
		disrupts := m.Method == MethodInPlace || m.Method == MethodReplace || m.Method == MethodReplaceFirst
		require.Equal(t, disrupts, m.Batch > 0, "%s: %s %s batch %d", where, m.Machine, m.Method, m.Batch)
		src := in[m.Machine]
		require.NotNil(t, src, "%s: unknown machine %s", where, m.Machine)
		if m.Batch > 0 {
			require.False(t, src.Failed || src.PDBBlocked || src.Annotations[DoNotDisruptAnnotation] == "true" || src.NodeAnnotations[DoNotDisruptAnnotation] == "true",
				"%s: protected or failed machine %s planned", where, m.Machine)
			require.False(t, plan.CircuitOpen)
		}
		if src.Decision.Outcome == OutcomeNoChange {
			require.Equal(t, MethodSkip, m.Method)
		}
	}
	require.Len(t, planned, len(in), where)
	seen := map[string]bool{}
	workersStarted := false
	cpLeft := 0
	for _, m := range plan.Machines {
		if m.Role == RoleControlPlane && m.Batch > 0 {
			cpLeft++
		}
	}
	for bi, b := range plan.Batches {
		require.Equal(t, bi+1, b.Index)
		require.NotEmpty(t, b.Machines)
		for _, n := range b.Machines {
			require.False(t, seen[n], "%s: %s in two batches", where, n)
			seen[n] = true
			require.Equal(t, b.Index, planned[n].Batch)
		}
		if b.Phase == PhaseControlPlane {
			require.False(t, workersStarted, "%s: control plane batch %d after workers", where, b.Index)
			require.Len(t, b.Machines, 1, "%s: control plane one at a time", where)
			require.Equal(t, -1, groupOf[b.Machines[0]])
			cpLeft--
			continue
		}
		workersStarted = true
		require.Zero(t, cpLeft, "%s: worker batch %d before all control plane batches", where, b.Index)
		gi := groupOf[b.Machines[0]]
		require.GreaterOrEqual(t, gi, 0)
		g := c.Workers[gi]
		if b.Canary {
			require.LessOrEqual(t, len(b.Machines), p.canary)
		}
		surge, unavail, err := g.Rollout.Limits(len(g.Machines))
		require.NoError(t, err)
		var inPlace, repl, replFirst int
		for _, n := range b.Machines {
			require.Equal(t, gi, groupOf[n], "%s: batch %d mixes groups", where, b.Index)
			switch planned[n].Method {
			case MethodInPlace:
				inPlace++
			case MethodReplace:
				repl++
			case MethodReplaceFirst:
				replFirst++
			}
		}
		inPlaceOnSurge := 0
		if unavail == 0 {
			// CAPI covers one in-place update with one surge machine.
			require.LessOrEqual(t, inPlace, 1, "%s: batch %d: in place with maxUnavailable 0", where, b.Index)
			inPlaceOnSurge = inPlace
		} else {
			require.LessOrEqual(t, inPlace, unavail, "%s: batch %d: in place over maxUnavailable", where, b.Index)
		}
		onSurge := inPlaceOnSurge + max(0, repl-(unavail-inPlace+inPlaceOnSurge)) // fewest machines that must surge
		require.LessOrEqual(t, onSurge, surge, "%s: batch %d: unavailable over maxUnavailable", where, b.Index)
		require.LessOrEqual(t, replFirst+onSurge, max(surge, 1), "%s: batch %d: surge over maxSurge", where, b.Index)
		for i, bd := range g.Budgets {
			allowed, _ := bd.Allowed(clock.PassiveClock(p.clock), len(g.Machines))
			used := 0
			for _, n := range b.Machines {
				if bd.AppliesTo(planned[n].Disruption) {
					used++
				}
			}
			require.LessOrEqual(t, used, allowed, "%s: batch %d over budgets[%d] %+v", where, b.Index, i, bd)
		}
	}
	checkSkewOverPlan(t, c, plan, where)
}

// checkSkewOverPlan replays the plan batch by batch and checks the skew
// policy after each: no kubelet newer than the oldest API server, none more
// than 3 minors behind the newest, and no control plane machine moving more
// than one minor.
func checkSkewOverPlan(t *testing.T, c Cluster, plan *RolloutPlan, where string) {
	t.Helper()
	ver := map[string]*version.Version{}
	role := map[string]Role{}
	for _, m := range plan.Machines {
		role[m.Machine] = m.Role
		if m.FromVersion != "" {
			ver[m.Machine] = version.MustParseGeneric(m.FromVersion)
		}
		if m.Batch == 0 {
			require.Equal(t, m.FromVersion, m.ToVersion, "%s: %s not planned but changes version", where, m.Machine)
		}
		if m.Role == RoleControlPlane && m.Batch > 0 && m.FromVersion != "" && m.ToVersion != "" {
			from, to := version.MustParseGeneric(m.FromVersion), version.MustParseGeneric(m.ToVersion)
			require.LessOrEqual(t, to.Minor(), from.Minor()+1, "%s: %s skips a minor", where, m.Machine)
		}
	}
	check := func(step string) {
		var oldestAPI, newestAPI *version.Version
		for n, v := range ver {
			if role[n] != RoleControlPlane {
				continue
			}
			if oldestAPI == nil || v.LessThan(oldestAPI) {
				oldestAPI = v
			}
			if newestAPI == nil || newestAPI.LessThan(v) {
				newestAPI = v
			}
		}
		if oldestAPI == nil {
			return
		}
		for n, v := range ver {
			if role[n] != RoleWorker {
				continue
			}
			require.False(t, v.GreaterThan(oldestAPI), "%s: %s: kubelet %s on %s newer than API server %s", where, step, v, n, oldestAPI)
			require.LessOrEqual(t, newestAPI.Minor(), v.Minor()+3, "%s: %s: kubelet %s on %s too old for API server %s", where, step, v, n, newestAPI)
		}
	}
	check("start")
	for _, b := range plan.Batches {
		for _, n := range b.Machines {
			if tv := planned(plan, n).ToVersion; tv != "" {
				ver[n] = version.MustParseGeneric(tv)
			}
		}
		check(fmt.Sprintf("after batch %d", b.Index))
	}
	_ = c
}

func planned(plan *RolloutPlan, name string) PlannedMachine {
	m, _ := plan.Machine(name)
	return m
}
