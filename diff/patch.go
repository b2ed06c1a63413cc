package diff

import (
	"encoding/json"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// documents keeps what a change set needs to build patches: the compared
// objects, converted to JSON data on first use. It is allocated for every
// diff with changes, so it is kept small; the JSON forms live in a second
// allocation made only when a patch is asked for.
type documents struct {
	cur, des  [numObjects]doc
	templates bool
	strictNum bool // StrictNumbers: patches keep integers and floats apart

	// lazy is made by the first patch: most change sets are never
	// patched, and a plan holds one per machine.
	lazy atomic.Pointer[loadedDocs]
}

// loadedDocs holds the documents' JSON forms, made on first use.
type loadedDocs struct {
	mu     sync.Mutex
	loaded [numObjects]*loadedDoc
}

// doc is one compared object: JSON data (map[string]any), a pointer to
// the typed struct, or nil.
type doc = any

func docOf(in input) doc {
	if in.data != nil || !in.typed.IsValid() {
		return in.data
	}
	return in.typed.Addr().Interface()
}

// docData is the JSON form of a doc.
func docData(d doc) (map[string]any, error) {
	switch x := d.(type) {
	case nil:
		return nil, nil
	case map[string]any:
		return x, nil
	}
	return input{typed: reflect.ValueOf(d).Elem()}.asData()
}

type loadedDoc struct {
	cur, des map[string]any
	err      error
}

func (d *documents) load(o Object) (cur, des map[string]any, err error) {
	ld := d.lazy.Load()
	if ld == nil {
		d.lazy.CompareAndSwap(nil, &loadedDocs{})
		ld = d.lazy.Load()
	}
	ld.mu.Lock()
	defer ld.mu.Unlock()
	l := ld.loaded[o]
	if l == nil {
		l = &loadedDoc{}
		if l.cur, l.err = docData(d.cur[o]); l.err == nil {
			l.des, l.err = docData(d.des[o])
		}
		ld.loaded[o] = l
	}
	return l.cur, l.des, l.err
}

// PatchOp is one RFC 6902 operation.
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// MarshalJSON writes the operation; add, replace and test always carry a
// value, null included (RFC 6902 requires the member), remove never does.
func (op PatchOp) MarshalJSON() ([]byte, error) {
	if op.Op == "remove" || op.Value != nil {
		type plain PatchOp
		return json.Marshal(plain(op))
	}
	return json.Marshal(struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}{op.Op, op.Path, nil})
}

// JSONPatch returns an RFC 6902 JSON patch that, applied to the current
// object, makes the paths of the changes in the set equal to desired and
// leaves every other path untouched: what CAPI's CanUpdateMachine and
// CanUpdateMachineSet responses carry.
//
// Only spec is patched (spec.template.spec for templates); changes to labels
// and annotations are left out, as CAPI ignores them in patches. A change
// inside a list replaces the outermost list on its path whole, so that the
// patched list equals desired element for element: accepting one change in
// a list accepts the list. An object with no changes gives "[]".
func (cs ChangeSet) JSONPatch(obj Object) ([]byte, error) {
	ops, err := cs.PatchOps(obj)
	if err != nil {
		return nil, err
	}
	if len(ops) == 0 {
		return []byte("[]"), nil
	}
	return json.Marshal(ops)
}

// PatchOps is JSONPatch as values. Under StrictNumbers a float value is a
// json.Number in float form ("8.0"), so that marshalling it keeps its kind.
func (cs ChangeSet) PatchOps(obj Object) ([]PatchOp, error) {
	cur, target, err := cs.target(obj)
	if err != nil || target == nil {
		return nil, err
	}
	strictNum := cs.docs.strictNum
	var ops []PatchOp
	if strictNum {
		// Against current as Cluster API patches it; but a patch that
		// re-marshalling alone would make right must not be empty (an
		// empty patch is not applied, so current is not re-marshalled):
		// it writes the changes against current as it is.
		patchOps(reencoded(cur).(map[string]any), target, "", true, &ops)
		if len(ops) == 0 {
			patchOps(cur, target, "", true, &ops)
		}
		for i := range ops {
			ops[i].Value = floatForms(ops[i].Value)
		}
		return ops, nil
	}
	patchOps(cur, target, "", false, &ops)
	return ops, nil
}

