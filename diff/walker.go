package diff

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// frame is one step of the path being walked.
type frame struct {
	name    string // field name, for fields
	elem    bool   // a list element
	idx     int    // the element's index
	keys    []string
	keyT    reflect.Value  // typed keyed element, for the readable selector
	keyU    map[string]any // unstructured keyed element
	noRules bool           // template prefix: shown in paths, not matched by rules
}

// walker compares one object. It is reused through a pool, so its slices
// keep their capacity and an equal comparison allocates nothing.
type walker struct {
	cfg      *config
	obj      Object
	kind     string
	first    bool // stop at the first difference
	found    bool
	changes  []Change
	frames   []frame
	act      []activeSet
	depth    int // len(act)-1
	err      error
	maxDepth int
	prefix   int // number of template prefix frames
}

// scopeAllows limits the comparison to spec, metadata.labels and
// metadata.annotations: status and the rest of metadata are never compared.
func (w *walker) scopeAllows(name string) bool {
	switch len(w.frames) - w.prefix {
	case 0:
		return name == "spec" || name == "metadata"
	case 1:
		if w.frames[w.prefix].name == "metadata" {
			return name == "labels" || name == "annotations"
		}
	}
	return true
}

func (w *walker) reset(cfg *config, obj Object, kind string, first bool) {
	w.cfg, w.obj, w.kind, w.first = cfg, obj, kind, first
	w.found, w.err = false, nil
	w.changes = w.changes[:0]
	w.frames = w.frames[:0]
	w.prefix = 0
	w.maxDepth = cfg.maxDepth
	if len(w.act) == 0 {
		w.act = append(w.act, nil)
	}
	// w.act keeps its length and every set its capacity across walks.
	w.act[0] = cfg.compare[obj].start(w.act[0], kind)
	w.depth = 0
}

// done reports whether the walk should stop.
func (w *walker) done() bool { return w.err != nil || (w.first && w.found) }

func (w *walker) top() activeSet { return w.act[w.depth] }

func (w *walker) pushAct() activeSet {
	w.depth++
	if w.depth == len(w.act) {
		w.act = append(w.act, nil)
	}
	return w.act[w.depth][:0]
}

// enterField pushes a field step; it returns false when the field is ignored
// or the walk is too deep (w.err is then set).
func (w *walker) enterField(name string) bool {
	w.frames = append(w.frames, frame{name: name})
	next := w.pushAct()
	if src := w.act[w.depth-1]; len(src) > 0 {
		next = descendField(next, src, name)
	}
	w.act[w.depth] = next
	return w.checkEnter()
}

// enterElem pushes a list element step.
func (w *walker) enterElem(idx int) bool {
	w.frames = append(w.frames, frame{elem: true, idx: idx})
	next := w.pushAct()
	if src := w.act[w.depth-1]; len(src) > 0 {
		next = descendElem(next, src)
	}
	w.act[w.depth] = next
	return w.checkEnter()
}

// enterPrefix pushes a template prefix step that rules do not see.
func (w *walker) enterPrefix(name string) {
	w.frames = append(w.frames, frame{name: name, noRules: true})
	w.prefix++
}

func (w *walker) checkEnter() bool {
	if len(w.frames) > w.maxDepth {
		w.fail(ErrTooDeep, "more than %d levels (a cyclic value?)", w.maxDepth)
		return false
	}
	return !w.has(ruleIgnore)
}

func (w *walker) leave() {
	w.frames = w.frames[:len(w.frames)-1]
	w.depth--
}

func (w *walker) fail(err error, format string, args ...any) {
	if w.err == nil {
		w.err = newErr(w.obj, "", w.field(), err, format, args...)
	}
}

// has reports whether a rule of this kind applies exactly here.
func (w *walker) has(kind ruleKind) bool {
	for _, n := range w.top() {
		for _, r := range n.rules {
			if r.kind == kind {
				return true
			}
		}
	}
	return false
}

// lookup returns the winning rule of this kind here, or nil.
func (w *walker) lookup(kind ruleKind) *rule {
	var best *rule
	for _, n := range w.top() {
		for _, r := range n.rules {
			if r.kind == kind && (best == nil || r.order < best.order) {
				best = r
			}
		}
	}
	return best
}

func (w *walker) strict() bool { return w.has(ruleStrictEmpty) }

func (w *walker) ordered() bool { return w.cfg.ordered || w.has(ruleOrdered) }

// listKeys returns the keys of the list here; keyed is false for a list
// compared by index.
func (w *walker) listKeys() (keys []string, keyed bool) {
	r := w.lookup(ruleListKey)
	if r == nil {
		return nil, false
	}
	if _, idx := r.value.(indexMarker); idx {
		return nil, false
	}
	return r.keys, true
}

// emit records a difference at the current path. old and new are JSON data.
func (w *walker) emit(op Op, old, new any) {
	w.found = true
	if w.first {
		return
	}
	c := Change{
		Object: w.obj,
		Kind:   w.kind,
		Path:   w.pointer(len(w.frames)),
		Field:  w.field(),
		Op:     op,
		Old:    old,
		New:    new,
		reveal: w.cfg.reveal,
	}
	c.rel = c.Path
	if w.prefix > 0 {
		c.rel = c.Path[len(w.pointer(w.prefix)):]
	}
	for i, f := range w.frames {
		if f.elem {
			c.ListPath = w.pointer(i)
			break
		}
	}
	c.Category, c.Sensitive = w.classify()
	if !c.Sensitive && !c.reveal {
		// Sensitive values below the change's path (a whole file added)
		// are redacted inside the value.
		redOld, redNew := w.redactBelow(old), w.redactBelow(new)
		if !sameData(redOld, old) || !sameData(redNew, new) {
			c.Sensitive, c.partial = true, true
			c.redOld, c.redNew = redOld, redNew
		}
	}
	w.changes = append(w.changes, c)
}

