package diff

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/upgradekit/upgradekit/internal/reflectx"
)

// State is one side of a machine: its three objects. Each may be a typed Go
// struct (pointer or value, e.g. *clusterv1.Machine, *bootstrapv1.KubeadmConfig),
// *unstructured.Unstructured, map[string]any, raw JSON ([]byte or
// json.RawMessage) or runtime.RawExtension, the form CAPI's hooks use.
// Bootstrap may be nil on both sides (a Machine with a data secret only).
type State struct {
	Machine        any
	Bootstrap      any
	Infrastructure any
}

func (s State) get(o Object) any {
	switch o {
	case ObjectMachine:
		return s.Machine
	case ObjectBootstrap:
		return s.Bootstrap
	default:
		return s.Infrastructure
	}
}

// Differ is a compiled set of options. It is safe for concurrent use;
// compile once and reuse it on hot paths: it remembers how it classified
// each field path (at most 4,096 of them), so comparing many machines of
// one schema gets cheaper after the first.
type Differ struct {
	cfg  config
	pool sync.Pool
}

// New compiles options into a Differ. The built-in list keys, sensitive
// paths and categories apply after the given options (which therefore take
// precedence) unless WithoutDefaults is among them.
func New(opts ...Option) (*Differ, error) {
	d := &Differ{}
	d.cfg.maxDepth = 100
	Options(opts).apply(&d.cfg)
	noDefaults := false
	for _, o := range opts {
		if _, ok := o.(withoutDefaults); ok {
			noDefaults = true
		}
	}
	if !noDefaults {
		defaultOptions().apply(&d.cfg)
	}
	if len(d.cfg.errs) > 0 {
		return nil, errors.Join(d.cfg.errs...)
	}
	d.pool.New = func() any { return &walker{} }
	return d, nil
}

var (
	defaultOnce   sync.Once
	defaultDiffer *Differ
)

func differFor(opts []Option) (*Differ, error) {
	if len(opts) == 0 {
		defaultOnce.Do(func() { defaultDiffer, _ = New() })
		return defaultDiffer, nil
	}
	return New(opts...)
}

// Machines diffs two machines: Machine, bootstrap config and infrastructure
// machine. Only spec, metadata.labels and metadata.annotations are compared.
//
// Without options everything there counts, including the fields a
// provider fills in for a running machine (its providerID, instance ID,
// the names of its own infrastructure and bootstrap objects; see
// AssignedPaths): right for "is anything different at all?", wrong for
// "what will Cluster API do?". To ask whether a machine can be updated in
// place, as Cluster API will, pass InPlaceProposal (desired built by you)
// or InPlaceUpdate (desired from a Cluster API request); for what makes a
// MachineDeployment or a KubeadmControlPlane roll, MachineDeploymentRollout
// or KubeadmControlPlane.
func Machines(current, desired State, opts ...Option) (ChangeSet, error) {
	d, err := differFor(opts)
	if err != nil {
		return ChangeSet{}, err
	}
	return d.Machines(current, desired)
}

// Templates diffs machine templates: the Machine side is a MachineSet or
// MachineDeployment, the others a bootstrap config template and an
// infrastructure machine template. Their spec.template parts are compared
// with the same rules as Machines (patterns name paths below spec.template).
func Templates(current, desired State, opts ...Option) (ChangeSet, error) {
	d, err := differFor(opts)
	if err != nil {
		return ChangeSet{}, err
	}
	return d.Templates(current, desired)
}

// Objects diffs one object of a machine.
func Objects(obj Object, current, desired any, opts ...Option) (ChangeSet, error) {
	d, err := differFor(opts)
	if err != nil {
		return ChangeSet{}, err
	}
	return d.Objects(obj, current, desired)
}

// Equal reports whether two machines have no changes. It stops at the first
// difference and, for typed inputs, allocates nothing.
func Equal(current, desired State, opts ...Option) (bool, error) {
	d, err := differFor(opts)
	if err != nil {
		return false, err
	}
	return d.Equal(current, desired)
}

