package strategy

import (
	"context"
	"fmt"
	"math/rand"
	"reflect"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/upgradekit/upgradekit/diff"
)

// scratchChangeSets builds change sets to decide: withVersion all change
// the Kubernetes version (so any decider finds a change no policy here
// ignores), the others do not. Some have more than eight changes (assign's
// stack buffers overflow) and one changes an assigned field (a Warning).
func scratchChangeSets(t *testing.T) (withVersion, without []diff.ChangeSet) {
	t.Helper()
	state := func(ver, ami, providerID string, files int, content string) diff.State {
		var fs []bootstrapv1.File
		for i := range 12 {
			c := "a"
			if i < files {
				c = content
			}
			fs = append(fs, bootstrapv1.File{Path: fmt.Sprintf("/etc/f%02d", i), Content: c})
		}
		return diff.State{
			Machine:   &clusterv1.Machine{Spec: clusterv1.MachineSpec{Version: ver, ClusterName: "c", ProviderID: providerID}},
			Bootstrap: &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{Files: fs}},
			Infrastructure: map[string]any{"kind": "AWSMachine", "spec": map[string]any{
				"ami": map[string]any{"id": ami}, "instanceType": "m5.large"}},
		}
	}
	cur := state("v1.30.4", "ami-1", "", 0, "")
	mk := func(des diff.State) diff.ChangeSet {
		cs, err := diff.Machines(cur, des)
		require.NoError(t, err)
		return cs
	}
	for _, ver := range []string{"v1.30.4", "v1.31.0"} {
		sets := []diff.ChangeSet{
			mk(state(ver, "ami-1", "", 0, "")),
			mk(state(ver, "ami-2", "", 0, "")),
			mk(state(ver, "ami-1", "", 1, "b")),
			mk(state(ver, "ami-1", "", 12, "b")),
			mk(state(ver, "ami-2", "", 12, "b")),
			mk(state(ver, "ami-1", "aws:///i-1", 0, "")),
			mk(state(ver, "ami-2", "aws:///i-1", 3, "b")),
		}
		if ver == "v1.30.4" {
			without = sets
		} else {
			withVersion = sets
		}
	}
	require.Equal(t, 0, without[0].Len())
	require.Equal(t, 1, withVersion[0].Len())
	require.Greater(t, withVersion[4].Len(), 8)
	return withVersion, without
}

