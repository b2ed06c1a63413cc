package diff_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/upgradekit/upgradekit/diff"
)

func TestPatternMatch(t *testing.T) {
	m, c, u := fixture()
	m.Spec.Version = "v1.31.0"
	c.Spec.Files[0].Content = "x"
	u.Object["spec"].(map[string]any)["ami"] = map[string]any{"id": "ami-new"}
	cs, err := diff.Machines(state(), diff.State{Machine: m, Bootstrap: c, Infrastructure: u})
	require.NoError(t, err)
	require.Len(t, cs.Changes, 3)
	version, file, ami := cs.Changes[0], cs.Changes[1], cs.Changes[2]

	cases := []struct {
		pattern string
		matches []diff.Change
	}{
		{"machine.spec.version", []diff.Change{version}},
		{"machine.spec", []diff.Change{version}},
		{"machine", []diff.Change{version}},
		{"*.spec", []diff.Change{version, file, ami}},
		{"bootstrap.spec.files", []diff.Change{file}},
		{"bootstrap.spec.files[*].content", []diff.Change{file}},
		{"bootstrap.spec.files[*].path", nil},
		{"bootstrap.spec.**.content", []diff.Change{file}},
		{"infrastructure(AWSMachine).spec.ami", []diff.Change{ami}},
		{"infrastructure(DockerMachine).spec.ami", nil},
		{"*.spec.*.id", []diff.Change{ami}},
		{"bootstrap.spec.files.content", nil}, // an index is not a field name
	}
	for _, tc := range cases {
		t.Run(tc.pattern, func(t *testing.T) {
			p, err := diff.ParsePattern(tc.pattern)
			require.NoError(t, err)
			require.Equal(t, tc.pattern, p.String())
			var got []diff.Change
			for _, ch := range cs.Changes {
				if p.Match(ch) {
					got = append(got, ch)
				}
			}
			require.Equal(t, fieldsOf(diff.ChangeSet{Changes: tc.matches}), fieldsOf(diff.ChangeSet{Changes: got}))
		})
	}

	// Template changes are matched below spec.template, like options.
	ms := &clusterv1.MachineSet{Spec: clusterv1.MachineSetSpec{Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{Version: "v1.30.0"}}}}
	ms2 := ms.DeepCopy()
	ms2.Spec.Template.Spec.Version = "v1.31.0"
	ts, err := diff.Templates(diff.State{Machine: ms}, diff.State{Machine: ms2})
	require.NoError(t, err)
	p, err := diff.ParsePattern("machine.spec.version")
	require.NoError(t, err)
	require.True(t, p.Match(ts.Changes[0]))

	_, err = diff.ParsePattern("node.spec")
	require.ErrorIs(t, err, diff.ErrInvalidOption)
}
