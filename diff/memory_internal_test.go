package diff

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/upgradekit/upgradekit/internal/reflectx"
)

// Types with the shapes the memory paths must get right: -0 and NaN,
// strings empty but not nil, blank and unexported fields (IsZero reads
// them, the JSON form does not), embedded structs by value and by pointer,
// omitempty and omitzero on every kind, interfaces, maps, arrays, leaves.
type memLeaf struct {
	S      string             `json:"s,omitempty"`
	F      float64            `json:"f,omitempty"`
	F32    float32            `json:"f32,omitzero"`
	I      int8               `json:"i,omitempty"`
	U      uint16             `json:"u"`
	B      bool               `json:"b,omitempty"`
	P      *string            `json:"p,omitempty"`
	L      []string           `json:"l,omitempty"`
	M      map[string]string  `json:"m,omitempty"`
	MI     map[string]int     `json:"mi,omitempty"`
	A      any                `json:"a,omitempty"`
	Arr    [2]string          `json:"arr,omitzero"`
	AE     [0]int             `json:"ae,omitempty"`
	N      [3]int16           `json:"n,omitzero"`
	By     []byte             `json:"by,omitempty"`
	T      metav1.Time        `json:"t,omitzero"`
	D      *metav1.Duration   `json:"d,omitempty"`
	Q      *resource.Quantity `json:"q,omitempty"`
	IS     intstr.IntOrString `json:"is,omitzero"`
	C      complex64          `json:"-"`
	_      int
	hidden string
}

type memEmbedded struct {
	E  string  `json:"e,omitempty"`
	EZ memLeaf `json:"ez,omitzero"`
}

type memSpec struct {
	*memEmbedded
	memLeaf
	Z      memLeaf            `json:"z,omitzero"`
	ZE     memLeaf            `json:"ze,omitempty"`
	PL     *memLeaf           `json:"pl,omitempty"`
	LL     []memLeaf          `json:"ll,omitempty"`
	AL     [2]memLeaf         `json:"al"`
	ML     map[string]memLeaf `json:"ml,omitempty"`
	Labels map[string]string  `json:"labels,omitzero"`
}

type memMachine struct {
	metav1.TypeMeta `json:",inline"`
	Spec            memSpec `json:"spec"`
}

// filler fills typed values at random. Two fillers with the same seed
// build the same value in distinct memory; mut, when set, changes a few
// of the choices of the second.
type filler struct {
	r    *rand.Rand
	mut  *rand.Rand
	pMut float64
}

func (f *filler) pick(n int) int {
	c := f.r.IntN(n)
	if f.mut != nil && f.mut.Float64() < f.pMut {
		c = f.mut.IntN(n)
	}
	return c
}

var (
	t0         = time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	timeValues = []metav1.Time{{}, {Time: t0}, {Time: t0.Add(time.Nanosecond)}, {Time: t0.In(time.FixedZone("x", 3600))}, {Time: t0.Add(time.Second)}}
)

// emptyNotNil is "" with a data pointer.
var emptyNotNil = strings.Clone("xy")[:0]

func (f *filler) fill(v reflect.Value, depth int) {
	if !v.CanSet() {
		v = reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem() // unexported
	}
	switch v.Type() {
	case reflect.TypeFor[metav1.Time]():
		v.Set(reflect.ValueOf(timeValues[f.pick(len(timeValues))]))
		return
	case reflect.TypeFor[resource.Quantity]():
		v.Set(reflect.ValueOf(resource.MustParse([]string{"1", "1000m", "2", "0"}[f.pick(4)])))
		return
	case reflect.TypeFor[intstr.IntOrString]():
		v.Set(reflect.ValueOf([]intstr.IntOrString{{}, intstr.FromInt32(1), intstr.FromString("a"), intstr.FromString("")}[f.pick(4)]))
		return
	case reflect.TypeFor[metav1.Duration]():
		v.Set(reflect.ValueOf(metav1.Duration{Duration: time.Duration(f.pick(2)) * time.Second}))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString([]string{"", "a", "b", emptyNotNil, "ab"}[f.pick(5)])
	case reflect.Bool:
		v.SetBool(f.pick(2) == 1)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(f.pick(3) - 1))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		v.SetUint(uint64(f.pick(3)))
	case reflect.Float32, reflect.Float64:
		switch c := f.pick(40); {
		case c == 38: // rare: the walk fails on them
			v.SetFloat(math.NaN())
		case c == 39:
			v.SetFloat(math.Inf(1))
		default:
			v.SetFloat([]float64{0, math.Copysign(0, -1), 1.5}[c%3])
		}
	case reflect.Complex64, reflect.Complex128:
		v.SetComplex([]complex128{0, 1i}[f.pick(2)])
	case reflect.Pointer:
		if depth > 6 || f.pick(3) == 0 {
			return
		}
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		n := f.pick(4) - 1 // -1: nil
		if depth > 6 || n < 0 {
			return
		}
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			f.fill(s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Array:
		for i := range v.Len() {
			f.fill(v.Index(i), depth+1)
		}
	case reflect.Map:
		n := f.pick(4) - 1
		if depth > 6 || n < 0 {
			return
		}
		m := reflect.MakeMap(v.Type())
		for range n {
			k := reflect.New(v.Type().Key()).Elem()
			k.SetString([]string{"a", "b", "c"}[f.pick(3)])
			e := reflect.New(v.Type().Elem()).Elem()
			f.fill(e, depth+1)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Interface:
		vals := []any{nil, "x", 1.5, map[string]any{"k": "v"}, []any{"z"}, int64(2)}
		if x := vals[f.pick(len(vals))]; x != nil {
			v.Set(reflect.ValueOf(x))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).Name == "_" {
				continue
			}
			f.fill(v.Field(i), depth+1)
		}
	}
}

