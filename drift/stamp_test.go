package drift_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/upgradekit/upgradekit/drift"
)

const prefix = "upgradekit.io"

func mustStamper(t testing.TB, h *drift.Hasher, opts ...drift.StamperOption) *drift.Stamper {
	t.Helper()
	s, err := drift.NewStamper(prefix, h, opts...)
	require.NoError(t, err)
	return s
}

func nodeClaim(name string) *metav1.ObjectMeta {
	return &metav1.ObjectMeta{Name: name, Labels: map[string]string{}}
}

func TestStampAndCheck(t *testing.T) {
	s := mustStamper(t, mustHasher(t, "v1"))
	spec := nodePoolTemplate()
	obj := nodeClaim("a")
	obj.Annotations = map[string]string{"keep": "me"}
	shared := obj.Annotations
	st, err := s.Stamp(obj, spec)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"keep": "me"}, shared, "the caller's map is not modified")
	require.Equal(t, st.Hash.String(), obj.Annotations[prefix+"/hash"])
	require.Equal(t, "v1+uk1", obj.Annotations[prefix+"/hash-version"])
	require.NotEmpty(t, obj.Annotations[prefix+"/hash-fields"])
	require.Less(t, len(obj.Annotations[prefix+"/hash-fields"]), 600, "fingerprints stay small")

	res := s.Compare(obj, st.Hash)
	require.Equal(t, drift.StateCurrent, res.State)
	require.NoError(t, res.Err)

	changed := nodePoolTemplate()
	changed.Spec.Taints[0].Value = "other"
	want, err := s.Compute(changed)
	require.NoError(t, err)
	require.Equal(t, drift.StateDrifted, s.Compare(obj, want.Hash).State)
}

func TestCheckKarpenterVersionRules(t *testing.T) {
	s := mustStamper(t, mustHasher(t, "v2"))
	desired, err := s.Compute(nodePoolTemplate())
	require.NoError(t, err)
	cases := []struct {
		name string
		ann  map[string]string
		want drift.State
		err  error
	}{
		{"not stamped", nil, drift.StateUnknown, drift.ErrNotStamped},
		{"hash without version", map[string]string{prefix + "/hash": desired.Hash.String()}, drift.StateUnknown, drift.ErrNotStamped},
		{"version without hash", map[string]string{prefix + "/hash-version": desired.Hash.Version}, drift.StateUnknown, drift.ErrNotStamped},
		{"current", map[string]string{prefix + "/hash": desired.Hash.String(), prefix + "/hash-version": desired.Hash.Version}, drift.StateCurrent, nil},
		{"drifted", map[string]string{prefix + "/hash": "0000000000000001", prefix + "/hash-version": desired.Hash.Version}, drift.StateDrifted, nil},
		{"other version is never drifted", map[string]string{prefix + "/hash": "0000000000000001", prefix + "/hash-version": "v1+uk1"}, drift.StateNeedsRestamp, nil},
		{"unknown future version", map[string]string{prefix + "/hash": "0000000000000001", prefix + "/hash-version": "v9+uk7"}, drift.StateNeedsRestamp, nil},
		{"garbage hash", map[string]string{prefix + "/hash": "not-a-hash", prefix + "/hash-version": desired.Hash.Version}, drift.StateUnknown, drift.ErrInvalidAnnotation},
		{"upper-case hash", map[string]string{prefix + "/hash": strings.ToUpper(desired.Hash.String()), prefix + "/hash-version": desired.Hash.Version}, drift.StateUnknown, drift.ErrInvalidAnnotation},
		{"garbage version", map[string]string{prefix + "/hash": desired.Hash.String(), prefix + "/hash-version": "v 2"}, drift.StateUnknown, drift.ErrInvalidAnnotation},
		{"empty version", map[string]string{prefix + "/hash": desired.Hash.String(), prefix + "/hash-version": ""}, drift.StateUnknown, drift.ErrInvalidAnnotation},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := &metav1.ObjectMeta{Annotations: tc.ann}
			res := s.Compare(obj, desired.Hash)
			require.Equal(t, tc.want, res.State, "state %s", res.State)
			if tc.err != nil {
				require.ErrorIs(t, res.Err, tc.err)
			} else {
				require.NoError(t, res.Err)
			}
			// The static check never reports drift unless the state is Drifted.
			c, err := drift.NewStaticHash(s, nodePoolTemplate())
			require.NoError(t, err)
			r, err := c.Check(context.Background(), obj)
			require.NoError(t, err)
			require.Equal(t, tc.want == drift.StateDrifted, r != nil)
		})
	}
}

