package diff

import (
	"bytes"
	"encoding"
	"encoding/base64"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/upgradekit/upgradekit/internal/reflectx"
)

// Typed values are compared by walking both with reflect, guided by a plan
// per Go type built once: JSON field names, omitempty/omitzero, embedded
// structs flattened as encoding/json does. The walk sees exactly what the
// JSON form would hold, so typed and unstructured inputs give the same
// changes, and an equal pair allocates nothing.

type leafKind uint8

const (
	leafNone        leafKind = iota
	leafTime                 // metav1.Time: RFC 3339, second precision
	leafMicroTime            // metav1.MicroTime
	leafQuantity             // resource.Quantity: compared by value
	leafIntOrString          // intstr.IntOrString
	leafDuration             // metav1.Duration
	leafBytes                // []byte: base64 string
	leafMarshal              // any other json.Marshaler / TextMarshaler, non-string-keyed maps
	leafUnsupported          // chan, func, complex, unsafe.Pointer
)

type typePlan struct {
	t         reflect.Type
	kind      reflect.Kind
	leaf      leafKind
	fields    []fieldPlan
	byName    map[string]int
	elem      *typePlan
	strMap    bool   // map[string]string
	boolMap   bool   // map[string]bool
	isZeroer  bool   // *T or T has IsZero() bool
	stringish bool   // kind String
	typeMeta  int    // struct: index of an embedded metav1.TypeMeta, or -1
	name      string // t.Name()
	size      uintptr
	// same is a struct's flat program for sameAt, made on first use.
	same atomic.Pointer[sameProg]
	// rootScope and metaScope index the fields in scope at the root and
	// in metadata (inRootScope, inMetaScope): the walk visits no other.
	rootScope, metaScope []int
}

type fieldPlan struct {
	index     []int
	name      string
	omitEmpty bool
	omitZero  bool
	plan      *typePlan
	// offset is the field's offset in the outer struct; direct says that
	// no embedded pointer lies on the way, so offset locates it.
	offset uintptr
	direct bool
	// zero is the field type's zero layout, for omitzero (nil: too
	// large, ask reflect).
	zero *zeroMask
}

var (
	planCache reflectx.PlanCache[*typePlan]

	timeType        = reflect.TypeFor[metav1.Time]()
	microTimeType   = reflect.TypeFor[metav1.MicroTime]()
	quantityType    = reflect.TypeFor[resource.Quantity]()
	intOrStringType = reflect.TypeFor[intstr.IntOrString]()
	durationType    = reflect.TypeFor[metav1.Duration]()
	marshalerType   = reflect.TypeFor[json.Marshaler]()
	textMarshalType = reflect.TypeFor[encoding.TextMarshaler]()
	isZeroerType    = reflect.TypeFor[interface{ IsZero() bool }]()
)

func planFor(t reflect.Type) *typePlan {
	if p, ok := planCache.Load(t); ok {
		return p
	}
	return planCache.Build(t, buildPlan, nil)
}

