package drift

import (
	"bytes"
	"encoding"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/upgradekit/upgradekit/internal/memzero"
	"github.com/upgradekit/upgradekit/internal/reflectx"
)

// The canonical encoding. Every value starts with a one-byte tag; strings
// and keys are length prefixed, so the encoding is unambiguous (two
// different canonical values never share an encoding). Object keys are
// written in byte order, so struct field order and map iteration order do
// not matter. Sets are written as their members' 64-bit hashes, sorted
// and de-duplicated.
const (
	tagNull   = 'n'
	tagFalse  = 'f'
	tagTrue   = 't'
	tagInt    = 'i'
	tagUint   = 'u'
	tagFloat  = 'd'
	tagString = 's'
	tagObj    = '{'
	tagObjEnd = '}'
	tagList   = '['
	tagLEnd   = ']'
	tagSet    = '<'
	tagSetEnd = '>'
)

type kvString struct{ k, v string }

type kvAny struct {
	k string
	v any
}

type kvValue struct {
	k string
	v reflect.Value
}

// fpEntry is one field fingerprint recorded while encoding.
type fpEntry struct {
	parent string
	name   string
	value  uint64
}

type ptrKey struct {
	p uintptr
	t reflect.Type
}

// encoder holds the reusable scratch of one hash computation. Encoders are
// pooled, so after warm-up hashing does not allocate.
type encoder struct {
	buf   []byte
	tmp   []byte
	ss    []kvString
	sa    []kvAny
	sets  []uint64
	fps   []fpEntry
	ptrs  []ptrKey
	cfg   *config
	depth int
	// level is the object nesting level of the fields being written, for
	// fingerprints: 1 for the root's fields, 2 for their children; 0 when
	// not recording.
	level  int
	parent string
}

func (e *encoder) reset(cfg *config) {
	e.buf = e.buf[:0]
	e.ss = e.ss[:0]
	e.sa = e.sa[:0]
	e.sets = e.sets[:0]
	e.fps = e.fps[:0]
	e.ptrs = e.ptrs[:0]
	e.cfg = cfg
	e.depth = 0
	e.level = 0
	e.parent = ""
}

// maxFingerprintLevel is the deepest object level that gets fingerprints.
const maxFingerprintLevel = 2

// descend moves into a field's value: fingerprint recording continues one
// level deeper, or stops.
func (e *encoder) descend(level int, name string) {
	if level > 0 && level < maxFingerprintLevel {
		e.level = level + 1
		e.parent = name
	} else {
		e.level = 0
	}
}

func (e *encoder) record(level int, parent, name string, start int) {
	if level == 0 {
		return
	}
	if level == 1 {
		parent = ""
	}
	e.fps = append(e.fps, fpEntry{parent: parent, name: name, value: xxhash.Sum64(e.buf[start:])})
}

func (e *encoder) null() bool {
	if e.cfg.keepZero {
		e.buf = append(e.buf, tagNull)
		return true
	}
	return false
}

func (e *encoder) appendKey(k string) {
	e.buf = binary.AppendUvarint(e.buf, uint64(len(k)))
	e.buf = append(e.buf, k...)
}

func (e *encoder) str(s string) bool {
	if s == "" && !e.cfg.keepZero {
		return false
	}
	e.buf = append(e.buf, tagString)
	e.buf = binary.AppendUvarint(e.buf, uint64(len(s)))
	e.buf = append(e.buf, s...)
	return true
}

func (e *encoder) strBytes(s []byte) bool {
	if len(s) == 0 && !e.cfg.keepZero {
		return false
	}
	e.buf = append(e.buf, tagString)
	e.buf = binary.AppendUvarint(e.buf, uint64(len(s)))
	e.buf = append(e.buf, s...)
	return true
}

func (e *encoder) boolean(b bool) bool {
	if !b {
		if !e.cfg.keepZero {
			return false
		}
		e.buf = append(e.buf, tagFalse)
		return true
	}
	e.buf = append(e.buf, tagTrue)
	return true
}

func (e *encoder) integer(i int64) bool {
	if i == 0 && !e.cfg.keepZero {
		return false
	}
	e.buf = append(e.buf, tagInt)
	e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(i))
	return true
}

func (e *encoder) unsigned(u uint64) bool {
	if u <= math.MaxInt64 {
		return e.integer(int64(u))
	}
	e.buf = append(e.buf, tagUint)
	e.buf = binary.BigEndian.AppendUint64(e.buf, u)
	return true
}

