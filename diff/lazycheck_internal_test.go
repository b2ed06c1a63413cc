package diff

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLazyChecksMatchUpFront: checking unstructured inputs during the walk
// gives the same results and the same errors as checking them whole
// before it, over random objects with values that have no JSON form
// placed anywhere: in and out of scope, in lists, under ignored paths,
// inside values reported whole, and nested past the depth limit; for
// Machines and for Equal, which stops at the first difference.
func TestLazyChecksMatchUpFront(t *testing.T) {
	differs := map[string]*Differ{}
	for name, opts := range map[string][]Option{
		"default":  nil,
		"ignore":   {Ignore("infrastructure.spec.b", "infrastructure.spec.l[*].x")},
		"strict":   {StrictEmpty("infrastructure.spec.a", "infrastructure.spec.l")},
		"keyed":    {ListKey("infrastructure.spec.l", "k")},
		"defaults": {Default("infrastructure.spec.a", "d")},
		"deep":     {MaxDepth(1000)},
	} {
		d, err := New(opts...)
		require.NoError(t, err)
		differs[name] = d
	}
	bad := []func() any{
		func() any { return math.NaN() },
		func() any { return math.Inf(-1) },
		func() any { return make(chan int) },
		func() any { return struct{ X int }{1} },
		func() any { return complex(1, 2) },
	}
	deep := func(n int) any {
		var v any = "leaf"
		for range n {
			v = map[string]any{"a": v}
		}
		return v
	}
	r := rand.New(rand.NewPCG(7, 11))
	var gen func(depth int, badP float64) any
	gen = func(depth int, badP float64) any {
		if r.Float64() < badP {
			return bad[r.IntN(len(bad))]()
		}
		switch k := r.IntN(10); {
		case badP > 0 && r.IntN(60) == 0:
			return deep(985 + r.IntN(30))
		case depth > 3 || k < 3:
			switch r.IntN(6) {
			case 0:
				return ""
			case 1:
				return int64(r.IntN(3))
			case 2:
				return r.IntN(2) == 0
			case 3:
				return nil
			case 4:
				return float64(r.IntN(3)) + 0.5
			}
			return fmt.Sprint("s", r.IntN(3))
		case k < 6:
			m := map[string]any{}
			for range r.IntN(4) {
				m[[]string{"a", "b", "c", "x", "k"}[r.IntN(5)]] = gen(depth+1, badP)
			}
			return m
		default:
			l := []any{}
			for range r.IntN(4) {
				l = append(l, map[string]any{"k": fmt.Sprint(r.IntN(3)), "x": gen(depth+1, badP)})
			}
			return l
		}
	}
	object := func(badP float64) map[string]any {
		spec := map[string]any{}
		for _, k := range []string{"a", "b", "l"} {
			if r.IntN(3) > 0 {
				spec[k] = gen(1, badP)
			}
		}
		return map[string]any{
			"kind":     "AWSMachine",
			"spec":     spec,
			"status":   gen(1, badP),
			"metadata": map[string]any{"name": gen(2, badP), "labels": map[string]any{"l": fmt.Sprint(r.IntN(2))}},
		}
	}
	defer func() { lazyChecks, fastPaths = true, true }()
	cases, failing := 0, 0
	for i := range 1500 {
		badP := []float64{0, 0, 0.02, 0.1}[i%4]
		cur, des := object(badP), object(badP)
		switch r.IntN(8) {
		case 0, 1:
			des = cur // equal objects, invalid values included
		case 2, 3:
			des = deepCopyData(cur).(map[string]any) // equal, in distinct memory
		}
		for name, d := range differs {
			lazyChecks = false
			want, wantErr := d.Machines(State{Infrastructure: cur}, State{Infrastructure: des})
			lazyChecks = true
			got, gotErr := d.Machines(State{Infrastructure: cur}, State{Infrastructure: des})
			lazyChecks = false
			wantEq, wantEqErr := d.Equal(State{Infrastructure: cur}, State{Infrastructure: des})
			lazyChecks = true
			gotEq, gotEqErr := d.Equal(State{Infrastructure: cur}, State{Infrastructure: des})
			// Without the fast paths (identical members skipped):
			// the same answers.
			slow, slowErr, slowEq, slowEqErr := got, gotErr, gotEq, gotEqErr
			if i%2 == 0 {
				fastPaths = false
				slow, slowErr = d.Machines(State{Infrastructure: cur}, State{Infrastructure: des})
				slowEq, slowEqErr = d.Equal(State{Infrastructure: cur}, State{Infrastructure: des})
				fastPaths = true
			}
			cases++
			sameErr := func(what string, wantErr, gotErr error) {
				require.Error(t, gotErr, "%s %s #%d: want %v", what, name, i, wantErr)
				var we, ge *Error
				require.True(t, errors.As(wantErr, &we) && errors.As(gotErr, &ge))
				// An input with a value too deep and another that is no
				// JSON may report either first (map order): both are bad
				// data, and the class must agree.
				class := func(err error) error {
					if err == ErrTooDeep {
						return ErrUnsupportedValue
					}
					return err
				}
				require.Equal(t, class(we.Err), class(ge.Err), "%s %s #%d: %v / %v", what, name, i, wantErr, gotErr)
				require.Equal(t, we.Side, ge.Side, "%s %s #%d: %v / %v", what, name, i, wantErr, gotErr)
				// Checks up front report no path; the walk's own errors do
				// (which one, when there are several, depends on map order).
				require.Equal(t, we.Path == "", ge.Path == "", "%s %s #%d: %v / %v", what, name, i, wantErr, gotErr)
				if we.Path == "" {
					require.Equal(t, we.Object, ge.Object)
				}
			}
			if slowEqErr != nil {
				sameErr("Equal without fast paths", slowEqErr, gotEqErr)
			} else {
				require.NoError(t, gotEqErr, "Equal %s #%d", name, i)
				require.Equal(t, slowEq, gotEq, "Equal %s #%d: fast paths", name, i)
			}
			if slowErr != nil {
				sameErr("Machines without fast paths", slowErr, gotErr)
			} else {
				require.NoError(t, gotErr, "%s #%d", name, i)
				require.Equal(t, slow.String(), got.String(), "%s #%d: fast paths", name, i)
			}
			if wantEqErr != nil {
				sameErr("Equal", wantEqErr, gotEqErr)
			} else {
				require.NoError(t, gotEqErr, "Equal %s #%d", name, i)
				require.Equal(t, wantEq, gotEq, "Equal %s #%d", name, i)
			}
			if wantErr != nil {
				failing++
				sameErr("Machines", wantErr, gotErr)
				continue
			}
			require.NoError(t, gotErr, "%s #%d", name, i)
			require.Equal(t, want.Empty(), gotEq, "%s #%d: Equal", name, i)
			require.Equal(t, want.String(), got.String(), "%s #%d", name, i)
			require.Equal(t, len(want.Changes), len(got.Changes))
			for j := range want.Changes {
				require.Equal(t, want.Changes[j].Path, got.Changes[j].Path)
				require.Equal(t, want.Changes[j].ListPath, got.Changes[j].ListPath)
			}
		}
	}
	t.Logf("%d diffs, %d of them errors", cases, failing)
	require.Greater(t, failing, cases/10)
	require.Less(t, failing, cases*9/10)
}

