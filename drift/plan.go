package drift

import (
	"encoding"
	"encoding/binary"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/upgradekit/upgradekit/internal/reflectx"
)

// planKind says how a type is encoded.
type planKind uint8

const (
	pkUnsupported planKind = iota
	pkBool
	pkInt
	pkUint
	pkFloat
	pkString
	pkBytes
	pkStruct
	pkPtr
	pkSlice
	pkArray
	pkMapStringString // map with string-kind keys and string-kind values
	pkMapStringAny    // map with string-kind keys and interface{} values
	pkMap             // any other map
	pkInterface
	pkQuantity
	pkMetaTime
	pkMicroTime
	pkMetaDuration
	pkStdTime
	pkIntOrString
	pkUnstructured
	pkJSONNumber
	pkJSONMarshaler    // value receiver
	pkJSONMarshalerPtr // pointer receiver, used when addressable
	pkTextMarshaler
	pkTextMarshalerPtr
)

// plan is the cached, immutable description of how to encode one type.
type plan struct {
	kind   planKind
	typ    reflect.Type
	elem   *plan       // ptr, slice, array, map values
	key    *plan       // generic maps
	fields []fieldPlan // structs, sorted by JSON name
	// zeroFolds: a value of this type whose memory is all zero bytes
	// encodes to nothing under zero folding, so it can be skipped without
	// being walked. Set by finishZeroFolds after the plan graph is built.
	zeroFolds bool
	// zeroFoldsNoTags is zeroFolds for hashers built with IgnoreHashTags,
	// where fields tagged hash:"ignore" count: such a field may encode
	// something even when zero (a metav1.Duration writes "0s").
	zeroFoldsNoTags bool
	// fallback is the plan used for a pointer-receiver marshaler type when
	// the value is not addressable (encoding/json does the same).
	fallback *plan
	// mem says how the memory walk (valueAt) reads a value of this type,
	// size is the type's size (the stride of a slice of it). Set by
	// finishPlans.
	mem  memKind
	size uintptr
}

// fieldPlan describes one JSON field of a struct. The fields the memory
// walk reads for every field come first, to share a cache line.
type fieldPlan struct {
	// Set by finishPlans, for the memory walk: op and opNoTags say how
	// objectAt handles the field (opNoTags under IgnoreHashTags), folds
	// and foldsNoTags copy the field plan's zeroFolds and
	// zeroFoldsNoTags, keyS is key followed by tagString.
	op, opNoTags       fieldOp
	folds, foldsNoTags bool
	direct             bool
	omitEmpty          bool
	omitZero           bool
	asString           bool
	// offset and size locate the field inside the outermost struct when
	// the path to it has no pointer (direct is true), for the zero-memory
	// fast path.
	offset, size uintptr
	plan         *plan
	keyS         string
	name         string
	key          []byte // uvarint length + name, as written
	index        []int
	ignore       bool
	set          bool
	// inMem: the memory walk (objectAt) reads this field at offset. It is
	// direct, not a ",string" field, and not an unexported embedded
	// struct, whose reflect.Value would be read-only (such a marshaler
	// is an error, which only the reflection walk reports).
	inMem bool
}

var (
	planCache reflectx.PlanCache[*plan]

	typQuantity        = reflect.TypeFor[resource.Quantity]()
	typMetaTime        = reflect.TypeFor[metav1.Time]()
	typMicroTime       = reflect.TypeFor[metav1.MicroTime]()
	typMetaDuration    = reflect.TypeFor[metav1.Duration]()
	typStdTime         = reflect.TypeFor[time.Time]()
	typIntOrString     = reflect.TypeFor[intstr.IntOrString]()
	typUnstructured    = reflect.TypeFor[unstructured.Unstructured]()
	typPtrUnstructured = reflect.TypeFor[*unstructured.Unstructured]()
	typJSONMarsh       = reflect.TypeFor[json.Marshaler]()
	typTextMarsh       = reflect.TypeFor[encoding.TextMarshaler]()
	typAny             = reflect.TypeFor[any]()
	typJSONNumber      = reflect.TypeFor[json.Number]()
)

// Fields of the special-cased apimachinery types, resolved by name (not
// position) once. If an apimachinery release renamed or retyped one, its
// index is -1 and the type falls back to its MarshalJSON, which gives the
// same JSON, only slower.
var (
	idxDurationValue = fieldIndex(typMetaDuration, "Duration", reflect.Int64)
	idxIntOrStrType  = fieldIndex(typIntOrString, "Type", reflect.Int64)
	idxIntOrStrInt   = fieldIndex(typIntOrString, "IntVal", reflect.Int32)
	idxIntOrStrStr   = fieldIndex(typIntOrString, "StrVal", reflect.String)
	idxUnstrObject   = fieldIndex(typUnstructured, "Object", reflect.Map)
)