// float encodes f; integral values in the int64 range are encoded as
// integers so that 5, int64(5) and float64(5) (as JSON decoders produce)
// hash equal.
func (e *encoder) float(f float64) (bool, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return false, newWalkError(fmt.Errorf("%w: float %v has no JSON form", errUnsupportedValue, f))
	}
	if f == math.Trunc(f) && f >= -(1<<63) && f < (1<<63) {
		return e.integer(int64(f)), nil
	}
	e.buf = append(e.buf, tagFloat)
	e.buf = binary.BigEndian.AppendUint64(e.buf, math.Float64bits(f))
	return true, nil
}

// float32 goes through its shortest decimal form, as encoding/json writes
// it, so a float32 hashes like the float64 a JSON decoder reads back.
func (e *encoder) float32(f float32) (bool, error) {
	f64 := float64(f)
	if !math.IsNaN(f64) && !math.IsInf(f64, 0) && f64 != math.Trunc(f64) {
		e.tmp = strconv.AppendFloat(e.tmp[:0], f64, 'g', -1, 32)
		if p, err := strconv.ParseFloat(string(e.tmp), 64); err == nil {
			f64 = p
		}
	}
	return e.float(f64)
}

func (e *encoder) depthEnter(p uintptr, t reflect.Type) error {
	e.depth++
	if e.depth > maxDepth {
		return newWalkError(fmt.Errorf("%w: deeper than %d levels", errTooDeep, maxDepth))
	}
	if e.depth > cycleCheckDepth && p != 0 {
		k := ptrKey{p, t}
		if slices.Contains(e.ptrs, k) {
			return newWalkError(fmt.Errorf("%w: %s refers to itself", errCycle, t))
		}
		e.ptrs = append(e.ptrs, k)
	}
	return nil
}

func (e *encoder) depthLeave(p uintptr) {
	if e.depth > cycleCheckDepth && p != 0 && len(e.ptrs) > 0 {
		e.ptrs = e.ptrs[:len(e.ptrs)-1]
	}
	e.depth--
}