func TestNewStamperValidation(t *testing.T) {
	h := mustHasher(t, "v1")
	for _, p := range []string{"", "Upper.io", "has space", "-bad.io"} {
		_, err := drift.NewStamper(p, h)
		require.ErrorIs(t, err, drift.ErrInvalidOption, p)
	}
	_, err := drift.NewStamper(prefix, nil)
	require.ErrorIs(t, err, drift.ErrInvalidOption)
	_, err = drift.NewStamper(prefix, h, drift.WithMaxFingerprintFields(-1))
	require.ErrorIs(t, err, drift.ErrInvalidOption)
}

func TestExplainFromFingerprints(t *testing.T) {
	s := mustStamper(t, mustHasher(t, "v1"))
	obj := nodeClaim("a")
	_, err := s.Stamp(obj, nodePoolTemplate())
	require.NoError(t, err)

	desired := nodePoolTemplate()
	desired.ObjectMeta.Labels["team"] = "risk"                                                                                    // second-level map: reported as metadata.labels
	desired.Spec.ExpireAfter = nil                                                                                                // removed
	desired.Spec.StartupTaints = append(desired.Spec.StartupTaints, corev1.Taint{Key: "x", Effect: corev1.TaintEffectNoSchedule}) // modified
	exp, err := s.Explain(context.Background(), obj, desired)
	require.NoError(t, err)
	require.Equal(t, "fingerprints", exp.Source)
	want := []drift.FieldChange{
		{Path: "metadata.labels", Kind: drift.ChangeKindModified},
		{Path: "spec.expireAfter", Kind: drift.ChangeKindRemoved},
		{Path: "spec.startupTaints", Kind: drift.ChangeKindModified},
	}
	require.Empty(t, cmp.Diff(want, exp.Changes))
	require.Zero(t, exp.Unnamed)

	// A field added at the top level.
	added := nodePoolTemplate()
	obj2 := nodeClaim("b")
	added.ObjectMeta = ObjectMeta{}
	_, err = s.Stamp(obj2, added)
	require.NoError(t, err)
	exp, err = s.Explain(context.Background(), obj2, nodePoolTemplate())
	require.NoError(t, err)
	require.Empty(t, cmp.Diff([]drift.FieldChange{
		{Path: "metadata.annotations", Kind: drift.ChangeKindAdded},
		{Path: "metadata.labels", Kind: drift.ChangeKindAdded},
	}, exp.Changes), "the most specific fields are named")
}

func TestExplainUnstructuredNamesRemovedFieldsWhenTold(t *testing.T) {
	s := mustStamper(t, mustHasher(t, "v1"))
	obj := nodeClaim("a")
	old := map[string]any{"spec": map[string]any{"version": "v1.33", "image": "ami-1"}}
	_, err := s.Stamp(obj, &unstructured.Unstructured{Object: old})
	require.NoError(t, err)
	desired := map[string]any{"spec": map[string]any{"version": "v1.33"}}
	exp, err := s.Explain(context.Background(), obj, desired)
	require.NoError(t, err)
	require.Empty(t, cmp.Diff([]drift.FieldChange{{Path: "spec", Kind: drift.ChangeKindModified}}, exp.Changes))
	require.Equal(t, 1, exp.Unnamed, "a removed map key cannot be named from the desired spec alone")

	exp, err = s.Explain(context.Background(), obj, desired, drift.WithKnownFields("spec.image"))
	require.NoError(t, err)
	require.Empty(t, cmp.Diff([]drift.FieldChange{{Path: "spec.image", Kind: drift.ChangeKindRemoved}}, exp.Changes))
	require.Zero(t, exp.Unnamed)
}