// fieldIndex returns the index of t's top-level field name if it has kind
// k, else -1.
func fieldIndex(t reflect.Type, name string, k reflect.Kind) int {
	f, ok := t.FieldByName(name)
	if !ok || len(f.Index) != 1 || f.Type.Kind() != k {
		return -1
	}
	return f.Index[0]
}

// planFor returns the cached plan for t, building it (and the plans of all
// types reachable from it) on first use.
func planFor(t reflect.Type) *plan {
	if p, ok := planCache.Load(t); ok {
		return p
	}
	return planCache.Build(t, buildPlan, finishPlans)
}

func buildPlan(t reflect.Type, building map[reflect.Type]*plan) *plan {
	if p, ok := planCache.Load(t); ok {
		return p
	}
	if p, ok := building[t]; ok {
		return p
	}
	p := &plan{typ: t}
	building[t] = p

	switch t {
	case typQuantity:
		p.kind = pkQuantity
		return p
	case typMetaTime:
		p.kind = pkMetaTime
		return p
	case typMicroTime:
		p.kind = pkMicroTime
		return p
	case typMetaDuration:
		if idxDurationValue >= 0 {
			p.kind = pkMetaDuration
			return p
		}
	case typStdTime:
		p.kind = pkStdTime
		return p
	case typIntOrString:
		if idxIntOrStrType >= 0 && idxIntOrStrInt >= 0 && idxIntOrStrStr >= 0 {
			p.kind = pkIntOrString
			return p
		}
	case typUnstructured:
		if idxUnstrObject >= 0 {
			p.kind = pkUnstructured
			return p
		}
	case typJSONNumber:
		p.kind = pkJSONNumber
		return p
	}
	if t.Kind() != reflect.Pointer && t.Kind() != reflect.Interface {
		switch {
		case t.Implements(typJSONMarsh):
			p.kind = pkJSONMarshaler
			return p
		case reflect.PointerTo(t).Implements(typJSONMarsh):
			p.kind = pkJSONMarshalerPtr
			p.fallback = buildDefault(&plan{typ: t}, t, building)
			return p
		case t.Implements(typTextMarsh):
			p.kind = pkTextMarshaler
			return p
		case reflect.PointerTo(t).Implements(typTextMarsh):
			p.kind = pkTextMarshalerPtr
			p.fallback = buildDefault(&plan{typ: t}, t, building)
			return p
		}
	}
	return buildDefault(p, t, building)
}

// buildDefault fills p with the encoding/json default encoding of t.
func buildDefault(p *plan, t reflect.Type, building map[reflect.Type]*plan) *plan {
	switch t.Kind() {
	case reflect.Bool:
		p.kind = pkBool
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		p.kind = pkInt
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		p.kind = pkUint
	case reflect.Float32, reflect.Float64:
		p.kind = pkFloat
	case reflect.String:
		p.kind = pkString
	case reflect.Interface:
		p.kind = pkInterface
	case reflect.Pointer:
		p.kind = pkPtr
		p.elem = buildPlan(t.Elem(), building)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 && !reflect.PointerTo(t.Elem()).Implements(typJSONMarsh) &&
			!reflect.PointerTo(t.Elem()).Implements(typTextMarsh) {
			p.kind = pkBytes
			return p
		}
		p.kind = pkSlice
		p.elem = buildPlan(t.Elem(), building)
	case reflect.Array:
		p.kind = pkArray
		p.elem = buildPlan(t.Elem(), building)
	case reflect.Map:
		k := t.Key()
		switch {
		case k.Kind() == reflect.String && t.Elem().Kind() == reflect.String &&
			!implementsAny(t.Elem()) && !implementsAnyText(k):
			p.kind = pkMapStringString
			// key and elem serve named types, which are read with
			// reflection (genericMap).
			p.key = buildPlan(k, building)
			p.elem = buildPlan(t.Elem(), building)
		case k.Kind() == reflect.String && t.Elem() == typAny && !implementsAnyText(k):
			p.kind = pkMapStringAny
			p.key = buildPlan(k, building)
			p.elem = buildPlan(t.Elem(), building)
		default:
			p.kind = pkMap
			p.key = buildPlan(k, building)
			p.elem = buildPlan(t.Elem(), building)
		}
	case reflect.Struct:
		p.kind = pkStruct
		p.fields = structFields(t, building)
	default:
		p.kind = pkUnsupported
	}
	return p
}

func implementsAny(t reflect.Type) bool {
	return t.Implements(typJSONMarsh) || reflect.PointerTo(t).Implements(typJSONMarsh) ||
		t.Implements(typTextMarsh) || reflect.PointerTo(t).Implements(typTextMarsh)
}

func implementsAnyText(t reflect.Type) bool {
	return t.Implements(typTextMarsh) || reflect.PointerTo(t).Implements(typTextMarsh)
}

