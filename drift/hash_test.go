package drift_test

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/upgradekit/upgradekit/drift"
)

func mustHasher(t testing.TB, version string, opts ...drift.Option) *drift.Hasher {
	t.Helper()
	h, err := drift.NewHasher(version, opts...)
	require.NoError(t, err)
	return h
}

func mustHash(t testing.TB, h *drift.Hasher, v any) drift.Hash {
	t.Helper()
	got, err := h.Hash(v)
	require.NoError(t, err)
	return got
}

func toUnstructured(t testing.TB, v any) map[string]any {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(v)
	require.NoError(t, err)
	return m
}

// viaJSON round-trips v through encoding/json into map[string]any, so
// numbers become float64 as in any JSON-decoded object.
func viaJSON(t testing.TB, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var out any
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}

func TestHashTypedEqualsUnstructured(t *testing.T) {
	h := mustHasher(t, "v1")
	// The requirements carry hash:"ignore", which unstructured data cannot
	// carry; say the same thing by path for both forms.
	hp := mustHasher(t, "v1", drift.IgnoreHashTags(), drift.IgnorePaths("spec.requirements"))
	cases := []struct {
		name   string
		hasher *drift.Hasher
		typed  any
	}{
		{"machine", h, capiMachine()},
		{"kubeadmconfig", h, kubeadmConfig()},
		{"nodepool-template", hp, nodePoolTemplate()},
		{"nodepool-spec", mustHasher(t, "v1", drift.IgnoreHashTags()), nodePoolSpec()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := mustHash(t, tc.hasher, tc.typed)
			u := toUnstructured(t, tc.typed)
			require.Equal(t, want, mustHash(t, tc.hasher, u), "unstructured map")
			require.Equal(t, want, mustHash(t, tc.hasher, &unstructured.Unstructured{Object: u}), "*unstructured.Unstructured")
			require.Equal(t, want, mustHash(t, tc.hasher, viaJSON(t, tc.typed)), "JSON-decoded map")
		})
	}
}

func TestHashValueAndPointerEqual(t *testing.T) {
	h := mustHasher(t, "v1")
	m := capiMachine()
	require.Equal(t, mustHash(t, h, m), mustHash(t, h, *m))
}

func TestHashZeroFolding(t *testing.T) {
	type inner struct {
		A string `json:"a,omitempty"`
	}
	type spec struct {
		Labels   map[string]string `json:"labels"`
		List     []string          `json:"list"`
		Count    *int32            `json:"count"`
		Name     *string           `json:"name"`
		Inner    *inner            `json:"inner"`
		Flag     bool              `json:"flag"`
		Duration *metav1.Duration  `json:"duration"`
		Time     metav1.Time       `json:"time"`
		Any      any               `json:"any"`
	}
	zeroish := []spec{
		{},
		{Labels: map[string]string{}, List: []string{}},
		{Count: ptr.To[int32](0), Name: ptr.To(""), Inner: &inner{}},
		{Time: metav1.Time{}, Any: map[string]any{}},
		{Any: []any{}},
	}
	folding := mustHasher(t, "v1")
	keeping := mustHasher(t, "v1", drift.KeepZeroValues())
	want := mustHash(t, folding, &zeroish[0])
	require.Equal(t, want, mustHash(t, folding, nil), "nil spec equals zero spec")
	require.Equal(t, want, mustHash(t, folding, map[string]any{"labels": nil, "count": 0.0, "inner": map[string]any{"a": ""}}))
	kept := map[drift.Hash]int{}
	for i, s := range zeroish {
		require.Equal(t, want, mustHash(t, folding, &s), "case %d folds", i)
		kept[mustHash(t, keeping, &s)] = i
	}
	require.Len(t, kept, len(zeroish), "KeepZeroValues tells them apart")

	// A real value is not folded.
	require.NotEqual(t, want, mustHash(t, folding, &spec{Count: ptr.To[int32](1)}))
	require.NotEqual(t, want, mustHash(t, folding, &spec{List: []string{""}}), "a list of one empty string is not empty")
	// Durations and quantities hash by their JSON strings, so an explicit
	// zero ("0s") is a value, as it is in the unstructured form.
	require.NotEqual(t, want, mustHash(t, folding, &spec{Duration: &metav1.Duration{}}))
	require.Equal(t, mustHash(t, folding, map[string]any{"duration": "0s"}), mustHash(t, folding, &spec{Duration: &metav1.Duration{}}))
}