// TestClassifyCache: classifications come out the same from the cache as
// computed, and the cache stops growing at its bound.
func TestClassifyCache(t *testing.T) {
	d, err := New(Categorize(CategoryNTP, "infrastructure.spec.m.*.ntp"), Sensitive("infrastructure.spec.m.*.secret"))
	require.NoError(t, err)
	spec := func(v string) map[string]any {
		m := map[string]any{}
		for i := range maxClassCache + 100 {
			m[fmt.Sprint("k", i)] = map[string]any{"ntp": v, "secret": v, "files": []any{map[string]any{"content": v}, map[string]any{"content": v}}}
		}
		return map[string]any{"kind": "AWSMachine", "spec": map[string]any{"m": m, "ami": v}}
	}
	cur, des := State{Infrastructure: spec("a")}, State{Infrastructure: spec("b")}
	first, err := d.Machines(cur, des)
	require.NoError(t, err)
	require.LessOrEqual(t, len(d.cfg.classes.m), maxClassCache)
	again, err := d.Machines(cur, des)
	require.NoError(t, err)
	require.Equal(t, first.String(), again.String())
	byPath := map[string]Change{}
	for _, c := range again.Changes {
		byPath[c.Path] = c
	}
	for _, k := range []string{"k0", "k4100"} {
		require.Equal(t, CategoryNTP, byPath["/spec/m/"+k+"/ntp"].Category)
		require.True(t, byPath["/spec/m/"+k+"/secret"].Sensitive)
		require.False(t, byPath["/spec/m/"+k+"/ntp"].Sensitive)
		for _, i := range []string{"0", "1"} {
			// One cache entry (indices left out), two paths.
			c := byPath["/spec/m/"+k+"/files/"+i+"/content"]
			require.Equal(t, CategoryOther, c.Category)
			require.Equal(t, "infrastructure.spec.m."+k+".files["+i+"].content", c.Field)
			require.Equal(t, "/spec/m/"+k+"/files", c.ListPath)
			require.True(t, c.Sensitive, "file content")
		}
	}
	require.Equal(t, CategoryImage, byPath["/spec/ami"].Category)
	require.Equal(t, "infrastructure.spec.ami", byPath["/spec/ami"].Field)
	require.Len(t, again.Changes, 4*(maxClassCache+100)+1)
}