func buildPlan(t reflect.Type, building map[reflect.Type]*typePlan) *typePlan {
	if p, ok := planCache.Load(t); ok {
		return p
	}
	if p := building[t]; p != nil {
		return p
	}
	p := &typePlan{t: t, kind: t.Kind(), typeMeta: -1, name: t.Name(), size: t.Size()}
	building[t] = p
	if t.Kind() == reflect.Struct {
		for i := 0; i < t.NumField(); i++ {
			if t.Field(i).Type == typeMetaType && t.Field(i).Anonymous {
				p.typeMeta = i
				break
			}
		}
	}
	p.isZeroer = t.Implements(isZeroerType) || reflect.PointerTo(t).Implements(isZeroerType)
	switch t {
	case timeType:
		p.leaf = leafTime
		return p
	case microTimeType:
		p.leaf = leafMicroTime
		return p
	case quantityType:
		p.leaf = leafQuantity
		return p
	case intOrStringType:
		p.leaf = leafIntOrString
		return p
	case durationType:
		p.leaf = leafDuration
		return p
	}
	switch t.Kind() {
	case reflect.Chan, reflect.Func, reflect.Complex64, reflect.Complex128, reflect.UnsafePointer:
		p.leaf = leafUnsupported
		return p
	}
	if t.Kind() != reflect.Pointer && t.Kind() != reflect.Interface &&
		(t.Implements(marshalerType) || reflect.PointerTo(t).Implements(marshalerType) ||
			t.Implements(textMarshalType) || reflect.PointerTo(t).Implements(textMarshalType)) {
		p.leaf = leafMarshal
		return p
	}
	switch t.Kind() {
	case reflect.String:
		p.stringish = true
	case reflect.Pointer, reflect.Array:
		p.elem = buildPlan(t.Elem(), building)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 && !t.Elem().Implements(marshalerType) && !reflect.PointerTo(t.Elem()).Implements(marshalerType) {
			p.leaf = leafBytes
			return p
		}
		p.elem = buildPlan(t.Elem(), building)
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			p.leaf = leafMarshal
			return p
		}
		p.elem = buildPlan(t.Elem(), building)
		p.strMap = t == reflect.TypeFor[map[string]string]() // not a named map type: asserted to map[string]string
		p.boolMap = t.Key() == reflect.TypeFor[string]() && t.Elem() == reflect.TypeFor[bool]()
	case reflect.Struct:
		p.byName = map[string]int{}
		addFields(p, t, nil, 0, true, building)
		for i, f := range p.fields {
			switch {
			case inRootScope(f.name):
				p.rootScope = append(p.rootScope, i)
			case inMetaScope(f.name):
				p.metaScope = append(p.metaScope, i)
			}
		}
	}
	return p
}

// addFields flattens t's fields into p, as encoding/json does: embedded
// structs without a JSON name are inlined; shallower names win.
// base is t's offset in p's struct, direct false when an embedded
// pointer lies on the way.
func addFields(p *typePlan, t reflect.Type, index []int, base uintptr, direct bool, building map[reflect.Type]*typePlan) {
	type embedded struct {
		t      reflect.Type
		index  []int
		base   uintptr
		direct bool
	}
	var inline []embedded
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		idx := append(append([]int(nil), index...), i)
		ft := sf.Type
		if sf.Anonymous && name == "" {
			et := ft
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				inline = append(inline, embedded{t: et, index: idx, base: base + sf.Offset, direct: direct && ft.Kind() != reflect.Pointer})
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		if _, dup := p.byName[name]; dup {
			continue
		}
		fp := fieldPlan{index: idx, name: name, plan: buildPlan(ft, building), offset: base + sf.Offset, direct: direct}
		for _, o := range strings.Split(opts, ",") {
			switch o {
			case "omitempty":
				fp.omitEmpty = true
			case "omitzero":
				fp.omitZero = true
			}
		}
		if fp.omitZero {
			fp.zero = zeroLayout(ft)
		}
		p.byName[name] = len(p.fields)
		p.fields = append(p.fields, fp)
	}
	for _, e := range inline {
		addFields(p, e.t, e.index, e.base, e.direct, building)
	}
}

// present reports whether a field's value appears in the JSON form.
func present(v reflect.Value, fp *fieldPlan) bool {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice:
		if v.IsNil() {
			return false
		}
	}
	if fp.omitEmpty {
		switch v.Kind() {
		case reflect.Bool:
			return v.Bool()
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			return v.Int() != 0
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			return v.Uint() != 0
		case reflect.Float32, reflect.Float64:
			return v.Float() != 0
		case reflect.String, reflect.Map, reflect.Slice, reflect.Array:
			return v.Len() != 0
		}
	}
	if fp.omitZero {
		if fp.plan.isZeroer {
			if z, ok := asIsZeroer(v); ok {
				return !z.IsZero()
			}
		}
		return !v.IsZero()
	}
	return true
}

func asIsZeroer(v reflect.Value) (interface{ IsZero() bool }, bool) {
	if v.CanAddr() {
		z, ok := v.Addr().Interface().(interface{ IsZero() bool })
		return z, ok
	}
	if v.CanInterface() {
		z, ok := v.Interface().(interface{ IsZero() bool })
		return z, ok
	}
	return nil, false
}

