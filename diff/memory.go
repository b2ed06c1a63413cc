package diff

import (
	"bytes"
	"math"
	"reflect"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgradekit/upgradekit/internal/memzero"
	"github.com/upgradekit/upgradekit/internal/reflectx"
)

// Fast paths for typed values: whether a field is present in the JSON form
// (presentAt) and whether two values are identical (sameAt) are read
// straight from memory, at offsets the type's plan holds, without building
// a reflect.Value per field. Each one answers exactly what its reflect
// counterpart (present, typedSame) answers; where reading memory cannot
// tell (a map's length, an IsZero method, an interface's dynamic value, a
// field behind an embedded pointer) they hand over to the reflect code.
// Building reflect.Values, with the exported-name check reflect makes on
// every Field call, was most of the time an equal pair took.

// fastPaths turns on the memory reads and the skipping of identical list
// elements (typedList.same); tests turn it off to compare with the reflect
// code and the full walk.
var fastPaths = true

// sliceHeader is the memory layout of every slice type.
type sliceHeader struct {
	data     unsafe.Pointer
	len, cap int
}

// zspanKind says how a zspan decides zero.
type zspanKind uint8

const (
	zMem     zspanKind = iota // zero when every byte is zero
	zString                   // zero when the length is zero
	zFloat32                  // zero when == 0 (so -0 is zero, NaN is not)
	zFloat64
	zComplex64
	zComplex128
)

// zspan is one part of a value that reflect.Value.IsZero reads.
type zspan struct {
	off, size uintptr
	kind      zspanKind
}

// maxZeroSpans bounds a type's zero layout; larger layouts (a struct with
// hundreds of strings) are left to reflect.
const maxZeroSpans = 128

// zeroLayout lists what reflect.Value.IsZero reads of a value of type t,
// in order: the bytes of numbers, bools and pointers, the first word of
// slices and interfaces (what IsNil reads), the length of strings, floats
// compared with 0; blank (_) fields are skipped, as IsZero and == skip
// them, and so is padding. ok is false when the layout is too large.
func zeroLayout(t reflect.Type) (spans []zspan, ok bool) {
	if !addZeroSpans(&spans, t, 0) {
		return nil, false
	}
	return spans, true
}

func addZeroSpans(s *[]zspan, t reflect.Type, off uintptr) bool {
	if len(*s) > maxZeroSpans {
		return false
	}
	switch t.Kind() {
	case reflect.String:
		*s = append(*s, zspan{off: off, kind: zString})
	case reflect.Float32:
		*s = append(*s, zspan{off: off, kind: zFloat32})
	case reflect.Float64:
		*s = append(*s, zspan{off: off, kind: zFloat64})
	case reflect.Complex64:
		*s = append(*s, zspan{off: off, kind: zComplex64})
	case reflect.Complex128:
		*s = append(*s, zspan{off: off, kind: zComplex128})
	case reflect.Slice, reflect.Interface:
		// IsNil reads the first word: the data pointer, the type.
		addMemSpan(s, off, unsafe.Sizeof(uintptr(0)))
	case reflect.Array:
		n := t.Len()
		if n == 0 {
			return true
		}
		var elem []zspan
		if !addZeroSpans(&elem, t.Elem(), 0) {
			return false
		}
		if len(elem) == 1 && elem[0].kind == zMem && elem[0].off == 0 && elem[0].size == t.Elem().Size() {
			addMemSpan(s, off, t.Size()) // an array of plain bytes, whole
			return true
		}
		if n*len(elem) > maxZeroSpans {
			return false
		}
		for i := range n {
			for _, z := range elem {
				z.off += off + uintptr(i)*t.Elem().Size()
				if z.kind == zMem {
					addMemSpan(s, z.off, z.size)
				} else {
					*s = append(*s, z)
				}
			}
		}
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Name == "_" {
				continue
			}
			if !addZeroSpans(s, f.Type, off+f.Offset) {
				return false
			}
		}
	default: // bools, integers, pointers, maps, chans, funcs, unsafe.Pointer
		addMemSpan(s, off, t.Size())
	}
	return len(*s) <= maxZeroSpans
}

// addMemSpan appends a zMem span, merged with the previous one when they
// touch.
func addMemSpan(s *[]zspan, off, size uintptr) {
	if size == 0 {
		return
	}
	if n := len(*s); n > 0 {
		last := &(*s)[n-1]
		if last.kind == zMem && last.off+last.size == off {
			last.size += size
			return
		}
	}
	*s = append(*s, zspan{off: off, size: size, kind: zMem})
}

// isZeroAt is reflect.Value.IsZero of the value at p, given its layout.
func isZeroAt(p unsafe.Pointer, spans []zspan) bool {
	for _, z := range spans {
		q := unsafe.Add(p, z.off)
		switch z.kind {
		case zMem:
			if !memzero.Bytes(q, z.size) {
				return false
			}
		case zString:
			if len(*(*string)(q)) != 0 {
				return false
			}
		case zFloat32:
			if *(*float32)(q) != 0 {
				return false
			}
		case zFloat64:
			if *(*float64)(q) != 0 {
				return false
			}
		case zComplex64:
			if *(*complex64)(q) != 0 {
				return false
			}
		case zComplex128:
			if *(*complex128)(q) != 0 {
				return false
			}
		}
	}
	return true
}

