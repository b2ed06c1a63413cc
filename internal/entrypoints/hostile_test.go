package entrypoints

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// callTimeout bounds one call. Contexts given to the call expire after
// ctxTimeout; a call that honours its context returns well within this.
// callTimeout is a hang detector, not a speed test: four calls run at once
// with megabyte inputs, under -race, on machines as small and as loaded
// as a 2-core CI runner, so it is minutes. Work that grows too fast with
// its input is caught by tests that count it (allocated bytes for 1k vs
// 8k inputs, as nodeexec/drain's TestStringsDoNotGrowQuadratically does),
// not by this clock.
const (
	ctxTimeout  = 2 * time.Second
	callTimeout = 3 * time.Minute
	maxDepth    = 4
)

// hostileStrings are the strings tried for every string parameter (plus
// one derived from the input bytes).
var hostileStrings = []string{
	"",
	"v1.31.1",
	"../../etc/kubernetes/pki/ca.key",
	"a\x00b",
	"$(id)`id`;rm -rf /tmp/x #",
	"\xff\xfe\xfd",
	"ｖ1．31．1",
	"-h",
	"1e400",
	"a/b/c[*].d",
	"spec.files[*].content",
	strings.Repeat("a", 1<<20),
	strings.Repeat("a.", 50000),
	strings.Repeat("[", 10000),
}

// errHostile is the error given where an error is an argument (an
// error returned back is not a new error of ours).
var errHostile = errors.New("hostile")

// gen makes argument values from a byte stream: the same bytes give the
// same values, so a failure found by the fuzzer replays.
type gen struct {
	data  []byte
	pos   int
	depth int
	ctx   context.Context
	// constructing guards against constructors that need themselves.
	constructing map[reflect.Type]bool
	desc         []string
	// huge is set once a huge string or slice was made: one per call, so
	// a call's input stays within memory (a slice of 10,000 megabyte
	// strings is not an input anyone sends).
	huge bool
	// light scales huge inputs down by 10 (at most 64 KiB strings) for
	// the fuzzer, which runs each input many times while minimising and
	// counts a slow input as a hung worker.
	light bool
}

// scale returns n, or n/10 for a light generator.
func (g *gen) scale(n int) int {
	if g.light {
		return n / 10
	}
	return n
}

func (g *gen) next() int {
	if g.pos >= len(g.data) {
		return 0
	}
	b := g.data[g.pos]
	g.pos++
	return int(b)
}

func (g *gen) choose(n int) int { return g.next() % n }

func (g *gen) note(format string, args ...any) {
	if len(g.desc) < 200 {
		g.desc = append(g.desc, strings.Repeat("  ", g.depth)+fmt.Sprintf(format, args...))
	}
}

func (g *gen) str() string {
	i := g.choose(len(hostileStrings) + 1)
	if i < len(hostileStrings) {
		s := hostileStrings[i]
		if len(s) > 1000 {
			if g.huge {
				s = ""
			}
			g.huge = true
			if g.light && len(s) > 64<<10 {
				s = s[:64<<10]
			}
		}
		g.note("string #%d (%d bytes)", i, len(s))
		return s
	}
	n := g.choose(32)
	var b strings.Builder
	for range n {
		b.WriteByte(byte(g.next()))
	}
	g.note("string %q", b.String())
	return b.String()
}

var (
	ctxType       = reflect.TypeFor[context.Context]()
	loggerType    = reflect.TypeFor[logr.Logger]()
	errorType     = reflect.TypeFor[error]()
	objectType    = reflect.TypeFor[metav1.Object]()
	timeType      = reflect.TypeFor[time.Time]()
	durationType  = reflect.TypeFor[time.Duration]()
	schemeType    = reflect.TypeFor[*runtime.Scheme]()
	emptyIfaceTyp = reflect.TypeFor[any]()
)

