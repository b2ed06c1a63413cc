package strategy_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/strategy"
)

// changes builds a change set: a version bump, a file change and, when
// image is set, an AWSMachine image change.
func changes(t *testing.T, image bool) diff.ChangeSet {
	t.Helper()
	m := &clusterv1.Machine{Spec: clusterv1.MachineSpec{Version: "v1.30.4"}}
	m2 := &clusterv1.Machine{Spec: clusterv1.MachineSpec{Version: "v1.31.1"}}
	c := &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{Files: []bootstrapv1.File{{Path: "/etc/motd", Content: "a"}}}}
	c2 := &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{Files: []bootstrapv1.File{{Path: "/etc/motd", Content: "b"}}}}
	infra := map[string]any{"kind": "AWSMachine", "spec": map[string]any{"ami": map[string]any{"id": "ami-1"}}}
	infra2 := map[string]any{"kind": "AWSMachine", "spec": map[string]any{"ami": map[string]any{"id": "ami-1"}}}
	if image {
		infra2["spec"] = map[string]any{"ami": map[string]any{"id": "ami-2"}}
	}
	cs, err := diff.Machines(diff.State{Machine: m, Bootstrap: c, Infrastructure: infra}, diff.State{Machine: m2, Bootstrap: c2, Infrastructure: infra2})
	require.NoError(t, err)
	return cs
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestUpdatersCompose(t *testing.T) {
	ctx := context.Background()
	k8s := must(strategy.ForCategories("kubernetes", diff.CategoryKubernetesVersion))
	files := must(strategy.ForPaths("files", "bootstrap.spec.files"))
	catchAll := must(strategy.NewUpdater("everything", func(diff.Change) bool { return true }))

	cases := []struct {
		name      string
		image     bool
		updaters  []strategy.Updater
		outcome   strategy.Outcome
		uncovered []string
		by        []string
	}{
		{"two updaters cover everything", false, []strategy.Updater{k8s, files}, strategy.OutcomeInPlace, nil, []string{"kubernetes", "files"}},
		{"one updater is not enough", false, []strategy.Updater{k8s}, strategy.OutcomeReplace, []string{"bootstrap.spec.files[path=/etc/motd].content"}, []string{"kubernetes"}},
		{"an image change declines", true, []strategy.Updater{k8s, files}, strategy.OutcomeReplace, []string{"infrastructure.spec.ami.id"}, []string{"kubernetes", "files"}},
		{"first covering updater wins", false, []strategy.Updater{files, catchAll}, strategy.OutcomeInPlace, nil, []string{"everything", "files"}},
		{"no updaters", false, nil, strategy.OutcomeReplace, []string{"machine.spec.version", "bootstrap.spec.files[path=/etc/motd].content"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := strategy.Updaters(tc.updaters...).Decide(ctx, changes(t, tc.image))
			require.NoError(t, err)
			require.Equal(t, tc.outcome, d.Outcome, d.Message)
			var unc []string
			for _, c := range d.Uncovered.Changes {
				unc = append(unc, c.Field)
				require.Contains(t, d.Message, c.Field, "the message names every uncovered field")
			}
			require.Equal(t, tc.uncovered, unc)
			require.ElementsMatch(t, tc.by, d.Updaters())
		})
	}

	d, err := strategy.Updaters(k8s, files).Decide(ctx, diff.ChangeSet{})
	require.NoError(t, err)
	require.Equal(t, strategy.OutcomeNoChange, d.Outcome)
}

func TestDecisionCarriesPatches(t *testing.T) {
	k8s := must(strategy.ForCategories("kubernetes", diff.CategoryKubernetesVersion))
	d, err := strategy.Updaters(k8s).Decide(context.Background(), changes(t, false))
	require.NoError(t, err)
	require.Equal(t, strategy.OutcomeReplace, d.Outcome)
	patch, err := d.InPlace.JSONPatch(diff.ObjectMachine)
	require.NoError(t, err)
	require.JSONEq(t, `[{"op":"replace","path":"/spec/version","value":"v1.31.1"}]`, string(patch))
	patch, err = d.InPlace.JSONPatch(diff.ObjectBootstrap)
	require.NoError(t, err)
	require.Equal(t, "[]", string(patch), "the declined file change is not in the in-place patch")
}