// typedEmpty reports whether a present value is empty in the folded sense
// (its JSON form is null, "", [] or an object of empty values).
func typedEmpty(v reflect.Value, p *typePlan, depth int) bool {
	if depth > 200 {
		return false
	}
	switch p.leaf {
	case leafNone:
	case leafTime, leafMicroTime:
		return v.IsZero()
	case leafBytes:
		return v.Len() == 0
	case leafMarshal, leafIntOrString:
		d, err := valueData(v)
		return err == nil && emptyData(d)
	default:
		return false
	}
	switch v.Kind() {
	case reflect.String:
		return v.Len() == 0
	case reflect.Slice, reflect.Map, reflect.Array:
		return v.Len() == 0
	case reflect.Pointer:
		return v.IsNil() || typedEmpty(v.Elem(), p.elem, depth+1)
	case reflect.Interface:
		if v.IsNil() {
			return true
		}
		e := v.Elem()
		return typedEmpty(e, planFor(e.Type()), depth+1)
	case reflect.Struct:
		for i := range p.fields {
			fp := &p.fields[i]
			f, ok := reflectx.FieldByIndex(v, fp.index)
			if ok && present(f, fp) && !typedEmpty(f, fp.plan, depth+1) {
				return false
			}
		}
		return true
	}
	return false
}

// valueData converts a typed value to JSON data, using pointer-receiver
// marshalers when the value is addressable, as encoding/json does.
func valueData(v reflect.Value) (any, error) {
	var x any
	switch {
	case v.CanAddr():
		x = v.Addr().Interface()
	case v.CanInterface():
		x = v.Interface()
	default:
		return nil, &json.UnsupportedValueError{Str: "unexported value"}
	}
	return toJSONData(x)
}

func (w *walker) data(v reflect.Value) any {
	d, err := valueData(v)
	if err != nil {
		w.fail(ErrUnsupportedValue, "%v", err)
		return nil
	}
	return d
}

