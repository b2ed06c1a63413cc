package diff

import (
	"math"
	"sort"
)

// cmpData compares two JSON data values at the current path; nil means
// absent. An absent object or list is compared as an empty one, member by
// member, so rules below it (ignore, defaults, strict emptiness) still apply
// and changes are reported at the leaves. Empty strings, lists and objects
// equal absent ones unless StrictEmpty says otherwise here; so does an
// explicit null, except that under StrictEmpty cmpMaps tells a member set to
// null from a missing one.
func (w *walker) cmpData(a, b any) {
	if w.done() {
		return
	}
	if r := w.lookup(ruleDefault); r != nil {
		if emptyData(a) {
			a = r.value
		}
		if emptyData(b) {
			b = r.value
		}
	}
	if a == nil && b == nil {
		return
	}
	// Under StrictEmpty an empty value against an absent one is a change
	// here; anything else is compared member by member as usual, so that
	// changes are still reported at the leaves.
	if (a == nil || b == nil) && w.strict() && !w.inScopedContainer() && emptyData(a) && emptyData(b) {
		if a == nil && w.checkDeep(b) {
			w.emit(OpAdd, nil, deepCopyData(b))
		} else if b == nil && w.checkDeep(a) {
			w.emit(OpRemove, deepCopyData(a), nil)
		}
		return
	}
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok && b != nil {
			w.replaceData(a, b)
			return
		}
		w.cmpMaps(x, y)
		return
	case []any:
		y, ok := b.([]any)
		if !ok && b != nil {
			w.replaceData(a, b)
			return
		}
		keys, keyed := w.listKeys()
		matchList(w, dataList{w: w, a: x, b: y, keys: keys}, keyed, w.ordered())
		return
	case nil:
		switch y := b.(type) {
		case map[string]any:
			w.cmpMaps(nil, y)
		case []any:
			keys, keyed := w.listKeys()
			matchList(w, dataList{w: w, b: y, keys: keys}, keyed, w.ordered())
		case string:
			if y != "" {
				w.emit(OpAdd, nil, y)
			}
		default:
			if w.checkData(b) {
				w.emit(OpAdd, nil, b)
			}
		}
		return
	case string:
		// Changes carry a and b, not x and y: they already hold the
		// strings, boxing them again would allocate.
		y, ok := b.(string)
		switch {
		case b == nil:
			if x != "" {
				w.emit(OpRemove, a, nil)
			}
		case !ok:
			w.replaceData(a, b)
		case x == y:
		case y == "" && !w.strict():
			w.emit(OpRemove, a, nil)
		case x == "" && !w.strict():
			w.emit(OpAdd, nil, b)
		default: // under StrictEmpty "" is a value like any other
			w.emit(OpReplace, a, b)
		}
		return
	case bool:
		if y, ok := b.(bool); !ok || x != y {
			w.replaceData(a, b)
		}
		return
	}
	if !w.checkData(a) {
		return
	}
	if b == nil {
		w.emit(OpRemove, a, nil)
		return
	}
	if eq, both := numbersSame(a, b, w.cfg.strictNum); !both || !eq {
		w.replaceData(a, b)
	}
}

// inScopedContainer reports whether the walk is at metadata, which is
// compared in part only (labels and annotations): a strict comparison there
// goes member by member, so it never reports the rest of metadata.
func (w *walker) inScopedContainer() bool {
	return len(w.frames)-w.prefix == 1 && w.frames[w.prefix].name == "metadata"
}