// mustOK returns v, panicking on err (test setup only).
func mustOK[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// userChoose is a user's strategy function: it reads the whole Decision.
func userChoose(d Decision) (Choice, bool) {
	switch d.Outcome {
	case OutcomeInPlace:
		return Choice{Method: MethodInPlace, Reason: fmt.Sprintf("user: %v %d %s", d.Updaters(), d.InPlace.Len(), d.Message)}, true
	case OutcomeReplace:
		return Choice{Method: MethodReplaceFirst, Reason: fmt.Sprintf("user: %d uncovered, %d ignored: %s", d.Uncovered.Len(), d.Ignored.Len(), d.Message)}, true
	}
	return Choice{Method: MethodSkip, Reason: "user: nothing"}, true
}

// embeddedStrategies embeds Strategies, so it has Strategies' unexported
// methods, and overrides Choose: it is user code.
type embeddedStrategies struct{ Strategies }

func (e embeddedStrategies) Choose(d Decision) (Choice, bool) { return userChoose(d) }

// scratchStrategies are the strategies the oracle picks from: built-in,
// user-defined, and built-in ones around user ones.
func scratchStrategies(t *testing.T) []Strategy {
	t.Helper()
	rolling := mustOK(RollingReplaceStrategy(RollingUpdate{}))
	user := mustOK(NewStrategy("user", userChoose))
	onlyReplace := mustOK(NewStrategy("user-replace", func(d Decision) (Choice, bool) {
		if d.Outcome != OutcomeReplace {
			return Choice{}, false
		}
		return userChoose(d)
	}))
	return []Strategy{
		nil, InPlaceStrategy(), rolling, ReplaceFirstStrategy(), OnDeleteStrategy(), NeverReplaceStrategy(),
		mustOK(FallbackStrategy(ReplaceFirstStrategy())),
		mustOK(FallbackStrategy(Strategies{nil, OnDeleteStrategy()})),
		Strategies{InPlaceStrategy(), Strategies{ReplaceFirstStrategy()}},
		Strategies{InPlaceStrategy()}, // Replace decisions fall through to Blocked
		user,
		mustOK(FallbackStrategy(user)),
		Strategies{InPlaceStrategy(), onlyReplace},
		Strategies{InPlaceStrategy(), embeddedStrategies{}},
	}
}

// scratchDeciders are the planners' deciders: built-in ones (scratch
// capable) and a user's.
func scratchDeciders(t *testing.T) []Decider {
	t.Helper()
	k8s := mustOK(ForCategories("kubernetes", diff.CategoryKubernetesVersion))
	files := mustOK(ForPaths("files", FilesPaths()...))
	return []Decider{
		Updaters(),
		Updaters(k8s),
		Updaters(nil, files, k8s),
		mustOK(NewPolicy([]Rule{{Category: diff.CategoryImage, Action: ActionIgnore}, {Path: "bootstrap.spec.files", Action: ActionInPlace}}, ActionInPlace, k8s, files)),
		mustOK(NewPolicy([]Rule{{Category: diff.CategoryKubernetesVersion, Action: ActionInPlace, Updater: "kubernetes"}}, ActionReplace, k8s)),
		DeciderFunc(func(ctx context.Context, cs diff.ChangeSet) (Decision, error) {
			return Updaters(k8s).Decide(ctx, cs)
		}),
	}
}

// errorsByText compares errors by type and text: the two plans build
// their own error values.
var errorsByText = cmp.Comparer(func(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return reflect.TypeOf(a) == reflect.TypeOf(b) && a.Error() == b.Error()
})

// scratchCluster is randomCluster with about half of the machines given as
// change sets to decide, and strategies that include users'.
func scratchCluster(t *testing.T, r *rand.Rand, withVersion, without []diff.ChangeSet, strategies []Strategy) (Cluster, PlannerOptions) {
	t.Helper()
	c, opts := randomCluster(r)
	decide := func(m *Machine) {
		if r.Intn(2) == 0 {
			return
		}
		sets := without
		if m.Decision.Outcome != OutcomeNoChange {
			sets = withVersion
		}
		m.Decision, m.Changes = nil, sets[r.Intn(len(sets))]
	}
	for i := range c.ControlPlane {
		decide(&c.ControlPlane[i])
	}
	for gi := range c.Workers {
		g := &c.Workers[gi]
		g.Strategy = strategies[r.Intn(len(strategies))]
		for i := range g.Machines {
			decide(&g.Machines[i])
		}
	}
	opts.Strategy = strategies[r.Intn(len(strategies))]
	return c, opts
}

// TestPlanScratchOracle: planning with decisions built in per-Plan scratch
// gives the plan that deciding every machine into a Decision of its own
// gives, over random clusters, deciders and strategies.
func TestPlanScratchOracle(t *testing.T) {
	r, seed := planRand(t)
	withVersion, without := scratchChangeSets(t)
	strategies := scratchStrategies(t)
	deciders := scratchDeciders(t)
	var decided, machines int
	for i := range 600 {
		c, opts := scratchCluster(t, r, withVersion, without, strategies)
		opts.Decider = deciders[r.Intn(len(deciders))]
		p, err := NewPlanner(opts)
		require.NoError(t, err)
		copying, err := NewPlanner(opts)
		require.NoError(t, err)
		copying.copyDecisions = true

		want, wantErr := copying.Plan(context.Background(), c)
		got, err := p.Plan(context.Background(), c)
		where := fmt.Sprintf("cluster %d (seed %d)", i, seed)
		if wantErr != nil {
			require.EqualError(t, err, wantErr.Error(), where)
			continue
		}
		require.NoError(t, err, where)
		require.Empty(t, cmp.Diff(want, got, errorsByText), where)
		for _, m := range got.Machines {
			if m.Outcome != OutcomeNoChange || m.InPlaceFields != nil || m.UncoveredFields != nil {
				decided++
			}
		}
		machines += len(got.Machines)
	}
	t.Logf("%d machines, %d with changes", machines, decided)
	require.Positive(t, decided)
}

// TestPlanScratchIsUsed: with a built-in decider and built-in strategies
// the planner decides into scratch (fewer allocations than copying); a
// user's strategy or decider anywhere on the path turns it off.
func TestPlanScratchIsUsed(t *testing.T) {
	withVersion, _ := scratchChangeSets(t)
	k8s := mustOK(ForCategories("kubernetes", diff.CategoryKubernetesVersion))
	cluster := func(s Strategy) Cluster {
		c := Cluster{Name: "c", TargetVersion: "v1.31.0"}
		g := Group{Name: "g", Strategy: s}
		for i := range 40 {
			g.Machines = append(g.Machines, Machine{Name: fmt.Sprintf("m-%02d", i), Version: "v1.30.4", Ready: true, Changes: withVersion[i%len(withVersion)]})
		}
		c.Workers = append(c.Workers, g)
		return c
	}
	allocs := func(d Decider, s Strategy, copying bool) float64 {
		p := newTestPlanner(t, PlannerOptions{Decider: d})
		p.copyDecisions = copying
		c := cluster(s)
		return testing.AllocsPerRun(5, func() {
			_, err := p.Plan(context.Background(), c)
			require.NoError(t, err)
		})
	}
	builtin := mustOK(FallbackStrategy(Strategies{ReplaceFirstStrategy()}))
	user := mustOK(NewStrategy("user", userChoose))
	copied := allocs(Updaters(k8s), builtin, true)
	// Each machine decided into scratch saves at least its change set copy.
	require.Less(t, allocs(Updaters(k8s), builtin, false), copied-30, "built-in decider and strategy")
	require.Less(t, allocs(mustOK(NewPolicy(nil, ActionReplace, k8s)), builtin, false), copied-30, "policy")
	require.Less(t, allocs(Updaters(k8s), nil, false), copied-30, "the planner's default strategy")
	for name, s := range map[string]Strategy{
		"user":                 user,
		"fallback to user":     mustOK(FallbackStrategy(user)),
		"list with user":       Strategies{InPlaceStrategy(), user},
		"embedded Strategies":  embeddedStrategies{Strategies{InPlaceStrategy()}},
		"pointer to a list":    &Strategies{InPlaceStrategy()},
		"fallback to embedded": mustOK(FallbackStrategy(embeddedStrategies{})),
	} {
		require.False(t, scratchSafe(s, 0), name)
		require.GreaterOrEqual(t, allocs(Updaters(k8s), s, false), copied, name)
	}
}

// TestScratchSafeSelfReference: a Strategies list that holds itself is not
// trusted, and checking it terminates.
func TestScratchSafeSelfReference(t *testing.T) {
	ss := Strategies{InPlaceStrategy(), nil}
	ss[1] = ss
	require.False(t, scratchSafe(ss, 0))
	require.True(t, scratchSafe(Strategies{InPlaceStrategy(), Strategies{ReplaceFirstStrategy()}}, 0))
}

// TestPlanKeptDecisionsAreIndependent: a user's strategy, alone or behind
// a built-in one, and a user's decider may keep every Decision they see;
// each keeps its own change sets, as Decide promises, untouched by the
// machines planned after it.
func TestPlanKeptDecisionsAreIndependent(t *testing.T) {
	withVersion, _ := scratchChangeSets(t)
	k8s := mustOK(ForCategories("kubernetes", diff.CategoryKubernetesVersion))
	ref := Updaters(k8s)
	cluster := func(s Strategy) Cluster {
		c := Cluster{Name: "c", TargetVersion: "v1.31.0"}
		g := Group{Name: "g", Strategy: s}
		for i := range 3 * len(withVersion) {
			g.Machines = append(g.Machines, Machine{Name: fmt.Sprintf("m-%02d", i), Version: "v1.30.4", Ready: true, Changes: withVersion[i%len(withVersion)]})
		}
		c.Workers = append(c.Workers, g)
		return c
	}
	// check compares each kept decision with a fresh one for its change
	// set, and checks that no two share an array.
	check := func(name string, kept []Decision, sets []diff.ChangeSet) {
		t.Helper()
		require.Len(t, kept, len(sets), name)
		seen := map[*diff.Change]int{}
		for i, d := range kept {
			want, err := ref.Decide(context.Background(), sets[i])
			require.NoError(t, err)
			require.Empty(t, cmp.Diff(want, d, errorsByText, cmp.Exporter(func(reflect.Type) bool { return true })),
				"%s: decision %d", name, i)
			for _, cs := range []diff.ChangeSet{d.InPlace, d.Uncovered, d.Ignored} {
				for k := range cs.Changes {
					c := &cs.Changes[k]
					prev, dup := seen[c]
					require.False(t, dup, "%s: decisions %d and %d share a change", name, prev, i)
					seen[c] = i
				}
			}
			for k, cv := range d.Coverage {
				require.Same(t, &d.InPlace.Changes[k], cv.Change, "%s: decision %d: coverage points into InPlace", name, i)
			}
		}
	}
	var mu sync.Mutex
	var kept []Decision
	var sets []diff.ChangeSet
	keeper := func(next func(Decision) (Choice, bool)) Strategy {
		return mustOK(NewStrategy("keeper", func(d Decision) (Choice, bool) {
			mu.Lock()
			kept = append(kept, d)
			mu.Unlock()
			return next(d)
		}))
	}
	// The group's machines, in the order the planner decides them, with
	// the outcomes a strategy sees.
	order := func(c Cluster, only Outcome) []diff.ChangeSet {
		var out []diff.ChangeSet
		for _, m := range c.Workers[0].Machines {
			d, err := ref.Decide(context.Background(), m.Changes)
			require.NoError(t, err)
			if only == "" || d.Outcome == only {
				out = append(out, m.Changes)
			}
		}
		return out
	}
	replaceOnly := func(d Decision) (Choice, bool) {
		if d.Outcome != OutcomeReplace {
			return Choice{}, false
		}
		return userChoose(d)
	}
	for _, tc := range []struct {
		name string
		s    Strategy
		sees Outcome // "" for every decision
	}{
		{"user strategy", keeper(userChoose), ""},
		{"fallback to a user strategy", mustOK(FallbackStrategy(keeper(userChoose))), OutcomeReplace},
		{"list with a user strategy", Strategies{InPlaceStrategy(), keeper(replaceOnly)}, OutcomeReplace},
		{"list in a list with a user strategy", Strategies{InPlaceStrategy(), Strategies{nil, keeper(replaceOnly)}}, OutcomeReplace},
	} {
		kept, sets = nil, nil
		c := cluster(tc.s)
		p := newTestPlanner(t, PlannerOptions{Decider: ref})
		_, err := p.Plan(context.Background(), c)
		require.NoError(t, err, tc.name)
		sets = order(c, tc.sees)
		check(tc.name, kept, sets)
	}

	// A user's decider keeps what it returns; the planner's built-in
	// strategies see those very decisions, not copies in scratch.
	kept = nil
	user := DeciderFunc(func(ctx context.Context, cs diff.ChangeSet) (Decision, error) {
		d, err := ref.Decide(ctx, cs)
		mu.Lock()
		kept = append(kept, d)
		mu.Unlock()
		return d, err
	})
	c := cluster(mustOK(FallbackStrategy(ReplaceFirstStrategy())))
	p := newTestPlanner(t, PlannerOptions{Decider: user})
	_, err := p.Plan(context.Background(), c)
	require.NoError(t, err)
	check("user decider", kept, order(c, ""))
}

// TestPlanConcurrentScratch: Plan calls on one Planner from several
// goroutines each use scratch of their own (run with -race) and plan what
// they plan alone.
func TestPlanConcurrentScratch(t *testing.T) {
	withVersion, without := scratchChangeSets(t)
	r := rand.New(rand.NewSource(1))
	builtins := scratchStrategies(t)[:10]
	k8s := mustOK(ForCategories("kubernetes", diff.CategoryKubernetesVersion))
	p := newTestPlanner(t, PlannerOptions{Decider: Updaters(k8s), Strategy: mustOK(FallbackStrategy(ReplaceFirstStrategy()))})
	var clusters []Cluster
	var want []*RolloutPlan
	for len(clusters) < 16 {
		c, _ := scratchCluster(t, r, withVersion, without, builtins)
		plan, err := p.Plan(context.Background(), c)
		if err != nil {
			continue
		}
		clusters, want = append(clusters, c), append(want, plan)
	}
	var wg sync.WaitGroup
	got := make([][]*RolloutPlan, len(clusters))
	errs := make([][]error, len(clusters))
	for i := range clusters {
		got[i], errs[i] = make([]*RolloutPlan, 20), make([]error, 20)
		wg.Go(func() {
			for k := range got[i] {
				got[i][k], errs[i][k] = p.Plan(context.Background(), clusters[(i+k)%len(clusters)])
			}
		})
	}
	wg.Wait()
	for i := range got {
		for k, plan := range got[i] {
			require.NoError(t, errs[i][k])
			require.Empty(t, cmp.Diff(want[(i+k)%len(clusters)], plan, errorsByText), "goroutine %d, plan %d", i, k)
		}
	}
}
