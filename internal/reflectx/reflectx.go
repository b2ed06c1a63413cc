// Package reflectx holds the reflection machinery the typed walks of diff
// and drift share: a concurrent cache of per-type plans and a field lookup
// that does not panic on a nil embedded pointer. What a plan holds is each
// package's own (diff's says how to compare a type, drift's how to encode
// it); only the mechanism is shared.
package reflectx

import (
	"reflect"
	"sync"
)

// FieldByIndex is reflect.Value.FieldByIndex that reports false, instead
// of panicking, when an embedded pointer on the way is nil. v must be a
// struct and index a field index path of its type, as reflect.StructField
// holds it.
func FieldByIndex(v reflect.Value, index []int) (reflect.Value, bool) {
	if len(index) == 1 {
		return v.Field(index[0]), true
	}
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}, false
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v, true
}

// PlanCache caches one immutable plan P per Go type, safe for concurrent
// use. Plans are built under one lock, a whole graph of types at a time,
// so recursive types resolve to the plan under construction and readers
// only ever see finished plans. The zero value is ready to use.
type PlanCache[P any] struct {
	m  sync.Map // reflect.Type -> P
	mu sync.Mutex
}

// Load returns the cached plan for t, if any.
func (c *PlanCache[P]) Load(t reflect.Type) (P, bool) {
	p, ok := c.m.Load(t)
	if !ok {
		var zero P
		return zero, false
	}
	return p.(P), true
}

// Build returns the cached plan for t, or builds it. build makes the plan
// of t, and of any type reachable from it that Load does not know yet,
// recording each in building before it recurses (so a type that refers to
// itself finds its own plan there). finish, if not nil, then completes
// the new plans as a group (properties that need the whole graph). Only
// after that are they published.
func (c *PlanCache[P]) Build(t reflect.Type, build func(t reflect.Type, building map[reflect.Type]P) P, finish func(building map[reflect.Type]P)) P {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.Load(t); ok {
		return p
	}
	building := map[reflect.Type]P{}
	p := build(t, building)
	if finish != nil {
		finish(building)
	}
	for bt, bp := range building {
		c.m.Store(bt, bp)
	}
	return p
}
