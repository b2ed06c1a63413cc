package diff_test

import (
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/upgradekit/upgradekit/diff"
)

// How Cluster API sees numbers after an in-place extension's patches
// (internal/util/patch in sigs.k8s.io/cluster-api v1.14.2), which these
// tests reproduce with the same libraries:
//
//   - objects are unstructured content decoded by k8s.io/apimachinery's
//     util/json (sigs.k8s.io/json with PreserveInts): a literal with
//     neither fraction nor exponent that fits in an int64 is an int64,
//     every other number (8.0, 8e0, 9223372036854775808) a float64;
//   - ConvertToRawExtension re-marshals the object with encoding/json, so
//     before a patch is applied an integral float64 below 1e21 has become
//     an integer literal (8.0 -> "8", -0.0 -> "-0");
//   - the patch (evanphx/json-patch) copies its values' literals, and the
//     result is decoded by the same int64-or-float64 rule (patch.Patch);
//     an empty patch is not applied at all;
//   - go-cmp compares: an int64 never equals a float64, two int64 or two
//     float64 compare by value (-0.0 == 0.0).

// capiDecode decodes JSON as Cluster API's unstructured objects hold it.
func capiDecode(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, utiljson.Unmarshal(raw, &m))
	return m
}

// capiApply applies a JSON patch (RFC 6902) or, with merge, a merge patch
// to obj as Cluster API does and returns the patched object's spec.
func capiApply(t *testing.T, obj, patch []byte, merge bool) any {
	t.Helper()
	if string(patch) == "[]" || string(patch) == "{}" {
		return capiDecode(t, obj)["spec"] // not applied
	}
	remarshalled, err := json.Marshal(capiDecode(t, obj))
	require.NoError(t, err)
	var out []byte
	if merge {
		out, err = jsonpatch.MergePatch(remarshalled, patch)
	} else {
		p, derr := jsonpatch.DecodePatch(patch)
		require.NoError(t, derr)
		out, err = p.Apply(remarshalled)
	}
	require.NoError(t, err)
	return capiDecode(t, out)["spec"]
}

func TestStrictNumbers(t *testing.T) {
	type change struct {
		Field string
		Op    diff.Op
	}
	replaced := func(field string) []change { return []change{{"infrastructure.spec." + field, diff.OpReplace}} }
	for _, tc := range []struct {
		name     string
		cur, des string
		// strict is what StrictNumbers (and InPlaceUpdate) report,
		// lenient what the default comparison reports.
		strict, lenient []change
	}{
		{"integer against float", `{"n":8}`, `{"n":8.0}`, replaced("n"), nil},
		{"integer against exponent", `{"n":8}`, `{"n":8e0}`, replaced("n"), nil},
		{"float against integer", `{"n":8.0}`, `{"n":8}`, replaced("n"), nil},
		{"two float forms", `{"n":8.0}`, `{"n":80e-1}`, nil, nil},
		{"two floats", `{"n":2.5}`, `{"n":25e-1}`, nil, nil},
		{"zero and negative zero integers", `{"n":0}`, `{"n":-0}`, nil, nil},
		{"zero against negative zero float", `{"n":0}`, `{"n":-0.0}`, replaced("n"), nil},
		{"float zeros", `{"n":0.0}`, `{"n":-0.0}`, nil, nil},
		{"integers beyond 2^53", `{"n":9007199254740993}`, `{"n":9007199254740992}`, replaced("n"), replaced("n")},
		{"integer beyond 2^53 against the nearest float", `{"n":9007199254740993}`, `{"n":9007199254740993.0}`, replaced("n"), replaced("n")},
		{"int64 max against its float", `{"n":9223372036854775807}`, `{"n":9223372036854775808}`, replaced("n"), nil},
		{"beyond int64: floats", `{"n":9223372036854775808}`, `{"n":9.223372036854775808e18}`, nil, nil},
		{"1e21 forms", `{"n":1e21}`, `{"n":1000000000000000000000}`, nil, nil},
		{"number against string", `{"n":8}`, `{"n":"8"}`, replaced("n"), replaced("n")},
		{"in a list", `{"l":[1,8]}`, `{"l":[1,8.0]}`, replaced("l[1]"), nil},
		{"nested", `{"o":{"n":-12}}`, `{"o":{"n":-1.2e1}}`, replaced("o.n"), nil},
		{"float added", `{}`, `{"n":8.0}`, []change{{"infrastructure.spec.n", diff.OpAdd}}, []change{{"infrastructure.spec.n", diff.OpAdd}}},
		{"equal floats beside a change", `{"n":8.0,"s":"a"}`, `{"n":8.0,"s":"b"}`, replaced("s"), replaced("s")},
		{"negative zero float beside a change", `{"n":-0.0,"s":"a"}`, `{"n":-0.0,"s":"b"}`, replaced("s"), replaced("s")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur, des := infraJSON(tc.cur), infraJSON(tc.des)
			for _, mode := range []struct {
				name string
				opts []diff.Option
				want []change
			}{
				{"strict", []diff.Option{diff.StrictNumbers()}, tc.strict},
				{"in place", []diff.Option{diff.InPlaceUpdate()}, tc.strict},
				{"lenient", nil, tc.lenient},
			} {
				cs, err := diff.Objects(diff.ObjectInfrastructure, cur, des, mode.opts...)
				require.NoError(t, err)
				var got []change
				for _, c := range cs.Changes {
					got = append(got, change{c.Field, c.Op})
				}
				require.Empty(t, cmp.Diff(mode.want, got), "%s changes", mode.name)
				eq, err := diff.Equal(diff.State{Infrastructure: cur}, diff.State{Infrastructure: des}, mode.opts...)
				require.NoError(t, err)
				require.Equal(t, len(mode.want) == 0, eq, "%s Equal", mode.name)
				if mode.name == "lenient" {
					continue
				}
				// The patches make current what desired is, for Cluster API.
				want := capiDecode(t, des)["spec"]
				jp, err := cs.JSONPatch(diff.ObjectInfrastructure)
				require.NoError(t, err)
				require.Empty(t, cmp.Diff(want, capiApply(t, cur, jp, false)), "%s: JSON patch %s", mode.name, jp)
				mp, err := cs.MergePatch(diff.ObjectInfrastructure)
				require.NoError(t, err)
				require.Empty(t, cmp.Diff(want, capiApply(t, cur, mp, true)), "%s: merge patch %s", mode.name, mp)
			}
		})
	}
}

