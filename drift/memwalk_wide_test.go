package drift_test

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/upgradekit/upgradekit/drift"
)

type valMarsh struct{ S string }

func (v valMarsh) MarshalJSON() ([]byte, error) { return json.Marshal("vm:" + v.S) }

type txtVal int

func (t txtVal) MarshalText() ([]byte, error) { return []byte(fmt.Sprint("t", int(t))), nil }

type txtPtr string

func (t *txtPtr) MarshalText() ([]byte, error) { return []byte("tp:" + string(*t)), nil }

type embedsMarsh struct {
	valMarsh
	X int `json:"x"`
}

type embedsPtrMarsh struct {
	ptrMarshaler
	X int `json:"x"`
}

type unexpInner struct {
	A string            `json:"a"`
	P *int              `json:"p"`
	M ptrMarshaler      `json:"m"`
	T time.Time         `json:"t"`
	S []string          `json:"s"`
	Q resource.Quantity `json:"q"`
}

type ExpInner struct {
	B string    `json:"b"`
	N *ExpInner `json:"n,omitempty"`
}

type myInt32 int32
type myStr string
type myF32 float32
type myBytes []byte
type myMap map[string]string
type myStrMap map[myStr]myStr
type pint *int
type zst struct{}
type rec *rec
type selfSlice []selfSlice

type wide struct {
	unexpInner
	*ExpInner
	Inl2 ExpInner `json:",inline"`
	Skip string   `json:"-"`
	//lint:ignore SA5008 a field named "-", as encoding/json spells it
	Dash   string   `json:"-,"`
	IntS   int      `json:"intS,string"`
	PIntS  *int     `json:"pintS,string"`
	StrS   string   `json:"strS,string"`
	BoolS  bool     `json:"boolS,string"`
	FS     float64  `json:"fs,string"`
	NestOE ExpInner `json:"nestOE,omitempty"`
	NestOZ ExpInner `json:"nestOZ,omitzero"`
	Tm     time.Time
	PTm    *time.Time
	MT     metav1.Time
	MMT    metav1.MicroTime
	PMT    *metav1.Time
	Q      resource.Quantity
	PQ     *resource.Quantity
	QL     []resource.Quantity
	IS     intstr.IntOrString
	PIS    *intstr.IntOrString
	ISL    []intstr.IntOrString
	D      metav1.Duration
	DL     []metav1.Duration
	B      []byte
	MB     myBytes
	Arr0   [0]int
	Arr    [3]*int
	ArrM   [2]ptrMarshaler
	MSS    map[string]string
	MyM    myMap
	MyKM   myStrMap
	PMSS   *map[string]string
	LMSS   []map[string]string
	F      float64
	F32    float32
	MF     myF32
	PF     *float64
	LF     []float64
	LPF    []*float64
	I8     int8
	MI     myInt32
	MS     myStr
	U64    uint64
	UP     uintptr
	PP     **int
	PPS    **string
	PArr   *[2]string
	PIface *any
	Iface  any
	PMap   *map[string]any
	Z      zst
	ZL     []zst
	PZ     *zst
	PI     pint
	VM     valMarsh
	PVM    *valMarsh
	LVM    []valMarsh
	LPM    []ptrMarshaler
	MPM    map[string]ptrMarshaler
	TV     txtVal
	TP     txtPtr
	LTP    []txtPtr
	EM     embedsMarsh
	EPM    embedsPtrMarsh
	LEPM   []embedsPtrMarsh
	SetL   []ExpInner      `hash:"set"`
	Ign    ExpInner        `hash:"ignore"`
	IgnD   metav1.Duration `hash:"ignore"`
	Self   *wide
	SelfL  []wide
	SelfM  map[string]*wide
	U      *unstructured.Unstructured
	UV     unstructured.Unstructured
	Num    json.Number
	LL     [][]*ExpInner
}

// filler sets a random subset of a value's fields, exported or not,
// leaving about a third of everything zero; with errs, it also writes
// values the hash refuses (NaN, infinities, a malformed json.Number or
// IntOrString).
type filler struct {
	r    *rand.Rand
	errs bool
}