// pointer renders the first n frames as an RFC 6901 pointer.
func (w *walker) pointer(n int) string {
	var b strings.Builder
	for _, f := range w.frames[:n] {
		b.WriteByte('/')
		if f.elem {
			b.WriteString(strconv.Itoa(f.idx))
			continue
		}
		b.WriteString(escapePointer(f.name))
	}
	return b.String()
}

// field renders the readable path.
func (w *walker) field() string {
	var b strings.Builder
	b.WriteString(w.obj.String())
	for _, f := range w.frames {
		if !f.elem {
			if strings.ContainsAny(f.name, ".[]/ ") {
				b.WriteString(`["`)
				b.WriteString(f.name)
				b.WriteString(`"]`)
			} else {
				b.WriteByte('.')
				b.WriteString(f.name)
			}
			continue
		}
		b.WriteByte('[')
		if sel := f.selector(); sel != "" {
			b.WriteString(sel)
		} else {
			b.WriteString(strconv.Itoa(f.idx))
		}
		b.WriteByte(']')
	}
	return b.String()
}

func (f frame) selector() string {
	if len(f.keys) == 0 {
		return ""
	}
	parts := make([]string, 0, len(f.keys))
	for _, k := range f.keys {
		var v string
		switch {
		case f.keyU != nil:
			v = scalarText(f.keyU[k])
		case f.keyT.IsValid():
			v = typedKeyText(f.keyT, k)
		}
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ",")
}

// classify finds the category and sensitivity of the current path.
func (w *walker) classify() (Category, bool) {
	t := &w.cfg.classify[w.obj]
	set := t.start(nil, w.kind)
	var best *rule
	sensitive := false
	visit := func(s activeSet) {
		for _, n := range s {
			for _, r := range n.rules {
				switch r.kind {
				case ruleCategory:
					if best == nil || r.order < best.order {
						best = r
					}
				case ruleSensitive:
					sensitive = true
				}
			}
		}
	}
	visit(set)
	for _, f := range w.frames {
		if f.noRules {
			continue
		}
		var next activeSet
		if f.elem {
			next = descendElem(nil, set)
		} else {
			next = descendField(nil, set, f.name)
		}
		set = next
		visit(set)
	}
	if best == nil {
		return CategoryOther, sensitive
	}
	return best.category, sensitive
}

// redactBelow returns v with values under sensitive paths below the
// current path replaced by their digest.
func (w *walker) redactBelow(v any) any {
	if v == nil {
		return nil
	}
	t := &w.cfg.classify[w.obj]
	set := t.start(nil, w.kind)
	for _, f := range w.frames {
		if f.noRules {
			continue
		}
		if f.elem {
			set = descendElem(nil, set)
		} else {
			set = descendField(nil, set, f.name)
		}
	}
	return redactValue(v, set)
}

func redactValue(v any, set activeSet) any {
	if len(set) == 0 {
		return v
	}
	for _, n := range set {
		for _, r := range n.rules {
			if r.kind == ruleSensitive {
				return Redact(v)
			}
		}
	}
	switch x := v.(type) {
	case map[string]any:
		var out map[string]any
		for k, e := range x {
			r := redactValue(e, descendField(nil, set, k))
			if !sameData(r, e) {
				if out == nil {
					out = make(map[string]any, len(x))
					for k2, e2 := range x {
						out[k2] = e2
					}
				}
				out[k] = r
			}
		}
		if out != nil {
			return out
		}
	case []any:
		var out []any
		for i, e := range x {
			r := redactValue(e, descendElem(nil, set))
			if !sameData(r, e) {
				if out == nil {
					out = append([]any(nil), x...)
				}
				out[i] = r
			}
		}
		if out != nil {
			return out
		}
	}
	return v
}

// sameData reports whether a and b are the identical value (not a deep
// comparison: used to notice that redaction replaced something).
func sameData(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		return ok && reflect.ValueOf(x).UnsafePointer() == reflect.ValueOf(y).UnsafePointer()
	case []any:
		y, ok := b.([]any)
		return ok && len(x) == len(y) && (len(x) == 0 || &x[0] == &y[0])
	default:
		return a == b
	}
}

func escapePointer(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// sortChanges orders changes by object, then path with indices compared as
// numbers, so typed and unstructured inputs give the same order.
func sortChanges(cs []Change) {
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].Object != cs[j].Object {
			return cs[i].Object < cs[j].Object
		}
		return lessPointer(cs[i].Path, cs[j].Path)
	})
}

func lessPointer(a, b string) bool {
	for a != "" && b != "" {
		var ta, tb string
		ta, a = nextToken(a)
		tb, b = nextToken(b)
		if ta == tb {
			continue
		}
		na, errA := strconv.Atoi(ta)
		nb, errB := strconv.Atoi(tb)
		if errA == nil && errB == nil {
			return na < nb
		}
		return ta < tb
	}
	return len(a) < len(b)
}

func nextToken(p string) (tok, rest string) {
	p = strings.TrimPrefix(p, "/")
	if i := strings.IndexByte(p, '/'); i >= 0 {
		return p[:i], p[i:]
	}
	return p, ""
}

// scalarText renders a scalar for a readable key selector.
func scalarText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return ""
	default:
		return fmt.Sprint(x)
	}
}