// anyValue is a hostile value for an `any` parameter (a spec to hash or
// diff, an object to read).
func (g *gen) anyValue() reflect.Value {
	switch g.choose(11) {
	case 0:
		g.note("any: nil")
		return reflect.Zero(emptyIfaceTyp)
	case 1:
		m := map[string]any{"spec": nil}
		m["spec"] = m
		g.note("any: cyclic map")
		return reflect.ValueOf(m)
	case 2:
		if g.huge {
			return reflect.Zero(emptyIfaceTyp)
		}
		g.huge = true
		var deep any = "leaf"
		for range g.scale(20000) {
			deep = map[string]any{"a": deep}
		}
		g.note("any: map nested 20000 deep")
		return reflect.ValueOf(deep)
	case 3:
		s := []any{nil}
		s[0] = s
		g.note("any: cyclic slice")
		return reflect.ValueOf(s)
	case 4:
		g.note("any: NaN")
		return reflect.ValueOf(math.NaN())
	case 5:
		g.note("any: chan")
		return reflect.ValueOf(make(chan int))
	case 6:
		g.note("any: func")
		return reflect.ValueOf(func() {})
	case 7:
		g.note("any: typed nil *Node")
		return reflect.ValueOf((*corev1.Node)(nil))
	case 8:
		g.note("any: map with non-string keys")
		return reflect.ValueOf(map[any]any{1.5: "x", true: nil})
	case 9:
		u := g.unstructured()
		return reflect.ValueOf(u)
	default:
		return reflect.ValueOf(g.str())
	}
}

func (g *gen) unstructured() *unstructured.Unstructured {
	obj := map[string]any{"apiVersion": g.str(), "kind": g.str()}
	switch g.choose(4) {
	case 0:
		obj["spec"] = obj
		g.note("unstructured: cyclic spec")
	case 1:
		obj["spec"] = map[string]any{"files": map[string]any{"0": map[string]any{"content": "secret-token"}}}
		g.note("unstructured: files as a map")
	case 2:
		obj["metadata"] = "not a map"
		g.note("unstructured: metadata not a map")
	default:
		obj["spec"] = map[string]any{"version": g.str(), "x": math.Inf(1)}
		g.note("unstructured: spec with +Inf")
	}
	return &unstructured.Unstructured{Object: obj}
}

// special handles types whose hostile values need knowledge of the type.
func (g *gen) special(t reflect.Type) (reflect.Value, bool) {
	switch t {
	case ctxType:
		return reflect.ValueOf(g.ctx), true
	case loggerType:
		return reflect.ValueOf(logr.Discard()), true
	case emptyIfaceTyp:
		return g.anyValue(), true
	case timeType:
		if g.choose(2) == 0 {
			return reflect.ValueOf(time.Time{}), true
		}
		return reflect.ValueOf(time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)), true
	case durationType:
		d := []time.Duration{0, -1, time.Millisecond, math.MaxInt64, math.MinInt64}[g.choose(5)]
		g.note("duration %v", d)
		return reflect.ValueOf(d), true
	case schemeType:
		if g.choose(2) == 0 {
			return reflect.Zero(t), true
		}
		return reflect.ValueOf(runtime.NewScheme()), true
	}
	if t.Kind() != reflect.Interface {
		return reflect.Value{}, false
	}
	var cands []reflect.Value
	switch {
	case t == errorType:
		cands = append(cands, reflect.ValueOf(errHostile))
	case objectType.Implements(t) || t == objectType:
		cands = append(cands, reflect.ValueOf((*corev1.Node)(nil)), reflect.ValueOf(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: g.str(), Annotations: map[string]string{g.str(): g.str()}}}),
			reflect.ValueOf(g.unstructured()))
	case reflect.TypeFor[*k8sfake.Clientset]().Implements(t) && t.NumMethod() > 5:
		cands = append(cands, reflect.ValueOf((*k8sfake.Clientset)(nil)), reflect.ValueOf(k8sfake.NewClientset()))
	case reflect.TypeFor[client.WithWatch]().Implements(t) && t.NumMethod() > 2:
		cands = append(cands, reflect.ValueOf(crfake.NewClientBuilder().Build()))
	case reflect.TypeFor[*clocktesting.FakeClock]().Implements(t):
		cands = append(cands, reflect.ValueOf(clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))))
	}
	// Types of ours that implement t (func adapters, checks, ...).
	for _, r := range implementers(t) {
		if g.depth < maxDepth {
			g.depth++
			cands = append(cands, g.receiver(r))
			g.depth--
		}
	}
	i := g.choose(len(cands) + 1)
	if i == len(cands) {
		g.note("%v: nil", t)
		return reflect.Zero(t), true
	}
	v := cands[i]
	if !v.IsValid() || !v.Type().Implements(t) {
		return reflect.Zero(t), true
	}
	out := reflect.New(t).Elem()
	out.Set(v)
	return out, true
}