// value encodes v according to p. node holds the path rules that apply at
// v, set says lists here are sets. It reports whether anything was
// written: with zero folding, a zero value writes nothing.
func (e *encoder) value(v reflect.Value, p *plan, node *pathNode, set bool) (bool, error) {
	switch p.kind {
	case pkString:
		return e.str(v.String()), nil
	case pkBool:
		return e.boolean(v.Bool()), nil
	case pkInt:
		return e.integer(v.Int()), nil
	case pkUint:
		return e.unsigned(v.Uint()), nil
	case pkFloat:
		if v.Kind() == reflect.Float32 {
			return e.float32(float32(v.Float()))
		}
		return e.float(v.Float())
	case pkPtr:
		if v.IsNil() {
			return e.null(), nil
		}
		ptr := v.Pointer()
		if err := e.depthEnter(ptr, p.typ); err != nil {
			return false, err
		}
		wrote, err := e.value(v.Elem(), p.elem, node, set)
		e.depthLeave(ptr)
		return wrote, err
	case pkStruct:
		return e.object(v, p, node)
	case pkSlice:
		if v.IsNil() {
			return e.null(), nil
		}
		ptr := v.Pointer()
		if err := e.depthEnter(ptr, p.typ); err != nil {
			return false, err
		}
		wrote, err := e.list(v, v.Len(), p.elem, node, set)
		e.depthLeave(ptr)
		return wrote, err
	case pkArray:
		return e.list(v, v.Len(), p.elem, node, set)
	case pkBytes:
		if v.IsNil() {
			return e.null(), nil
		}
		b := v.Bytes()
		n := base64.StdEncoding.EncodedLen(len(b))
		if n == 0 && !e.cfg.keepZero {
			return false, nil
		}
		e.buf = append(e.buf, tagString)
		e.buf = binary.AppendUvarint(e.buf, uint64(n))
		e.buf = base64.StdEncoding.AppendEncode(e.buf, b)
		return true, nil
	case pkMapStringString:
		if v.IsNil() {
			return e.null(), nil
		}
		if p.typ == typMapStringString && v.CanInterface() {
			// The exact type: read it without reflection's per-entry
			// allocations.
			return e.mapStringString(v.Interface().(map[string]string), node)
		}
		// Named key or value types (map[MyKey]MyVal), or a map reached
		// through an unexported embedded struct: iterate with reflection.
		// Strings nest nothing, so no depth is counted, as above.
		return e.genericMap(v, p, node)
	case pkMapStringAny:
		if v.IsNil() {
			return e.null(), nil
		}
		ptr := uintptr(v.UnsafePointer())
		if err := e.depthEnter(ptr, p.typ); err != nil {
			return false, err
		}
		var wrote bool
		var err error
		if p.typ == typMapStringAny && v.CanInterface() {
			wrote, err = e.mapStringAny(v.Interface().(map[string]any), node)
		} else {
			wrote, err = e.genericMap(v, p, node)
		}
		e.depthLeave(ptr)
		return wrote, err
	case pkMap:
		if v.IsNil() {
			return e.null(), nil
		}
		ptr := v.Pointer()
		if err := e.depthEnter(ptr, p.typ); err != nil {
			return false, err
		}
		wrote, err := e.genericMap(v, p, node)
		e.depthLeave(ptr)
		return wrote, err
	case pkInterface:
		if v.IsNil() {
			return e.null(), nil
		}
		if err := e.depthEnter(0, nil); err != nil {
			return false, err
		}
		var wrote bool
		var err error
		if v.CanInterface() {
			wrote, err = e.anyValue(v.Interface(), node, set)
		} else {
			el := v.Elem()
			wrote, err = e.value(el, planFor(el.Type()), node, set)
		}
		e.depthLeave(0)
		return wrote, err
	case pkQuantity:
		var q *resource.Quantity
		if v.CanAddr() && v.Addr().CanInterface() {
			q, _ = v.Addr().Interface().(*resource.Quantity)
		} else if v.CanInterface() {
			qv, _ := v.Interface().(resource.Quantity)
			q = &qv
		}
		if q == nil {
			return false, newWalkError(fmt.Errorf("%w: unreadable %s", errUnsupportedValue, p.typ))
		}
		num, suffix := q.CanonicalizeBytes(e.tmp[:0])
		e.buf = append(e.buf, tagString)
		e.buf = binary.AppendUvarint(e.buf, uint64(len(num)+len(suffix)))
		e.buf = append(e.buf, num...)
		e.buf = append(e.buf, suffix...)
		return true, nil
	case pkMetaTime, pkMicroTime, pkStdTime:
		t, ok := readTime(v)
		if !ok {
			return false, newWalkError(fmt.Errorf("%w: unreadable %s", errUnsupportedValue, p.typ))
		}
		layout := time.RFC3339
		switch p.kind {
		case pkMicroTime:
			layout = metav1.RFC3339Micro
		case pkStdTime:
			layout = time.RFC3339Nano
		}
		if t.IsZero() && p.kind != pkStdTime {
			// metav1.Time and MicroTime marshal their zero value as null.
			return e.null(), nil
		}
		if p.kind != pkStdTime {
			t = t.UTC()
		}
		e.tmp = t.AppendFormat(e.tmp[:0], layout)
		return e.strBytes(e.tmp), nil
	case pkMetaDuration:
		d := time.Duration(v.Field(idxDurationValue).Int())
		e.tmp = appendDuration(e.tmp[:0], d)
		return e.strBytes(e.tmp), nil
	case pkIntOrString:
		typ := intstr.Type(v.Field(idxIntOrStrType).Int())
		if typ == intstr.String {
			return e.str(v.Field(idxIntOrStrStr).String()), nil
		}
		if typ == intstr.Int {
			return e.integer(v.Field(idxIntOrStrInt).Int()), nil
		}
		return false, newWalkError(fmt.Errorf("%w: IntOrString with type %d", errUnsupportedValue, typ))
	case pkJSONNumber:
		if v.String() == "" {
			return e.null(), nil
		}
		return e.number(json.Number(v.String()))
	case pkUnstructured:
		obj := v.Field(idxUnstrObject)
		return e.value(obj, planFor(obj.Type()), node, set)
	case pkJSONMarshaler:
		if !v.CanInterface() {
			return false, newWalkError(fmt.Errorf("%w: unexported marshaler %s", errUnsupportedValue, p.typ))
		}
		m, _ := v.Interface().(json.Marshaler)
		return e.marshaled(m, node, set)
	case pkJSONMarshalerPtr:
		if v.CanAddr() && v.Addr().CanInterface() {
			m, _ := v.Addr().Interface().(json.Marshaler)
			return e.marshaled(m, node, set)
		}
		return e.value(v, p.fallback, node, set)
	case pkTextMarshaler:
		if !v.CanInterface() {
			return false, newWalkError(fmt.Errorf("%w: unexported marshaler %s", errUnsupportedValue, p.typ))
		}
		m, _ := v.Interface().(encoding.TextMarshaler)
		return e.text(m)
	case pkTextMarshalerPtr:
		if v.CanAddr() && v.Addr().CanInterface() {
			m, _ := v.Addr().Interface().(encoding.TextMarshaler)
			return e.text(m)
		}
		return e.value(v, p.fallback, node, set)
	default:
		return false, newWalkError(fmt.Errorf("%w: %s has no JSON form", errUnsupportedType, p.typ))
	}
}

func readTime(v reflect.Value) (time.Time, bool) {
	if v.CanAddr() && v.Addr().CanInterface() {
		switch x := v.Addr().Interface().(type) {
		case *metav1.Time:
			return x.Time, true
		case *metav1.MicroTime:
			return x.Time, true
		case *time.Time:
			return *x, true
		}
		return time.Time{}, false
	}
	if !v.CanInterface() {
		return time.Time{}, false
	}
	switch x := v.Interface().(type) {
	case metav1.Time:
		return x.Time, true
	case metav1.MicroTime:
		return x.Time, true
	case time.Time:
		return x, true
	}
	return time.Time{}, false
}