// checkPresence compares presentAt and the zero layouts with present and
// reflect.Value.IsZero on every struct field reached from v.
func checkPresence(t *testing.T, v reflect.Value, depth int) int {
	checked := 0
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() && depth < 20 {
			checked += checkPresence(t, v.Elem(), depth+1)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			checked += checkPresence(t, v.Index(i), depth+1)
		}
	case reflect.Struct:
		p := planFor(v.Type())
		for i := range p.fields {
			fp := &p.fields[i]
			f, ok := reflectx.FieldByIndex(v, fp.index)
			if !ok {
				continue
			}
			if fp.direct {
				ptr := unsafe.Add(unsafe.Pointer(v.UnsafeAddr()), fp.offset)
				require.Equal(t, f.UnsafeAddr(), uintptr(ptr), "%s.%s: offset", v.Type(), fp.name)
				if got, known := presentAt(ptr, fp); known {
					require.Equal(t, present(f, fp), got, "%s.%s = %#v: present", v.Type(), fp.name, f)
					checked++
				}
				if fp.zero != nil {
					require.Equal(t, f.IsZero(), isZeroAt(ptr, fp.zero), "%s.%s = %#v: zero", v.Type(), fp.name, f)
				}
			}
			checked += checkPresence(t, f, depth+1)
		}
	}
	return checked
}

// TestMemoryPathsMatchReflect: reading typed values in memory (presentAt,
// sameAt, the zero layouts) gives what the reflect code gives, field by
// field and for whole diffs, over random Machines, KubeadmConfigs and
// values of awkward types, equal pairs in distinct memory and pairs with
// a few differences.
func TestMemoryPathsMatchReflect(t *testing.T) {
	require.NotNil(t, unsafe.StringData(emptyNotNil), "the empty string must have a data pointer")
	differs := []*Differ{}
	for _, opts := range [][]Option{nil, {StrictEmpty()}, {StrictNumbers(), OrderedLists("*.**")}, {Default("*.spec.**.s", "d"), Ignore("*.spec.z.l")}} {
		d, err := New(opts...)
		require.NoError(t, err)
		differs = append(differs, d)
	}
	defer func() { fastPaths = true }()
	run := func(d *Differ, obj Object, a, b any) (string, error) {
		var cs ChangeSet
		var err error
		if obj == ObjectMachine {
			cs, err = d.Machines(State{Machine: a}, State{Machine: b})
		} else {
			cs, err = d.Objects(obj, a, b)
		}
		if err != nil {
			return "", err
		}
		var s strings.Builder
		for _, c := range cs.Changes {
			fmt.Fprintf(&s, "%s %s %s %v %v %v\n", c.Path, c.Field, c.ListPath, c.Op, c.Sensitive, c.Category)
		}
		return s.String() + cs.String(), nil
	}
	types := []struct {
		obj Object
		new func() any
	}{
		{ObjectInfrastructure, func() any { return &memMachine{} }},
		{ObjectMachine, func() any { return &clusterv1.Machine{TypeMeta: metav1.TypeMeta{Kind: "Machine"}} }},
		{ObjectBootstrap, func() any { return &bootstrapv1.KubeadmConfig{} }},
	}
	meta := rand.New(rand.NewPCG(35, 1))
	fields, equal, differ := 0, 0, 0
	for i := range 600 {
		ty := types[i%len(types)]
		seed := meta.Uint64()
		pMut := []float64{0, 0.002, 0.01, 0.05}[meta.IntN(4)]
		a, b := ty.new(), ty.new()
		(&filler{r: rand.New(rand.NewPCG(seed, 0))}).fill(reflect.ValueOf(a).Elem(), 0)
		(&filler{r: rand.New(rand.NewPCG(seed, 0)), mut: rand.New(rand.NewPCG(seed, 1)), pMut: pMut}).fill(reflect.ValueOf(b).Elem(), 0)
		if ty.obj == ObjectMachine {
			a.(*clusterv1.Machine).Kind, b.(*clusterv1.Machine).Kind = "Machine", "Machine"
		}
		fields += checkPresence(t, reflect.ValueOf(a), 0) + checkPresence(t, reflect.ValueOf(b), 0)

		va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
		p := planFor(va.Type())
		fastPaths = false
		want := typedSame(va, vb, p, 0, 100)
		fastPaths = true
		got := sameAt(unsafe.Pointer(va.UnsafeAddr()), unsafe.Pointer(vb.UnsafeAddr()), p, 0, 100)
		require.Equal(t, want, got, "#%d %T: sameAt", i, a)

		for k, d := range differs {
			fastPaths = false
			want, wantErr := run(d, ty.obj, a, b)
			wantEq, wantEqErr := d.Equal(State{}.with(ty.obj, a), State{}.with(ty.obj, b))
			fastPaths = true
			got, gotErr := run(d, ty.obj, a, b)
			gotEq, gotEqErr := d.Equal(State{}.with(ty.obj, a), State{}.with(ty.obj, b))
			sameErr(t, wantErr, gotErr, "#%d %T differ %d", i, a, k)
			require.Equal(t, want, got, "#%d %T differ %d", i, a, k)
			sameErr(t, wantEqErr, gotEqErr, "#%d %T differ %d: Equal", i, a, k)
			require.Equal(t, wantEq, gotEq, "#%d %T differ %d: Equal", i, a, k)
			if wantEqErr == nil && wantEq {
				equal++
			} else {
				differ++
			}
		}
	}
	t.Logf("%d presence checks, %d equal and %d differing diffs", fields, equal, differ)
	require.Greater(t, equal, 200, "equal pairs in distinct memory")
	require.Greater(t, differ, 200)
}

