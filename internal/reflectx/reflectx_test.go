package reflectx

import (
	"reflect"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

type inner struct{ X int }

type outer struct {
	*inner
	Y int
}

// TestFieldByIndex: a direct field, a field through a set embedded
// pointer, and one through a nil embedded pointer (false, no panic).
func TestFieldByIndex(t *testing.T) {
	tf, ok := reflect.TypeFor[outer]().FieldByName("X")
	require.True(t, ok)
	f, ok := FieldByIndex(reflect.ValueOf(outer{Y: 2}), []int{1})
	require.True(t, ok)
	require.Equal(t, 2, f.Interface())
	f, ok = FieldByIndex(reflect.ValueOf(outer{inner: &inner{X: 3}}), tf.Index)
	require.True(t, ok)
	require.Equal(t, 3, f.Interface())
	_, ok = FieldByIndex(reflect.ValueOf(outer{}), tf.Index)
	require.False(t, ok)
}

type node struct {
	t    reflect.Type
	next *node
	done bool
}

type list struct{ Next *list }

// TestPlanCache: a recursive type resolves to the plan under construction,
// finish sees every new plan before any is published, and concurrent
// callers all get the one plan, built once.
func TestPlanCache(t *testing.T) {
	var c PlanCache[*node]
	builds := 0
	var build func(reflect.Type, map[reflect.Type]*node) *node
	build = func(t reflect.Type, building map[reflect.Type]*node) *node {
		if p, ok := c.Load(t); ok {
			return p
		}
		if p, ok := building[t]; ok {
			return p
		}
		builds++
		p := &node{t: t}
		building[t] = p
		switch t.Kind() {
		case reflect.Pointer:
			p.next = build(t.Elem(), building)
		case reflect.Struct:
			p.next = build(t.Field(0).Type, building)
		}
		return p
	}
	finish := func(building map[reflect.Type]*node) {
		for _, p := range building {
			p.done = true
		}
	}
	lt := reflect.TypeFor[list]()
	_, ok := c.Load(lt)
	require.False(t, ok)
	var wg sync.WaitGroup
	got := make([]*node, 8)
	for i := range got {
		wg.Go(func() {
			p, ok := c.Load(lt)
			if !ok {
				p = c.Build(lt, build, finish)
			}
			got[i] = p
		})
	}
	wg.Wait()
	for _, p := range got {
		require.Same(t, got[0], p)
	}
	require.Equal(t, 2, builds) // list and *list
	p := got[0]
	require.True(t, p.done)
	require.Same(t, p, p.next.next, "the recursive type points back at its own plan")
	pp, ok := c.Load(reflect.PointerTo(lt))
	require.True(t, ok)
	require.Same(t, p.next, pp)
	require.True(t, pp.done)
	// nil finish is allowed.
	var c2 PlanCache[*node]
	require.Equal(t, reflect.TypeFor[int](), c2.Build(reflect.TypeFor[int](), func(t reflect.Type, b map[reflect.Type]*node) *node {
		p := &node{t: t}
		b[t] = p
		return p
	}, nil).t)
}
