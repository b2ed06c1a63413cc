package drift_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/drift"
)

type panicText struct{ S string }

func (panicText) MarshalText() ([]byte, error) { panic("text boom") }

type panicZero struct{ N int }

func (panicZero) IsZero() bool { panic("zero boom") }

type textKey string

func (textKey) MarshalText() ([]byte, error) { panic("key boom") }

// TestHashUserPanics: a panic in a user MarshalJSON, MarshalText or IsZero
// is bad input (ErrUnsupportedValue) naming the field, never ErrInternal,
// which is kept for bugs in drift itself.
func TestHashUserPanics(t *testing.T) {
	cases := []struct {
		name string
		opts []drift.Option
		v    any
		path string
	}{
		{"MarshalJSON", nil, &struct {
			M panicMarshaler `json:"m"`
		}{}, "m"},
		{"MarshalText", nil, &struct {
			T panicText `json:"t"`
		}{}, "t"},
		{"map key MarshalText", nil, &struct {
			M map[textKey]string `json:"m"`
		}{M: map[textKey]string{"a": "b"}}, "m"},
		{"IsZero", []drift.Option{drift.KeepZeroValues()}, &struct {
			Z panicZero `json:"z,omitzero"`
		}{}, "z"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := mustHasher(t, "v1", c.opts...).Hash(c.v)
			require.ErrorIs(t, err, drift.ErrUnsupportedValue)
			require.NotErrorIs(t, err, drift.ErrInternal)
			var pe *drift.PathError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, c.path, pe.Path)
		})
	}
}

// TestHasherNotConstructed: a zero or nil Hasher returns ErrInvalidOption
// instead of panicking.
func TestHasherNotConstructed(t *testing.T) {
	for name, h := range map[string]*drift.Hasher{"zero": {}, "nil": nil} {
		t.Run(name, func(t *testing.T) {
			_, err := h.Hash(map[string]any{"a": "b"})
			require.ErrorIs(t, err, drift.ErrInvalidOption)
			_, _, err = h.Fingerprint(map[string]any{"a": "b"}, 0)
			require.ErrorIs(t, err, drift.ErrInvalidOption)
			require.Empty(t, h.Version())
		})
	}
}

// TestNewHasherVersionRules: the documented rules are the enforced ones:
// 1 to MaxVersionLen characters of [A-Za-z0-9._-], no '+'.
func TestNewHasherVersionRules(t *testing.T) {
	longest := strings.Repeat("v", drift.MaxVersionLen)
	h := mustHasher(t, longest)
	require.Len(t, h.Version(), 63)
	for _, bad := range []string{"", "v1+extra", "+", longest + "v", "a/b"} {
		_, err := drift.NewHasher(bad)
		require.ErrorIs(t, err, drift.ErrInvalidOption, "version %q", bad)
	}
	for _, good := range []string{"v1", "A.b_c-9"} {
		_, err := drift.NewHasher(good)
		require.NoError(t, err, "version %q", good)
	}
}