// MergePatch returns the RFC 7386 merge patch equivalent of JSONPatch
// (lists are always replaced whole in a merge patch). An object with no
// changes gives "{}". A merge patch cannot set a field to an explicit null
// (null deletes it): where desired has one, use JSONPatch.
func (cs ChangeSet) MergePatch(obj Object) ([]byte, error) {
	cur, target, err := cs.target(obj)
	if err != nil {
		return nil, err
	}
	if target == nil {
		return []byte("{}"), nil
	}
	strictNum := cs.docs.strictNum
	var m map[string]any
	if strictNum {
		// As in PatchOps.
		if m = mergeDiff(reencoded(cur).(map[string]any), target, true); m == nil {
			m = mergeDiff(cur, target, true)
		}
	} else {
		m = mergeDiff(cur, target, false)
	}
	if m == nil {
		return []byte("{}"), nil
	}
	if strictNum {
		return json.Marshal(floatForms(m))
	}
	return json.Marshal(m)
}

// target returns current and current-with-the-set's-spec-changes-applied.
// target is nil when the set holds no spec changes for obj. Under
// StrictNumbers target keeps current's own numbers where nothing changed,
// so that patches against current as Cluster API patches it, re-marshalled
// (see reencoded), restore their float forms.
func (cs ChangeSet) target(obj Object) (cur, target map[string]any, err error) {
	if obj >= numObjects {
		return nil, nil, newErr(obj, "", "", ErrWrongKind, "unknown object")
	}
	scope := "/spec"
	if cs.docs != nil && cs.docs.templates {
		scope = "/spec/template/spec"
	}
	var selected []Change
	for _, c := range cs.Changes {
		if c.Object == obj && (c.Path == scope || strings.HasPrefix(c.Path, scope+"/")) {
			selected = append(selected, c)
		}
	}
	if len(selected) == 0 {
		return nil, nil, nil
	}
	if cs.docs == nil {
		return nil, nil, newErr(obj, "", "", ErrNoDocument, "change set was not produced by a diff")
	}
	cur, des, err := cs.docs.load(obj)
	if err != nil {
		return nil, nil, newErr(obj, "", "", ErrUnsupportedValue, "%v", err)
	}
	if cur == nil {
		cur = map[string]any{}
	}
	target, _ = deepCopyData(cur).(map[string]any)
	for _, c := range selected {
		p := c.Path
		if c.ListPath != "" {
			p = c.ListPath
		}
		toks := parsePointer(p)
		// Under StrictEmpty desired is copied exactly, empty values and
		// nulls included; otherwise an empty value is written as absent.
		v, ok := lookupPointer(des, toks)
		if ok && (c.strict || !(c.Op == OpRemove && c.ListPath == "" && emptyData(v))) {
			setPointer(target, toks, deepCopyData(v))
		} else {
			deletePointer(target, toks)
			if c.strict {
				pruneEmptied(target, des, toks)
			}
		}
	}
	return cur, target, nil
}

// pruneEmptied follows a deletion at toks up the objects it emptied: an
// object left empty where desired has none becomes what desired has there
// (absent, null or another value). Changes are reported at the leaves, so
// an object absent from desired loses its members one by one; under
// StrictEmpty the empty object left behind would still differ.
func pruneEmptied(target, des map[string]any, toks []string) {
	for i := len(toks) - 1; i > 0; i-- {
		parent := toks[:i]
		pv, _ := lookupPointer(target, parent)
		if m, isMap := pv.(map[string]any); !isMap || len(m) > 0 {
			return
		}
		dv, inDes := lookupPointer(des, parent)
		if _, isMap := dv.(map[string]any); isMap {
			return
		}
		if inDes {
			setPointer(target, parent, deepCopyData(dv))
			return
		}
		deletePointer(target, parent)
	}
}

