package drift

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRecoverInternal: a panic that reaches Hasher.run is reported as
// ErrInternal, not as bad input, so fuzz targets can tell the two apart.
func TestRecoverInternal(t *testing.T) {
	err := func() (err error) {
		defer recoverInternal(&err)
		var m map[string]int
		m["x"] = 1 // a bug: write to a nil map
		return nil
	}()
	require.ErrorIs(t, err, ErrInternal)
	require.NotErrorIs(t, err, ErrUnsupportedValue)
	var pe *PathError
	require.ErrorAs(t, err, &pe)
}