// sameErr: both nil, or the same class of error on the same object and
// side (which of several bad values is met first, and so the path, depends
// on map order).
func sameErr(t *testing.T, want, got error, msg string, args ...any) {
	t.Helper()
	if want == nil {
		require.NoError(t, got, args...)
		return
	}
	var we, ge *Error
	require.ErrorAs(t, want, &we)
	require.ErrorAs(t, got, &ge, append([]any{msg + ": want %v"}, append(args, want)...)...)
	require.Equal(t, []any{we.Err, we.Object, we.Side}, []any{ge.Err, ge.Object, ge.Side}, append([]any{msg + ": %v / %v"}, append(args, want, got)...)...)
}

func (s State) with(o Object, v any) State {
	switch o {
	case ObjectMachine:
		s.Machine = v
	case ObjectBootstrap:
		s.Bootstrap = v
	default:
		s.Infrastructure = v
	}
	return s
}

// TestZeroLayouts: the zero layouts answer reflect.Value.IsZero on the
// values where reading bytes would not: -0, "" with a data pointer, a set
// blank or unexported field, an empty array, NaN, a nil interface.
func TestZeroLayouts(t *testing.T) {
	setBlank := func(l memLeaf) memLeaf {
		f, ok := reflect.TypeFor[memLeaf]().FieldByName("_")
		require.True(t, ok)
		*(*int)(unsafe.Add(unsafe.Pointer(&l), f.Offset)) = 7
		return l
	}
	cases := []struct {
		name string
		v    memLeaf
		zero bool
	}{
		{"zero", memLeaf{}, true},
		{"-0", memLeaf{F: math.Copysign(0, -1)}, true},
		{"float32 -0", memLeaf{F32: float32(math.Copysign(0, -1))}, true},
		{"NaN", memLeaf{F: math.NaN()}, false},
		{"float32 NaN", memLeaf{F32: float32(math.NaN())}, false},
		{"complex -0", memLeaf{C: complex64(complex(math.Copysign(0, -1), math.Copysign(0, -1)))}, true},
		{"complex NaN", memLeaf{C: complex64(complex(0, math.NaN()))}, false},
		{"empty string with a data pointer", memLeaf{S: emptyNotNil, Arr: [2]string{emptyNotNil, ""}}, true},
		{"string", memLeaf{Arr: [2]string{"", "a"}}, false},
		{"last array element", memLeaf{N: [3]int16{0, 0, 1}}, false},
		{"blank field set", setBlank(memLeaf{}), true},
		{"unexported field set", memLeaf{hidden: "x"}, false},
		{"complex under json:\"-\"", memLeaf{C: 1i}, false},
		{"empty slice", memLeaf{L: []string{}}, false},
		{"empty interface", memLeaf{A: nil}, true},
		{"interface holding a zero", memLeaf{A: 0}, false},
		{"time in a zone, zero instant", memLeaf{T: metav1.Time{Time: time.Time{}.In(time.FixedZone("x", 0))}}, false},
	}
	mask := zeroLayout(reflect.TypeFor[memLeaf]())
	require.NotNil(t, mask)
	p := planFor(reflect.TypeFor[memSpec]())
	fz := &p.fields[p.byName["z"]]
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.zero, reflect.ValueOf(tc.v).IsZero(), "the case itself")
			require.Equal(t, tc.zero, isZeroAt(unsafe.Pointer(&tc.v), mask))
			s := memSpec{Z: tc.v}
			got, known := presentAt(unsafe.Add(unsafe.Pointer(&s), fz.offset), fz)
			require.True(t, known)
			require.Equal(t, !tc.zero, got, "omitzero field")
		})
	}
}