// structFields lists the JSON fields of t following encoding/json's rules:
// exported fields, json tag names, "-" skipped, untagged anonymous structs
// inlined, and on a name conflict the shallowest field wins (a tie at the
// same depth drops the name, as encoding/json does, unless exactly one of
// the tied fields is tagged).
func structFields(t reflect.Type, building map[reflect.Type]*plan) []fieldPlan {
	t0 := t
	type cand struct {
		fieldPlan
		depth  int
		tagged bool
	}
	var cands []cand
	var walk func(t reflect.Type, index []int, depth int, visited map[reflect.Type]bool)
	walk = func(t reflect.Type, index []int, depth int, visited map[reflect.Type]bool) {
		if visited[t] {
			return
		}
		visited[t] = true
		defer delete(visited, t)
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			ft := f.Type
			if f.Anonymous {
				et := ft
				if et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				if !f.IsExported() && et.Kind() != reflect.Struct {
					continue
				}
				if name == "" && et.Kind() == reflect.Struct {
					walk(et, append(slices.Clone(index), i), depth+1, visited)
					continue
				}
			} else if !f.IsExported() {
				continue
			}
			c := cand{depth: depth, tagged: name != ""}
			if name == "" {
				name = f.Name
			}
			c.name = name
			c.index = append(slices.Clone(index), i)
			for o := range strings.SplitSeq(opts, ",") {
				switch o {
				case "omitempty":
					c.omitEmpty = true
				case "omitzero":
					c.omitZero = true
				case "string":
					switch ft.Kind() {
					case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
						reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
						reflect.Uintptr, reflect.Float32, reflect.Float64, reflect.String:
						c.asString = true
					}
				}
			}
			for o := range strings.SplitSeq(f.Tag.Get("hash"), ",") {
				switch o {
				case "ignore", "-":
					c.ignore = true
				case "set":
					c.set = true
				}
			}
			c.plan = buildPlan(ft, building)
			c.key = binary.AppendUvarint(nil, uint64(len(name)))
			c.key = append(c.key, name...)
			c.size = ft.Size()
			c.direct = true
			cur := t0
			for _, x := range c.index {
				if cur.Kind() == reflect.Pointer {
					c.direct = false
					break
				}
				sf := cur.Field(x)
				c.offset += sf.Offset
				cur = sf.Type
			}
			c.inMem = c.direct && !c.asString && f.IsExported()
			cands = append(cands, c)
		}
	}
	walk(t, nil, 0, map[reflect.Type]bool{})

	// Resolve conflicts: group by name.
	slices.SortStableFunc(cands, func(a, b cand) int {
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		if a.depth != b.depth {
			return a.depth - b.depth
		}
		if a.tagged != b.tagged {
			if a.tagged {
				return -1
			}
			return 1
		}
		return 0
	})
	var out []fieldPlan
	for i := 0; i < len(cands); {
		j := i + 1
		for j < len(cands) && cands[j].name == cands[i].name {
			j++
		}
		group := cands[i:j]
		dominant := len(group) == 1 ||
			group[0].depth < group[1].depth ||
			(group[0].tagged && !group[1].tagged)
		if dominant {
			out = append(out, group[0].fieldPlan)
		}
		i = j
	}
	return out
}

// finishPlans completes the plans just built: their memory kinds, and
// zeroFolds and zeroFoldsNoTags to a fixed point (plans may be recursive):
// start optimistic for structs, then clear until nothing changes.
func finishPlans(building map[reflect.Type]*plan) {
	var all []*plan
	for _, p := range building {
		all = append(all, p)
		if p.fallback != nil {
			all = append(all, p.fallback)
		}
	}
	for _, p := range all {
		setMem(p)
		p.zeroFolds = baseZeroFolds(p)
		p.zeroFoldsNoTags = p.zeroFolds
	}
	defer setFieldOps(all)
	for changed := true; changed; {
		changed = false
		for _, p := range all {
			if p.kind != pkStruct {
				continue
			}
			for _, f := range p.fields {
				if f.plan == nil {
					continue
				}
				if p.zeroFolds && !f.plan.zeroFolds && !f.ignore {
					p.zeroFolds = false
					changed = true
				}
				if p.zeroFoldsNoTags && !f.plan.zeroFoldsNoTags {
					p.zeroFoldsNoTags = false
					changed = true
				}
			}
		}
	}
}

func baseZeroFolds(p *plan) bool {
	switch p.kind {
	case pkBool, pkInt, pkUint, pkFloat, pkString, pkBytes, pkPtr, pkSlice,
		pkMapStringString, pkMapStringAny, pkMap, pkInterface,
		pkMetaTime, pkMicroTime, pkIntOrString,
		pkUnstructured, pkJSONNumber, pkStruct:
		return true
	case pkArray:
		return p.typ.Len() == 0
	}
	return false
}