func TestHashKeepZeroEntries(t *testing.T) {
	h := mustHasher(t, "v1")
	hk := mustHasher(t, "v1", drift.KeepZeroEntries("metadata.labels"))
	a := map[string]any{"metadata": map[string]any{"labels": map[string]any{"role": ""}}}
	b := map[string]any{"metadata": map[string]any{}}
	require.Equal(t, mustHash(t, h, a), mustHash(t, h, b))
	require.NotEqual(t, mustHash(t, hk, a), mustHash(t, hk, b))
	typed := &NodeClaimTemplate{ObjectMeta: ObjectMeta{Labels: map[string]string{"role": ""}}}
	require.Equal(t, mustHash(t, hk, a), mustHash(t, hk, typed), "typed and unstructured agree with KeepZeroEntries")
}

func TestHashOrderIndependence(t *testing.T) {
	h := mustHasher(t, "v1")
	a := map[string]any{"b": 1, "a": map[string]any{"y": "1", "x": "2"}}
	b := map[string]any{"a": map[string]any{"x": "2", "y": "1"}, "b": int64(1)}
	require.Equal(t, mustHash(t, h, a), mustHash(t, h, b))
	// Lists are ordered unless declared sets.
	l1 := map[string]any{"l": []any{"x", "y"}}
	l2 := map[string]any{"l": []any{"y", "x", "y"}}
	require.NotEqual(t, mustHash(t, h, l1), mustHash(t, h, l2))
	hs := mustHasher(t, "v1", drift.SetPaths("l"))
	require.Equal(t, mustHash(t, hs, l1), mustHash(t, hs, l2))
	all := mustHasher(t, "v1", drift.SlicesAsSets())
	require.Equal(t, mustHash(t, all, l1), mustHash(t, all, l2))
}

func TestHashTags(t *testing.T) {
	type spec struct {
		Keep   string   `json:"keep"`
		Ignore string   `json:"ignore" hash:"ignore"`
		Set    []string `json:"set" hash:"set"`
	}
	h := mustHasher(t, "v1")
	base := mustHash(t, h, &spec{Keep: "k", Ignore: "a", Set: []string{"1", "2"}})
	require.Equal(t, base, mustHash(t, h, &spec{Keep: "k", Ignore: "b", Set: []string{"2", "1"}}))
	require.NotEqual(t, base, mustHash(t, h, &spec{Keep: "k2", Ignore: "a", Set: []string{"1", "2"}}))
	nt := mustHasher(t, "v1", drift.IgnoreHashTags())
	require.NotEqual(t, mustHash(t, nt, &spec{Keep: "k", Ignore: "a"}), mustHash(t, nt, &spec{Keep: "k", Ignore: "b"}))
}

func TestHashIgnorePaths(t *testing.T) {
	tmpl := nodePoolTemplate()
	h := mustHasher(t, "v1", drift.IgnorePaths("metadata.annotations", "spec.taints.value", "*.startupTaints"))
	base := mustHash(t, h, tmpl)

	changed := nodePoolTemplate()
	changed.ObjectMeta.Annotations["new"] = "x"
	changed.Spec.Taints[0].Value = "other"
	changed.Spec.StartupTaints = nil
	require.Equal(t, base, mustHash(t, h, changed), "ignored paths do not count")

	changed.Spec.Taints[0].Key = "other"
	require.NotEqual(t, base, mustHash(t, h, changed), "a sibling of an ignored path still counts")

	// Map keys are path segments too.
	hk := mustHasher(t, "v1", drift.IgnorePaths("metadata.labels.team"))
	a, b := nodePoolTemplate(), nodePoolTemplate()
	b.ObjectMeta.Labels["team"] = "other"
	require.Equal(t, mustHash(t, hk, a), mustHash(t, hk, b))
	b.ObjectMeta.Labels["wave"] = "3"
	require.NotEqual(t, mustHash(t, hk, a), mustHash(t, hk, b))

	// diff's path syntax: "[*]" is the (transparent) list step; the same
	// path with or without it.
	hd := mustHasher(t, "v1", drift.IgnorePaths("metadata.annotations", "spec.taints[*].value", "*.startupTaints"))
	require.Equal(t, base, mustHash(t, hd, tmpl))
	require.Equal(t, mustHash(t, h, changed), mustHash(t, hd, changed))
	_, err := drift.NewHasher("v1", drift.IgnorePaths("spec.taints[key=a].value"))
	require.ErrorIs(t, err, drift.ErrInvalidOption, "a list element cannot be singled out")
	require.ErrorContains(t, err, "cannot select list elements")
}