// TestDecisionChangeSetsAreIndependent: a Decision's change sets may be
// appended to and edited without touching each other or the input.
func TestDecisionChangeSetsAreIndependent(t *testing.T) {
	k8s := must(strategy.ForCategories("kubernetes", diff.CategoryKubernetesVersion))
	in := changes(t, true)
	before := append([]diff.Change(nil), in.Changes...)
	d, err := strategy.Updaters(k8s).Decide(context.Background(), in)
	require.NoError(t, err)
	require.Equal(t, 1, d.InPlace.Len())
	require.Equal(t, 2, d.Uncovered.Len())
	uncovered := append([]diff.Change(nil), d.Uncovered.Changes...)

	d.InPlace.Changes = append(d.InPlace.Changes, diff.Change{Field: "appended"})
	d.InPlace.Changes[0].Field = "edited"
	d.Coverage[0].Change.Field = "edited too"
	require.Equal(t, uncovered, d.Uncovered.Changes, "appending to InPlace wrote into Uncovered")
	require.Equal(t, before, in.Changes, "the input changed")
	require.Nil(t, d.Ignored.Changes)
}

func TestPolicy(t *testing.T) {
	ctx := context.Background()
	files := must(strategy.ForPaths("files", "bootstrap.spec.files"))
	k8s := must(strategy.ForCategories("kubernetes", diff.CategoryKubernetesVersion))

	p, err := strategy.NewPolicy([]strategy.Rule{
		{Category: diff.CategoryKubernetesVersion, Action: strategy.ActionInPlace, Updater: "kubernetes"},
		{Path: "bootstrap.spec.files", Action: strategy.ActionInPlace},
		{Category: diff.CategoryImage, Action: strategy.ActionIgnore},
	}, strategy.ActionReplace, k8s, files)
	require.NoError(t, err)
	d, err := p.Decide(ctx, changes(t, true))
	require.NoError(t, err)
	require.Equal(t, strategy.OutcomeInPlace, d.Outcome, d.Message)
	require.Equal(t, 1, d.Ignored.Len())
	require.Equal(t, 2, d.InPlace.Len())

	// The default decides what no rule selects.
	strict, err := strategy.NewPolicy([]strategy.Rule{{Category: diff.CategoryKubernetesVersion, Action: strategy.ActionInPlace}}, strategy.ActionReplace, k8s)
	require.NoError(t, err)
	d, err = strict.Decide(ctx, changes(t, false))
	require.NoError(t, err)
	require.Equal(t, strategy.OutcomeReplace, d.Outcome)
	require.Contains(t, d.Message, "bootstrap.spec.files[path=/etc/motd].content (Files)")

	// An InPlace rule whose updater does not cover the change declines.
	wrong, err := strategy.NewPolicy([]strategy.Rule{{Path: "bootstrap.spec.files", Action: strategy.ActionInPlace, Updater: "kubernetes"}}, strategy.ActionIgnore, k8s)
	require.NoError(t, err)
	d, err = wrong.Decide(ctx, changes(t, false))
	require.NoError(t, err)
	require.Equal(t, strategy.OutcomeReplace, d.Outcome)

	// Without updaters the policy covers its InPlace changes itself.
	bare, err := strategy.NewPolicy([]strategy.Rule{{Path: "*.spec", Action: strategy.ActionInPlace}}, strategy.ActionReplace)
	require.NoError(t, err)
	d, err = bare.Decide(ctx, changes(t, true))
	require.NoError(t, err)
	require.Equal(t, strategy.OutcomeInPlace, d.Outcome)
	require.Equal(t, []string{"policy"}, d.Updaters())

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = p.Decide(cancelled, changes(t, false))
	require.ErrorIs(t, err, context.Canceled)
}

