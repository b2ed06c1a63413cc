package errtext

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestQuote(t *testing.T) {
	require.Equal(t, `"a\x00b"`, Quote("a\x00b"))
	long := Quote(strings.Repeat("a", 1<<20))
	require.Less(t, len(long), MaxQuoted+40)
	require.True(t, strings.HasSuffix(long, "... (1048576 bytes)"), long)
}

func TestCut(t *testing.T) {
	errs := make([]error, 25)
	for i := range errs {
		errs[i] = errors.New("e")
	}
	got := Cut(errs)
	require.Len(t, got, MaxErrors+1)
	require.EqualError(t, got[MaxErrors], "... and 15 more")
	require.Len(t, Cut(errs[:3]), 3)
}