// object encodes a struct as a JSON object.
func (e *encoder) object(v reflect.Value, p *plan, node *pathNode) (bool, error) {
	// The memory walk reads at p's offsets: only for a value of p's own
	// type (checked, so that a caller passing another plan falls back
	// instead of reading the wrong memory).
	if !e.cfg.keepZero && !e.cfg.noMemWalk && v.CanAddr() && v.CanInterface() && p.mem == memStruct && v.Type() == p.typ {
		return e.objectAt(unsafe.Pointer(v.UnsafeAddr()), p, node)
	}
	start := len(e.buf)
	e.buf = append(e.buf, tagObj)
	level, parent := e.level, e.parent
	var base unsafe.Pointer
	if !e.cfg.keepZero && v.CanAddr() {
		base = unsafe.Pointer(v.UnsafeAddr())
	}
	for i := range p.fields {
		f := &p.fields[i]
		if (f.ignore && !e.cfg.noTags) || f.plan == nil {
			continue
		}
		folds := f.plan.zeroFolds
		if e.cfg.noTags {
			folds = f.plan.zeroFoldsNoTags
		}
		if base != nil && f.direct && folds && memzero.Bytes(unsafe.Add(base, f.offset), f.size) {
			continue
		}
		var fnode *pathNode
		if node != nil {
			fnode = node.child(f.name)
			if fnode != nil && fnode.ignore {
				continue
			}
		}
		if base != nil && f.direct && !f.asString {
			// Scalars and pointers to scalars are read straight from
			// memory, without building reflect.Values.
			mark := len(e.buf)
			e.buf = append(e.buf, f.key...)
			valStart := len(e.buf)
			if handled, wrote, err := e.scalarField(unsafe.Add(base, f.offset), f.plan); handled {
				if err != nil {
					return false, wrapField(err, f.name)
				}
				if !wrote {
					e.buf = e.buf[:mark]
				} else {
					e.record(level, parent, f.name, valStart)
				}
				continue
			}
			e.buf = e.buf[:mark]
		}
		fv, ok := reflectx.FieldByIndex(v, f.index)
		if !ok {
			continue
		}
		if e.cfg.keepZero && f.omitEmpty && isEmptyJSON(fv) {
			continue
		}
		if e.cfg.keepZero && f.omitZero {
			zero, err := isZeroJSON(fv)
			if err != nil {
				return false, wrapField(err, f.name)
			}
			if zero {
				continue
			}
		}
		mark := len(e.buf)
		e.buf = append(e.buf, f.key...)
		valStart := len(e.buf)
		e.descend(level, f.name)
		set := e.cfg.slicesAsSets || (f.set && !e.cfg.noTags) || (fnode != nil && fnode.set)
		var wrote bool
		var err error
		if f.asString {
			wrote, err = e.asString(fv)
		} else {
			wrote, err = e.value(fv, f.plan, fnode, set)
		}
		e.level, e.parent = level, parent
		if err != nil {
			return false, wrapField(err, f.name)
		}
		if !wrote {
			e.buf = e.buf[:mark]
			continue
		}
		e.record(level, parent, f.name, valStart)
	}
	if len(e.buf) == start+1 && !e.cfg.keepZero {
		e.buf = e.buf[:start]
		return false, nil
	}
	e.buf = append(e.buf, tagObjEnd)
	return true, nil
}

// scalarField encodes the value of plan pl stored at p when it is a plain
// scalar (or a pointer to one); handled is false for anything else.
func (e *encoder) scalarField(p unsafe.Pointer, pl *plan) (handled, wrote bool, err error) {
	switch {
	case pl.mem == memPtrScalar:
		q := *(*unsafe.Pointer)(p)
		if q == nil {
			return true, e.null(), nil
		}
		wrote, err = e.scalarAt(q, pl.elem.mem)
		return true, wrote, err
	case pl.mem >= memString && pl.mem <= memFloat64:
		wrote, err = e.scalarAt(p, pl.mem)
		return true, wrote, err
	}
	return false, false, nil
}

// isEmptyJSON is encoding/json's omitempty test.
func isEmptyJSON(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}

type zeroer interface{ IsZero() bool }

