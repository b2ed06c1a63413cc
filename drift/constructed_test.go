package drift_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgradekit/upgradekit/drift"
)

// TestZeroValuesDoNotPanic: checks and stampers not made by their
// constructors return ErrInvalidOption (or do nothing) instead of
// panicking.
func TestZeroValuesDoNotPanic(t *testing.T) {
	ctx := context.Background()
	obj := &metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{"a": "b"}}

	for name, s := range map[string]*drift.Stamper{"zero": {}, "nil": nil} {
		t.Run("Stamper "+name, func(t *testing.T) {
			_, err := s.Compute(map[string]any{"a": 1})
			require.ErrorIs(t, err, drift.ErrInvalidOption)
			_, err = s.Stamp(obj, map[string]any{"a": 1})
			require.ErrorIs(t, err, drift.ErrInvalidOption)
			res := s.Compare(obj, drift.Hash{Version: "v1+uk1", Value: 1})
			require.Equal(t, drift.StateUnknown, res.State)
			require.ErrorIs(t, res.Err, drift.ErrInvalidOption)
			_, err = s.Explain(ctx, obj, map[string]any{"a": 1})
			require.ErrorIs(t, err, drift.ErrInvalidOption)
			s.Apply(obj, drift.Stamp{Hash: drift.Hash{Version: "v1+uk1", Value: 1}})
			require.Equal(t, map[string]string{"a": "b"}, obj.Annotations, "nothing written")
			require.Nil(t, s.Hasher())
			_, err = drift.PlanVersionBump(ctx, []metav1.Object{obj}, drift.VersionBump{From: s, To: s})
			require.ErrorIs(t, err, drift.ErrInvalidOption)
		})
	}
	for name, c := range map[string]*drift.StaticHash{"zero": {}, "nil": nil} {
		t.Run("StaticHash "+name, func(t *testing.T) {
			_, err := c.Check(ctx, obj)
			require.ErrorIs(t, err, drift.ErrInvalidOption)
			require.Zero(t, c.Desired())
		})
	}
	for name, c := range map[string]*drift.Image{"zero": {}, "nil": nil} {
		t.Run("Image "+name, func(t *testing.T) {
			_, err := c.Check(ctx, obj)
			require.ErrorIs(t, err, drift.ErrInvalidOption)
		})
	}
}

// TestImageChooserErrorIsTyped: a chooser failure wraps ErrImageChooser
// and keeps the chooser's own error (and ErrNoImage, if it wrapped it).
func TestImageChooserErrorIsTyped(t *testing.T) {
	boom := errors.New("pricing API down")
	for _, cause := range []error{boom, drift.ErrNoImage} {
		chooser := drift.ImageChooserFunc(func(context.Context, map[string]string) (string, error) { return "", cause })
		c, err := drift.NewImage(chooser, func(metav1.Object) (string, bool) { return "ami-1", true })
		require.NoError(t, err)
		_, err = c.Check(context.Background(), &metav1.ObjectMeta{Name: "n1"})
		require.ErrorIs(t, err, drift.ErrImageChooser)
		require.ErrorIs(t, err, cause)
	}
}

// TestKarpenterLabelAliasesIsACopy: changing the returned map changes
// neither later calls nor a Requirements check built from it.
func TestKarpenterLabelAliasesIsACopy(t *testing.T) {
	a := drift.KarpenterLabelAliases()
	require.Equal(t, corev1.LabelTopologyZone, a[corev1.LabelFailureDomainBetaZone])
	opt := drift.WithLabelAliases(a)
	a[corev1.LabelFailureDomainBetaZone] = "mutated"
	require.Equal(t, corev1.LabelTopologyZone, drift.KarpenterLabelAliases()[corev1.LabelFailureDomainBetaZone])

	c, err := drift.NewRequirements([]corev1.NodeSelectorRequirement{
		{Key: corev1.LabelFailureDomainBetaZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"us-west-2a"}},
	}, opt)
	require.NoError(t, err)
	r, err := c.Check(context.Background(), &metav1.ObjectMeta{Labels: map[string]string{corev1.LabelTopologyZone: "us-west-2a"}})
	require.NoError(t, err)
	require.Nil(t, r, "the alias captured before the mutation applies")
}

// TestUnsatisfiableBounds: Lt MinInt matches no value and, as in
// Karpenter, a node without the label does not satisfy it. Gt MaxInt is
// DoesNotExist in Karpenter (a node without the label is compatible) and
// here too, so drift is never reported where Karpenter sees none.
func TestUnsatisfiableBounds(t *testing.T) {
	ctx := context.Background()
	minInt, maxInt := strconv.Itoa(math.MinInt), strconv.Itoa(math.MaxInt)
	cases := []struct {
		name    string
		reqs    []corev1.NodeSelectorRequirement
		labels  map[string]string
		drifted bool
	}{
		{"Lt MinInt, label absent", []corev1.NodeSelectorRequirement{req("gen", corev1.NodeSelectorOpLt, minInt)}, nil, true},
		{"Lt MinInt, label present", []corev1.NodeSelectorRequirement{req("gen", corev1.NodeSelectorOpLt, minInt)}, map[string]string{"gen": "5"}, true},
		{"Lt MinInt and NotIn, label absent", []corev1.NodeSelectorRequirement{
			req("gen", corev1.NodeSelectorOpLt, minInt), req("gen", corev1.NodeSelectorOpNotIn, "3"),
		}, nil, true},
		{"Gt MaxInt, label absent (Karpenter: DoesNotExist)", []corev1.NodeSelectorRequirement{req("gen", corev1.NodeSelectorOpGt, maxInt)}, nil, false},
		{"Gt MaxInt, label present", []corev1.NodeSelectorRequirement{req("gen", corev1.NodeSelectorOpGt, maxInt)}, map[string]string{"gen": "5"}, true},
		{"Gt 5, label absent", []corev1.NodeSelectorRequirement{req("gen", corev1.NodeSelectorOpGt, "5")}, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := drift.NewRequirements(tc.reqs)
			require.NoError(t, err)
			r, err := c.Check(ctx, &metav1.ObjectMeta{Name: "n1", Labels: tc.labels})
			require.NoError(t, err)
			require.Equal(t, tc.drifted, r != nil, "reason: %+v", r)
		})
	}
}