// Machines is the Differ form of the package-level Machines.
func (d *Differ) Machines(current, desired State) (ChangeSet, error) {
	return d.run(current, desired, false, false)
}

// Templates is the Differ form of the package-level Templates.
func (d *Differ) Templates(current, desired State) (ChangeSet, error) {
	return d.run(current, desired, true, false)
}

// Objects is the Differ form of the package-level Objects.
func (d *Differ) Objects(obj Object, current, desired any) (ChangeSet, error) {
	if obj >= numObjects {
		return ChangeSet{}, newErr(obj, "", "", ErrWrongKind, "unknown object")
	}
	var cur, des State
	switch obj {
	case ObjectMachine:
		cur.Machine, des.Machine = current, desired
	case ObjectBootstrap:
		cur.Bootstrap, des.Bootstrap = current, desired
	default:
		cur.Infrastructure, des.Infrastructure = current, desired
	}
	cs, _, err := d.walk(cur, des, walkMode{needSpec: true})
	return cs, err
}

// specInScope refuses two objects of which neither has a spec: the diff
// compares spec, metadata.labels and metadata.annotations only, so such
// objects (a ConfigMap, say) would always compare as "no changes".
func specInScope(obj Object, cur, des input) error {
	has := func(in input) bool {
		if in.typed.IsValid() {
			_, ok := in.typed.Type().FieldByName("Spec")
			return ok
		}
		_, ok := in.data["spec"]
		return ok
	}
	if !cur.isNil() && !des.isNil() && !has(cur) && !has(des) {
		return newErr(obj, "", "spec", ErrWrongKind, "neither object has a spec: the diff compares spec, metadata.labels and metadata.annotations only, so it would find no changes whatever differs")
	}
	return nil
}

// EqualTemplates reports whether two sets of templates (see Templates)
// have no changes, stopping at the first difference.
func EqualTemplates(current, desired State, opts ...Option) (bool, error) {
	d, err := differFor(opts)
	if err != nil {
		return false, err
	}
	return d.EqualTemplates(current, desired)
}

// EqualTemplates is the Differ form of the package-level EqualTemplates.
func (d *Differ) EqualTemplates(current, desired State) (bool, error) {
	_, found, err := d.walk(current, desired, walkMode{templates: true, first: true})
	return err == nil && !found, err
}

// Equal is the Differ form of the package-level Equal.
func (d *Differ) Equal(current, desired State) (bool, error) {
	_, found, err := d.walk(current, desired, walkMode{first: true})
	return err == nil && !found, err
}

func (d *Differ) run(current, desired State, templates, first bool) (ChangeSet, error) {
	cs, _, err := d.walk(current, desired, walkMode{templates: templates, first: first})
	return cs, err
}

// walkMode says what walk compares and how.
type walkMode struct {
	templates bool // compare spec.template (Templates)
	first     bool // stop at the first difference (Equal)
	needSpec  bool // refuse objects without a spec (Objects; specInScope)
}

