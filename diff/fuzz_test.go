package diff_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"

	"github.com/upgradekit/upgradekit/diff"
)

// Seeds: real objects (the fixture's KubeadmConfig and AWSMachine as JSON,
// and edited copies) plus shapes that have bitten diff engines: nil vs
// empty, type changes, nested lists, numbers of every form.
func fuzzSeeds(f *testing.F) {
	m, c, u := fixture()
	mj, _ := json.Marshal(m)
	cj, _ := json.Marshal(c)
	uj, _ := json.Marshal(u.Object)
	_, c2, u2 := fixture()
	c2.Spec.Files = c2.Spec.Files[1:]
	c2.Spec.Users[0].Name = "root"
	u2.Object["spec"].(map[string]any)["ami"] = map[string]any{"id": "ami-x"}
	c2j, _ := json.Marshal(c2)
	u2j, _ := json.Marshal(u2.Object)
	f.Add(cj, c2j)
	f.Add(uj, u2j)
	f.Add(mj, mj)
	f.Add([]byte(`{"spec":{"files":[]}}`), []byte(`{"spec":{}}`))
	f.Add([]byte(`{"spec":{"a":""}}`), []byte(`{"spec":{"a":null}}`))
	f.Add([]byte(`{"spec":{"a":1}}`), []byte(`{"spec":{"a":1.0}}`))
	f.Add([]byte(`{"spec":{"a":9007199254740993}}`), []byte(`{"spec":{"a":9007199254740992}}`))
	f.Add([]byte(`{"spec":{"a":[1,[2,{"b":[]}]]}}`), []byte(`{"spec":{"a":[1,[2,{"b":{}}]]}}`))
	f.Add([]byte(`{"spec":{"a":{"b":"x"}}}`), []byte(`{"spec":{"a":"x"}}`))
	f.Add([]byte(`{"spec":{"files":[{"path":"/a"},{"path":"/a"}]}}`), []byte(`{"spec":{"files":[{"path":"/a","content":"x"}]}}`))
	f.Add([]byte(`{"metadata":{"labels":{"a":"b"},"uid":"1"},"status":{"x":1}}`), []byte(`{"metadata":{"labels":{"a":"c"}}}`))
	f.Add([]byte(`{"spec":{"a/b~c":true}}`), []byte(`{"spec":{"a/b~c":false}}`))
}

// FuzzNoPanic: arbitrary JSON pairs never panic, as unstructured content or
// decoded into the typed KubeadmConfig; errors are *diff.Error.
func FuzzNoPanic(f *testing.F) {
	fuzzSeeds(f)
	d, err := diff.New(diff.KubeadmControlPlane("v1.31.0"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		check := func(err error) {
			var de *diff.Error
			if err != nil && !errors.As(err, &de) {
				t.Fatalf("error is not a *diff.Error: %v", err)
			}
		}
		cs, err := diff.Objects(diff.ObjectInfrastructure, a, b)
		check(err)
		if err == nil {
			_ = cs.String()
			_, err = cs.JSONPatch(diff.ObjectInfrastructure)
			check(err)
			_, err = cs.MergePatch(diff.ObjectInfrastructure)
			check(err)
		}
		_, err = d.Objects(diff.ObjectBootstrap, a, b)
		check(err)
		var ca, cb bootstrapv1.KubeadmConfig
		if json.Unmarshal(a, &ca) == nil && json.Unmarshal(b, &cb) == nil {
			cs, err := diff.Objects(diff.ObjectBootstrap, &ca, &cb)
			check(err)
			_ = cs.String()
			_, err = d.Objects(diff.ObjectBootstrap, &ca, &cb)
			check(err)
		}
	})
}

// FuzzOracle: with no list keys, a pair has no changes exactly when go-cmp
// finds the two equal after the same normalisation: only spec and
// metadata labels/annotations, empty strings, lists and objects dropped,
// numbers compared by value.
func FuzzOracle(f *testing.F) {
	fuzzSeeds(f)
	d, err := diff.New(diff.WithoutDefaults())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		cs, err := d.Objects(diff.ObjectInfrastructure, a, b)
		if err != nil {
			return
		}
		na, okA := oracleNormalize(a)
		nb, okB := oracleNormalize(b)
		if !okA || !okB {
			return
		}
		requireAgreesWithCmp(t, cs, na, nb, a, b)
	})
}