// isZeroJSON is encoding/json's omitzero test: an IsZero method if the
// type has one, else the zero value. A panicking IsZero is an
// errUnsupportedValue walkError.
func isZeroJSON(v reflect.Value) (bool, error) {
	if v.CanInterface() {
		if z, ok := v.Interface().(zeroer); ok {
			if v.Kind() == reflect.Pointer && v.IsNil() {
				return true, nil
			}
			return callIsZero(z)
		}
		if v.CanAddr() && v.Addr().CanInterface() {
			if z, ok := v.Addr().Interface().(zeroer); ok {
				return callIsZero(z)
			}
		}
	}
	return v.IsZero(), nil
}

// The user methods the encoder calls (MarshalJSON, MarshalText, IsZero)
// are called through these wrappers, which turn a panic into an
// errUnsupportedValue: a broken marshaler is bad input, not a bug here.
// Any other panic while hashing is ErrInternal (see Hasher.run).

func callIsZero(z zeroer) (zero bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = newWalkError(fmt.Errorf("%w: IsZero of %T panicked: %v", errUnsupportedValue, z, r))
		}
	}()
	return z.IsZero(), nil
}

func callMarshalJSON(m json.Marshaler) (b []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	return m.MarshalJSON()
}

func callMarshalText(m encoding.TextMarshaler) (b []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	return m.MarshalText()
}

