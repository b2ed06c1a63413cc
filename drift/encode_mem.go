package drift

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/upgradekit/upgradekit/internal/memzero"
	"github.com/upgradekit/upgradekit/internal/reflectx"
)

// The memory walk: objectAt, valueAt and listAt encode values read
// straight from memory at offsets the plans hold, without building a
// reflect.Value per field and element. They serve addressable values that
// reflection would not mark read-only (a value reached only through
// exported fields, pointers and slice elements from an addressable
// root), under zero folding. Anything else (marshalers, interfaces,
// generic maps, times, quantities, read-only values) goes back to value
// through reflect.NewAt, which yields the same addressable, writable
// reflect.Value that the reflection walk would have had, so both walks
// write the same bytes.

// memKind says how valueAt reads a value of a plan's type from memory.
type memKind uint8

const (
	memNone memKind = iota // through reflection (value)
	memString
	memBool
	memInt
	memInt8
	memInt16
	memInt32
	memInt64
	memUint
	memUint8
	memUint16
	memUint32
	memUint64
	memUintptr
	memFloat32
	memFloat64
	memPtrScalar // pointer to one of the kinds above
	memPtr       // any other pointer whose element valueAt reads
	memStruct
	memSlice
	memMapStringString // exactly map[string]string
	memDuration        // metav1.Duration
	memIntOrString     // intstr.IntOrString
)

// Offsets of the special-cased apimachinery fields, for the memory walk.
// A -1 index (a renamed field) leaves the type to reflection.
var (
	offDurationValue = fieldOffset(typMetaDuration, idxDurationValue)
	offIntOrStrType  = fieldOffset(typIntOrString, idxIntOrStrType)
	offIntOrStrInt   = fieldOffset(typIntOrString, idxIntOrStrInt)
	offIntOrStrStr   = fieldOffset(typIntOrString, idxIntOrStrStr)
)

func fieldOffset(t reflect.Type, i int) uintptr {
	if i < 0 {
		return 0
	}
	return t.Field(i).Offset
}

// scalarMem maps the scalar plan kinds to their memory reads.
func scalarMem(p *plan) memKind {
	switch p.kind {
	case pkString:
		if p.typ.Kind() == reflect.String {
			return memString
		}
	case pkBool:
		if p.typ.Kind() == reflect.Bool {
			return memBool
		}
	case pkInt:
		switch p.typ.Kind() {
		case reflect.Int:
			return memInt
		case reflect.Int8:
			return memInt8
		case reflect.Int16:
			return memInt16
		case reflect.Int32:
			return memInt32
		case reflect.Int64:
			return memInt64
		}
	case pkUint:
		switch p.typ.Kind() {
		case reflect.Uint:
			return memUint
		case reflect.Uint8:
			return memUint8
		case reflect.Uint16:
			return memUint16
		case reflect.Uint32:
			return memUint32
		case reflect.Uint64:
			return memUint64
		case reflect.Uintptr:
			return memUintptr
		}
	case pkFloat:
		switch p.typ.Kind() {
		case reflect.Float32:
			return memFloat32
		case reflect.Float64:
			return memFloat64
		}
	}
	return memNone
}

// setMem sets p.mem and p.size; it needs p.elem's kind, so it runs after
// the plan graph is built (finishPlans).
func setMem(p *plan) {
	p.size = p.typ.Size()
	if m := scalarMem(p); m != memNone {
		p.mem = m
		return
	}
	switch p.kind {
	case pkPtr:
		if p.typ.Kind() != reflect.Pointer || p.elem == nil {
			return
		}
		if scalarMem(p.elem) != memNone {
			p.mem = memPtrScalar
		} else {
			p.mem = memPtr
		}
	case pkStruct:
		if p.typ.Kind() == reflect.Struct {
			p.mem = memStruct
		}
	case pkSlice:
		if p.typ.Kind() == reflect.Slice && p.elem != nil {
			p.mem = memSlice
		}
	case pkMapStringString:
		if p.typ == typMapStringString {
			p.mem = memMapStringString
		}
	case pkMetaDuration:
		p.mem = memDuration
	case pkIntOrString:
		p.mem = memIntOrString
	}
}