func TestHashSpecialTypes(t *testing.T) {
	h := mustHasher(t, "v1")
	ts := time.Date(2025, 3, 4, 5, 6, 7, 0, time.FixedZone("x", 3600))
	type spec struct {
		Q   resource.Quantity  `json:"q"`
		T   metav1.Time        `json:"t"`
		MT  metav1.MicroTime   `json:"mt"`
		D   metav1.Duration    `json:"d"`
		IS  intstr.IntOrString `json:"is"`
		II  intstr.IntOrString `json:"ii"`
		RL  corev1.ResourceList
		Raw []byte  `json:"raw"`
		F32 float32 `json:"f32"`
		U   uint64  `json:"u"`
		N   json.Number
		S   int `json:"s,string"`
	}
	v := &spec{
		Q:   resource.MustParse("1500m"),
		T:   metav1.NewTime(ts),
		MT:  metav1.NewMicroTime(ts.Add(123456 * time.Microsecond)),
		D:   metav1.Duration{Duration: 90*time.Minute + 1500*time.Millisecond},
		IS:  intstr.FromString("25%"),
		II:  intstr.FromInt32(3),
		RL:  corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
		Raw: []byte("hello"),
		F32: 0.1,
		U:   1 << 40,
		N:   json.Number("12.5"),
		S:   42,
	}
	want := mustHash(t, h, v)
	require.Equal(t, want, mustHash(t, h, viaJSON(t, v)), "typed equals its JSON form")

	// runtime.DefaultUnstructuredConverter departs from encoding/json for
	// float32 (widened), json.Number (kept a string) and ",string" (not
	// applied); Kubernetes API types use none of them. The hasher follows
	// encoding/json, so compare the rest.
	v.F32, v.N, v.S = 0, "", 0
	want = mustHash(t, h, v)
	require.Equal(t, want, mustHash(t, h, toUnstructured(t, v)), "typed equals its unstructured form")
}

func TestDurationFormat(t *testing.T) {
	// appendDuration must agree with time.Duration.String; checked via
	// hashing a metav1.Duration against its String form.
	h := mustHasher(t, "v1")
	r := rand.New(rand.NewPCG(1, 2))
	ds := []time.Duration{1, -1, 999, time.Microsecond, 1500 * time.Microsecond, time.Second, -time.Hour,
		math.MaxInt64, math.MinInt64, 25*time.Hour + 3*time.Millisecond,
		720 * time.Hour, 48 * time.Hour, 30 * time.Second, 90 * time.Minute, -2 * time.Second, 3601 * time.Second,
		math.MaxInt64 / time.Second * time.Second, math.MinInt64 / time.Second * time.Second}
	for range 2000 {
		ds = append(ds, time.Duration(r.Int64()>>r.IntN(63)))
	}
	for _, d := range ds {
		require.Equal(t,
			mustHash(t, h, map[string]any{"d": d.String()}),
			mustHash(t, h, &struct {
				D metav1.Duration `json:"d"`
			}{metav1.Duration{Duration: d}}), "duration %d", int64(d))
	}
}

