package drift_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgradekit/upgradekit/drift"
)

type labelKey string

type labelValue string

type namedLabels map[labelKey]labelValue

type namedAny map[labelKey]any

// hidden is unexported and embedded: encoding/json promotes its fields,
// and reflection marks values read through it read-only.
type hidden struct {
	Labels map[string]string `json:"labels"`
	Extra  map[string]any    `json:"extra"`
}

type withHidden struct {
	hidden
	Name string `json:"name"`
}

// TestHashNamedMaps: maps with named string key and value types hash like
// map[string]string and map[string]any with the same entries, under every
// option that changes how maps are written, and so do maps reached through
// an unexported embedded struct.
func TestHashNamedMaps(t *testing.T) {
	exactSS := map[string]string{"b": "2", "a": "1", "empty": ""}
	namedSS := namedLabels{"b": "2", "a": "1", "empty": ""}
	nested := map[string]any{"x": []any{"y", 1.5}, "z": nil}
	exactSA := map[string]any{"k": "v", "n": int64(3), "m": nested, "e": ""}
	namedSA := namedAny{"k": "v", "n": int64(3), "m": nested, "e": ""}

	hashers := map[string]*drift.Hasher{
		"default":         mustHasher(t, "v1"),
		"keep zero":       mustHasher(t, "v1", drift.KeepZeroValues()),
		"keep entries":    mustHasher(t, "v1", drift.KeepZeroEntries("labels", "extra")),
		"ignore key":      mustHasher(t, "v1", drift.IgnorePaths("labels.a", "extra.k", "a", "k")),
		"slices as sets":  mustHasher(t, "v1", drift.SlicesAsSets()),
		"ignore hashtags": mustHasher(t, "v1", drift.IgnoreHashTags()),
	}
	for name, h := range hashers {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, mustHash(t, h, exactSS), mustHash(t, h, namedSS))
			require.Equal(t, mustHash(t, h, exactSA), mustHash(t, h, namedSA))
			require.NotEqual(t, mustHash(t, h, exactSS), mustHash(t, h, namedLabels{"b": "3", "a": "1"}))

			type exactSpec struct {
				Labels map[string]string `json:"labels"`
				Extra  map[string]any    `json:"extra"`
				Name   string            `json:"name"`
			}
			type namedSpec struct {
				Labels namedLabels `json:"labels"`
				Extra  namedAny    `json:"extra"`
				Name   string      `json:"name"`
			}
			want := mustHash(t, h, &exactSpec{Labels: exactSS, Extra: exactSA, Name: "n"})
			require.Equal(t, want, mustHash(t, h, &namedSpec{Labels: namedSS, Extra: namedSA, Name: "n"}))
			require.Equal(t, want, mustHash(t, h, &withHidden{hidden: hidden{Labels: exactSS, Extra: exactSA}, Name: "n"}))

			// Fingerprints see the same entries.
			_, fpExact, err := h.Fingerprint(&exactSpec{Labels: exactSS, Extra: exactSA, Name: "n"}, 0)
			require.NoError(t, err)
			_, fpNamed, err := h.Fingerprint(&namedSpec{Labels: namedSS, Extra: namedSA, Name: "n"}, 0)
			require.NoError(t, err)
			require.Equal(t, fpExact, fpNamed)
		})
	}
}

// TestHashDeepMapCycle: a map[string]any that contains itself below the
// depth at which cycle tracking starts is reported as a cycle, whether it
// is reached as map[string]any or through a named map type.
func TestHashDeepMapCycle(t *testing.T) {
	h := mustHasher(t, "v1")
	for _, named := range []bool{false, true} {
		loop := map[string]any{}
		var top any = loop
		for range 100 {
			if named {
				top = namedAny{"n": top}
			} else {
				top = map[string]any{"n": top}
			}
		}
		loop["self"] = top
		_, err := h.Hash(top)
		require.ErrorIs(t, err, drift.ErrCycle, "named=%v", named)
	}
}

// ignoredDuration has a field that encodes something even when zero
// (metav1.Duration writes "0s"), hidden by a hash tag.
type ignoredDuration struct {
	Name    string          `json:"name"`
	Timeout metav1.Duration `json:"timeout" hash:"ignore"`
}

// TestHashZeroSkipRespectsIgnoreHashTags: the shortcut that skips a
// zero-memory struct must agree with walking it, with and without
// IgnoreHashTags: a value and a pointer to it hash equal.
func TestHashZeroSkipRespectsIgnoreHashTags(t *testing.T) {
	for _, opts := range [][]drift.Option{nil, {drift.IgnoreHashTags()}} {
		h := mustHasher(t, "v1", opts...)
		type byValue struct {
			In ignoredDuration `json:"in"`
		}
		type byPointer struct {
			In *ignoredDuration `json:"in"`
		}
		require.Equal(t,
			mustHash(t, h, map[string]ignoredDuration{"a": {}}),
			mustHash(t, h, map[string]*ignoredDuration{"a": {}}), "opts=%d", len(opts))
		require.Equal(t,
			mustHash(t, h, &byValue{}),
			mustHash(t, h, &byPointer{In: &ignoredDuration{}}), "opts=%d", len(opts))
	}
}