func TestStrictNumbersPatches(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cur, des  string
		jsonPatch string
		merge     string
	}{
		{"float written as float", `{"n":8}`, `{"n":8.0}`,
			`[{"op":"replace","path":"/spec/n","value":8.0}]`, `{"spec":{"n":8.0}}`},
		{"exponent written as float", `{"n":8}`, `{"n":8e0}`,
			`[{"op":"replace","path":"/spec/n","value":8.0}]`, `{"spec":{"n":8.0}}`},
		{"negative zero float", `{"n":0}`, `{"n":-0.0}`,
			`[{"op":"replace","path":"/spec/n","value":-0.0}]`, `{"spec":{"n":-0.0}}`},
		{"large float", `{}`, `{"n":1e21}`,
			`[{"op":"add","path":"/spec/n","value":1e+21}]`, `{"spec":{"n":1e+21}}`},
		{"float to integer: written although re-marshalling alone would do", `{"n":8.0}`, `{"n":8}`,
			`[{"op":"replace","path":"/spec/n","value":8}]`, `{"spec":{"n":8}}`},
		{"integral floats beside a change are restored", `{"n":8.0,"l":[1.0,2.5],"s":"a","i":3}`, `{"n":8.0,"l":[1.0,2.5],"s":"b","i":3}`,
			`[{"op":"replace","path":"/spec/l","value":[1.0,2.5]},{"op":"replace","path":"/spec/n","value":8.0},{"op":"replace","path":"/spec/s","value":"b"}]`,
			`{"spec":{"l":[1.0,2.5],"n":8.0,"s":"b"}}`},
		{"no spec changes: no patch", `{"n":8.0}`, `{"n":8.0}`, `[]`, `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, err := diff.Objects(diff.ObjectInfrastructure, infraJSON(tc.cur), infraJSON(tc.des), diff.InPlaceUpdate())
			require.NoError(t, err)
			jp, err := cs.JSONPatch(diff.ObjectInfrastructure)
			require.NoError(t, err)
			require.JSONEq(t, tc.jsonPatch, string(jp)) // JSONEq compares by value: check the text too
			require.Equal(t, compact(t, tc.jsonPatch), string(jp))
			mp, err := cs.MergePatch(diff.ObjectInfrastructure)
			require.NoError(t, err)
			require.Equal(t, compact(t, tc.merge), string(mp))
		})
	}
}

func compact(t *testing.T, s string) string {
	t.Helper()
	var v any
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&v))
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// TestStrictNumbersGoValues: unstructured content keeps its Go types:
// int64 and int are integers, float64 a float.
func TestStrictNumbersGoValues(t *testing.T) {
	obj := func(n any) map[string]any {
		return map[string]any{"kind": "AWSMachine", "spec": map[string]any{"n": n}}
	}
	for _, tc := range []struct {
		name     string
		cur, des any
		differ   bool
	}{
		{"int64 and int", int64(8), 8, false},
		{"int64 and float64", int64(8), float64(8), true},
		{"float64 and float32", float64(8), float32(8), false},
		{"json.Number literals", json.Number("8"), json.Number("8.0"), true},
		{"json.Number and int64", json.Number("8"), int64(8), false},
		{"uint64 beyond int64 is a float", uint64(1 << 63), float64(1 << 63), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, err := diff.Objects(diff.ObjectInfrastructure, obj(tc.cur), obj(tc.des), diff.StrictNumbers())
			require.NoError(t, err)
			require.Equal(t, tc.differ, !cs.Empty(), "%s", cs)
			lenient, err := diff.Objects(diff.ObjectInfrastructure, obj(tc.cur), obj(tc.des))
			require.NoError(t, err)
			require.True(t, lenient.Empty(), "%s", lenient)
		})
	}
}

func TestStrictNumbersShown(t *testing.T) {
	cs, err := diff.Objects(diff.ObjectInfrastructure, infraJSON(`{"n":8}`), infraJSON(`{"n":8.0}`), diff.StrictNumbers())
	require.NoError(t, err)
	require.Equal(t, "infrastructure.spec.n: replace 8 -> 8.0 (Other)", cs.Changes[0].String())
	b, err := json.Marshal(cs.Changes[0])
	require.NoError(t, err)
	require.Contains(t, string(b), `"old":8,"new":8.0`)

	// Without StrictNumbers patches write numbers as encoding/json does.
	cs, err = diff.Objects(diff.ObjectInfrastructure, infraJSON(`{"n":1}`), infraJSON(`{"n":8.0}`))
	require.NoError(t, err)
	jp, err := cs.JSONPatch(diff.ObjectInfrastructure)
	require.NoError(t, err)
	require.Equal(t, `[{"op":"replace","path":"/spec/n","value":8}]`, string(jp))
}