// receivers are the receiver types of the registry's methods.
var receivers = sync.OnceValue(func() []reflect.Type {
	seen := map[reflect.Type]bool{}
	var out []reflect.Type
	for name, fn := range registry {
		if strings.Count(name, ".") != 2 {
			continue
		}
		r := fn.Type().In(0)
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
})

func implementers(t reflect.Type) []reflect.Type {
	var out []reflect.Type
	for _, r := range receivers() {
		if r.Implements(t) {
			out = append(out, r)
		}
	}
	return out
}

// constructors maps a type to the registry's functions whose first
// result it is (NewX and friends).
var constructors = sync.OnceValue(func() map[reflect.Type][]string {
	out := map[reflect.Type][]string{}
	for name, fn := range registry {
		ft := fn.Type()
		if strings.Count(name, ".") != 1 || ft.NumOut() == 0 || !strings.HasPrefix(name[strings.Index(name, ".")+1:], "New") {
			continue
		}
		out[ft.Out(0)] = append(out[ft.Out(0)], name)
	}
	for _, v := range out {
		sort.Strings(v)
	}
	return out
})

// construct calls a constructor of t with hostile arguments and returns
// its value when it accepted them.
func (g *gen) construct(t reflect.Type) (reflect.Value, bool) {
	names := constructors()[t]
	if len(names) == 0 || g.constructing[t] {
		return reflect.Value{}, false
	}
	name := names[g.choose(len(names))]
	g.constructing[t] = true
	defer delete(g.constructing, t)
	g.note("%v from %s:", t, name)
	outs := g.callWith(registry[name], false)
	if outs == nil {
		return reflect.Value{}, false
	}
	if last := outs[len(outs)-1]; last.Type() == errorType && !last.IsNil() {
		return reflect.Value{}, false
	}
	return outs[0], true
}

// nilSafe are the pointer types whose methods document what a nil
// receiver does. Other methods are not called on nil: as in the standard
// library, a method may assume its receiver exists. Zero values (&T{})
// and values from our constructors are tried for every receiver.
var nilSafe = map[string]bool{
	"*simulator.Faults": true, "*drift.Detector": true, "*drift.Stamper": true, "*drift.StaticHash": true,
	"*drift.Image": true, "*drift.Requirements": true, "*capi.Extension": true, "*capi.MachineUpdater": true,
	"*extensionserver.Server": true, "*preview.Prediction": true, "*gates.Concurrency": true,
}

// receiver makes a receiver of type t for a method call.
func (g *gen) receiver(t reflect.Type) reflect.Value {
	if t.Kind() != reflect.Pointer || nilSafe[t.String()] {
		return g.value(t)
	}
	if len(constructors()[t]) > 0 && g.choose(2) == 0 {
		if v, ok := g.construct(t); ok && !v.IsNil() {
			return v
		}
	}
	p := reflect.New(t.Elem())
	if g.choose(2) == 0 {
		g.note("%v: zero", t)
		return p
	}
	p.Elem().Set(g.value(t.Elem()))
	return p
}

// callWith calls fn with generated arguments. A panic inside is re-raised
// (the caller reports it); it returns nil when fn is not callable here.
// For a method expression the first argument is the receiver.
func (g *gen) callWith(fn reflect.Value, method bool) []reflect.Value {
	ft := fn.Type()
	args := make([]reflect.Value, ft.NumIn())
	for i := range args {
		at := ft.In(i)
		if i == 0 && method {
			args[0] = g.receiver(at)
			continue
		}
		if ft.IsVariadic() && i == ft.NumIn()-1 {
			n := g.choose(3)
			s := reflect.MakeSlice(at, n, n)
			for j := range n {
				s.Index(j).Set(g.value(at.Elem()))
			}
			args[i] = s
			continue
		}
		args[i] = g.value(at)
	}
	if ft.IsVariadic() {
		return fn.CallSlice(args)
	}
	return fn.Call(args)
}

// value makes a hostile value of type t.
func (g *gen) value(t reflect.Type) reflect.Value {
	if v, ok := g.special(t); ok {
		return v
	}
	if g.depth >= maxDepth {
		return reflect.Zero(t)
	}
	g.depth++
	defer func() { g.depth-- }()
	if len(constructors()[t]) > 0 && g.choose(3) == 0 {
		if v, ok := g.construct(t); ok {
			return v
		}
	}
	v := reflect.New(t).Elem()
	switch t.Kind() {
	case reflect.String:
		v.SetString(g.str())
	case reflect.Bool:
		v.SetBool(g.choose(2) == 1)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		x := []int64{0, -1, 1, 3, math.MinInt64, math.MaxInt64, 1 << 20}[g.choose(7)]
		if v.OverflowInt(x) {
			x = -1
		}
		v.SetInt(x)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		x := []uint64{0, 1, math.MaxUint64}[g.choose(3)]
		if v.OverflowUint(x) {
			x = 1
		}
		v.SetUint(x)
	case reflect.Float32, reflect.Float64:
		v.SetFloat([]float64{0, -1, math.NaN(), math.Inf(1), 1e300, 0.5}[g.choose(6)])
	case reflect.Pointer:
		if g.choose(3) == 0 {
			g.note("%v: nil", t)
			return v
		}
		p := reflect.New(t.Elem())
		p.Elem().Set(g.value(t.Elem()))
		return p
	case reflect.Map:
		switch g.choose(4) {
		case 0:
			return v
		case 1:
			return reflect.MakeMap(t)
		default:
			m := reflect.MakeMap(t)
			for range 1 + g.choose(3) {
				k := g.value(t.Key())
				if !k.IsValid() || !k.Type().Comparable() {
					continue
				}
				func() {
					defer func() { _ = recover() }() // unhashable dynamic key
					m.SetMapIndex(k, g.value(t.Elem()))
				}()
			}
			return m
		}
	case reflect.Slice:
		switch g.choose(5) {
		case 0:
			return v
		case 1:
			return reflect.MakeSlice(t, 0, 0)
		case 2:
			if g.huge {
				return v
			}
			// Many copies of one element: large inputs.
			g.huge = true
			n := g.scale(10000)
			if t.Elem().Size() > 256 {
				n = g.scale(500)
			}
			e := g.value(t.Elem())
			s := reflect.MakeSlice(t, n, n)
			for i := range n {
				s.Index(i).Set(e)
			}
			g.note("%v: %d copies", t, n)
			return s
		default:
			n := 1 + g.choose(3)
			s := reflect.MakeSlice(t, n, n)
			for i := range n {
				s.Index(i).Set(g.value(t.Elem()))
			}
			return s
		}
	case reflect.Array:
		for i := range t.Len() {
			v.Index(i).Set(g.value(t.Elem()))
		}
	case reflect.Struct:
		if g.choose(3) == 0 {
			g.note("%v: zero", t)
			return v
		}
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() {
				v.Field(i).Set(g.value(f.Type))
			}
		}
	case reflect.Func:
		if g.choose(2) == 0 {
			return v
		}
		return reflect.MakeFunc(t, func([]reflect.Value) []reflect.Value {
			outs := make([]reflect.Value, t.NumOut())
			for i := range outs {
				outs[i] = reflect.Zero(t.Out(i))
			}
			return outs
		})
	case reflect.Chan:
		if g.choose(2) == 0 {
			return v
		}
		return reflect.MakeChan(reflect.ChanOf(reflect.BothDir, t.Elem()), 1).Convert(t)
	}
	return v
}

