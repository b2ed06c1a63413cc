package drift_test

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/upgradekit/upgradekit/drift"
)

// embeddedInner is unexported and embedded: its fields are promoted.
type embeddedInner struct {
	Promoted string            `json:"promoted"`
	Labels   map[string]string `json:"labels"`
}

// ptrMarshaler marshals through a pointer receiver.
type ptrMarshaler struct{ N int }

func (p *ptrMarshaler) MarshalJSON() ([]byte, error) { return json.Marshal(map[string]int{"n": p.N}) }

// tagged is unexported and embedded under a JSON name: reflection marks
// its value read-only.
type tagged struct {
	X string `json:"x"`
}

// memWalkSpec mixes the kinds the memory walk reads itself with the ones
// it hands back to reflection.
type memWalkSpec struct {
	embeddedInner
	*embeddedPtr
	tagged       `json:"tagged"`
	ptrMarshaler `json:"pm"`
	Name         string              `json:"name"`
	Count        *int64              `json:"count"`
	Small        int8                `json:"small"`
	U16          uint16              `json:"u16"`
	F32          float32             `json:"f32"`
	F64          *float64            `json:"f64"`
	Flag         bool                `json:"flag"`
	AsString     int                 `json:"asString,string"`
	Ignored      string              `json:"ignored" hash:"ignore"`
	Set          []string            `json:"set" hash:"set"`
	Names        []string            `json:"names"`
	Nested       [][]string          `json:"nested"`
	PtrList      []*embeddedInner    `json:"ptrList"`
	Marsh        ptrMarshaler        `json:"marsh"`
	MarshPtr     *ptrMarshaler       `json:"marshPtr"`
	Any          any                 `json:"any"`
	Q            resource.Quantity   `json:"q"`
	T            metav1.Time         `json:"t"`
	D            metav1.Duration     `json:"d"`
	DP           *metav1.Duration    `json:"dp"`
	IS           intstr.IntOrString  `json:"is"`
	Raw          []byte              `json:"raw"`
	Arr          [2]string           `json:"arr"`
	Generic      map[string]int      `json:"generic"`
	Named        map[string]myString `json:"named"`
	Self         *memWalkSpec        `json:"self"`
}

type embeddedPtr struct {
	ViaPtr string `json:"viaPtr"`
}

type myString string

// TestMemWalkEqualsReflection: the memory walk writes exactly what the
// reflection walk writes, for random CAPI and Karpenter-like objects and
// for a type mixing every kind, under every option that changes the
// walk: same hashes, same fingerprints, same errors.
func TestMemWalkEqualsReflection(t *testing.T) {
	optionSets := map[string][]drift.Option{
		"default":        nil,
		"slices as sets": {drift.SlicesAsSets()},
		"ignore tags":    {drift.IgnoreHashTags(), drift.SetPaths("spec.files", "names")},
		"ignore paths": {drift.IgnorePaths("metadata.labels.a", "spec.users.name", "name", "labels.b", "*.kind"),
			drift.KeepZeroEntries("metadata.labels", "labels")},
	}
	r := rand.New(rand.NewPCG(35, 2026))
	types := []reflect.Type{
		reflect.TypeFor[clusterv1.Machine](),
		reflect.TypeFor[bootstrapv1.KubeadmConfig](),
		reflect.TypeFor[NodePoolSpec](),
		reflect.TypeFor[memWalkSpec](),
	}
	objects := []any{nodePoolTemplate(), nodePoolSpec(), capiMachine(), kubeadmConfig(), capiPair()}
	for range 150 {
		for _, typ := range types {
			v := reflect.New(typ)
			fillRandom(r, v.Elem(), 0)
			objects = append(objects, v.Interface())
		}
	}
	for name, opts := range optionSets {
		t.Run(name, func(t *testing.T) {
			mem := mustHasher(t, "v1", opts...)
			refl := mustHasher(t, "v1", append(append([]drift.Option{}, opts...), drift.ReflectionWalk())...)
			hashed := 0
			t.Cleanup(func() { require.Greater(t, hashed, len(objects)/2, "most objects hash") })
			for i, v := range objects {
				want, wantErr := refl.Hash(v)
				got, err := mem.Hash(v)
				require.Equal(t, errString(wantErr), errString(err), "object %d (%T)", i, v)
				require.Equal(t, want, got, "object %d (%T)", i, v)
				if err == nil {
					hashed++
				}
				wantH, wantFP, wantErr := refl.Fingerprint(v, 0)
				gotH, gotFP, err := mem.Fingerprint(v, 0)
				require.Equal(t, errString(wantErr), errString(err), "object %d (%T)", i, v)
				require.Equal(t, wantH, gotH, "object %d (%T)", i, v)
				require.Equal(t, wantFP, gotFP, "object %d (%T)", i, v)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

var randomStrings = []string{"", "", "a", "b", "kind", "prod-md-0", "ünïcode", "with space", "x\x00y"}

// fillRandom sets a random subset of v's exported fields (v settable),
// leaving about half of everything zero, as in real specs.
func fillRandom(r *rand.Rand, v reflect.Value, depth int) {
	if depth > 5 || r.IntN(3) == 0 {
		return
	}
	switch v.Type() {
	case reflect.TypeFor[resource.Quantity]():
		v.Set(reflect.ValueOf(resource.MustParse([]string{"1", "1500m", "4Gi", "0"}[r.IntN(4)])))
		return
	case reflect.TypeFor[metav1.Time]():
		v.Set(reflect.ValueOf(metav1.NewTime(time.Unix(r.Int64N(1<<31), 0))))
		return
	case reflect.TypeFor[intstr.IntOrString]():
		if r.IntN(2) == 0 {
			v.Set(reflect.ValueOf(intstr.FromInt32(r.Int32N(100))))
		} else {
			v.Set(reflect.ValueOf(intstr.FromString(randomStrings[r.IntN(len(randomStrings))])))
		}
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
		v.SetUint(r.Uint64N(200))
	case reflect.Float32, reflect.Float64:
		v.SetFloat([]float64{0, math.Copysign(0, -1), 1, 0.1, -2.5, 1e300}[r.IntN(6)])
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fillRandom(r, p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		n := r.IntN(4)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			fillRandom(r, s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Array:
		for i := range v.Len() {
			fillRandom(r, v.Index(i), depth+1)
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
			fillRandom(r, e, depth+1)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Interface:
		if v.NumMethod() == 0 {
			v.Set(reflect.ValueOf(map[string]any{"k": randomStrings[r.IntN(len(randomStrings))], "n": 1.5}))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Field(i)
			if v.Type().Field(i).Anonymous {
				// Reach unexported embedded structs too.
				f = reflect.NewAt(f.Type(), f.Addr().UnsafePointer()).Elem()
			}
			if f.CanSet() {
				fillRandom(r, f, depth+1)
			}
		}
	}
}
