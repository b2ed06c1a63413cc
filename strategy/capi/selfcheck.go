package capi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/internal/errtext"
)

// selfCheckMessage is in the message of a decline made by the Extension's
// last check: before answering a CanUpdate* request without declining, it
// applies its own patches to the current objects the way Cluster API does
// (spec only; spec.template.spec for templates) and compares the result
// with desired by Cluster API's strict in-place rules (diff.InPlaceUpdate
// alone, without ExtensionOptions.DiffOptions). Whatever is left would make Cluster API
// roll the machine after all, so the answer becomes a decline naming those
// fields. It should never happen; when it does, the diff options hide a
// difference Cluster API sees.
const selfCheckMessage = "the answer's patches would leave differences Cluster API rolls out for"

// selfCheck returns the fields in which current, patched with the answer's
// patches as Cluster API patches it, still differs from desired (nil when
// nothing is left).
func (e *Extension) selfCheck(cur, des diff.State, patches [3]runtimehooksv1.Patch, templates bool) ([]string, error) {
	left, err := leftAfterPatches(e.strict, cur, des, patches, templates)
	if err != nil || left.Empty() {
		return nil, err
	}
	return fieldNames(left), nil
}

// leftAfterPatches applies patches (by diff.Object) to cur as Cluster API
// does and returns what strict still finds between the result and des.
func leftAfterPatches(strict *diff.Differ, cur, des diff.State, patches [3]runtimehooksv1.Patch, templates bool) (diff.ChangeSet, error) {
	specPath := []string{"spec"}
	if templates {
		specPath = []string{"spec", "template", "spec"}
	}
	patched := cur
	for _, o := range []diff.Object{diff.ObjectMachine, diff.ObjectBootstrap, diff.ObjectInfrastructure} {
		p := patches[o]
		if !p.IsDefined() {
			continue
		}
		obj, err := applyAsCAPI(objectOf(cur, o), p, specPath)
		if err != nil {
			return diff.ChangeSet{}, fmt.Errorf("%w: %s: %w", ErrInvalidPatch, o, err)
		}
		switch o {
		case diff.ObjectMachine:
			patched.Machine = obj
		case diff.ObjectBootstrap:
			patched.Bootstrap = obj
		default:
			patched.Infrastructure = obj
		}
	}
	if templates {
		return strict.Templates(patched, des)
	}
	return strict.Machines(patched, des)
}

func objectOf(s diff.State, o diff.Object) any {
	switch o {
	case diff.ObjectMachine:
		return s.Machine
	case diff.ObjectBootstrap:
		return s.Bootstrap
	default:
		return s.Infrastructure
	}
}

// applyAsCAPI applies a patch to obj's JSON form and copies back the
// field at specPath only, as Cluster API's ApplyPatchToObject does; a typed
// obj (the Machine or MachineSet) comes back as a new value of its type,
// as from ApplyPatchToTypedObject, other objects as JSON.
//
// Numbers end up as in Cluster API's patched object: the patch applies to
// the object re-marshalled from its unstructured form (ConvertToRawExtension:
// an integral float such as 8.0 is written 8, an integer once decoded), and
// the result keeps the patch's literals (8.0 stays a float), which the diff
// decodes as Kubernetes does.
func applyAsCAPI(obj any, p runtimehooksv1.Patch, specPath []string) (any, error) {
	doc, err := jsonOf(obj)
	if err != nil {
		return nil, err
	}
	if doc, err = remarshal(doc); err != nil {
		return nil, err
	}
	var out []byte
	switch p.PatchType {
	case runtimehooksv1.JSONPatchType:
		jp, err := jsonpatch.DecodePatch(p.Patch)
		if err != nil {
			return nil, fmt.Errorf("decoding our JSON patch: %w", err)
		}
		if len(jp) == 0 {
			return obj, nil // Cluster API leaves the object as it is
		}
		if out, err = jp.Apply(doc); err != nil {
			return nil, fmt.Errorf("applying our JSON patch: %w", err)
		}
	case runtimehooksv1.JSONMergePatchType:
		if len(p.Patch) == 0 || bytes.Equal(p.Patch, []byte("{}")) {
			return obj, nil // Cluster API leaves the object as it is
		}
		if out, err = jsonpatch.MergePatch(doc, p.Patch); err != nil {
			return nil, fmt.Errorf("applying our merge patch: %w", err)
		}
	default:
		return nil, fmt.Errorf("unknown patch type %s", errtext.Quote(string(p.PatchType)))
	}
	var before, after map[string]any
	if err := decodeLiterals(doc, &before); err != nil {
		return nil, err
	}
	if err := decodeLiterals(out, &after); err != nil {
		return nil, err
	}
	if v, ok := fieldAt(after, specPath); ok && before != nil {
		if err := setFieldAt(before, specPath, v); err != nil {
			return nil, err
		}
	}
	merged, err := json.Marshal(before)
	if err != nil {
		return nil, err
	}
	if rv := reflect.ValueOf(obj); rv.Kind() == reflect.Pointer && rv.Elem().Kind() == reflect.Struct {
		typed := reflect.New(rv.Elem().Type())
		if err := json.Unmarshal(merged, typed.Interface()); err != nil {
			return nil, err
		}
		return typed.Interface(), nil
	}
	return merged, nil
}

// remarshal is doc decoded into unstructured content (int64 or float64
// numbers, as k8s.io/apimachinery decodes them) and marshalled again with
// encoding/json, as Cluster API's ConvertToRawExtension makes Raw.
func remarshal(doc []byte) ([]byte, error) {
	if len(bytes.TrimSpace(doc)) == 0 {
		return doc, nil
	}
	var v any
	if err := utiljson.Unmarshal(doc, &v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// decodeLiterals decodes JSON keeping numbers as json.Number, so that
// marshalling them again writes the same literals.
func decodeLiterals(doc []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	return dec.Decode(v)
}

// jsonOf is the JSON form of one of a request's objects.
func jsonOf(obj any) ([]byte, error) {
	switch x := obj.(type) {
	case runtime.RawExtension:
		if len(x.Raw) == 0 && x.Object != nil {
			return json.Marshal(x.Object)
		}
		return x.Raw, nil
	case *runtime.RawExtension:
		if x == nil {
			return nil, nil
		}
		return jsonOf(*x)
	}
	return json.Marshal(obj)
}

func fieldAt(m map[string]any, path []string) (any, bool) {
	var v any = m
	for _, k := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = mm[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// setFieldAt sets path in m as unstructured.SetNestedField does, which
// Cluster API's patch.CopyFields calls: a missing object on the way is
// created, but one that is present and not an object, null included, is
// an error. Cluster API v1.14.2 then fails the whole hook call, so a
// template stored without a spec (an empty KubeadmConfigTemplate is) can
// be patched by no answer.
func setFieldAt(m map[string]any, path []string, v any) error {
	for i, k := range path {
		if i == len(path)-1 {
			m[k] = v
			return nil
		}
		cur, present := m[k]
		next, ok := cur.(map[string]any)
		if !ok {
			if present {
				what := "null"
				if cur != nil {
					what = "not an object"
				}
				return fmt.Errorf("%s is %s in the current object, and Cluster API cannot set %s under it (its patch.CopyFields fails, and the rollout with it)",
					strings.Join(path[:i+1], "."), what, strings.Join(path, "."))
			}
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	return nil
}