// replaceData reports a change between values of different types (or
// different scalars). A side that is empty in the folded sense is absent,
// so the other side is compared member by member against nothing.
func (w *walker) replaceData(a, b any) {
	if !w.checkData(a) || !w.checkData(b) {
		return
	}
	if a != nil && b != nil && !w.strict() {
		switch {
		case emptyData(a):
			w.cmpData(nil, b)
			return
		case emptyData(b):
			w.cmpData(a, nil)
			return
		}
	}
	if w.lazyCheck && (!w.checkDeep(a) || !w.checkDeep(b)) {
		return // reported whole: their insides were not walked
	}
	switch {
	case a == nil:
		w.emit(OpAdd, nil, deepCopyData(b))
	case b == nil:
		w.emit(OpRemove, deepCopyData(a), nil)
	default:
		w.emit(OpReplace, deepCopyData(a), deepCopyData(b))
	}
}

// checkSkipped checks a value the walk does not compare (out of scope),
// when the inputs were not checked up front.
func (w *walker) checkSkipped(v any) {
	if !w.lazyCheck || w.err != nil || isPlainLeaf(v) {
		return
	}
	if err := checkJSONData(v, len(w.frames)-w.prefix+1); err != nil {
		w.fail(ErrUnsupportedValue, "%v", err)
	}
}

// skipped notes a value left out of the comparison (an ignored path): with
// inputs not checked up front, they are then checked whole.
func (w *walker) skipped() {
	if w.lazyCheck && w.err == nil {
		w.gap = true
	}
}

// checkDeep checks a whole value before it is reported.
func (w *walker) checkDeep(v any) bool {
	depth := 0
	if w.lazyCheck {
		// Unchecked inputs: the same depth limit as the check up front,
		// counted from the root.
		depth = len(w.frames) - w.prefix
	}
	if err := checkJSONData(v, depth); err != nil {
		w.fail(ErrUnsupportedValue, "%v", err)
		return false
	}
	return true
}

// checkData fails the walk on values with no JSON form. Containers are
// checked as they are walked.
func (w *walker) checkData(v any) bool {
	switch v.(type) {
	case map[string]any, []any, string, bool, nil:
		return true
	}
	_, f, _, ok := numberOf(v)
	if !ok {
		w.fail(ErrUnsupportedValue, "%T is not JSON data", v)
		return false
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		w.fail(ErrUnsupportedValue, "%v has no JSON form", f)
		return false
	}
	return true
}

// cmpMaps compares objects key by key. Keys are visited in sorted order
// only when a difference is possible; the final change list is sorted
// anyway, so iteration order does not show.
func (w *walker) cmpMaps(a, b map[string]any) {
	inBoth := 0 // keys of a found in b
	for k, av := range a {
		if w.done() {
			return
		}
		bv, ok := b[k]
		if ok {
			inBoth++
		}
		if !w.scopeAllows(k) {
			w.checkSkipped(av)
			w.checkSkipped(bv)
			continue
		}
		if ok && len(w.frames) < w.maxDepth && sameLeaf(av, bv) {
			continue // identical strings or bools: no rule can tell them apart
		}
		// Identical values below the root: no rule can tell them apart
		// either, and identicalData has checked that they are JSON data.
		// (Not tried on the root's members, as with typed values:
		// metadata mostly differs, and spec is where changes are.)
		if ok && fastPaths && len(w.frames) > w.prefix && identicalData(av, bv, len(w.frames)+1, w.maxDepth) {
			continue
		}
		if w.enterField(k) {
			if av == nil && !ok && w.strict() {
				w.emit(OpRemove, nil, nil) // an explicit null against absent
			} else {
				w.cmpData(av, bv)
			}
		} else {
			w.skipped()
		}
		w.leave()
	}
	if inBoth == len(b) {
		return // b has no key a lacks
	}
	for k, bv := range b {
		if w.done() {
			return
		}
		if _, seen := a[k]; seen {
			continue
		}
		if !w.scopeAllows(k) {
			w.checkSkipped(bv)
			continue
		}
		if w.enterField(k) {
			if bv == nil && w.strict() {
				w.emit(OpAdd, nil, nil) // absent against an explicit null
			} else {
				w.cmpData(nil, bv)
			}
		} else {
			w.skipped()
		}
		w.leave()
	}
}

