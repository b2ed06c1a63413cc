package diff_test

import (
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/upgradekit/upgradekit/diff"
)

// infraJSON is an infrastructure machine whose spec is given as JSON.
func infraJSON(spec string) []byte {
	return []byte(`{"apiVersion":"infrastructure.cluster.x-k8s.io/v1beta2","kind":"AWSMachine","metadata":{"name":"m"},"spec":` + spec + `}`)
}

// specOf decodes an object's spec.
func specOf(t *testing.T, obj []byte) any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(obj, &m))
	return m["spec"]
}

func TestStrictEmpty(t *testing.T) {
	type change struct {
		Field string
		Op    diff.Op
	}
	for _, tc := range []struct {
		name     string
		cur, des string
		// strict is what StrictEmpty() reports; by default none of these
		// pairs differ except where lenient says so.
		strict  []change
		lenient []change
	}{
		{"empty string against absent", `{"a":"x","s":""}`, `{"a":"x"}`, []change{{"infrastructure.spec.s", diff.OpRemove}}, nil},
		{"absent against empty string", `{"a":"x"}`, `{"a":"x","s":""}`, []change{{"infrastructure.spec.s", diff.OpAdd}}, nil},
		{"empty list against absent", `{"l":[]}`, `{}`, []change{{"infrastructure.spec.l", diff.OpRemove}}, nil},
		{"empty object against absent", `{}`, `{"o":{}}`, []change{{"infrastructure.spec.o", diff.OpAdd}}, nil},
		{"nested empty object against absent", `{"o":{"p":{}}}`, `{}`, []change{{"infrastructure.spec.o", diff.OpRemove}}, nil},
		{"nested empty against empty object", `{"o":{"p":""}}`, `{"o":{}}`, []change{{"infrastructure.spec.o.p", diff.OpRemove}}, nil},
		{"value to empty string is a replacement", `{"s":"x"}`, `{"s":""}`, []change{{"infrastructure.spec.s", diff.OpReplace}}, []change{{"infrastructure.spec.s", diff.OpRemove}}},
		{"empty string to value is a replacement", `{"s":""}`, `{"s":"x"}`, []change{{"infrastructure.spec.s", diff.OpReplace}}, []change{{"infrastructure.spec.s", diff.OpAdd}}},
		{"null against absent", `{"n":null}`, `{}`, []change{{"infrastructure.spec.n", diff.OpRemove}}, nil},
		{"absent against null", `{}`, `{"n":null}`, []change{{"infrastructure.spec.n", diff.OpAdd}}, nil},
		{"empty object against null", `{"n":{}}`, `{"n":null}`, []change{{"infrastructure.spec.n", diff.OpRemove}}, nil},
		{"empty list element", `{"l":["a"]}`, `{"l":["a",""]}`, []change{{"infrastructure.spec.l[1]", diff.OpAdd}}, []change{{"infrastructure.spec.l[1]", diff.OpAdd}}},
		{"object absent in desired", `{"o":{"a":"1","l":["x"],"e":{}}}`, `{}`,
			[]change{{"infrastructure.spec.o.a", diff.OpRemove}, {"infrastructure.spec.o.e", diff.OpRemove}, {"infrastructure.spec.o.l[0]", diff.OpRemove}},
			[]change{{"infrastructure.spec.o.a", diff.OpRemove}, {"infrastructure.spec.o.l[0]", diff.OpRemove}}},
		{"object emptied in desired", `{"o":{"p":{"a":"1"}}}`, `{"o":{}}`, []change{{"infrastructure.spec.o.p.a", diff.OpRemove}}, []change{{"infrastructure.spec.o.p.a", diff.OpRemove}}},
		{"object replaced by null", `{"o":{"a":"1"}}`, `{"o":null}`, []change{{"infrastructure.spec.o.a", diff.OpRemove}}, []change{{"infrastructure.spec.o.a", diff.OpRemove}}},
		{"equal empties", `{"s":"","l":[],"o":{}}`, `{"s":"","l":[],"o":{}}`, nil, nil},
		{"0 and false are values either way", `{"i":0,"b":false}`, `{}`, []change{{"infrastructure.spec.b", diff.OpRemove}, {"infrastructure.spec.i", diff.OpRemove}}, []change{{"infrastructure.spec.b", diff.OpRemove}, {"infrastructure.spec.i", diff.OpRemove}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur, des := infraJSON(tc.cur), infraJSON(tc.des)
			for _, mode := range []struct {
				name string
				opts []diff.Option
				want []change
			}{
				{"strict", []diff.Option{diff.StrictEmpty()}, tc.strict},
				{"lenient", nil, tc.lenient},
			} {
				cs, err := diff.Objects(diff.ObjectInfrastructure, cur, des, mode.opts...)
				require.NoError(t, err)
				var got []change
				for _, c := range cs.Changes {
					got = append(got, change{c.Field, c.Op})
				}
				require.Empty(t, cmp.Diff(mode.want, got), "%s changes", mode.name)
				if mode.name != "strict" {
					continue
				}
				// Under StrictEmpty the JSON patch gives desired exactly, as
				// go-cmp sees it (what CAPI compares).
				jp, err := cs.JSONPatch(diff.ObjectInfrastructure)
				require.NoError(t, err)
				p, err := jsonpatch.DecodePatch(jp)
				require.NoError(t, err, "%s", jp)
				patched, err := p.Apply(cur)
				require.NoError(t, err, "%s", jp)
				require.Empty(t, cmp.Diff(specOf(t, des), specOf(t, patched)), "JSON patch %s", jp)
				// So does the merge patch, except for explicit nulls, which
				// a merge patch cannot write.
				if strings.Contains(tc.name, "null") && tc.name != "null against absent" {
					continue
				}
				mp, err := cs.MergePatch(diff.ObjectInfrastructure)
				require.NoError(t, err)
				merged, err := jsonpatch.MergePatch(cur, mp)
				require.NoError(t, err, "%s", mp)
				require.Empty(t, cmp.Diff(specOf(t, des), specOf(t, merged)), "merge patch %s", mp)
			}
		})
	}
}

