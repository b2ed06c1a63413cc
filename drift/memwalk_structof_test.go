package drift_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

type Emb1 struct {
	A string `json:"a"`
	B *int   `json:"b"`
	C []Emb2 `json:"c"`
}
type Emb2 struct {
	A int8              `json:"a"`
	D map[string]string `json:"d"`
	E *Emb1
}

func randStruct(r *rand.Rand, pool []reflect.Type, depth int) reflect.Type {
	n := 1 + r.IntN(8)
	var fs []reflect.StructField
	names := []string{"A", "B", "C", "D", "X", "Y"}
	for i := range n {
		var ft reflect.Type
		anon := false
		switch k := r.IntN(10); {
		case k < 4:
			ft = pool[r.IntN(len(pool))]
		case k == 4 && depth < 3:
			ft = randStruct(r, pool, depth+1)
		case k == 5:
			ft = reflect.PointerTo(pool[r.IntN(len(pool))])
		case k == 6:
			ft = reflect.SliceOf(pool[r.IntN(len(pool))])
		case k == 7:
			ft = reflect.ArrayOf(r.IntN(3), pool[r.IntN(len(pool))])
		case k == 8:
			ft = []reflect.Type{reflect.TypeFor[Emb1](), reflect.TypeFor[Emb2](), reflect.TypeFor[*Emb1]()}[r.IntN(3)]
			anon = true
		default:
			ft = reflect.MapOf(reflect.TypeFor[string](), pool[r.IntN(len(pool))])
		}
		name := fmt.Sprintf("F%d", i)
		if anon {
			name = ft.Name()
			if ft.Kind() == reflect.Pointer {
				name = ft.Elem().Name()
			}
			// one of each
			dup := false
			for _, f := range fs {
				if f.Name == name {
					dup = true
				}
			}
			if dup {
				continue
			}
		}
		tag := ""
		if r.IntN(2) == 0 {
			tag = fmt.Sprintf(`json:"%s`, names[r.IntN(len(names))])
			if anon && r.IntN(2) == 0 {
				tag = `json:"`
			}
			switch r.IntN(5) {
			case 0:
				tag += ",omitempty"
			case 1:
				tag += ",string"
			}
			tag += `"`
			switch r.IntN(6) {
			case 0:
				tag += ` hash:"set"`
			case 1:
				tag += ` hash:"ignore"`
			}
		}
		fs = append(fs, reflect.StructField{Name: name, Type: ft, Tag: reflect.StructTag(tag), Anonymous: anon})
	}
	return reflect.StructOf(fs)
}

// TestMemWalkStructOf: random struct types built with reflect.StructOf
// (embedded structs and pointers, name conflicts, random tags) hash alike
// through both walks.
func TestMemWalkStructOf(t *testing.T) {
	for seed := uint64(1); seed < 9; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { structOfRound(t, seed) })
	}
}

func structOfRound(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	f := filler{r: r}
	pool := []reflect.Type{
		reflect.TypeFor[string](), reflect.TypeFor[int](), reflect.TypeFor[int8](), reflect.TypeFor[uint16](),
		reflect.TypeFor[bool](), reflect.TypeFor[float32](), reflect.TypeFor[float64](), reflect.TypeFor[*string](),
		reflect.TypeFor[*int32](), reflect.TypeFor[[]string](), reflect.TypeFor[map[string]string](), reflect.TypeFor[any](),
		reflect.TypeFor[metav1.Duration](), reflect.TypeFor[intstr.IntOrString](), reflect.TypeFor[ptrMarshaler](),
		reflect.TypeFor[valMarsh](), reflect.TypeFor[[]byte](), reflect.TypeFor[myStr](), reflect.TypeFor[struct{}](),
		reflect.TypeFor[Emb1](), reflect.TypeFor[Emb2](),
	}
	var objects []any
	base := len(pool)
	for range 80 {
		func() {
			defer func() {
				if e := recover(); e != nil {
					// StructOf limitation
				}
			}()
			typ := randStruct(r, pool, 0)
			if typ.Size() < 4096 && len(pool) < base+15 {
				pool = append(pool, typ)
			}
			for range 10 {
				v := reflect.New(typ)
				f.fill(v.Elem(), 0)
				objects = append(objects, v.Interface(), v.Elem().Interface())
			}
		}()
	}
	compareWalks(t, "structof", wideOptions, objects)
}