// outcome of one hostile call.
type outcome struct {
	panicked any
	stack    []byte
	outs     []reflect.Value
	hung     bool
	desc     []string
	echoes   bool // an Error or Unwrap method: returns the caller's own data
}

// callHostile calls the entry point name with arguments made from data.
func callHostile(name string, data []byte, light bool) outcome {
	fn := registry[name]
	ctx, cancel := context.WithTimeout(context.Background(), ctxTimeout)
	defer cancel()
	g := &gen{data: data, ctx: ctx, constructing: map[reflect.Type]bool{}, light: light}
	done := make(chan outcome, 1)
	go func() {
		var o outcome
		defer func() {
			if r := recover(); r != nil {
				o.panicked, o.stack = r, debug.Stack()
			}
			o.desc = g.desc
			done <- o
		}()
		o.outs = g.callWith(fn, strings.Count(name, ".") == 2)
	}()
	select {
	case o := <-done:
		o.echoes = strings.HasSuffix(name, ".Unwrap") || strings.HasSuffix(name, ".Error")
		return o
	case <-time.After(callTimeout):
		return outcome{hung: true, desc: g.desc}
	}
}

// ours reports whether err can be told apart with errors.Is or
// errors.As: its chain holds one of our sentinels, a context error, or a
// typed error (ours, a Kubernetes API status, encoding/json's, ...),
// not only bare strings.
func ours(err error) bool {
	found := false
	var walk func(e error)
	walk = func(e error) {
		if e == nil || found {
			return
		}
		for _, s := range sentinels {
			if e == s {
				found = true
				return
			}
		}
		if e == context.DeadlineExceeded || e == context.Canceled || e == errHostile {
			found = true
			return
		}
		t := reflect.TypeOf(e)
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if strings.HasPrefix(t.PkgPath(), modulePath+"/") && t.PkgPath() != modulePath+"/internal/entrypoints" {
			found = true
			return
		}
		if _, ok := e.(apierrors.APIStatus); ok {
			found = true
			return
		}
		// A typed error of another package (encoding/json, io/fs, ...)
		// can be matched with errors.As; only bare strings cannot.
		switch reflect.TypeOf(e).String() {
		case "*errors.errorString", "*fmt.wrapError", "*fmt.wrapErrors", "*errors.joinError":
		default:
			found = true
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return found
}

// problem says what is wrong with an outcome, or "". Reading a returned
// error's message is part of the check: a panic there is ours too. The
// size of an error's message is not checked for Error and Unwrap methods:
// they render or return what the caller put in the error value.
func problem(o outcome) (p string) {
	defer func() {
		if r := recover(); r != nil {
			p = fmt.Sprintf("returned an error whose Error method panicked: %v\n%s", r, debug.Stack())
		}
	}()
	switch {
	case o.hung:
		return fmt.Sprintf("did not return within %v", callTimeout)
	case o.panicked != nil:
		return fmt.Sprintf("panicked: %v\n%s", o.panicked, o.stack)
	}
	for _, v := range o.outs {
		if v.Type() != errorType || v.IsNil() {
			continue
		}
		err := v.Interface().(error)
		if err.Error() == "" {
			return "returned an error with an empty message"
		}
		if !ours(err) {
			msg := err.Error()
			if len(msg) > 300 {
				msg = msg[:300] + "..."
			}
			return fmt.Sprintf("returned an error that is not ours (no sentinel or typed error of this module in its chain): %T: %s", err, msg)
		}
		if len(err.Error()) > 4096 && !o.echoes {
			msg := err.Error()
			return fmt.Sprintf("returned a %d-byte error message (truncate what it quotes): %.200s ... %s", len(msg), msg, msg[len(msg)-100:])
		}
	}
	return ""
}

func names() []string {
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// TestEntryPointsRefuseHostileInput calls every registered entry point
// with inputs drawn from a fixed seed: nil and zero values, huge strings
// and slices, cyclic and deeply nested maps, NaN, traversal paths, values
// made by our own constructors from hostile arguments. None may panic,
// hang, or return an error that is not ours.
func TestEntryPointsRefuseHostileInput(t *testing.T) {
	runs := 12
	if testing.Short() {
		runs = 3
	}
	var mu sync.Mutex
	failures := map[string]string{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, name := range names() {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			rng := rand.New(rand.NewPCG(uint64(len(name)), 7))
			for run := range runs {
				data := make([]byte, 64+rng.IntN(192))
				for i := range data {
					data[i] = byte(rng.Uint32())
				}
				if run == 0 {
					data = nil // every choice 0: nil and zero values
				}
				o := callHostile(name, data, false)
				if p := problem(o); p != "" {
					mu.Lock()
					failures[name] = fmt.Sprintf("%s\ninput %x\n%s", p, data, strings.Join(o.desc, "\n"))
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	var keys []string
	for k := range failures {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Errorf("%s %s", k, failures[k])
	}
	require.NotEmpty(t, registry)
}

// FuzzEntryPoints is TestEntryPointsRefuseHostileInput under the fuzzer:
// the first two bytes pick the entry point, the rest its arguments.
func FuzzEntryPoints(f *testing.F) {
	all := names()
	for i := range all {
		f.Add([]byte{byte(i >> 8), byte(i)})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		name := all[(int(data[0])<<8|int(data[1]))%len(all)]
		if p := problem(callHostile(name, data[2:], true)); p != "" {
			t.Fatalf("%s %s", name, p)
		}
	})
}