func TestStrictEmptyPatterns(t *testing.T) {
	cur, des := infraJSON(`{"a":"","b":"","o":{"c":""}}`), infraJSON(`{}`)
	for _, tc := range []struct {
		name   string
		opt    diff.Option
		fields []string
	}{
		{"one path", diff.StrictEmpty("infrastructure.spec.a"), []string{"infrastructure.spec.a"}},
		{"a subtree", diff.StrictEmpty("infrastructure.spec.o.**"), []string{"infrastructure.spec.o"}},
		{"everywhere", diff.StrictEmpty(), []string{"infrastructure.spec.a", "infrastructure.spec.b", "infrastructure.spec.o"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, err := diff.Objects(diff.ObjectInfrastructure, cur, des, tc.opt)
			require.NoError(t, err)
			var got []string
			for _, c := range cs.Changes {
				got = append(got, c.Field)
			}
			require.Empty(t, cmp.Diff(tc.fields, got))
		})
	}
}

func TestStrictEmptyKeepsMetadataScope(t *testing.T) {
	cur := []byte(`{"kind":"AWSMachine","metadata":{"name":"a","uid":"1"},"spec":{}}`)
	des := []byte(`{"kind":"AWSMachine","spec":{}}`)
	cs, err := diff.Objects(diff.ObjectInfrastructure, cur, des, diff.StrictEmpty())
	require.NoError(t, err)
	require.True(t, cs.Empty(), "name and uid are never compared: %s", cs)

	des = []byte(`{"kind":"AWSMachine","metadata":{"labels":{}},"spec":{}}`)
	cs, err = diff.Objects(diff.ObjectInfrastructure, cur, des, diff.StrictEmpty())
	require.NoError(t, err)
	require.Len(t, cs.Changes, 1)
	require.Equal(t, "infrastructure.metadata.labels", cs.Changes[0].Field)
}

func TestInPlaceUpdateIsStrictAboutEmpty(t *testing.T) {
	m := &clusterv1.Machine{Spec: clusterv1.MachineSpec{Version: "v1.31.1"}}
	cur := diff.State{Machine: m, Infrastructure: infraJSON(`{"ami":{"id":"a"},"sshKeyName":""}`)}
	des := diff.State{Machine: m, Infrastructure: infraJSON(`{"ami":{"id":"a"}}`)}
	cs, err := diff.Machines(cur, des, diff.InPlaceUpdate())
	require.NoError(t, err)
	require.Len(t, cs.Changes, 1, "%s", cs)
	require.Equal(t, "infrastructure.spec.sshKeyName", cs.Changes[0].Field)
	jp, err := cs.JSONPatch(diff.ObjectInfrastructure)
	require.NoError(t, err)
	require.JSONEq(t, `[{"op":"remove","path":"/spec/sshKeyName"}]`, string(jp))

	// The other presets keep empty equal to absent.
	cs, err = diff.Machines(cur, des, diff.KubeadmControlPlane("v1.31.1"))
	require.NoError(t, err)
	require.True(t, cs.Empty(), "%s", cs)
}

func TestPatchOpWritesNullValues(t *testing.T) {
	for _, tc := range []struct {
		op   diff.PatchOp
		want string
	}{
		{diff.PatchOp{Op: "add", Path: "/spec/n"}, `{"op":"add","path":"/spec/n","value":null}`},
		{diff.PatchOp{Op: "replace", Path: "/spec/n", Value: ""}, `{"op":"replace","path":"/spec/n","value":""}`},
		{diff.PatchOp{Op: "remove", Path: "/spec/n"}, `{"op":"remove","path":"/spec/n"}`},
	} {
		b, err := json.Marshal(tc.op)
		require.NoError(t, err)
		require.JSONEq(t, tc.want, string(b))
	}
}

func TestKeyedListElementsWithoutKeys(t *testing.T) {
	// Elements that are not objects have no key: identical ones match.
	cur := []byte(`{"kind":"KubeadmConfig","spec":{"files":[{"path":"/a"},"x"]}}`)
	cs, err := diff.Objects(diff.ObjectBootstrap, cur, cur)
	require.NoError(t, err)
	require.True(t, cs.Empty(), "%s", cs)
}