// scalarAt encodes the scalar of memory kind m at p.
func (e *encoder) scalarAt(p unsafe.Pointer, m memKind) (bool, error) {
	switch m {
	case memString:
		return e.str(*(*string)(p)), nil
	case memBool:
		return e.boolean(*(*bool)(p)), nil
	case memInt:
		return e.integer(int64(*(*int)(p))), nil
	case memInt8:
		return e.integer(int64(*(*int8)(p))), nil
	case memInt16:
		return e.integer(int64(*(*int16)(p))), nil
	case memInt32:
		return e.integer(int64(*(*int32)(p))), nil
	case memInt64:
		return e.integer(*(*int64)(p)), nil
	case memUint:
		return e.unsigned(uint64(*(*uint)(p))), nil
	case memUint8:
		return e.unsigned(uint64(*(*uint8)(p))), nil
	case memUint16:
		return e.unsigned(uint64(*(*uint16)(p))), nil
	case memUint32:
		return e.unsigned(uint64(*(*uint32)(p))), nil
	case memUint64:
		return e.unsigned(*(*uint64)(p)), nil
	case memUintptr:
		return e.unsigned(uint64(*(*uintptr)(p))), nil
	case memFloat32:
		return e.float32(*(*float32)(p))
	case memFloat64:
		return e.float(*(*float64)(p))
	}
	return false, newWalkError(fmt.Errorf("%w: memory kind %d is not a scalar", ErrInternal, m))
}

// valueAt encodes the value of plan p stored at ptr, as value would.
func (e *encoder) valueAt(ptr unsafe.Pointer, p *plan, node *pathNode, set bool) (bool, error) {
	switch p.mem {
	case memNone:
		return e.value(reflect.NewAt(p.typ, ptr).Elem(), p, node, set)
	case memStruct:
		return e.objectAt(ptr, p, node)
	case memPtr, memPtrScalar:
		return e.pointeeAt(*(*unsafe.Pointer)(ptr), p, node, set)
	case memSlice:
		s := (*sliceHeader)(ptr)
		if s.data == nil {
			return e.null(), nil
		}
		if err := e.depthEnter(uintptr(s.data), p.typ); err != nil {
			return false, err
		}
		wrote, err := e.listAt(s.data, s.len, p.elem, node, set)
		e.depthLeave(uintptr(s.data))
		return wrote, err
	case memMapStringString:
		m := *(*map[string]string)(ptr)
		if m == nil {
			return e.null(), nil
		}
		return e.mapStringString(m, node)
	case memDuration:
		d := *(*int64)(unsafe.Add(ptr, offDurationValue))
		e.tmp = appendDuration(e.tmp[:0], time.Duration(d))
		return e.strBytes(e.tmp), nil
	case memIntOrString:
		typ := intstr.Type(*(*int64)(unsafe.Add(ptr, offIntOrStrType)))
		if typ == intstr.String {
			return e.str(*(*string)(unsafe.Add(ptr, offIntOrStrStr))), nil
		}
		if typ == intstr.Int {
			return e.integer(int64(*(*int32)(unsafe.Add(ptr, offIntOrStrInt)))), nil
		}
		return false, newWalkError(fmt.Errorf("%w: IntOrString with type %d", errUnsupportedValue, typ))
	}
	return e.scalarAt(ptr, p.mem)
}

// fieldOp says how objectAt handles one field of a struct.
type fieldOp uint8

const (
	fopSkip            fieldOp = iota // ignored (a hash tag), or no plan
	fopReflect                        // not in memory: through reflection
	fopString                         // a string, written in place
	fopPtrScalar                      // a pointer to a scalar
	fopScalar                         // any other scalar
	fopStruct                         // a struct, walked in memory
	fopPtr                            // a pointer to anything else valueAt reads
	fopSlice                          // a slice valueAt reads
	fopMapStringString                // exactly map[string]string
	fopValue                          // anything else valueAt reads
)

