package drift_test

import (
	"sync"
	"testing"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgradekit/upgradekit/drift"
)

type cyc struct {
	Next *cyc   `json:"next"`
	L    []cyc  `json:"l"`
	V    string `json:"v"`
}

type zs struct{}
type zholder struct {
	Ps []*zs
	N  *zholder
}

type withUnsafe struct {
	P unsafe.Pointer
	C chan int
	F func()
	X complex128
}

// TestMemWalkEdges: cycles through pointers, slices and interfaces, nesting
// past the depth bound, zero-size types, unsupported kinds, nil and
// non-struct roots give the same hashes and errors through both walks.
func TestMemWalkEdges(t *testing.T) {
	a := &cyc{V: "a"}
	a.Next = a
	b := &cyc{V: "b"}
	b.L = []cyc{{V: "c"}}
	b.L[0].Next = b
	var r rec
	r = rec(&r)
	s := make(selfSlice, 1)
	s[0] = s
	deep := &cyc{}
	cur := deep
	for range 1200 {
		cur.Next = &cyc{V: "x"}
		cur = cur.Next
	}
	deepSl := &cyc{}
	cur = deepSl
	for range 1200 {
		cur.L = []cyc{{V: "x"}}
		cur = &cur.L[0]
	}
	zh := &zholder{}
	zc := zh
	for range 100 {
		zc.Ps = []*zs{{}, {}}
		zc.N = &zholder{}
		zc = zc.N
	}
	var ifc any
	ifc = &ifc
	pp := new(*int)
	var np *cyc
	objs := []any{a, b, &r, &s, s, deep, deepSl, zh, ifc, &ifc, pp, np, (*int)(nil), new(unsafe.Pointer),
		&withUnsafe{}, &withUnsafe{P: unsafe.Pointer(a)}, &withUnsafe{C: make(chan int)}, &withUnsafe{X: 1},
		new([0]int), new(struct{}), new(**metav1.Duration), &[]*metav1.Duration{nil, {}},
		new(any), new(map[string]any), &map[string]any{"a": a}, []any{a}, map[string]any{"x": &s},
	}
	compareWalks(t, "edge", wideOptions, objs)
}

// TestMemWalkConcurrentTypes: one Hasher hashing alternating types from four
// goroutines (its last-plan cache) gives the reflection walk's hashes (run
// under -race).
func TestMemWalkConcurrentTypes(t *testing.T) {
	mem := mustHasher(t, "v1")
	refl := mustHasher(t, "v1", drift.ReflectionWalk())
	objs := []any{nodePoolTemplate(), capiMachine(), kubeadmConfig(), &cyc{V: "q"}, &wide{MS: "x"}, new(int), &[]string{"a"}}
	var want []drift.Hash
	for _, o := range objs {
		h, _ := refl.Hash(o)
		want = append(want, h)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				k := (i + g) % len(objs)
				h, _ := mem.Hash(objs[k])
				if h != want[k] {
					t.Errorf("goroutine %d obj %d: %v != %v", g, k, h, want[k])
					return
				}
			}
		}()
	}
	wg.Wait()
}