// cmpTyped compares a and b (of one Go type, plan p) at the current path.
// aOK/bOK say whether each is present in the JSON form; an absent side is
// compared as an empty value, member by member, as cmpData does.
func (w *walker) cmpTyped(a, b reflect.Value, aOK, bOK bool, p *typePlan) {
	if w.done() || (!aOK && !bOK) {
		return
	}
	if p.leaf == leafUnsupported {
		if (aOK && !a.IsZero()) || (bOK && !b.IsZero()) {
			w.fail(ErrUnsupportedValue, "%s has no JSON form", p.t)
		}
		return
	}
	if w.lookup(ruleDefault) != nil {
		// Defaults are JSON values: compare in that form (rare paths).
		var da, db any
		if aOK {
			da = w.data(a)
		}
		if bOK {
			db = w.data(b)
		}
		if w.err == nil {
			w.cmpData(da, db)
		}
		return
	}
	if aOK != bOK && w.strict() {
		if aOK {
			if d := w.data(a); w.err == nil {
				w.emit(OpRemove, d, nil)
			}
		} else if d := w.data(b); w.err == nil {
			w.emit(OpAdd, nil, d)
		}
		return
	}
	switch p.kind {
	case reflect.Pointer:
		aOK = aOK && !a.IsNil()
		bOK = bOK && !b.IsNil()
		var ea, eb reflect.Value
		if aOK {
			ea = a.Elem()
		}
		if bOK {
			eb = b.Elem()
		}
		w.cmpTyped(ea, eb, aOK, bOK, p.elem)
		return
	case reflect.Interface:
		aOK = aOK && !a.IsNil()
		bOK = bOK && !b.IsNil()
		var ea, eb reflect.Value
		if aOK {
			ea = a.Elem()
		}
		if bOK {
			eb = b.Elem()
		}
		switch {
		case aOK && bOK && ea.Type() != eb.Type():
			da, db := w.data(ea), w.data(eb)
			if w.err == nil {
				w.cmpData(da, db)
			}
		case aOK:
			w.cmpTyped(ea, eb, aOK, bOK, planFor(ea.Type()))
		case bOK:
			w.cmpTyped(ea, eb, aOK, bOK, planFor(eb.Type()))
		}
		return
	}
	if p.leaf != leafNone {
		switch {
		case aOK && bOK:
			w.equalLeaf(a, b, p)
		case aOK:
			if !typedEmpty(a, p, 0) {
				if d := w.data(a); w.err == nil {
					w.emit(OpRemove, d, nil)
				}
			}
		default:
			if !typedEmpty(b, p, 0) {
				if d := w.data(b); w.err == nil {
					w.emit(OpAdd, nil, d)
				}
			}
		}
		return
	}
	switch p.kind {
	case reflect.Struct:
		// The scope limits only the root's fields and metadata's
		// (scopeAllows): only those in it are visited.
		n, scope := len(p.fields), []int(nil)
		switch {
		case len(w.frames)-w.prefix == 0:
			n, scope = len(p.rootScope), p.rootScope
		case len(w.frames)-w.prefix == 1 && w.frames[w.prefix].name == "metadata":
			n, scope = len(p.metaScope), p.metaScope
		}
		// Addressable structs (all but map values and interface contents)
		// are read in memory: see memory.go.
		var baseA, baseB unsafe.Pointer
		if aOK && a.CanAddr() {
			baseA = unsafe.Pointer(a.UnsafeAddr())
		}
		if bOK && b.CanAddr() {
			baseB = unsafe.Pointer(b.UnsafeAddr())
		}
		inMemory := fastPaths && (!aOK || baseA != nil) && (!bOK || baseB != nil)
		for k := range n {
			if w.done() {
				return
			}
			i := k
			if scope != nil {
				i = scope[k] // status and most of metadata: not even looked at
			}
			fp := &p.fields[i]
			var fa, fb reflect.Value
			var pa, pb bool
			var ptrA, ptrB unsafe.Pointer
			knownA, knownB := !aOK, !bOK // absent sides are known absent
			if inMemory && fp.direct {
				if aOK {
					ptrA = unsafe.Add(baseA, fp.offset)
					pa, knownA = presentAt(ptrA, fp)
				}
				if bOK {
					ptrB = unsafe.Add(baseB, fp.offset)
					pb, knownB = presentAt(ptrB, fp)
				}
			}
			if !knownA {
				var ok bool
				if fa, ok = reflectx.FieldByIndex(a, fp.index); ok {
					pa = present(fa, fp)
				}
			}
			if !knownB {
				var ok bool
				if fb, ok = reflectx.FieldByIndex(b, fp.index); ok {
					pb = present(fb, fp)
				}
			}
			if !pa && !pb {
				continue
			}
			// Identical values cannot differ under any rule. (Not tried on
			// the root's fields: in metadata only labels and annotations
			// are compared and the rest, name and uid, mostly differs; and
			// spec is where the changes are, its fields are tried one by
			// one.)
			if pa && pb && len(w.frames) > w.prefix {
				var same bool
				if ptrA != nil && ptrB != nil {
					same = sameAt(ptrA, ptrB, fp.plan, len(w.frames)+1, w.maxDepth)
				} else {
					if !fa.IsValid() {
						fa, _ = reflectx.FieldByIndex(a, fp.index)
					}
					if !fb.IsValid() {
						fb, _ = reflectx.FieldByIndex(b, fp.index)
					}
					same = typedSame(fa, fb, fp.plan, len(w.frames)+1, w.maxDepth)
				}
				if same {
					continue
				}
			}
			if pa && !fa.IsValid() {
				fa, _ = reflectx.FieldByIndex(a, fp.index)
			}
			if pb && !fb.IsValid() {
				fb, _ = reflectx.FieldByIndex(b, fp.index)
			}
			if w.enterField(fp.name) {
				w.cmpTyped(fa, fb, pa, pb, fp.plan)
			}
			w.leave()
		}
	case reflect.Slice, reflect.Array:
		keys, keyed := w.listKeys()
		l := typedList{w: w, p: p.elem, keys: keys}
		if aOK {
			l.a = a
		}
		if bOK {
			l.b = b
		}
		if keyed {
			l.memKeys(p)
		}
		matchList(w, l, keyed, w.ordered())
	case reflect.Map:
		w.cmpTypedMaps(a, b, aOK, bOK, p)
	case reflect.String:
		var sa, sb string
		if aOK {
			sa = a.String()
		}
		if bOK {
			sb = b.String()
		}
		w.cmpStrings(sa, sb)
	default:
		switch {
		case aOK && bOK:
			w.cmpScalars(a, b)
		case aOK:
			w.emit(OpRemove, scalarOf(a), nil)
		default:
			w.emit(OpAdd, nil, scalarOf(b))
		}
	}
}