// setFieldOps sets the memory-walk fields of the struct plans' fields,
// once their field plans are complete.
func setFieldOps(all []*plan) {
	for _, p := range all {
		for i := range p.fields {
			f := &p.fields[i]
			if f.plan == nil {
				continue
			}
			f.folds, f.foldsNoTags = f.plan.zeroFolds, f.plan.zeroFoldsNoTags
			f.keyS = string(f.key) + string(rune(tagString))
			switch m := f.plan.mem; {
			case !f.inMem:
				f.opNoTags = fopReflect
			case m == memString:
				f.opNoTags = fopString
			case m == memPtrScalar:
				f.opNoTags = fopPtrScalar
			case m >= memString && m <= memFloat64:
				f.opNoTags = fopScalar
			case m == memStruct:
				f.opNoTags = fopStruct
			case m == memPtr:
				f.opNoTags = fopPtr
			case m == memSlice:
				f.opNoTags = fopSlice
			case m == memMapStringString:
				f.opNoTags = fopMapStringString
			default:
				f.opNoTags = fopValue
			}
			f.op = f.opNoTags
			if f.ignore {
				f.op = fopSkip
			}
		}
	}
}

// pointeeAt encodes the pointer q of plan p (memPtr or memPtrScalar), as
// value would.
func (e *encoder) pointeeAt(q unsafe.Pointer, p *plan, node *pathNode, set bool) (bool, error) {
	if q == nil {
		return e.null(), nil
	}
	if err := e.depthEnter(uintptr(q), p.typ); err != nil {
		return false, err
	}
	wrote, err := e.valueAt(q, p.elem, node, set)
	e.depthLeave(uintptr(q))
	return wrote, err
}

// sliceHeader is the memory layout of a slice.
type sliceHeader struct {
	data     unsafe.Pointer
	len, cap int
}

// objectAt is object for a struct at base (see the memory walk above).
func (e *encoder) objectAt(base unsafe.Pointer, p *plan, node *pathNode) (bool, error) {
	start := len(e.buf)
	e.buf = append(e.buf, tagObj)
	level, parent := e.level, e.parent
	noTags := e.cfg.noTags
	for i := range p.fields {
		f := &p.fields[i]
		op, folds := f.op, f.folds
		if noTags {
			op, folds = f.opNoTags, f.foldsNoTags
		}
		fp := unsafe.Add(base, f.offset)
		// Zero values fold to nothing: test each kind's zero cheaply.
		switch op {
		case fopSkip:
			continue
		case fopString:
			// The commonest field, written in place.
			s := *(*string)(fp)
			if len(s) == 0 {
				continue
			}
			if node != nil {
				if c := node.child(f.name); c != nil && c.ignore {
					continue
				}
			}
			valStart := len(e.buf) + len(f.key)
			e.buf = append(e.buf, f.keyS...)
			e.buf = binary.AppendUvarint(e.buf, uint64(len(s)))
			e.buf = append(e.buf, s...)
			if level != 0 {
				e.record(level, parent, f.name, valStart)
			}
			continue
		case fopPtrScalar, fopPtr, fopMapStringString:
			// A nil map or pointer; a map[string]string without entries
			// writes nothing either.
			if *(*unsafe.Pointer)(fp) == nil {
				continue
			}
		case fopSlice:
			if (*sliceHeader)(fp).data == nil {
				continue
			}
		default:
			if f.direct && folds && memzero.Bytes(fp, f.size) {
				continue
			}
		}
		var fnode *pathNode
		if node != nil {
			if fnode = node.child(f.name); fnode != nil && fnode.ignore {
				continue
			}
		}
		mark := len(e.buf)
		e.buf = append(e.buf, f.key...)
		valStart := len(e.buf)
		var wrote bool
		var err error
		switch op {
		case fopPtrScalar:
			// Pointers to scalars nest nothing: no depth, no descent.
			wrote, err = e.scalarAt(*(*unsafe.Pointer)(fp), f.plan.elem.mem)
		case fopScalar:
			wrote, err = e.scalarAt(fp, f.plan.mem)
		case fopReflect:
			e.descend(level, f.name)
			var ok bool
			ok, wrote, err = e.fieldByReflect(base, p, f, fnode, noTags)
			e.level, e.parent = level, parent
			if !ok {
				e.buf = e.buf[:mark]
				continue
			}
		default:
			e.descend(level, f.name)
			switch op {
			case fopStruct:
				wrote, err = e.objectAt(fp, f.plan, fnode)
			case fopMapStringString:
				wrote, err = e.mapStringString(*(*map[string]string)(fp), fnode)
			default:
				set := e.cfg.slicesAsSets || (f.set && !noTags) || (fnode != nil && fnode.set)
				wrote, err = e.valueAt(fp, f.plan, fnode, set)
			}
			e.level, e.parent = level, parent
		}
		if err != nil {
			return false, wrapField(err, f.name)
		}
		if !wrote {
			e.buf = e.buf[:mark]
			continue
		}
		if level != 0 {
			e.record(level, parent, f.name, valStart)
		}
	}
	if len(e.buf) == start+1 {
		e.buf = e.buf[:start]
		return false, nil
	}
	e.buf = append(e.buf, tagObjEnd)
	return true, nil
}