// presentAt is present for the field stored at p; known is false when
// memory alone cannot tell, and the caller asks present.
func presentAt(p unsafe.Pointer, fp *fieldPlan) (ok, known bool) {
	pl := fp.plan
	switch pl.kind {
	case reflect.Pointer, reflect.Map, reflect.Interface, reflect.Slice:
		// The first word: the pointer, the map, the interface's type, the
		// slice's data.
		if *(*unsafe.Pointer)(p) == nil {
			return false, true
		}
	}
	if fp.omitEmpty {
		switch pl.kind {
		case reflect.Bool:
			return *(*bool)(p), true
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			return !memzero.Bytes(p, pl.size), true
		case reflect.Float32:
			return *(*float32)(p) != 0, true
		case reflect.Float64:
			return *(*float64)(p) != 0, true
		case reflect.String:
			return len(*(*string)(p)) != 0, true
		case reflect.Slice:
			return (*sliceHeader)(p).len != 0, true
		case reflect.Array:
			return pl.t.Len() != 0, true
		case reflect.Map:
			return false, false
		}
	}
	if fp.omitZero {
		if pl.isZeroer || !fp.zeroKnown {
			return false, false
		}
		// All bytes zero is the zero value, whatever the type; an unset
		// section (most of a KubeadmConfigSpec) is decided by this scan.
		return !memzero.Bytes(p, pl.size) && !isZeroAt(p, fp.zero), true
	}
	return true, true
}

// sameAt is typedSame for the values of plan p stored at a and b.
func sameAt(a, b unsafe.Pointer, p *typePlan, depth, maxDepth int) bool {
	if depth > maxDepth {
		return false
	}
	switch p.leaf {
	case leafNone:
	case leafTime:
		return (*metav1.Time)(a).Unix() == (*metav1.Time)(b).Unix()
	case leafMicroTime:
		return (*metav1.MicroTime)(a).UnixMicro() == (*metav1.MicroTime)(b).UnixMicro()
	case leafDuration:
		return (*metav1.Duration)(a).Duration == (*metav1.Duration)(b).Duration
	case leafBytes:
		x, y := (*sliceHeader)(a), (*sliceHeader)(b)
		return (x.data == nil) == (y.data == nil) && x.len == y.len &&
			bytes.Equal(unsafe.Slice((*byte)(x.data), x.len), unsafe.Slice((*byte)(y.data), y.len))
	default: // quantities, int-or-strings, marshalers, unsupported kinds
		return false
	}
	switch p.kind {
	case reflect.Pointer:
		x, y := *(*unsafe.Pointer)(a), *(*unsafe.Pointer)(b)
		if x == nil || y == nil {
			return x == nil && y == nil
		}
		return sameAt(x, y, p.elem, depth+1, maxDepth)
	case reflect.Interface:
		return sameIfaces(reflect.NewAt(p.t, a).Elem(), reflect.NewAt(p.t, b).Elem(), depth, maxDepth)
	case reflect.Struct:
		var va, vb reflect.Value
		for i := range p.fields {
			fp := &p.fields[i]
			if fp.direct {
				if !sameAt(unsafe.Add(a, fp.offset), unsafe.Add(b, fp.offset), fp.plan, depth+1, maxDepth) {
					return false
				}
				continue
			}
			if !va.IsValid() {
				va, vb = reflect.NewAt(p.t, a).Elem(), reflect.NewAt(p.t, b).Elem()
			}
			fa, okA := reflectx.FieldByIndex(va, fp.index)
			fb, okB := reflectx.FieldByIndex(vb, fp.index)
			if okA != okB {
				return false
			}
			if okA && !typedSame(fa, fb, fp.plan, depth+1, maxDepth) {
				return false
			}
		}
		return true
	case reflect.Slice:
		x, y := (*sliceHeader)(a), (*sliceHeader)(b)
		if (x.data == nil) != (y.data == nil) || x.len != y.len {
			return false
		}
		return sameElems(x.data, y.data, x.len, p.elem, depth, maxDepth)
	case reflect.Array:
		return sameElems(a, b, p.t.Len(), p.elem, depth, maxDepth)
	case reflect.Map:
		if p.strMap {
			ma, mb := *(*map[string]string)(a), *(*map[string]string)(b)
			if (ma == nil) != (mb == nil) || len(ma) != len(mb) {
				return false
			}
			if depth+1 > maxDepth && len(ma) > 0 {
				return false
			}
			for k, va := range ma {
				if vb, ok := mb[k]; !ok || va != vb {
					return false
				}
			}
			return true
		}
		return sameMaps(reflect.NewAt(p.t, a).Elem(), reflect.NewAt(p.t, b).Elem(), p, depth, maxDepth)
	case reflect.String:
		return *(*string)(a) == *(*string)(b)
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		// Equal integers (and bools) are equal bytes.
		switch p.size {
		case 1:
			return *(*uint8)(a) == *(*uint8)(b)
		case 2:
			return *(*uint16)(a) == *(*uint16)(b)
		case 4:
			return *(*uint32)(a) == *(*uint32)(b)
		case 8:
			return *(*uint64)(a) == *(*uint64)(b)
		}
		return false
	case reflect.Float32:
		fa, fb := float64(*(*float32)(a)), float64(*(*float32)(b))
		return fa == fb && !math.IsInf(fa, 0)
	case reflect.Float64:
		fa, fb := *(*float64)(a), *(*float64)(b)
		return fa == fb && !math.IsInf(fa, 0)
	}
	return false
}

// sameElems compares n elements of plan p laid out from a and from b.
func sameElems(a, b unsafe.Pointer, n int, p *typePlan, depth, maxDepth int) bool {
	for i := range n {
		off := uintptr(i) * p.size
		if !sameAt(unsafe.Add(a, off), unsafe.Add(b, off), p, depth+1, maxDepth) {
			return false
		}
	}
	return true
}