// walk compares every object of the two states. With first set it stops at
// the first difference and reports it through found.
func (d *Differ) walk(current, desired State, mode walkMode) (cs ChangeSet, found bool, err error) {
	templates, first := mode.templates, mode.first
	if d == nil || d.pool.New == nil {
		return ChangeSet{}, false, fmt.Errorf("%w: Differ not constructed with New", ErrInvalidOption)
	}
	w := d.pool.Get().(*walker)
	defer d.pool.Put(w)
	var curs, dess [numObjects]doc
	w.changes = w.changes[:0] // every object's changes; copied out at the end
	defer func() {
		clear(w.changes) // do not keep the values alive in the pool
		w.changes = w.changes[:0]
	}()
	// Unstructured inputs must hold nothing but JSON data, anywhere (status
	// included). Checking them is a walk over both objects; for a plain
	// diff the comparison walks most of them anyway, so it checks what it
	// visits and what it skips (out of scope), and marks anything it
	// leaves unchecked. On any error, or a gap, the inputs are checked
	// whole first, in the order readInput checks them, so the errors are
	// the same as when they are checked up front, which templates (only
	// spec.template is walked), transforms (they see the data first) and
	// depth limits beyond checkJSONData's still do. Equal, which stops at
	// the first difference, checks the inputs whole when it finds one.
	lazy := lazyChecks && !templates && d.cfg.maxDepth <= maxJSONDepth
	for o := Object(0); o < numObjects; o++ {
		lazyO := lazy && len(d.cfg.transforms[o]) == 0
		cur, err := readInputCheck(o, "current", current.get(o), !lazyO)
		if err != nil {
			return ChangeSet{}, false, err
		}
		des, err := readInputCheck(o, "desired", desired.get(o), !lazyO)
		if err != nil {
			return ChangeSet{}, false, firstErr(cur.checkIfUnchecked(), err)
		}
		if cur.isNil() && des.isNil() {
			continue
		}
		if mode.needSpec {
			if err := specInScope(o, cur, des); err != nil {
				return ChangeSet{}, false, firstErr(cur.checkIfUnchecked(), des.checkIfUnchecked(), err)
			}
		}
		if err := checkPair(o, cur, des, templates); err != nil {
			return ChangeSet{}, false, firstErr(cur.checkIfUnchecked(), des.checkIfUnchecked(), err)
		}
		if len(d.cfg.transforms[o]) > 0 {
			if cur, des, err = d.transform(o, cur, des); err != nil {
				return ChangeSet{}, false, err
			}
		}
		curs[o], dess[o] = docOf(cur), docOf(des)
		w.reset(&d.cfg, o, des.kind, first)
		w.lazyCheck = cur.unchecked || des.unchecked
		if templates {
			w.enterPrefix("spec")
			w.enterPrefix("template")
		}
		compareRoots(w, cur, des, templates)
		if w.err != nil || w.gap {
			if err := firstErr(cur.checkIfUnchecked(), des.checkIfUnchecked(), w.err); err != nil {
				return ChangeSet{}, false, err
			}
		}
		if first && w.found {
			// The walk stopped early: what it did not reach is unchecked.
			if err := firstErr(cur.checkIfUnchecked(), des.checkIfUnchecked()); err != nil {
				return ChangeSet{}, false, err
			}
			return ChangeSet{}, true, nil
		}
	}
	if len(w.changes) == 0 {
		return ChangeSet{}, false, nil
	}
	sortChanges(w.changes)
	return ChangeSet{Changes: slices.Clone(w.changes), docs: &documents{cur: curs, des: dess, templates: templates, strictNum: d.cfg.strictNum}}, true, nil
}

// lazyChecks lets the walk check unstructured inputs as it goes (see
// Differ.walk); tests turn it off to compare with checking up front.
var lazyChecks = true

// checkIfUnchecked checks the input's data if readInput did not.
func (in input) checkIfUnchecked() error {
	if !in.unchecked {
		return nil
	}
	return in.check()
}

// firstErr returns the first non-nil error.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// compareRoots compares the two roots (for templates, their spec.template).
func compareRoots(w *walker, cur, des input, templates bool) {
	if cur.typed.IsValid() && des.typed.IsValid() && cur.typed.Type() == des.typed.Type() {
		a, b := cur.typed, des.typed
		p := cur.plan
		aOK, bOK := true, true
		if templates {
			for _, name := range []string{"spec", "template"} {
				a, aOK = typedChild(a, p, name, aOK)
				b, bOK = typedChild(b, p, name, bOK)
				p = childPlan(p, name)
				if p == nil {
					w.fail(ErrWrongKind, "%s has no field %q", cur.typed.Type(), name)
					return
				}
			}
		}
		w.cmpTyped(a, b, aOK, bOK, p)
		return
	}
	a, err := cur.asData()
	if err != nil {
		w.fail(ErrUnsupportedValue, "current: %v", err)
		return
	}
	b, err := des.asData()
	if err != nil {
		w.fail(ErrUnsupportedValue, "desired: %v", err)
		return
	}
	var av, bv any = a, b
	if templates {
		av, bv = dataAt(a, "spec", "template"), dataAt(b, "spec", "template")
	}
	w.cmpData(av, bv)
}