// typedSame reports whether a and b (present, of one Go type, plan p) are
// identical in every field their JSON form has, so that comparing them
// would find no change under any option: with equal values on both sides
// no ignore, list key, default, strictness or order rule can report one.
// It is conservative: whatever could fail the walk (NaN, unsupported
// kinds, custom marshalers, nesting beyond maxDepth) and any difference of
// form (nil against empty) answers false, and the walk decides. depth is
// the number of path steps to a and b; no frames are pushed, nothing is
// allocated. Addressable values are compared in memory (sameAt).
func typedSame(a, b reflect.Value, p *typePlan, depth, maxDepth int) bool {
	if depth > maxDepth {
		return false
	}
	if fastPaths && a.CanAddr() && b.CanAddr() {
		return sameAt(unsafe.Pointer(a.UnsafeAddr()), unsafe.Pointer(b.UnsafeAddr()), p, depth, maxDepth)
	}
	switch p.leaf {
	case leafNone:
	case leafTime:
		return timeOf(a).Unix() == timeOf(b).Unix()
	case leafMicroTime:
		return microTimeOf(a).UnixMicro() == microTimeOf(b).UnixMicro()
	case leafDuration:
		return a.Field(0).Int() == b.Field(0).Int()
	case leafBytes:
		return a.IsNil() == b.IsNil() && bytes.Equal(a.Bytes(), b.Bytes())
	default: // quantities, int-or-strings, marshalers, unsupported kinds
		return false
	}
	switch p.kind {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() && b.IsNil()
		}
		return typedSame(a.Elem(), b.Elem(), p.elem, depth+1, maxDepth)
	case reflect.Interface:
		return sameIfaces(a, b, depth, maxDepth)
	case reflect.Struct:
		for i := range p.fields {
			fp := &p.fields[i]
			fa, okA := reflectx.FieldByIndex(a, fp.index)
			fb, okB := reflectx.FieldByIndex(b, fp.index)
			if okA != okB {
				return false
			}
			if okA && !typedSame(fa, fb, fp.plan, depth+1, maxDepth) {
				return false
			}
		}
		return true
	case reflect.Slice, reflect.Array:
		if p.kind == reflect.Slice && a.IsNil() != b.IsNil() {
			return false
		}
		n := a.Len()
		if b.Len() != n {
			return false
		}
		for i := 0; i < n; i++ {
			if !typedSame(a.Index(i), b.Index(i), p.elem, depth+1, maxDepth) {
				return false
			}
		}
		return true
	case reflect.Map:
		return sameMaps(a, b, p, depth, maxDepth)
	case reflect.String:
		return a.String() == b.String()
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return a.Uint() == b.Uint()
	case reflect.Float32, reflect.Float64:
		fa, fb := a.Float(), b.Float()
		return fa == fb && !math.IsInf(fa, 0) // NaN != NaN
	}
	return false
}

// sameIfaces is typedSame for two interface values.
func sameIfaces(a, b reflect.Value, depth, maxDepth int) bool {
	if a.IsNil() || b.IsNil() {
		return a.IsNil() && b.IsNil()
	}
	ea, eb := a.Elem(), b.Elem()
	return ea.Type() == eb.Type() && typedSame(ea, eb, planFor(ea.Type()), depth+1, maxDepth)
}

// sameMaps is typedSame for two maps, with reflect (a map's entries are
// not addressable).
func sameMaps(a, b reflect.Value, p *typePlan, depth, maxDepth int) bool {
	if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
		return false
	}
	if p.strMap && a.CanInterface() && b.CanInterface() {
		if depth+1 > maxDepth && a.Len() > 0 {
			return false
		}
		ma, mb := a.Interface().(map[string]string), b.Interface().(map[string]string)
		for k, va := range ma {
			if vb, ok := mb[k]; !ok || va != vb {
				return false
			}
		}
		return true
	}
	iter := a.MapRange()
	for iter.Next() {
		vb := b.MapIndex(iter.Key())
		if !vb.IsValid() || !typedSame(iter.Value(), vb, p.elem, depth+1, maxDepth) {
			return false
		}
	}
	return true
}