func TestHashBadInput(t *testing.T) {
	h := mustHasher(t, "v1")
	type withChan struct {
		C chan int `json:"c"`
	}
	type withFunc struct {
		Inner struct {
			F func() `json:"f"`
		} `json:"inner"`
	}
	type node struct {
		Name string `json:"name"`
		Next *node  `json:"next"`
	}
	loop := &node{Name: "a"}
	loop.Next = &node{Name: "b", Next: loop}
	selfMap := map[string]any{"a": 1}
	selfMap["self"] = selfMap
	selfList := []any{1}
	selfList[0] = selfList
	deep := map[string]any{}
	cur := deep
	for range drift.MaxDepth + 5 {
		next := map[string]any{}
		cur["x"] = next
		cur = next
	}

	cases := []struct {
		name string
		v    any
		want error
		path string
	}{
		{"chan", &withChan{C: make(chan int)}, drift.ErrUnsupportedType, "c"},
		{"nil chan", &withChan{}, drift.ErrUnsupportedType, "c"},
		{"func", &withFunc{}, drift.ErrUnsupportedType, "inner.f"},
		{"complex", map[string]any{"c": complex(1, 2)}, drift.ErrUnsupportedType, "c"},
		{"NaN", map[string]any{"spec": map[string]any{"f": math.NaN()}}, drift.ErrUnsupportedValue, "spec.f"},
		{"Inf in list", map[string]any{"l": []any{1.0, math.Inf(-1)}}, drift.ErrUnsupportedValue, "l[1]"},
		{"pointer cycle", loop, drift.ErrCycle, ""},
		{"map cycle", selfMap, drift.ErrCycle, ""},
		{"list cycle", selfList, drift.ErrCycle, ""},
		{"too deep", deep, drift.ErrTooDeep, ""},
		{"bad map key", map[[2]int]string{{1, 2}: "x"}, drift.ErrUnsupportedType, ""},
		{"failing marshaler", &struct {
			M badMarshaler `json:"m"`
		}{}, drift.ErrUnsupportedValue, "m"},
		{"panicking marshaler", &struct {
			M panicMarshaler `json:"m"`
		}{}, drift.ErrUnsupportedValue, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.Hash(tc.v)
			require.ErrorIs(t, err, tc.want)
			var pe *drift.PathError
			require.True(t, errors.As(err, &pe), "error %v is a *PathError", err)
			if tc.path != "" {
				require.Equal(t, tc.path, pe.Path)
			}
		})
	}
}

type badMarshaler struct{}

func (badMarshaler) MarshalJSON() ([]byte, error) { return nil, errors.New("boom") }

type panicMarshaler struct{}

func (panicMarshaler) MarshalJSON() ([]byte, error) { panic("boom") }

func TestNewHasherValidation(t *testing.T) {
	for _, v := range []string{"", "has space", "ü", string(make([]byte, 70))} {
		_, err := drift.NewHasher(v)
		require.ErrorIs(t, err, drift.ErrInvalidOption, "version %q", v)
	}
	_, err := drift.NewHasher("v1", drift.IgnorePaths("a..b"))
	require.ErrorIs(t, err, drift.ErrInvalidOption)
	_, err = drift.NewHasher("v1", drift.SetPaths(""))
	require.ErrorIs(t, err, drift.ErrInvalidOption)
	h := mustHasher(t, "v7")
	require.Equal(t, "v7+"+drift.EncodingVersion, h.Version())
}

func TestHashStringRoundTrip(t *testing.T) {
	h := mustHash(t, mustHasher(t, "v1"), capiMachine())
	require.Len(t, h.String(), 16)
	back, err := drift.ParseHash(h.Version, h.String())
	require.NoError(t, err)
	require.Equal(t, h, back)
	for _, bad := range []string{"", "xyz", "0123456789ABCDEF", "0123456789abcdef0", "-123456789abcdef"} {
		_, err := drift.ParseHash(h.Version, bad)
		require.ErrorIs(t, err, drift.ErrInvalidAnnotation, bad)
	}
	_, err = drift.ParseHash("bad version", h.String())
	require.ErrorIs(t, err, drift.ErrInvalidAnnotation)
}