// fieldByReflect encodes field f of the struct of plan p at base through
// reflection, as object would; ok is false when an embedded pointer on
// the way to it is nil.
func (e *encoder) fieldByReflect(base unsafe.Pointer, p *plan, f *fieldPlan, fnode *pathNode, noTags bool) (ok, wrote bool, err error) {
	fv, ok := reflectx.FieldByIndex(reflect.NewAt(p.typ, base).Elem(), f.index)
	if !ok {
		return false, false, nil
	}
	if f.asString {
		wrote, err = e.asString(fv)
		return true, wrote, err
	}
	set := e.cfg.slicesAsSets || (f.set && !noTags) || (fnode != nil && fnode.set)
	wrote, err = e.value(fv, f.plan, fnode, set)
	return true, wrote, err
}

// listAt is list for n elements of plan ep stored from data on.
func (e *encoder) listAt(data unsafe.Pointer, n int, ep *plan, node *pathNode, set bool) (bool, error) {
	if n == 0 {
		return false, nil
	}
	if ep.mem == memString {
		e.stringsAt(unsafe.Slice((*string)(data), n), set)
		return true, nil
	}
	level := e.level
	e.level = 0
	elemSet := e.cfg.slicesAsSets || (node != nil && node.set)
	if set {
		base := len(e.sets)
		for i := 0; i < n; i++ {
			start := len(e.buf)
			wrote, err := e.valueAt(unsafe.Add(data, uintptr(i)*ep.size), ep, node, elemSet)
			if err != nil {
				e.level = level
				return false, wrapIndex(err, i)
			}
			if !wrote {
				e.buf = append(e.buf, tagNull)
			}
			e.sets = append(e.sets, xxhash.Sum64(e.buf[start:]))
			e.buf = e.buf[:start]
		}
		e.writeSet(base)
		e.level = level
		return true, nil
	}
	e.buf = append(e.buf, tagList)
	for i := 0; i < n; i++ {
		wrote, err := e.valueAt(unsafe.Add(data, uintptr(i)*ep.size), ep, node, elemSet)
		if err != nil {
			e.level = level
			return false, wrapIndex(err, i)
		}
		if !wrote {
			e.buf = append(e.buf, tagNull)
		}
	}
	e.buf = append(e.buf, tagLEnd)
	e.level = level
	return true, nil
}

// stringsAt is listAt for a non-empty list of strings, the commonest
// list in a spec: its members are written in place, an empty one as null.
// Strings nest nothing, so no fingerprints are affected.
func (e *encoder) stringsAt(l []string, set bool) {
	if !set {
		e.buf = append(e.buf, tagList)
		for _, s := range l {
			e.appendStringOrNull(s)
		}
		e.buf = append(e.buf, tagLEnd)
		return
	}
	base := len(e.sets)
	for _, s := range l {
		start := len(e.buf)
		e.appendStringOrNull(s)
		e.sets = append(e.sets, xxhash.Sum64(e.buf[start:]))
		e.buf = e.buf[:start]
	}
	e.writeSet(base)
}

// appendStringOrNull writes s as str does under zero folding, or null
// for an empty s, as a list member.
func (e *encoder) appendStringOrNull(s string) {
	if len(s) == 0 {
		e.buf = append(e.buf, tagNull)
		return
	}
	e.buf = append(e.buf, tagString)
	e.buf = binary.AppendUvarint(e.buf, uint64(len(s)))
	e.buf = append(e.buf, s...)
}