// scalarOf returns a bool or number as JSON data.
func scalarOf(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Bool:
		return v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return normalizeJSON(v.Uint())
	case reflect.Float32, reflect.Float64:
		return normalizeJSON(v.Float())
	}
	return nil
}

// cmpScalars compares two present bools or numbers without allocating
// unless they differ.
func (w *walker) cmpScalars(a, b reflect.Value) {
	switch a.Kind() {
	case reflect.Bool:
		if a.Bool() != b.Bool() {
			w.emit(OpReplace, a.Bool(), b.Bool())
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if a.Int() != b.Int() {
			w.emit(OpReplace, a.Int(), b.Int())
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if a.Uint() != b.Uint() {
			w.emit(OpReplace, normalizeJSON(a.Uint()), normalizeJSON(b.Uint()))
		}
	case reflect.Float32, reflect.Float64:
		fa, fb := a.Float(), b.Float()
		for _, f := range [2]float64{fa, fb} {
			if math.IsNaN(f) || math.IsInf(f, 0) {
				w.fail(ErrUnsupportedValue, "%v has no JSON form", f)
				return
			}
		}
		if fa != fb {
			w.emit(OpReplace, normalizeJSON(fa), normalizeJSON(fb))
		}
	}
}

// equalLeaf handles the leaf kinds. It returns true when the value is not a
// leaf and the caller should compare by kind.
func (w *walker) equalLeaf(a, b reflect.Value, p *typePlan) bool {
	switch p.leaf {
	case leafNone:
		return true
	case leafTime:
		ta, tb := timeOf(a), timeOf(b)
		if ta.Unix() != tb.Unix() {
			w.replaceTyped(a, b)
		}
	case leafMicroTime:
		ta, tb := microTimeOf(a), microTimeOf(b)
		if ta.UnixMicro() != tb.UnixMicro() {
			w.replaceTyped(a, b)
		}
	case leafQuantity:
		qa, qb := quantityOf(a), quantityOf(b)
		if qa.Cmp(qb) != 0 {
			w.replaceTyped(a, b)
		}
	case leafDuration:
		if a.Field(0).Int() != b.Field(0).Int() {
			w.replaceTyped(a, b)
		}
	case leafIntOrString:
		ia, ib := a.Interface().(intstr.IntOrString), b.Interface().(intstr.IntOrString)
		if ia.Type != ib.Type || ia.IntVal != ib.IntVal || ia.StrVal != ib.StrVal {
			w.replaceTyped(a, b)
		}
	case leafBytes:
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			w.emit(OpReplace, base64.StdEncoding.EncodeToString(a.Bytes()), base64.StdEncoding.EncodeToString(b.Bytes()))
		}
	case leafMarshal:
		da, db := w.data(a), w.data(b)
		if w.err == nil {
			w.cmpData(da, db)
		}
	}
	return false
}

func (w *walker) replaceTyped(a, b reflect.Value) {
	da, db := w.data(a), w.data(b)
	if w.err == nil {
		w.emit(OpReplace, da, db)
	}
}

func timeOf(v reflect.Value) metav1.Time {
	if v.CanAddr() {
		return *v.Addr().Interface().(*metav1.Time)
	}
	return v.Interface().(metav1.Time)
}

func microTimeOf(v reflect.Value) metav1.MicroTime {
	if v.CanAddr() {
		return *v.Addr().Interface().(*metav1.MicroTime)
	}
	return v.Interface().(metav1.MicroTime)
}

func quantityOf(v reflect.Value) resource.Quantity {
	if v.CanAddr() {
		return *v.Addr().Interface().(*resource.Quantity)
	}
	return v.Interface().(resource.Quantity)
}

func (w *walker) cmpTypedMaps(a, b reflect.Value, aOK, bOK bool, p *typePlan) {
	aOK = aOK && !a.IsNil()
	bOK = bOK && !b.IsNil()
	if p.strMap && (!aOK || a.CanInterface()) && (!bOK || b.CanInterface()) {
		var ma, mb map[string]string
		if aOK {
			ma = a.Interface().(map[string]string)
		}
		if bOK {
			mb = b.Interface().(map[string]string)
		}
		if len(ma) == len(mb) {
			same := true
			for k, v := range ma {
				if v2, ok := mb[k]; !ok || v2 != v {
					same = false
					break
				}
			}
			if same {
				return
			}
		}
		for k, va := range ma {
			if !w.scopeAllows(k) {
				continue
			}
			if w.enterField(k) {
				w.cmpStrings(va, mb[k])
			}
			w.leave()
		}
		for k, vb := range mb {
			if _, seen := ma[k]; seen || !w.scopeAllows(k) {
				continue
			}
			if w.enterField(k) {
				w.cmpStrings("", vb)
			}
			w.leave()
		}
		return
	}
	// Generic string-keyed maps.
	if aOK {
		iter := a.MapRange()
		for iter.Next() {
			if w.done() {
				return
			}
			k := iter.Key().String()
			if !w.scopeAllows(k) {
				continue
			}
			var vb reflect.Value
			if bOK {
				vb = b.MapIndex(iter.Key())
			}
			if w.enterField(k) {
				w.cmpTyped(iter.Value(), vb, true, vb.IsValid(), p.elem)
			}
			w.leave()
		}
	}
	if bOK {
		iter := b.MapRange()
		for iter.Next() {
			if w.done() {
				return
			}
			k := iter.Key().String()
			if (aOK && a.MapIndex(iter.Key()).IsValid()) || !w.scopeAllows(k) {
				continue
			}
			if w.enterField(k) {
				w.cmpTyped(reflect.Value{}, iter.Value(), false, true, p.elem)
			}
			w.leave()
		}
	}
}

func (w *walker) cmpStrings(a, b string) {
	if w.strict() || w.lookup(ruleDefault) != nil {
		var da, db any
		if a != "" {
			da = a
		}
		if b != "" {
			db = b
		}
		w.cmpData(da, db)
		return
	}
	switch {
	case a == b:
	case w.first:
		w.found = true // Equal: nothing to box
	case a == "":
		w.emit(OpAdd, nil, w.boxString(b))
	case b == "":
		w.emit(OpRemove, w.boxString(a), nil)
	default:
		w.emit(OpReplace, w.boxString(a), w.boxString(b))
	}
}

// typedList adapts two slices of one Go type to matchList.
type typedList struct {
	w    *walker
	a, b reflect.Value
	p    *typePlan // element plan
	keys []string
	// keyOff is the offset of the single key, a string field stored in
	// the element (memKeys), and dataA and dataB the slices' arrays;
	// keyMem false when keys are read with reflect.
	keyMem       bool
	keyOff       uintptr
	dataA, dataB unsafe.Pointer
}

// memKeys lets keyEq read the key in memory when the lists are slices of
// structs keyed by one string field of their own (path, name: most keyed
// lists), instead of building reflect.Values for every pair it compares.
func (l *typedList) memKeys(p *typePlan) {
	if !fastPaths || p.kind != reflect.Slice || len(l.keys) != 1 || l.p.kind != reflect.Struct || l.p.leaf != leafNone {
		return
	}
	i, ok := l.p.byName[l.keys[0]]
	if !ok {
		return
	}
	fp := &l.p.fields[i]
	if !fp.direct || fp.plan.kind != reflect.String || fp.plan.leaf != leafNone {
		return
	}
	l.keyMem, l.keyOff = true, fp.offset
	if l.a.IsValid() {
		l.dataA = l.a.UnsafePointer()
	}
	if l.b.IsValid() {
		l.dataB = l.b.UnsafePointer()
	}
}

func (l typedList) lenA() int {
	if !l.a.IsValid() {
		return 0
	}
	return l.a.Len()
}

func (l typedList) lenB() int {
	if !l.b.IsValid() {
		return 0
	}
	return l.b.Len()
}

func (l typedList) side(s bool) reflect.Value {
	if s { // sideB
		return l.b
	}
	return l.a
}

func (l typedList) keyEq(x bool, i int, y bool, j int) bool {
	if l.keyMem {
		return *(*string)(l.keyAt(x, i)) == *(*string)(l.keyAt(y, j))
	}
	ex, ey := l.side(x).Index(i), l.side(y).Index(j)
	if len(l.keys) == 0 {
		return typedScalarEqual(ex, ey)
	}
	sx, px := derefStruct(ex, l.p)
	sy, py := derefStruct(ey, l.p)
	if px == nil || py == nil {
		return false
	}
	for _, k := range l.keys {
		ix, okx := px.byName[k]
		iy, oky := py.byName[k]
		if !okx || !oky {
			return false
		}
		fx, okx := reflectx.FieldByIndex(sx, px.fields[ix].index)
		fy, oky := reflectx.FieldByIndex(sy, py.fields[iy].index)
		if okx != oky || (okx && !typedScalarEqual(fx, fy)) {
			return false
		}
	}
	return true
}

// keyAt locates the key of element i of a side (keyMem).
func (l typedList) keyAt(s bool, i int) unsafe.Pointer {
	data := l.dataA
	if s { // sideB
		data = l.dataB
	}
	return unsafe.Add(data, uintptr(i)*l.p.size+l.keyOff)
}

// derefStruct follows pointers to a struct element and returns it with its
// plan, or a nil plan when the element is not a struct.
func derefStruct(v reflect.Value, p *typePlan) (reflect.Value, *typePlan) {
	for p != nil && p.kind == reflect.Pointer {
		if v.IsNil() {
			return v, nil
		}
		v, p = v.Elem(), p.elem
	}
	if p == nil || p.kind != reflect.Struct || p.leaf != leafNone {
		return v, nil
	}
	return v, p
}

// typedScalarEqual compares key fields: strings, numbers, bools, through
// pointers; anything else by JSON form.
func typedScalarEqual(a, b reflect.Value) bool {
	for a.Kind() == reflect.Pointer && b.Kind() == reflect.Pointer {
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		a, b = a.Elem(), b.Elem()
	}
	if a.Kind() != b.Kind() {
		return false
	}
	switch a.Kind() {
	case reflect.String:
		return a.String() == b.String()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return a.Uint() == b.Uint()
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Float32, reflect.Float64:
		return a.Float() == b.Float()
	}
	da, errA := valueData(a)
	db, errB := valueData(b)
	return errA == nil && errB == nil && dataEqual(da, db)
}

// appendTypedKeyText appends a key field of a typed element for a selector.
func appendTypedKeyText(b []byte, v reflect.Value, key string) []byte {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return b
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		d, _ := valueData(v)
		return appendScalarText(b, d)
	}
	p := planFor(v.Type())
	i, ok := p.byName[key]
	if !ok {
		return b
	}
	f, ok := reflectx.FieldByIndex(v, p.fields[i].index)
	if !ok {
		return b
	}
	for f.Kind() == reflect.Pointer {
		if f.IsNil() {
			return b
		}
		f = f.Elem()
	}
	switch f.Kind() {
	case reflect.String:
		return append(b, f.String()...)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.AppendInt(b, f.Int(), 10)
	}
	d, _ := valueData(f)
	return appendScalarText(b, d)
}

func (l typedList) enter(s bool, i int, keyed bool) bool {
	ok := l.w.enterElem(i)
	if keyed && len(l.keys) > 0 {
		l.w.setKey(keyInfo{keys: l.keys, keyT: l.side(s).Index(i)})
	} else if l.w.inArgsList() {
		l.w.nameUnkeyedArg(typedEntryName(l.a, i), typedEntryName(l.b, i))
	}
	return ok
}

func (l typedList) cmp(i, j int) {
	ea, eb := l.a.Index(i), l.b.Index(j)
	l.w.cmpTyped(ea, eb, !nilish(ea), !nilish(eb), l.p)
}

func (l typedList) same(i, j int) bool {
	if !fastPaths {
		return false
	}
	ea, eb := l.a.Index(i), l.b.Index(j)
	return !nilish(ea) && !nilish(eb) && typedSame(ea, eb, l.p, len(l.w.frames)+1, l.w.maxDepth)
}

func nilish(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice:
		return v.IsNil()
	}
	return false
}

func (l typedList) value(s bool, i int) any { return l.w.data(l.side(s).Index(i)) }

func (l typedList) whole(s bool) any {
	if !l.side(s).IsValid() {
		return nil
	}
	return l.w.data(l.side(s))
}