// TestHashCollisions hashes a large corpus of random specs built from small
// domains, so that many are equal in content but differ in construction
// (map order, int vs float, nil vs empty): equal canonical JSON must give
// equal hashes and different JSON different hashes (64 bits: expected
// collisions among 200k distinct specs are about 2.4e-9).
func TestHashCollisions(t *testing.T) {
	n := 200_000
	if testing.Short() {
		n = 20_000
	}
	h := mustHasher(t, "v1")
	r := rand.New(rand.NewPCG(7, 11))
	byJSON := map[string]uint64{}
	byHash := map[uint64]string{}
	for range n {
		spec := randomSpec(r)
		canon, err := json.Marshal(normalize(spec))
		if err != nil {
			t.Fatal(err)
		}
		hv, err := h.Hash(spec)
		if err != nil {
			t.Fatal(err)
		}
		got := hv.Value
		if prev, ok := byJSON[string(canon)]; ok {
			if prev != got {
				t.Fatalf("equal specs hash differently: %s", canon)
			}
			continue
		}
		if other, ok := byHash[got]; ok {
			t.Fatalf("collision: %s and %s both hash to %x", canon, other, got)
		}
		byJSON[string(canon)] = got
		byHash[got] = string(canon)
	}
	t.Logf("%d specs, %d distinct, 0 collisions", n, len(byJSON))
	require.Greater(t, len(byJSON), n/2)
}

func randomSpec(r *rand.Rand) map[string]any {
	words := []string{"a", "b", "c", "spot", "on-demand", "amd64", "arm64", ""}
	spec := map[string]any{}
	for _, k := range []string{"version", "image", "zone", "pool", "arch"} {
		if r.IntN(3) > 0 {
			spec[k] = words[r.IntN(len(words))]
		}
	}
	if r.IntN(2) == 0 {
		if r.IntN(2) == 0 {
			spec["replicas"] = int64(r.IntN(20))
		} else {
			spec["replicas"] = float64(r.IntN(20))
		}
	}
	labels := map[string]any{}
	for range r.IntN(5) {
		labels["l"+strconv.Itoa(r.IntN(6))] = words[r.IntN(len(words))]
	}
	if len(labels) > 0 || r.IntN(2) == 0 {
		spec["labels"] = labels
	}
	var taints []any
	for range r.IntN(4) {
		taints = append(taints, map[string]any{"key": words[r.IntN(4)], "effect": []any{"NoSchedule", "NoExecute"}[r.IntN(2)]})
	}
	if taints != nil || r.IntN(2) == 0 {
		spec["taints"] = taints
	}
	if r.IntN(4) == 0 {
		spec["ratio"] = float64(r.IntN(100)) / 8
	}
	if r.IntN(4) == 0 {
		spec["enabled"] = r.IntN(2) == 0
	}
	return spec
}

// normalize applies the hasher's zero folding to a JSON-like value, for
// use as the test oracle.
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if n := normalize(e); n != nil {
				out[k] = n
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	case []any:
		if len(x) == 0 {
			return nil
		}
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalize(e)
		}
		return out
	case string:
		if x == "" {
			return nil
		}
		return x
	case bool:
		if !x {
			return nil
		}
		return x
	case int64:
		if x == 0 {
			return nil
		}
		return float64(x)
	case float64:
		if x == 0 {
			return nil
		}
		return x
	case nil:
		return nil
	}
	return v
}

// TestHashConcurrent hashes the same objects from many goroutines; under
// -race it proves hashing never writes to the caller's values (Quantity's
// String cache, for one, is not touched).
func TestHashConcurrent(t *testing.T) {
	h := mustHasher(t, "v1", drift.SlicesAsSets())
	objs := []any{nodePoolSpec(), capiPair(), toUnstructured(t, capiMachine())}
	want := make([]drift.Hash, len(objs))
	for i, o := range objs {
		want[i] = mustHash(t, h, o)
	}
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			for range 200 {
				for i, o := range objs {
					got, err := h.Hash(o)
					if err == nil && got != want[i] {
						err = errors.New("hash changed under concurrency")
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		require.NoError(t, <-errs)
	}
}
