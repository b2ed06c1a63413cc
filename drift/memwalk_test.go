package drift_test

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

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
	f := filler{r: r}
	for range 150 {
		for _, typ := range types {
			v := reflect.New(typ)
			f.fill(v.Elem(), 0)
			objects = append(objects, v.Interface())
		}
	}
	hashed := compareWalks(t, "specs", optionSets, objects)
	require.Greater(t, hashed, len(optionSets)*len(objects)/2, "most objects hash")
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

var randomStrings = []string{"", "", "a", "b", "kind", "prod-md-0", "ünïcode", "with space", "x\x00y"}
