package diff

import (
	"bytes"
	"encoding/binary"
	"math"
	"reflect"
	"sync/atomic"
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

// maxZeroSize bounds the types given a zero layout; larger ones are left
// to reflect.
const maxZeroSize = 1 << 16

// zeroMask is a type's zero layout as a mask over its bytes: a value is
// zero exactly when none of its bytes has a bit the mask sets. It covers
// what reflect.Value.IsZero reads: the bytes of numbers, bools and
// pointers, the first word of slices and interfaces (what IsNil reads),
// the length word of strings, and floats but for the sign bit (so -0 is
// zero and NaN is not); blank (_) fields and padding are left out, as
// IsZero and == skip them. Deciding zero is a scan of whole words, however
// many strings and nested structs the type has.
type zeroMask struct {
	words []uint64 // the mask of each whole 8-byte word, in memory order
	tail  []byte   // the mask of the bytes after the last whole word
	// hint is the word where the last scan found the value not zero,
	// tried first: values of one field are mostly set in the same place
	// (a KubeadmConfigSpec's joinConfiguration, past hundreds of bytes
	// of unset sections), so a present value is told in one word.
	hint atomic.Int32
}

// zeroLayout returns the zero mask of type t; nil when t is too large.
func zeroLayout(t reflect.Type) *zeroMask {
	if t.Size() > maxZeroSize {
		return nil
	}
	b := make([]byte, t.Size())
	markZero(b, t, 0)
	n := len(b) / 8
	m := &zeroMask{words: make([]uint64, n), tail: b[n*8:]}
	for i := range n {
		m.words[i] = binary.NativeEndian.Uint64(b[i*8:])
	}
	return m
}

// markZero sets in b the mask bits of a value of type t stored at off.
func markZero(b []byte, t reflect.Type, off uintptr) {
	const word = unsafe.Sizeof(uintptr(0))
	mark := func(off, n uintptr) {
		for i := off; i < off+n; i++ {
			b[i] = 0xff
		}
	}
	switch t.Kind() {
	case reflect.String:
		mark(off+word, word) // the length, after the data pointer
	case reflect.Float32:
		binary.NativeEndian.PutUint32(b[off:], math.MaxInt32)
	case reflect.Float64:
		binary.NativeEndian.PutUint64(b[off:], math.MaxInt64)
	case reflect.Complex64:
		binary.NativeEndian.PutUint32(b[off:], math.MaxInt32)
		binary.NativeEndian.PutUint32(b[off+4:], math.MaxInt32)
	case reflect.Complex128:
		binary.NativeEndian.PutUint64(b[off:], math.MaxInt64)
		binary.NativeEndian.PutUint64(b[off+8:], math.MaxInt64)
	case reflect.Slice, reflect.Interface:
		mark(off, word) // IsNil reads the first word: the data pointer, the type
	case reflect.Array:
		for i := range t.Len() {
			markZero(b, t.Elem(), off+uintptr(i)*t.Elem().Size())
		}
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.Name != "_" {
				markZero(b, f.Type, off+f.Offset)
			}
		}
	default: // bools, integers, pointers, maps, chans, funcs, unsafe.Pointer
		mark(off, t.Size())
	}
}