func TestExplainWithDiffer(t *testing.T) {
	s := mustStamper(t, mustHasher(t, "v1"))
	obj := nodeClaim("a")
	old := nodePoolTemplate()
	_, err := s.Stamp(obj, old)
	require.NoError(t, err)
	desired := nodePoolTemplate()
	desired.Spec.NodeClassRef.Name = "gpu"
	var gotOld, gotNew any
	d := drift.DifferFunc(func(_ context.Context, o, n any) ([]drift.FieldChange, error) {
		gotOld, gotNew = o, n
		return []drift.FieldChange{{Path: "spec.nodeClassRef.name", Kind: drift.ChangeKindModified, Old: "default", New: "gpu"}}, nil
	})
	exp, err := s.Explain(context.Background(), obj, desired, drift.WithOldSpec(old, d))
	require.NoError(t, err)
	require.Equal(t, "diff", exp.Source)
	require.Same(t, old, gotOld)
	require.Same(t, desired, gotNew)
	require.Equal(t, "gpu", exp.Changes[0].New)

	// The static check uses the differ as evidence when it can find the old spec.
	c, err := drift.NewStaticHash(s, desired, drift.WithOldSpecs(func(metav1.Object) (any, bool) { return old, true }, d))
	require.NoError(t, err)
	r, err := c.Check(context.Background(), obj)
	require.NoError(t, err)
	require.NotNil(t, r)
	require.Equal(t, drift.ReasonNameNodePoolDrifted, r.Name)
	require.Contains(t, r.Evidence, drift.Evidence{Kind: drift.EvidenceKindField, Key: "spec.nodeClassRef.name", Want: "gpu", Got: "default", Detail: "Modified"})
}

func TestExplainGarbageFingerprints(t *testing.T) {
	s := mustStamper(t, mustHasher(t, "v1"))
	desired := nodePoolTemplate()
	st, err := s.Compute(desired)
	require.NoError(t, err)
	for _, fields := range []string{"!!!", "", "Aw", "AgAAAAAA", "AQAAAAA"} {
		obj := &metav1.ObjectMeta{Annotations: map[string]string{
			prefix + "/hash": "0000000000000001", prefix + "/hash-version": st.Hash.Version, prefix + "/hash-fields": fields,
		}}
		exp, err := s.Explain(context.Background(), obj, desired)
		require.NoError(t, err, fields)
		require.Equal(t, "none", exp.Source, fields)
	}
}

func TestFingerprintsBoundedAndRoundTrip(t *testing.T) {
	spec := map[string]any{}
	for i := range 40 {
		inner := map[string]any{}
		for j := range 5 {
			inner[string(rune('a'+j))] = i*10 + j + 1
		}
		spec[string(rune('A'+i))] = inner
	}
	s := mustStamper(t, mustHasher(t, "v1"), drift.WithMaxFingerprintFields(50))
	st, err := s.Compute(spec)
	require.NoError(t, err)
	require.Equal(t, 50, st.Fields.Len())
	require.True(t, st.Fields.Truncated())
	back, err := drift.ParseFingerprints(st.Fields.String())
	require.NoError(t, err)
	require.Equal(t, st.Fields.String(), back.String())
	require.True(t, back.Truncated())

	// All 40 top-level fields are kept before any second-level one.
	paths := st.Fields.Paths()
	for i := range 40 {
		require.Equal(t, string(rune('A'+i)), paths[i])
	}

	// No fields annotation at all when disabled.
	s0 := mustStamper(t, mustHasher(t, "v1"), drift.WithMaxFingerprintFields(0))
	obj := nodeClaim("x")
	_, err = s0.Stamp(obj, spec)
	require.NoError(t, err)
	require.NotContains(t, obj.Annotations, prefix+"/hash-fields")
}
