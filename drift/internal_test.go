package drift

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRecoverInternal: a panic that reaches Hasher.run is reported as
// ErrInternal, not as bad input, so fuzz targets can tell the two apart.
func TestRecoverInternal(t *testing.T) {
	err := func() (err error) {
		defer recoverInternal(&err)
		panic("simulated bug in the encoder")
	}()
	require.ErrorIs(t, err, ErrInternal)
	require.NotErrorIs(t, err, ErrUnsupportedValue)
	var pe *PathError
	require.ErrorAs(t, err, &pe)
}

// TestSpecialFieldsResolveByName: the apimachinery fields read directly
// are found by name in the current release (so the fast paths are on),
// and a name or kind that does not match disables the fast path instead
// of reading the wrong field.
func TestSpecialFieldsResolveByName(t *testing.T) {
	for name, idx := range map[string]int{
		"Duration.Duration":   idxDurationValue,
		"IntOrString.Type":    idxIntOrStrType,
		"IntOrString.IntVal":  idxIntOrStrInt,
		"IntOrString.StrVal":  idxIntOrStrStr,
		"Unstructured.Object": idxUnstrObject,
	} {
		require.GreaterOrEqual(t, idx, 0, name)
	}
	require.Equal(t, pkMetaDuration, planFor(typMetaDuration).kind)
	require.Equal(t, pkIntOrString, planFor(typIntOrString).kind)
	require.Equal(t, pkUnstructured, planFor(typUnstructured).kind)
	require.Equal(t, -1, fieldIndex(typIntOrString, "Missing", reflect.Int64))
	require.Equal(t, -1, fieldIndex(typIntOrString, "StrVal", reflect.Int64))
}