func childPlan(p *typePlan, name string) *typePlan {
	if p == nil || p.kind != reflect.Struct {
		return nil
	}
	i, ok := p.byName[name]
	if !ok {
		return nil
	}
	return p.fields[i].plan
}

func typedChild(v reflect.Value, p *typePlan, name string, ok bool) (reflect.Value, bool) {
	if !ok || p == nil || p.kind != reflect.Struct {
		return reflect.Value{}, false
	}
	i, found := p.byName[name]
	if !found {
		return reflect.Value{}, false
	}
	fp := &p.fields[i]
	f, ok := reflectx.FieldByIndex(v, fp.index)
	return f, ok && present(f, fp)
}

func dataAt(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}

// input is one object as given, read into a typed value or JSON data.
type input struct {
	typed reflect.Value // addressable struct
	plan  *typePlan     // typed's plan
	data  map[string]any
	kind  string
	obj   Object
	side  string
	// unchecked: data was not checked for values with no JSON form.
	unchecked bool
}

func (in input) isNil() bool { return !in.typed.IsValid() && in.data == nil }

func (in input) asData() (map[string]any, error) {
	if in.data != nil || !in.typed.IsValid() {
		return in.data, nil
	}
	d, err := toJSONData(in.typed.Addr().Interface())
	if err != nil {
		return nil, err
	}
	m, ok := d.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s is not a JSON object", in.typed.Type())
	}
	return m, nil
}

var (
	typeMetaType = reflect.TypeFor[metav1.TypeMeta]()
	typeMetaKind = func() int {
		f, _ := typeMetaType.FieldByName("Kind")
		return f.Index[0]
	}()
)

func readInput(obj Object, side string, v any) (input, error) {
	return readInputCheck(obj, side, v, true)
}

// readInputCheck is readInput; with validate false, JSON data is not
// checked here but marked unchecked, for the walk to check as it goes
// (see Differ.walk).
func readInputCheck(obj Object, side string, v any, validate bool) (input, error) {
	in := input{obj: obj, side: side}
	bad := func(err error, format string, args ...any) (input, error) {
		return input{}, newErr(obj, side, "", err, format, args...)
	}
	switch x := v.(type) {
	case nil:
		return in, nil
	case *unstructured.Unstructured:
		if x == nil || x.Object == nil {
			return in, nil
		}
		in.data = x.Object
	case unstructured.Unstructured:
		if x.Object == nil {
			return in, nil
		}
		in.data = x.Object
	case map[string]any:
		if x == nil {
			return in, nil
		}
		in.data = x
	case json.RawMessage:
		return readInputCheck(obj, side, []byte(x), validate)
	case []byte:
		if len(strings.TrimSpace(string(x))) == 0 {
			return in, nil
		}
		d, err := decodeJSON(x)
		if err != nil {
			return bad(ErrInvalidJSON, "%v", err)
		}
		m, ok := d.(map[string]any)
		if !ok {
			if d == nil {
				return in, nil
			}
			return bad(ErrInvalidJSON, "want a JSON object, got %T", d)
		}
		in.data = m
	case runtime.RawExtension:
		return readRaw(obj, side, &x, validate)
	case *runtime.RawExtension:
		return readRaw(obj, side, x, validate)
	default:
		rv := reflect.ValueOf(v)
		if rv.Kind() == reflect.Pointer {
			if rv.IsNil() {
				return in, nil
			}
			rv = rv.Elem()
		} else {
			cp := reflect.New(rv.Type()).Elem()
			cp.Set(rv)
			rv = cp
		}
		if rv.Kind() != reflect.Struct {
			return bad(ErrUnsupportedValue, "%T is not an object (want a struct, unstructured, map or JSON)", v)
		}
		in.typed = rv
		in.plan = planFor(rv.Type())
		in.kind = typedKind(rv, in.plan)
		return in, nil
	}
	if !validate {
		in.unchecked = true
	} else if err := in.check(); err != nil {
		return input{}, err
	}
	in.kind, _ = in.data["kind"].(string)
	return in, nil
}