// asString encodes a field tagged `json:",string"`.
func (e *encoder) asString(v reflect.Value) (bool, error) {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return e.null(), nil
		}
		v = v.Elem()
	}
	b := e.tmp[:0]
	switch v.Kind() {
	case reflect.Bool:
		b = strconv.AppendBool(b, v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		b = strconv.AppendInt(b, v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		b = strconv.AppendUint(b, v.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return false, newWalkError(fmt.Errorf("%w: float %v has no JSON form", errUnsupportedValue, f))
		}
		bits := 64
		if v.Kind() == reflect.Float32 {
			bits = 32
		}
		b = strconv.AppendFloat(b, f, 'g', -1, bits)
	case reflect.String:
		q, err := json.Marshal(v.String())
		if err != nil {
			return false, newWalkError(fmt.Errorf("%w: %v", errUnsupportedValue, err))
		}
		b = append(b, q...)
	default:
		return false, newWalkError(fmt.Errorf("%w: ,string option on %s", errUnsupportedType, v.Type()))
	}
	e.tmp = b
	if v.IsZero() && !e.cfg.keepZero {
		return false, nil
	}
	return e.strBytes(b), nil
}

// list encodes a slice or array. Inside lists no fingerprints are taken.
func (e *encoder) list(v reflect.Value, n int, ep *plan, node *pathNode, set bool) (bool, error) {
	if n == 0 {
		if e.cfg.keepZero {
			e.buf = append(e.buf, tagList, tagLEnd)
			return true, nil
		}
		return false, nil
	}
	level := e.level
	e.level = 0
	defer func() { e.level = level }()
	elemSet := e.cfg.slicesAsSets || (node != nil && node.set)
	if set {
		base := len(e.sets)
		for i := 0; i < n; i++ {
			start := len(e.buf)
			wrote, err := e.value(v.Index(i), ep, node, elemSet)
			if err != nil {
				return false, wrapIndex(err, i)
			}
			if !wrote {
				e.buf = append(e.buf, tagNull)
			}
			e.sets = append(e.sets, xxhash.Sum64(e.buf[start:]))
			e.buf = e.buf[:start]
		}
		e.writeSet(base)
		return true, nil
	}
	e.buf = append(e.buf, tagList)
	for i := 0; i < n; i++ {
		wrote, err := e.value(v.Index(i), ep, node, elemSet)
		if err != nil {
			return false, wrapIndex(err, i)
		}
		if !wrote {
			e.buf = append(e.buf, tagNull)
		}
	}
	e.buf = append(e.buf, tagLEnd)
	return true, nil
}

// writeSet writes the member hashes collected since base, sorted and
// without duplicates, and pops them.
func (e *encoder) writeSet(base int) {
	members := e.sets[base:]
	slices.Sort(members)
	members = slices.Compact(members)
	e.buf = append(e.buf, tagSet)
	for _, h := range members {
		e.buf = binary.BigEndian.AppendUint64(e.buf, h)
	}
	e.buf = append(e.buf, tagSetEnd)
	e.sets = e.sets[:base]
}

func cmpKVString(a, b kvString) int { return strings.Compare(a.k, b.k) }
func cmpKVAny(a, b kvAny) int       { return strings.Compare(a.k, b.k) }

func (e *encoder) mapStringString(m map[string]string, node *pathNode) (bool, error) {
	if len(m) == 0 {
		if e.cfg.keepZero {
			e.buf = append(e.buf, tagObj, tagObjEnd)
			return true, nil
		}
		return false, nil
	}
	base := len(e.ss)
	for k, v := range m {
		if node != nil {
			if c := node.child(k); c != nil && c.ignore {
				continue
			}
		}
		e.ss = append(e.ss, kvString{k, v})
	}
	entries := e.ss[base:]
	sortKVString(entries)
	keepEntries := node != nil && node.keepEntries
	start := len(e.buf)
	e.buf = append(e.buf, tagObj)
	level, parent := e.level, e.parent
	for _, kv := range entries {
		if kv.v == "" && !e.cfg.keepZero {
			if !keepEntries {
				continue
			}
			e.appendKey(kv.k)
			e.buf = append(e.buf, tagNull)
			e.record(level, parent, kv.k, len(e.buf)-1)
			continue
		}
		// Key, then the value as str writes it.
		e.buf = binary.AppendUvarint(e.buf, uint64(len(kv.k)))
		e.buf = append(e.buf, kv.k...)
		valStart := len(e.buf)
		e.buf = append(e.buf, tagString)
		e.buf = binary.AppendUvarint(e.buf, uint64(len(kv.v)))
		e.buf = append(e.buf, kv.v...)
		if level != 0 {
			e.record(level, parent, kv.k, valStart)
		}
	}
	e.ss = e.ss[:base]
	if len(e.buf) == start+1 && !e.cfg.keepZero {
		e.buf = e.buf[:start]
		return false, nil
	}
	e.buf = append(e.buf, tagObjEnd)
	return true, nil
}

// sortKVString sorts map entries by key. Keys are distinct, so stability
// does not matter; the few labels of a spec sort by insertion, comparing
// strings directly instead of through a comparison function.
func sortKVString(s []kvString) {
	if len(s) > 12 {
		slices.SortFunc(s, cmpKVString)
		return
	}
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].k < s[j-1].k; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func (e *encoder) mapStringAny(m map[string]any, node *pathNode) (bool, error) {
	if len(m) == 0 {
		if e.cfg.keepZero {
			e.buf = append(e.buf, tagObj, tagObjEnd)
			return true, nil
		}
		return false, nil
	}
	base := len(e.sa)
	for k, v := range m {
		e.sa = append(e.sa, kvAny{k, v})
	}
	slices.SortFunc(e.sa[base:], cmpKVAny)
	keepEntries := node != nil && node.keepEntries
	start := len(e.buf)
	e.buf = append(e.buf, tagObj)
	level, parent := e.level, e.parent
	// Index instead of ranging over a sub-slice: nested maps append to
	// e.sa and may move it.
	n := len(e.sa) - base
	for i := 0; i < n; i++ {
		kv := e.sa[base+i]
		var cnode *pathNode
		if node != nil {
			cnode = node.child(kv.k)
			if cnode != nil && cnode.ignore {
				continue
			}
		}
		mark := len(e.buf)
		e.appendKey(kv.k)
		valStart := len(e.buf)
		e.descend(level, kv.k)
		set := e.cfg.slicesAsSets || (cnode != nil && cnode.set)
		wrote, err := e.anyValue(kv.v, cnode, set)
		e.level, e.parent = level, parent
		if err != nil {
			e.sa = e.sa[:base]
			return false, wrapField(err, kv.k)
		}
		if !wrote {
			if !keepEntries {
				e.buf = e.buf[:mark]
				continue
			}
			e.buf = append(e.buf, tagNull)
		}
		e.record(level, parent, kv.k, valStart)
	}
	clear(e.sa[base:])
	e.sa = e.sa[:base]
	if len(e.buf) == start+1 && !e.cfg.keepZero {
		e.buf = e.buf[:start]
		return false, nil
	}
	e.buf = append(e.buf, tagObjEnd)
	return true, nil
}

// genericMap encodes maps that are not string-keyed with string or
// interface values. It allocates; such maps are rare in Kubernetes specs
// (corev1.ResourceList is one).
func (e *encoder) genericMap(v reflect.Value, p *plan, node *pathNode) (bool, error) {
	if v.Len() == 0 {
		if e.cfg.keepZero {
			e.buf = append(e.buf, tagObj, tagObjEnd)
			return true, nil
		}
		return false, nil
	}
	entries := make([]kvValue, 0, v.Len())
	it := v.MapRange()
	for it.Next() {
		k, err := mapKeyString(it.Key(), p.key)
		if err != nil {
			return false, err
		}
		entries = append(entries, kvValue{k, it.Value()})
	}
	slices.SortFunc(entries, func(a, b kvValue) int { return strings.Compare(a.k, b.k) })
	keepEntries := node != nil && node.keepEntries
	start := len(e.buf)
	e.buf = append(e.buf, tagObj)
	level, parent := e.level, e.parent
	for _, kv := range entries {
		var cnode *pathNode
		if node != nil {
			cnode = node.child(kv.k)
			if cnode != nil && cnode.ignore {
				continue
			}
		}
		mark := len(e.buf)
		e.appendKey(kv.k)
		valStart := len(e.buf)
		e.descend(level, kv.k)
		set := e.cfg.slicesAsSets || (cnode != nil && cnode.set)
		wrote, err := e.value(kv.v, p.elem, cnode, set)
		e.level, e.parent = level, parent
		if err != nil {
			return false, wrapField(err, kv.k)
		}
		if !wrote {
			if !keepEntries {
				e.buf = e.buf[:mark]
				continue
			}
			e.buf = append(e.buf, tagNull)
		}
		e.record(level, parent, kv.k, valStart)
	}
	if len(e.buf) == start+1 && !e.cfg.keepZero {
		e.buf = e.buf[:start]
		return false, nil
	}
	e.buf = append(e.buf, tagObjEnd)
	return true, nil
}

// mapKeyString renders a map key as encoding/json does.
func mapKeyString(k reflect.Value, kp *plan) (string, error) {
	if k.Kind() == reflect.String && kp.kind != pkTextMarshaler && kp.kind != pkTextMarshalerPtr {
		return k.String(), nil
	}
	if k.CanInterface() {
		if tm, ok := k.Interface().(encoding.TextMarshaler); ok {
			if k.Kind() == reflect.Pointer && k.IsNil() {
				return "", nil
			}
			b, err := callMarshalText(tm)
			if err != nil {
				return "", newWalkError(fmt.Errorf("%w: map key: %v", errUnsupportedValue, err))
			}
			return string(b), nil
		}
	}
	switch k.Kind() {
	case reflect.String:
		return k.String(), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(k.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(k.Uint(), 10), nil
	}
	return "", newWalkError(fmt.Errorf("%w: map key type %s", errUnsupportedType, k.Type()))
}

// anyValue encodes a dynamically typed value, with fast paths for the
// types that unstructured objects and JSON decoding produce.
func (e *encoder) anyValue(x any, node *pathNode, set bool) (bool, error) {
	switch v := x.(type) {
	case nil:
		return e.null(), nil
	case string:
		return e.str(v), nil
	case bool:
		return e.boolean(v), nil
	case int64:
		return e.integer(v), nil
	case float64:
		return e.float(v)
	case int:
		return e.integer(int64(v)), nil
	case int32:
		return e.integer(int64(v)), nil
	case json.Number:
		return e.number(v)
	case map[string]any:
		if v == nil {
			return e.null(), nil
		}
		var ptr uintptr
		if e.depth >= cycleCheckDepth {
			ptr = uintptr(reflect.ValueOf(v).UnsafePointer())
		}
		if err := e.depthEnter(ptr, typMapStringAny); err != nil {
			return false, err
		}
		wrote, err := e.mapStringAny(v, node)
		e.depthLeave(ptr)
		return wrote, err
	case []any:
		if v == nil {
			return e.null(), nil
		}
		var ptr uintptr
		if len(v) > 0 && e.depth >= cycleCheckDepth {
			ptr = uintptr(unsafe.Pointer(&v[0]))
		}
		if err := e.depthEnter(ptr, typSliceAny); err != nil {
			return false, err
		}
		wrote, err := e.anyList(v, node, set)
		e.depthLeave(ptr)
		return wrote, err
	case map[string]string:
		if v == nil {
			return e.null(), nil
		}
		return e.mapStringString(v, node)
	case *unstructured.Unstructured:
		if v == nil {
			return e.null(), nil
		}
		return e.anyValue(v.Object, node, set)
	}
	rv := reflect.ValueOf(x)
	return e.value(rv, planFor(rv.Type()), node, set)
}

var (
	typMapStringAny    = reflect.TypeFor[map[string]any]()
	typMapStringString = reflect.TypeFor[map[string]string]()
	typSliceAny        = reflect.TypeFor[[]any]()
)

func (e *encoder) anyList(l []any, node *pathNode, set bool) (bool, error) {
	if len(l) == 0 {
		if e.cfg.keepZero {
			e.buf = append(e.buf, tagList, tagLEnd)
			return true, nil
		}
		return false, nil
	}
	level := e.level
	e.level = 0
	defer func() { e.level = level }()
	elemSet := e.cfg.slicesAsSets || (node != nil && node.set)
	if set {
		base := len(e.sets)
		for i, x := range l {
			start := len(e.buf)
			wrote, err := e.anyValue(x, node, elemSet)
			if err != nil {
				return false, wrapIndex(err, i)
			}
			if !wrote {
				e.buf = append(e.buf, tagNull)
			}
			e.sets = append(e.sets, xxhash.Sum64(e.buf[start:]))
			e.buf = e.buf[:start]
		}
		e.writeSet(base)
		return true, nil
	}
	e.buf = append(e.buf, tagList)
	for i, x := range l {
		wrote, err := e.anyValue(x, node, elemSet)
		if err != nil {
			return false, wrapIndex(err, i)
		}
		if !wrote {
			e.buf = append(e.buf, tagNull)
		}
	}
	e.buf = append(e.buf, tagLEnd)
	return true, nil
}

// number encodes a json.Number exactly: integers as integers, anything
// else as float64 (what a JSON decoder without UseNumber would produce).
func (e *encoder) number(n json.Number) (bool, error) {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return e.integer(i), nil
	}
	if u, err := strconv.ParseUint(string(n), 10, 64); err == nil {
		return e.unsigned(u), nil
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return false, newWalkError(fmt.Errorf("%w: number %q", errUnsupportedValue, string(n)))
	}
	return e.float(f)
}

// marshaled encodes the JSON a json.Marshaler produces, by decoding it and
// encoding the result, so it hashes like the same JSON in unstructured form.
func (e *encoder) marshaled(m json.Marshaler, node *pathNode, set bool) (bool, error) {
	if m == nil {
		return e.null(), nil
	}
	b, err := callMarshalJSON(m)
	if err != nil {
		return false, newWalkError(fmt.Errorf("%w: MarshalJSON of %T: %v", errUnsupportedValue, m, err))
	}
	b = bytes.TrimSpace(b)
	// Fast path: a string without escapes.
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' && bytes.IndexByte(b[1:len(b)-1], '\\') < 0 &&
		bytes.IndexByte(b[1:len(b)-1], '"') < 0 {
		return e.strBytes(b[1 : len(b)-1]), nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return false, newWalkError(fmt.Errorf("%w: MarshalJSON of %T returned invalid JSON: %v", errUnsupportedValue, m, err))
	}
	if dec.More() {
		return false, newWalkError(fmt.Errorf("%w: MarshalJSON of %T returned trailing data", errUnsupportedValue, m))
	}
	return e.anyValue(x, node, set)
}

func (e *encoder) text(m encoding.TextMarshaler) (bool, error) {
	if m == nil {
		return e.null(), nil
	}
	b, err := callMarshalText(m)
	if err != nil {
		return false, newWalkError(fmt.Errorf("%w: MarshalText of %T: %v", errUnsupportedValue, m, err))
	}
	return e.strBytes(b), nil
}

// appendDuration appends d in time.Duration.String's format without
// allocating.
func appendDuration(b []byte, d time.Duration) []byte {
	var arr [32]byte
	buf := arr[:]
	w := len(buf)
	u := uint64(d)
	neg := d < 0
	if neg {
		u = -u
	}
	if u < uint64(time.Second) {
		// Sub-second: use the smallest unit that keeps a leading digit.
		var prec int
		w--
		buf[w] = 's'
		w--
		switch {
		case u == 0:
			return append(b, "0s"...)
		case u < uint64(time.Microsecond):
			prec = 0
			buf[w] = 'n'
		case u < uint64(time.Millisecond):
			prec = 3
			// U+00B5 'µ' micro sign == 0xC2 0xB5
			w--
			copy(buf[w:], "µ")
		default:
			prec = 6
			buf[w] = 'm'
		}
		w, u = fmtFrac(buf[:w], u, prec)
		w = fmtInt(buf[:w], u)
	} else {
		w--
		buf[w] = 's'
		if u%uint64(time.Second) == 0 {
			// Whole seconds (the usual spec duration): no fraction.
			u /= uint64(time.Second)
		} else {
			w, u = fmtFrac(buf[:w], u, 9)
		}
		w = fmtInt(buf[:w], u%60)
		u /= 60
		if u > 0 {
			w--
			buf[w] = 'm'
			w = fmtInt(buf[:w], u%60)
			u /= 60
			if u > 0 {
				w--
				buf[w] = 'h'
				w = fmtInt(buf[:w], u)
			}
		}
	}
	if neg {
		w--
		buf[w] = '-'
	}
	return append(b, buf[w:]...)
}

// fmtFrac writes the fraction of v/10**prec (e.g. ".12345") into the tail
// of buf, omitting trailing zeros, and returns the new start and v/10**prec.
func fmtFrac(buf []byte, v uint64, prec int) (int, uint64) {
	w := len(buf)
	printed := false
	for i := 0; i < prec; i++ {
		digit := v % 10
		printed = printed || digit != 0
		if printed {
			w--
			buf[w] = byte(digit) + '0'
		}
		v /= 10
	}
	if printed {
		w--
		buf[w] = '.'
	}
	return w, v
}

// fmtInt writes v into the tail of buf and returns the new start.
func fmtInt(buf []byte, v uint64) int {
	w := len(buf)
	if v == 0 {
		w--
		buf[w] = '0'
		return w
	}
	for v > 0 {
		w--
		buf[w] = byte(v%10) + '0'
		v /= 10
	}
	return w
}