func oracleNormalize(raw []byte) (any, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v map[string]any
	if dec.Decode(&v) != nil || v == nil {
		return nil, false
	}
	scoped := map[string]any{"spec": v["spec"]}
	if md, ok := v["metadata"].(map[string]any); ok {
		scoped["metadata"] = map[string]any{"labels": md["labels"], "annotations": md["annotations"]}
	}
	return fold(scoped), true
}

// fold drops empty values and turns numbers into comparable strings.
func fold(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if f := fold(e); f != nil {
				out[k] = f
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	case []any:
		if len(x) == 0 {
			return nil
		}
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = fold(e)
		}
		return out
	case string:
		if x == "" {
			return nil
		}
		return x
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return "n:" + strconv.FormatInt(i, 10)
		}
		fl, _ := strconv.ParseFloat(string(x), 64)
		if fl == float64(int64(fl)) && fl >= -9.007199254740992e15 && fl <= 9.007199254740992e15 {
			return "n:" + strconv.FormatInt(int64(fl), 10)
		}
		return "n:" + strconv.FormatFloat(fl, 'g', -1, 64)
	}
	return v
}

// FuzzPatchRoundTrip: the JSON patch applied with evanphx/json-patch turns
// current into desired on every spec path.
func FuzzPatchRoundTrip(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, a, b []byte) {
		cs, err := diff.Objects(diff.ObjectInfrastructure, a, b)
		if err != nil {
			return
		}
		jp, err := cs.JSONPatch(diff.ObjectInfrastructure)
		if err != nil {
			t.Fatalf("patch: %v", err)
		}
		p, err := jsonpatch.DecodePatch(jp)
		if err != nil {
			t.Fatalf("decode %s: %v", jp, err)
		}
		var obj map[string]any
		if json.Unmarshal(a, &obj) != nil || obj == nil {
			// Blank or null input is "no object": nothing to patch.
			if string(jp) != "[]" {
				t.Fatalf("patch %s for an absent object", jp)
			}
			return
		}
		patched, err := p.Apply(a)
		if err != nil {
			t.Fatalf("apply %s to %s: %v", jp, a, err)
		}
		after, err := diff.Objects(diff.ObjectInfrastructure, patched, b)
		if err != nil {
			t.Fatalf("re-diff: %v", err)
		}
		if left := specOnly(after); !left.Empty() {
			t.Fatalf("patch %s on %s left:\n%s", jp, a, left)
		}
	})
}

// FuzzStrictOracle: under StrictEmpty(), with metadata ignored and no
// list keys (what Cluster API compares after an in-place extension's
// patches), a pair has no changes exactly when go-cmp finds the two specs
// equal with nothing folded but numbers; and the JSON patch turns
// current's spec into one go-cmp finds equal to desired's.
func FuzzStrictOracle(f *testing.F) {
	fuzzSeeds(f)
	f.Add([]byte(`{"spec":{"a":"","l":[],"o":{"p":{}}}}`), []byte(`{"spec":{"n":null}}`))
	d, err := diff.New(diff.WithoutDefaults(), diff.StrictEmpty(), diff.Ignore("*.metadata"))
	if err != nil {
		f.Fatal(err)
	}
	spec := func(raw []byte) (any, bool) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v map[string]any
		if dec.Decode(&v) != nil || v == nil {
			return nil, false
		}
		s, present := v["spec"]
		if present && s == nil {
			return nil, false // "spec": null: Cluster API never sends it
		}
		return numbersOnly(s), true
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		cs, err := d.Objects(diff.ObjectInfrastructure, a, b)
		if err != nil {
			return
		}
		sa, okA := spec(a)
		sb, okB := spec(b)
		if !okA || !okB {
			return
		}
		requireAgreesWithCmp(t, cs, sa, sb, a, b)
		jp, err := cs.JSONPatch(diff.ObjectInfrastructure)
		if err != nil {
			t.Fatalf("patch: %v", err)
		}
		p, err := jsonpatch.DecodePatch(jp)
		if err != nil {
			t.Fatalf("decode %s: %v", jp, err)
		}
		patched, err := p.Apply(a)
		if err != nil {
			return // a spec that is not an object cannot be patched below it
		}
		sp, ok := spec(patched)
		if ok && !cmp.Equal(sp, sb) {
			t.Fatalf("patch %s on %s: %s", jp, a, cmp.Diff(sb, sp))
		}
	})
}