func TestPolicyRejectsBadRules(t *testing.T) {
	k8s := must(strategy.ForCategories("kubernetes", diff.CategoryKubernetesVersion))
	cases := []struct {
		name  string
		rules []strategy.Rule
		def   strategy.Action
		err   error
	}{
		{"contradiction", []strategy.Rule{
			{Path: "bootstrap.spec.files", Action: strategy.ActionInPlace},
			{Path: "bootstrap.spec.files", Action: strategy.ActionReplace},
		}, strategy.ActionReplace, strategy.ErrInvalidRule},
		{"no selector", []strategy.Rule{{Action: strategy.ActionInPlace}}, strategy.ActionReplace, strategy.ErrInvalidRule},
		{"unknown action", []strategy.Rule{{Path: "machine.spec", Action: "Maybe"}}, strategy.ActionReplace, strategy.ErrInvalidRule},
		{"bad path", []strategy.Rule{{Path: "pod.spec", Action: strategy.ActionReplace}}, strategy.ActionReplace, strategy.ErrInvalidRule},
		{"unknown updater", []strategy.Rule{{Path: "machine.spec", Action: strategy.ActionInPlace, Updater: "etcd"}}, strategy.ActionReplace, strategy.ErrInvalidRule},
		{"updater on a replace rule", []strategy.Rule{{Path: "machine.spec", Action: strategy.ActionReplace, Updater: "kubernetes"}}, strategy.ActionReplace, strategy.ErrInvalidRule},
		{"bad default", nil, "", strategy.ErrInvalidRule},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := strategy.NewPolicy(tc.rules, tc.def, k8s)
			require.ErrorIs(t, err, tc.err)
		})
	}
	_, err := strategy.NewPolicy(nil, strategy.ActionReplace, k8s, k8s)
	require.ErrorIs(t, err, strategy.ErrInvalidRule)
	_, err = strategy.ForPaths("x", "nope.spec")
	require.ErrorIs(t, err, strategy.ErrInvalidRule)
	_, err = strategy.ForCategories("x")
	require.ErrorIs(t, err, strategy.ErrInvalidRule)
	_, err = strategy.NewUpdater("", nil)
	require.ErrorIs(t, err, strategy.ErrInvalidRule)
}

func TestKubeadmCategories(t *testing.T) {
	u := must(strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...))
	require.True(t, u.Covers(diff.Change{Category: diff.CategoryKubernetesVersion}))
	// Everything the kubeadm executor does not apply and verify on the node
	// stays out of the default accepted set: accepting a kubelet argument
	// or an etcd image change would mark the machine up to date while the
	// node keeps the old configuration.
	for _, c := range []diff.Category{diff.CategoryEtcdVersion, diff.CategoryAddons, diff.CategoryControlPlaneConfig,
		diff.CategoryKubeletConfig, diff.CategoryKubeadmConfig, diff.CategoryImage, diff.CategoryFiles, diff.CategoryUsers, diff.CategoryDisks} {
		require.False(t, u.Covers(diff.Change{Category: c}), c)
	}
}

// TestForCategoriesRejectsUnknownCategories: a typo would cover nothing and
// every machine would be replaced; it is a typed error listing the valid
// categories. Categories of one's own rules go through ForCustomCategories.
func TestForCategoriesRejectsUnknownCategories(t *testing.T) {
	_, err := strategy.ForCategories("kubeadm", diff.CategoryKubernetesVersion, "KubernetesVerison")
	require.ErrorIs(t, err, strategy.ErrInvalidRule)
	require.Contains(t, err.Error(), `unknown category "KubernetesVerison"`)
	require.Contains(t, err.Error(), "KubernetesVersion, EtcdVersion")

	for _, c := range diff.BuiltinCategories() {
		_, err := strategy.ForCategories("one", c)
		require.NoError(t, err, c)
	}

	mine := diff.Category("MyAgentConfig")
	u, err := strategy.ForCustomCategories("agent", mine)
	require.NoError(t, err)
	require.True(t, u.Covers(diff.Change{Category: mine}))
	require.False(t, u.Covers(diff.Change{Category: diff.CategoryFiles}))
	_, err = strategy.ForCustomCategories("agent", "")
	require.ErrorIs(t, err, strategy.ErrInvalidRule)
}