// check reports the first value in the input's JSON data that is not JSON
// data.
func (in input) check() error {
	if err := checkJSONData(in.data, 0); err != nil {
		return newErr(in.obj, in.side, "", dataErrKind(err), "%v", err)
	}
	return nil
}

// dataErrKind is the sentinel for checkJSONData's error: ErrTooDeep for
// nesting past its bound (a cyclic value among them), ErrUnsupportedValue
// for the rest.
func dataErrKind(err error) error {
	if errors.Is(err, ErrTooDeep) {
		return ErrTooDeep
	}
	return ErrUnsupportedValue
}

func readRaw(obj Object, side string, x *runtime.RawExtension, validate bool) (input, error) {
	if x == nil {
		return input{obj: obj, side: side}, nil
	}
	if len(x.Raw) > 0 {
		return readInputCheck(obj, side, x.Raw, validate)
	}
	if x.Object != nil {
		return readInputCheck(obj, side, x.Object, validate)
	}
	return input{obj: obj, side: side}, nil
}

// typedKind is the kind in TypeMeta if set, else the Go type's name.
func typedKind(v reflect.Value, p *typePlan) string {
	if p.typeMeta >= 0 {
		if k := v.Field(p.typeMeta).Field(typeMetaKind).String(); k != "" {
			return k
		}
	}
	return p.name
}

func checkPair(o Object, cur, des input, templates bool) error {
	if cur.isNil() != des.isNil() {
		side := "current"
		if des.isNil() {
			side = "desired"
		}
		return newErr(o, side, "", ErrNilObject, "present on one side only")
	}
	for _, in := range []input{cur, des} {
		if in.kind == "" {
			continue
		}
		isTemplate := strings.HasSuffix(in.kind, "Template")
		switch {
		case o == ObjectMachine && !templates && in.kind != "Machine":
			return newErr(o, in.side, "", ErrWrongKind, "want a Machine, got %s (use Templates for MachineSets and MachineDeployments)", in.kind)
		case o == ObjectMachine && templates && in.kind != "MachineSet" && in.kind != "MachineDeployment":
			return newErr(o, in.side, "", ErrWrongKind, "want a MachineSet or MachineDeployment, got %s", in.kind)
		case o != ObjectMachine && templates && !isTemplate:
			return newErr(o, in.side, "", ErrWrongKind, "want a template kind, got %s", in.kind)
		case o != ObjectMachine && !templates && isTemplate:
			return newErr(o, in.side, "", ErrWrongKind, "got the template kind %s (use Templates)", in.kind)
		}
	}
	if cur.kind != "" && des.kind != "" && cur.kind != des.kind && o != ObjectMachine {
		return newErr(o, "", "", ErrKindMismatch, "current is %s, desired is %s", cur.kind, des.kind)
	}
	sameRole := templates && o == ObjectMachine // a MachineSet against a MachineDeployment
	if cur.typed.IsValid() && des.typed.IsValid() && cur.typed.Type() != des.typed.Type() && cur.kind != des.kind && !sameRole {
		return newErr(o, "", "", ErrKindMismatch, "current is %s, desired is %s", cur.typed.Type(), des.typed.Type())
	}
	return nil
}

func (d *Differ) transform(o Object, cur, des input) (input, input, error) {
	a, err := cur.asData()
	if err != nil {
		return cur, des, newErr(o, "current", "", ErrUnsupportedValue, "%v", err)
	}
	b, err := des.asData()
	if err != nil {
		return cur, des, newErr(o, "desired", "", ErrUnsupportedValue, "%v", err)
	}
	a, _ = deepCopyData(a).(map[string]any)
	b, _ = deepCopyData(b).(map[string]any)
	for _, t := range d.cfg.transforms[o] {
		if err := t.fn(a, b); err != nil {
			return cur, des, newErr(o, "", "", ErrInvalidOption, "transform %s: %v", t.name, err)
		}
	}
	cur.typed, cur.data = reflect.Value{}, a
	des.typed, des.data = reflect.Value{}, b
	return cur, des, nil
}