// FuzzStrictNumbersOracle: under StrictEmpty() and StrictNumbers(), with
// metadata ignored and no list keys, a pair has no changes exactly when
// go-cmp finds the two specs equal as Cluster API decodes them (int64 or
// float64, see strictnumbers_test.go), nothing folded; and the JSON patch,
// applied as Cluster API applies it (to current re-marshalled), turns
// current's spec into one go-cmp finds equal to desired's.
func FuzzStrictNumbersOracle(f *testing.F) {
	fuzzSeeds(f)
	f.Add([]byte(`{"spec":{"a":8,"b":[0,2.5],"s":"x"}}`), []byte(`{"spec":{"a":8.0,"b":[-0.0,25e-1],"s":"x"}}`))
	f.Add([]byte(`{"spec":{"a":8.0,"b":-0.0,"s":"x"}}`), []byte(`{"spec":{"a":8.0,"b":-0.0,"s":"y"}}`))
	f.Add([]byte(`{"spec":{"a":9223372036854775807}}`), []byte(`{"spec":{"a":9223372036854775808}}`))
	f.Add([]byte(`{"spec":{"a":1e21,"b":8e0}}`), []byte(`{"spec":{"a":1000000000000000000000,"b":8}}`))
	d, err := diff.New(diff.WithoutDefaults(), diff.StrictEmpty(), diff.StrictNumbers(), diff.Ignore("*.metadata"))
	if err != nil {
		f.Fatal(err)
	}
	decode := func(raw []byte) (map[string]any, bool) {
		var v map[string]any
		if utiljson.Unmarshal(raw, &v) != nil || v == nil {
			return nil, false
		}
		s, present := v["spec"]
		if present && s == nil {
			return nil, false // "spec": null: Cluster API never sends it
		}
		return v, true
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		cs, err := d.Objects(diff.ObjectInfrastructure, a, b)
		if err != nil {
			return
		}
		va, okA := decode(a)
		vb, okB := decode(b)
		if !okA || !okB {
			return
		}
		requireAgreesWithCmp(t, cs, va["spec"], vb["spec"], a, b)
		jp, err := cs.JSONPatch(diff.ObjectInfrastructure)
		if err != nil {
			t.Fatalf("patch: %v", err)
		}
		if string(jp) == "[]" {
			return // not applied; cs is empty, so the specs are equal
		}
		p, err := jsonpatch.DecodePatch(jp)
		if err != nil {
			t.Fatalf("decode %s: %v", jp, err)
		}
		remarshalled, err := json.Marshal(va)
		if err != nil {
			t.Fatalf("re-marshal: %v", err)
		}
		patched, err := p.Apply(remarshalled)
		if err != nil {
			return // a spec that is not an object cannot be patched below it
		}
		vp, ok := decode(patched)
		if ok && !cmp.Equal(vp["spec"], vb["spec"]) {
			t.Fatalf("patch %s on %s: %s", jp, remarshalled, cmp.Diff(vb["spec"], vp["spec"]))
		}
	})
}

// numbersOnly turns numbers into comparable strings and leaves everything
// else, empty values included, as it is.
func numbersOnly(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = numbersOnly(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = numbersOnly(e)
		}
		return out
	case json.Number:
		return fold(x)
	}
	return v
}

// requireAgreesWithCmp fails unless cs is empty exactly when go-cmp finds
// x and y (the normalised forms of the inputs a and b) equal.
func requireAgreesWithCmp(t *testing.T, cs diff.ChangeSet, x, y any, a, b []byte) {
	t.Helper()
	if cs.Empty() != cmp.Equal(x, y) {
		t.Fatalf("diff says empty=%v, go-cmp says equal=%v\n%s\n%s\nchanges:\n%s\ncmp: %s",
			cs.Empty(), cmp.Equal(x, y), a, b, cs, cmp.Diff(x, y))
	}
}