func parsePointer(p string) []string {
	if p == "" {
		return nil
	}
	toks := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, t := range toks {
		if strings.Contains(t, "~") {
			toks[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(t)
		}
	}
	return toks
}

func lookupPointer(doc any, toks []string) (any, bool) {
	v := doc
	for _, t := range toks {
		switch x := v.(type) {
		case map[string]any:
			e, ok := x[t]
			if !ok {
				return nil, false
			}
			v = e
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// setPointer sets the value at toks, creating objects on the way. Paths
// through lists reach here only up to the list itself.
func setPointer(doc map[string]any, toks []string, v any) {
	m := doc
	for i, t := range toks {
		if i == len(toks)-1 {
			m[t] = v
			return
		}
		next, ok := m[t].(map[string]any)
		if !ok {
			if arr, isArr := m[t].([]any); isArr {
				if idx, err := strconv.Atoi(toks[i+1]); err == nil && idx >= 0 && idx < len(arr) {
					if i+1 == len(toks)-1 {
						arr[idx] = v
						return
					}
					if em, ok := arr[idx].(map[string]any); ok {
						setPointer(em, toks[i+2:], v)
						return
					}
				}
			}
			next = map[string]any{}
			m[t] = next
		}
		m = next
	}
}

func deletePointer(doc map[string]any, toks []string) {
	if len(toks) == 0 {
		return
	}
	parent, ok := lookupPointer(doc, toks[:len(toks)-1])
	if !ok {
		return
	}
	if m, ok := parent.(map[string]any); ok {
		delete(m, toks[len(toks)-1])
	}
}

// patchOps appends the RFC 6902 operations turning a into b. Objects are
// compared key by key; anything else that differs is replaced whole.
func patchOps(a, b map[string]any, prefix string, strictNum bool, ops *[]PatchOp) {
	for _, k := range sortedKeys(a) {
		if _, ok := b[k]; !ok {
			*ops = append(*ops, PatchOp{Op: "remove", Path: prefix + "/" + escapePointer(k)})
		}
	}
	for _, k := range sortedKeys(b) {
		path := prefix + "/" + escapePointer(k)
		av, inA := a[k]
		bv := b[k]
		switch {
		case !inA:
			*ops = append(*ops, PatchOp{Op: "add", Path: path, Value: bv})
		case dataSame(av, bv, strictNum):
		default:
			am, aIsMap := av.(map[string]any)
			bm, bIsMap := bv.(map[string]any)
			if aIsMap && bIsMap {
				patchOps(am, bm, path, strictNum, ops)
			} else {
				*ops = append(*ops, PatchOp{Op: "replace", Path: path, Value: bv})
			}
		}
	}
}

// mergeDiff returns the RFC 7386 merge patch turning a into b, or nil when
// they are equal.
func mergeDiff(a, b map[string]any, strictNum bool) map[string]any {
	var out map[string]any
	set := func(k string, v any) {
		if out == nil {
			out = map[string]any{}
		}
		out[k] = v
	}
	keys := sortedKeys(a)
	sort.Strings(keys)
	for _, k := range keys {
		if _, ok := b[k]; !ok {
			set(k, nil)
		}
	}
	for _, k := range sortedKeys(b) {
		av, inA := a[k]
		bv := b[k]
		if inA && dataSame(av, bv, strictNum) {
			continue
		}
		am, aIsMap := av.(map[string]any)
		bm, bIsMap := bv.(map[string]any)
		if inA && aIsMap && bIsMap {
			if sub := mergeDiff(am, bm, strictNum); sub != nil {
				set(k, sub)
			}
			continue
		}
		set(k, bv)
	}
	return out
}
