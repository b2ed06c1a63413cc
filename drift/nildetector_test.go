package drift_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgradekit/upgradekit/drift"
)

// TestNilDetector: a nil *Detector has no checks: nothing drifts, nothing
// panics, and With builds on it.
func TestNilDetector(t *testing.T) {
	ctx := context.Background()
	obj := &metav1.ObjectMeta{Name: "n1"}
	var d *drift.Detector

	r, err := d.First(ctx, obj)
	require.NoError(t, err)
	require.Nil(t, r)

	all, err := d.All(ctx, obj)
	require.NoError(t, err)
	require.Empty(t, all)

	rep, err := drift.DryRun(ctx, d, []metav1.Object{obj})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Total)
	require.Zero(t, rep.Drifted)
	require.Zero(t, rep.Failed)

	always := drift.CheckFunc(func(context.Context, metav1.Object) (*drift.Reason, error) {
		return &drift.Reason{Name: drift.ReasonNameNodePoolDrifted}, nil
	})
	r, err = d.With(always).First(ctx, obj)
	require.NoError(t, err)
	require.Equal(t, drift.ReasonNameNodePoolDrifted, r.Name)
}

// TestDetectorSkipsNilCheckFunc: a nil CheckFunc is a non-nil Check; it
// is skipped like a nil Check instead of panicking when run.
func TestDetectorSkipsNilCheckFunc(t *testing.T) {
	ctx := context.Background()
	obj := &metav1.ObjectMeta{Name: "n1"}
	var nilFunc drift.CheckFunc
	always := drift.CheckFunc(func(context.Context, metav1.Object) (*drift.Reason, error) {
		return &drift.Reason{Name: drift.ReasonNameAMIDrift}, nil
	})
	d := drift.NewDetector(nilFunc, nil, always).With(nilFunc)
	all, err := d.All(ctx, obj)
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.Equal(t, drift.ReasonNameAMIDrift, all[0].Name)
	r, err := d.First(ctx, obj)
	require.NoError(t, err)
	require.Equal(t, drift.ReasonNameAMIDrift, r.Name)
}