// sameLeaf reports whether a and b are the same string or the same bool:
// entering them would find no change under any rule, and they need no
// check (unlike numbers: NaN).
func sameLeaf(a, b any) bool {
	switch x := a.(type) {
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	}
	return false
}

// identicalData reports whether a and b, at depth path steps from the
// root, are the same JSON data: of the same types, member by member, with
// equal strings, bools and numbers. Comparing them would then find no
// change under any rule (as typedSame), and the walk can skip them. It is
// conservative: anything the walk could fail on (a value that is not JSON
// data, a number that is not int64 or a finite float64, nesting beyond
// maxDepth) answers false, and the walk decides, so skipping leaves no
// value unchecked. Nothing is allocated.
func identicalData(a, b any, depth, maxDepth int) bool {
	if depth > maxDepth {
		return false
	}
	switch x := a.(type) {
	case string:
		y, ok := b.(string)
		return ok && x == y
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) || (x == nil) != (y == nil) {
			return false
		}
		for k, e := range x {
			f, ok := y[k]
			if !ok || !identicalData(e, f, depth+1, maxDepth) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) || (x == nil) != (y == nil) {
			return false
		}
		for i := range x {
			if !identicalData(x[i], y[i], depth+1, maxDepth) {
				return false
			}
		}
		return true
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case int64:
		y, ok := b.(int64)
		return ok && x == y
	case float64:
		y, ok := b.(float64)
		return ok && x == y && !math.IsInf(x, 0) // NaN is unequal to itself
	case nil:
		return b == nil
	}
	return false
}

// dataList adapts two []any to matchList.
type dataList struct {
	w    *walker
	a, b []any
	keys []string
}

func (l dataList) lenA() int { return len(l.a) }
func (l dataList) lenB() int { return len(l.b) }

func (l dataList) side(s bool) []any {
	if s { // sideB
		return l.b
	}
	return l.a
}

func (l dataList) keyEq(x bool, i int, y bool, j int) bool {
	ex, ey := l.side(x)[i], l.side(y)[j]
	if len(l.keys) == 0 {
		return dataSame(ex, ey, l.w.cfg.strictNum)
	}
	mx, okx := ex.(map[string]any)
	my, oky := ey.(map[string]any)
	if !okx || !oky {
		// An element that is not an object has no key: it matches an
		// identical element only.
		return dataSame(ex, ey, l.w.cfg.strictNum)
	}
	for _, k := range l.keys {
		vx, vy := mx[k], my[k]
		if emptyData(vx) && emptyData(vy) {
			continue
		}
		if !dataSame(vx, vy, l.w.cfg.strictNum) {
			return false
		}
	}
	return true
}

func (l dataList) enter(s bool, i int, keyed bool) bool {
	ok := l.w.enterElem(i)
	if !ok {
		l.w.skipped()
	}
	if keyed && len(l.keys) > 0 {
		if m, isMap := l.side(s)[i].(map[string]any); isMap {
			l.w.setKey(keyInfo{keys: l.keys, keyU: m})
		}
	} else if l.w.inArgsList() {
		l.w.nameUnkeyedArg(entryName(l.a, i), entryName(l.b, i))
	}
	return ok
}

func (l dataList) cmp(i, j int) { l.w.cmpData(l.a[i], l.b[j]) }

// same reports identical elements (identicalData).
func (l dataList) same(i, j int) bool {
	return fastPaths && identicalData(l.a[i], l.b[j], len(l.w.frames)+1, l.w.maxDepth)
}

func (l dataList) value(s bool, i int) any {
	v := l.side(s)[i]
	if !l.w.checkData(v) || (l.w.lazyCheck && !l.w.checkDeep(v)) {
		return nil
	}
	return deepCopyData(v)
}

func (l dataList) whole(s bool) any { return deepCopyData(l.side(s)) }

// sortedKeys returns a map's keys in order.
func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