// isZeroAt is reflect.Value.IsZero of the value at p, given its mask.
func isZeroAt(p unsafe.Pointer, m *zeroMask) bool {
	b := unsafe.Slice((*byte)(p), len(m.words)*8+len(m.tail))
	if h := int(m.hint.Load()); h < len(m.words) && binary.NativeEndian.Uint64(b[h*8:])&m.words[h] != 0 {
		return false
	}
	if memzero.Bytes(p, uintptr(len(b))) {
		return true // unset: the common case of a large type, told fastest
	}
	w := m.words
	// Four words at a time: a KubeadmConfig's unset sections run to
	// hundreds of bytes.
	for len(w) >= 4 {
		if binary.NativeEndian.Uint64(b)&w[0]|binary.NativeEndian.Uint64(b[8:])&w[1]|
			binary.NativeEndian.Uint64(b[16:])&w[2]|binary.NativeEndian.Uint64(b[24:])&w[3] != 0 {
			i := len(m.words) - len(w)
			for binary.NativeEndian.Uint64(b)&w[0] == 0 {
				b, w, i = b[8:], w[1:], i+1
			}
			m.hint.Store(int32(i))
			return false
		}
		b, w = b[32:], w[4:]
	}
	for i, x := range w {
		if binary.NativeEndian.Uint64(b[i*8:])&x != 0 {
			m.hint.Store(int32(len(m.words) - len(w) + i))
			return false
		}
	}
	b = b[len(w)*8:]
	for i, x := range m.tail {
		if b[i]&x != 0 {
			return false
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
			if pl.strMap {
				return len(*(*map[string]string)(p)) != 0, true
			}
			return reflect.NewAt(pl.t, p).Elem().Len() != 0, true
		}
	}
	if fp.omitZero {
		if pl.isZeroer || fp.zero == nil {
			return false, false
		}
		// All bytes zero is the zero value, whatever the type; an unset
		// section (most of a KubeadmConfigSpec) is decided by this scan.
		return !isZeroAt(p, fp.zero), true
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
		if prog := p.sameProgram(); prog.ok && depth+prog.maxRel <= maxDepth {
			return prog.run(a, b, depth, maxDepth)
		}
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

// A sameProg is sameAt for a struct, flattened: the fields of nested
// structs (stored inline, not behind pointers) become steps of the outer
// struct at their offsets, and scalars, strings and pointers to them are
// compared in the loop, not by a call per field. A struct's fields are
// mostly strings, numbers and nested structs, so most of sameAt's calls
// go. It answers exactly what the field-by-field code answers: the steps
// are the same comparisons, and maxRel, the deepest level a step
// compares at, says when depth could decide instead (then the caller
// takes the field-by-field code).
type sameProg struct {
	steps  []sameStep
	maxRel int
	ok     bool // false: a field lies behind an embedded pointer
}

type stepKind uint8

const (
	stepString stepKind = iota
	stepU8              // a 1-byte number or bool
	stepU16
	stepU32
	stepU64
	stepF32
	stepF64
	stepCall // anything else: sameAt with the field's plan
)

type sameStep struct {
	off  uintptr
	kind stepKind
	ptr  bool // the field is a pointer to the value kind compares
	rel  int  // levels below the struct: the depth sameAt is called with is depth+rel
	plan *typePlan
}

// sameProgram returns p's flat program, making it on first use. Plans are
// complete once planFor returns, so every struct reached is.
func (p *typePlan) sameProgram() *sameProg {
	if prog := p.same.Load(); prog != nil {
		return prog
	}
	prog := &sameProg{ok: true}
	prog.add(p, 0, 0)
	p.same.Store(prog) // a concurrent first use makes an identical one
	return prog
}

// add appends the steps for the fields of struct plan p stored at off,
// rel levels below the program's struct.
func (prog *sameProg) add(p *typePlan, off uintptr, rel int) {
	prog.maxRel = max(prog.maxRel, rel) // sameAt's check on entering p
	for i := range p.fields {
		fp := &p.fields[i]
		if !fp.direct {
			prog.ok = false
			return
		}
		fpl, at, r := fp.plan, off+fp.offset, rel+1
		if fpl.leaf == leafNone && fpl.kind == reflect.Struct {
			prog.add(fpl, at, r)
			continue
		}
		step := sameStep{off: at, kind: stepCall, rel: r, plan: fpl}
		if k, ok := scalarStep(fpl); ok {
			step.kind = k
			prog.maxRel = max(prog.maxRel, r)
		} else if fpl.leaf == leafNone && fpl.kind == reflect.Pointer {
			if k, ok := scalarStep(fpl.elem); ok {
				step.kind, step.ptr = k, true
				prog.maxRel = max(prog.maxRel, r+1) // the pointer, then its target
			}
		}
		prog.steps = append(prog.steps, step)
	}
}

// scalarStep is the step comparing a string, bool or number of plan p
// (not a leaf kind such as a marshaler: sameAt leaves those to the walk).
func scalarStep(p *typePlan) (stepKind, bool) {
	if p.leaf != leafNone {
		return stepCall, false
	}
	switch p.kind {
	case reflect.String:
		return stepString, true
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		switch p.size {
		case 1:
			return stepU8, true
		case 2:
			return stepU16, true
		case 4:
			return stepU32, true
		case 8:
			return stepU64, true
		}
	case reflect.Float32:
		return stepF32, true
	case reflect.Float64:
		return stepF64, true
	}
	return stepCall, false
}

// run is sameAt for the struct stored at a and b, depth levels down; the
// caller has checked depth+maxRel against maxDepth. Scalars compare as in
// sameAt: equal bytes, floats equal and finite.
func (prog *sameProg) run(a, b unsafe.Pointer, depth, maxDepth int) bool {
	for i := range prog.steps {
		s := &prog.steps[i]
		x, y := unsafe.Add(a, s.off), unsafe.Add(b, s.off)
		if s.ptr {
			x, y = *(*unsafe.Pointer)(x), *(*unsafe.Pointer)(y)
			if x == nil || y == nil {
				if x != y {
					return false
				}
				continue
			}
		}
		switch s.kind {
		case stepString:
			if *(*string)(x) != *(*string)(y) {
				return false
			}
		case stepU8:
			if *(*uint8)(x) != *(*uint8)(y) {
				return false
			}
		case stepU16:
			if *(*uint16)(x) != *(*uint16)(y) {
				return false
			}
		case stepU32:
			if *(*uint32)(x) != *(*uint32)(y) {
				return false
			}
		case stepU64:
			if *(*uint64)(x) != *(*uint64)(y) {
				return false
			}
		case stepF32:
			if f, g := float64(*(*float32)(x)), float64(*(*float32)(y)); f != g || math.IsInf(f, 0) {
				return false
			}
		case stepF64:
			if f, g := *(*float64)(x), *(*float64)(y); f != g || math.IsInf(f, 0) {
				return false
			}
		default: // stepCall
			if !sameAt(x, y, s.plan, depth+s.rel, maxDepth) {
				return false
			}
		}
	}
	return true
}