func (f filler) fill(v reflect.Value, depth int) {
	r := f.r
	if depth > 6 || r.IntN(3) == 0 {
		return
	}
	switch v.Type() {
	case reflect.TypeFor[resource.Quantity]():
		v.Set(reflect.ValueOf(resource.MustParse([]string{"1", "1500m", "4Gi", "0"}[r.IntN(4)])))
		return
	case reflect.TypeFor[metav1.Time]():
		v.Set(reflect.ValueOf(metav1.NewTime(time.Unix(r.Int64N(1<<31), 0))))
		return
	case reflect.TypeFor[metav1.MicroTime]():
		v.Set(reflect.ValueOf(metav1.NewMicroTime(time.Unix(r.Int64N(1<<31), 1000))))
		return
	case reflect.TypeFor[time.Time]():
		v.Set(reflect.ValueOf(time.Unix(r.Int64N(1<<31), 5).In(time.FixedZone("x", 3600))))
		return
	case reflect.TypeFor[intstr.IntOrString]():
		switch r.IntN(3) {
		case 0:
			v.Set(reflect.ValueOf(intstr.FromInt32(r.Int32N(100))))
		case 1:
			v.Set(reflect.ValueOf(intstr.FromString(randomStrings[r.IntN(len(randomStrings))])))
		default:
			if f.errs {
				v.Set(reflect.ValueOf(intstr.IntOrString{Type: 7}))
			}
		}
		return
	case reflect.TypeFor[json.Number]():
		if f.errs {
			v.SetString([]string{"", "1", "1.5", "x"}[r.IntN(4)])
		} else {
			v.SetString([]string{"", "1", "1.5"}[r.IntN(3)])
		}
		return
	case reflect.TypeFor[unstructured.Unstructured]():
		v.Set(reflect.ValueOf(unstructured.Unstructured{Object: map[string]any{"a": "b", "n": int64(r.IntN(3))}}))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(randomStrings[r.IntN(len(randomStrings))])
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(r.Int64N(200) - 100)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		v.SetUint([]uint64{0, 1, 200, math.MaxUint64}[r.IntN(4)])
	case reflect.Float32, reflect.Float64:
		fl := []float64{0, math.Copysign(0, -1), 1, 0.1, -2.5, 1e300, 1e20, math.NaN(), math.Inf(1)}
		n := 7
		if f.errs {
			n = 9
		}
		x := fl[r.IntN(n)]
		if v.Kind() == reflect.Float32 && x == 1e300 && !f.errs {
			x = 3.25
		}
		v.SetFloat(x)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		n := r.IntN(4)
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
		if v.Type().Key().Kind() != reflect.String {
			return
		}
		m := reflect.MakeMap(v.Type())
		for range r.IntN(4) {
			k := reflect.New(v.Type().Key()).Elem()
			k.SetString(randomStrings[r.IntN(len(randomStrings))])
			e := reflect.New(v.Type().Elem()).Elem()
			f.fill(e, depth+1)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Interface:
		if v.NumMethod() == 0 {
			switch r.IntN(4) {
			case 0:
				v.Set(reflect.ValueOf(map[string]any{"k": randomStrings[r.IntN(len(randomStrings))], "n": 1.5}))
			case 1:
				v.Set(reflect.ValueOf(ExpInner{B: "x"}))
			case 2:
				v.Set(reflect.ValueOf(ptrMarshaler{N: 3}))
			case 3:
				v.Set(reflect.ValueOf(&ExpInner{B: "y"}))
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			fv := v.Field(i)
			fv = reflect.NewAt(fv.Type(), fv.Addr().UnsafePointer()).Elem()
			f.fill(fv, depth+1)
		}
	}
}

// wideOptions are option sets whose paths name wide's fields.
var wideOptions = map[string][]drift.Option{
	"default":        nil,
	"slices as sets": {drift.SlicesAsSets()},
	"ignore tags":    {drift.IgnoreHashTags(), drift.SetPaths("SetL", "names")},
	"ignore paths": {drift.IgnorePaths("MSS.a", "Self.Q", "a", "*.B"),
		drift.KeepZeroEntries("MSS", "MyM")},
}

// compareWalks hashes and fingerprints every object under every option
// set through the memory walk and the reflection walk and fails on any
// difference in hash, fingerprint or error. It returns how many hashes
// succeeded.
func compareWalks(t *testing.T, name string, optionSets map[string][]drift.Option, objects []any) int {
	t.Helper()
	fails, okCount := 0, 0
	for oname, opts := range optionSets {
		mem := mustHasher(t, "v1", opts...)
		refl := mustHasher(t, "v1", append(append([]drift.Option{}, opts...), drift.ReflectionWalk())...)
		for i, v := range objects {
			want, wantErr := refl.Hash(v)
			got, err := mem.Hash(v)
			wh, wfp, wfErr := refl.Fingerprint(v, 0)
			gh, gfp, gfErr := mem.Fingerprint(v, 0)
			if err == nil {
				okCount++
			}
			if errString(wantErr) != errString(err) || want != got || errString(wfErr) != errString(gfErr) || wh != gh || !reflect.DeepEqual(wfp, gfp) {
				fails++
				if fails < 15 {
					t.Errorf("%s/%s object %d (%T): refl=%v %v mem=%v %v | fp refl=%v mem=%v", name, oname, i, v, want, wantErr, got, err, wfErr, gfErr)
				}
			}
		}
	}
	t.Logf("%s: %d ok of %d", name, okCount, len(optionSets)*len(objects))
	if fails > 0 {
		t.Errorf("%d divergences", fails)
	}
	return okCount
}

// TestMemWalkWideRandom: 1,000 random values (pointer and value roots) of a
// type with a field of every kind the walks treat apart hash, fingerprint
// and fail alike through the memory walk and the reflection walk, under
// four option sets; once with values the hash refuses among them, once
// without, so the comparison also reaches every field.
func TestMemWalkWideRandom(t *testing.T) {
	for _, tc := range []struct {
		name   string
		seed   uint64
		errors bool
	}{{"with errors", 1, true}, {"without errors", 3, false}} {
		t.Run(tc.name, func(t *testing.T) {
			f := filler{r: rand.New(rand.NewPCG(tc.seed, tc.seed+1)), errs: tc.errors}
			var objects []any
			for range 500 {
				v := reflect.New(reflect.TypeFor[wide]())
				f.fill(v.Elem(), 0)
				objects = append(objects, v.Interface(), v.Elem().Interface())
			}
			compareWalks(t, "wide", wideOptions, objects)
		})
	}
}
