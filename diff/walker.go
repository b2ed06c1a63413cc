package diff

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// frame is one step of the path being walked. It holds one pointer (the
// name): frames are written on every step, and while the GC marks, every
// pointer slot written costs a write barrier.
type frame struct {
	name    string // field name, for fields
	idx     int    // the element's index
	key     int32  // 1 + index in walker.keyed for a keyed element, else 0
	elem    bool   // a list element
	noRules bool   // template prefix: shown in paths, not matched by rules
}

// keyInfo is a keyed list element, for its readable selector.
type keyInfo struct {
	keys []string
	keyT reflect.Value  // typed keyed element
	keyU map[string]any // unstructured keyed element
}

// walker compares one object. It is reused through a pool, so its slices
// keep their capacity and an equal comparison allocates nothing.
type walker struct {
	cfg      *config
	obj      Object
	kind     string
	first    bool // stop at the first difference
	found    bool
	changes  []Change // scratch: the changes of all objects of a walk
	frames   []frame
	keyed    []keyInfo // the keyed elements among frames
	act      []activeSet
	depth    int          // len(act)-1
	cls      [2]activeSet // scratch for classify
	classKey []byte       // scratch for classifyCached
	buf      []byte       // scratch for paths
	err      error
	maxDepth int
	prefix   int // number of template prefix frames

	// lazyCheck: the inputs' JSON data was not checked up front; the walk
	// checks what it visits and skips, and sets gap when it leaves a value
	// unchecked (an ignored path), so the caller checks the inputs whole.
	lazyCheck bool
	gap       bool

	// boxed holds the strings last boxed into changes' values, for
	// boxString; boxNext is the slot to overwrite next.
	boxed   [4]any
	boxNext uint8
}

// maxBoxedLen bounds the strings boxString remembers, so that the pooled
// walker keeps no large value alive.
const maxBoxedLen = 64

// boxString returns s as a change's value. The changes of a fleet repeat a
// few values (versions, images, the same file on every machine), so the
// last few boxed strings are reused: a boxed string is immutable, changes
// can share it, and one less allocation each.
func (w *walker) boxString(s string) any {
	if len(s) > maxBoxedLen {
		return s
	}
	for _, v := range w.boxed {
		if x, ok := v.(string); ok && x == s {
			return v
		}
	}
	v := any(s)
	w.boxed[w.boxNext%uint8(len(w.boxed))] = v
	w.boxNext++
	return v
}

// scopeAllows limits the comparison to spec, metadata.labels and
// metadata.annotations: status and the rest of metadata are never compared.
func (w *walker) scopeAllows(name string) bool {
	switch len(w.frames) - w.prefix {
	case 0:
		return inRootScope(name)
	case 1:
		if w.frames[w.prefix].name == "metadata" {
			return inMetaScope(name)
		}
	}
	return true
}

// inRootScope and inMetaScope are the scope: the root's members compared,
// and metadata's. Typed plans list their fields in scope by them
// (typePlan.rootScope, metaScope).
func inRootScope(name string) bool { return name == "spec" || name == "metadata" }

func inMetaScope(name string) bool { return name == "labels" || name == "annotations" }

func (w *walker) reset(cfg *config, obj Object, kind string, first bool) {
	w.cfg, w.obj, w.kind, w.first = cfg, obj, kind, first
	w.found, w.err = false, nil
	w.lazyCheck, w.gap = false, false
	w.frames = w.frames[:0]
	clear(w.keyed)
	w.keyed = w.keyed[:0]
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
	if k := w.frames[len(w.frames)-1].key; k != 0 {
		w.keyed[k-1] = keyInfo{}
		w.keyed = w.keyed[:k-1]
	}
	w.frames = w.frames[:len(w.frames)-1]
	w.depth--
}

// setKey records the key of the element just entered.
func (w *walker) setKey(k keyInfo) {
	w.keyed = append(w.keyed, k)
	w.frames[len(w.frames)-1].key = int32(len(w.keyed))
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

func (w *walker) strict() bool { return w.cfg.strictAll || w.has(ruleStrictEmpty) }

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
	// Built in place: a Change is large, copies cost.
	w.changes = append(w.changes, Change{})
	c := &w.changes[len(w.changes)-1]
	c.Object, c.Kind, c.Op, c.Old, c.New, c.reveal = w.obj, w.kind, op, old, new, w.cfg.reveal
	c.strict, c.strictNum = w.strict(), w.cfg.strictNum
	r := w.classifyCached()
	if r.path != "" {
		// The path has no list element and no template prefix: rendered
		// once per Differ and shared (strings are immutable).
		c.Path, c.Field = r.path[:r.np], r.path[r.np:]
	} else {
		w.paths(c)
	}
	below := r.below
	c.Category, c.Sensitive = r.cat, r.sensitive
	if c.reveal || c.Sensitive {
		return
	}
	secret, ctx := r.secret, r.sctx
	if !r.secretKnown {
		secret, ctx = w.secretPath()
	}
	if secret {
		c.Sensitive = true
		return
	}
	// Sensitive values below the change's path (a whole file added) are
	// redacted inside the value: by the Sensitive patterns, then by name.
	redOld, redNew := old, new
	if len(below) > 0 {
		redOld, redNew = redactValue(old, below), redactValue(new, below)
	}
	redOld, redNew = redactNamed(redOld, ctx), redactNamed(redNew, ctx)
	if !sameData(redOld, old) || !sameData(redNew, new) {
		c.Sensitive, c.partial = true, true
		c.red = &redacted{old: redOld, new: redNew}
	}
}

// paths sets the change's Path, rel, ListPath and Field. They are written
// into the walker's scratch buffer and become one string, which the four
// share: one allocation per change.
func (w *walker) paths(c *Change) {
	b := w.buf[:0]
	relStart, listEnd := 0, -1
	for i, f := range w.frames {
		if i == w.prefix {
			relStart = len(b)
		}
		if f.elem && listEnd < 0 {
			listEnd = len(b)
		}
		b = appendPointerToken(b, f)
	}
	if w.prefix >= len(w.frames) {
		relStart = len(b)
	}
	np := len(b)
	b = w.appendField(b)
	w.buf = b
	all := string(b)
	c.Path, c.Field = all[:np], all[np:]
	if w.prefix > 0 {
		c.relOff = uint32(relStart)
	}
	if listEnd >= 0 {
		c.ListPath = c.Path[:listEnd]
	}
}

// needsEscape reports whether a field name has "~" or "/", which RFC 6901
// escapes.
func needsEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '~' || c == '/' {
			return true
		}
	}
	return false
}

// needsQuote reports whether a field name must be written ["name"] in a
// readable path.
func needsQuote(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '.', '[', ']', '/', ' ':
			return true
		}
	}
	return false
}

// appendPointerToken appends "/" and the frame's RFC 6901 token.
func appendPointerToken(b []byte, f frame) []byte {
	b = append(b, '/')
	if f.elem {
		return strconv.AppendInt(b, int64(f.idx), 10)
	}
	if !needsEscape(f.name) {
		return append(b, f.name...)
	}
	for i := 0; i < len(f.name); i++ {
		switch c := f.name[i]; c {
		case '~':
			b = append(b, '~', '0')
		case '/':
			b = append(b, '~', '1')
		default:
			b = append(b, c)
		}
	}
	return b
}

// field renders the readable path.
func (w *walker) field() string { return string(w.appendField(nil)) }

// appendField appends the readable path.
func (w *walker) appendField(b []byte) []byte {
	b = append(b, w.obj.String()...)
	for _, f := range w.frames {
		if !f.elem {
			if needsQuote(f.name) {
				b = append(b, `["`...)
				b = append(b, f.name...)
				b = append(b, `"]`...)
			} else {
				b = append(b, '.')
				b = append(b, f.name...)
			}
			continue
		}
		b = append(b, '[')
		if f.key != 0 && len(w.keyed[f.key-1].keys) > 0 {
			b = w.keyed[f.key-1].appendSelector(b)
		} else {
			b = strconv.AppendInt(b, int64(f.idx), 10)
		}
		b = append(b, ']')
	}
	return b
}

// appendSelector appends the element's keys, "k1=v1,k2=v2".
func (f *keyInfo) appendSelector(b []byte) []byte {
	for i, k := range f.keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, k...)
		b = append(b, '=')
		switch {
		case f.keyU != nil:
			b = appendScalarText(b, f.keyU[k])
		case f.keyT.IsValid():
			b = appendTypedKeyText(b, f.keyT, k)
		}
	}
	return b
}

// classResult is the classification of one path.
type classResult struct {
	cat       Category
	sensitive bool
	below     activeSet // classification rules active below the path
	// path is the change's Path and Field as one string, np the length
	// of Path, for a path with neither list elements nor a template
	// prefix (the cache key then determines it); "" otherwise.
	path string
	np   int
	// secret and sctx are secretPath's answer, when secretKnown: the path
	// has no list element right below an extraArgs field, whose key or
	// name secretPath reads; otherwise only field names, which the cache
	// key holds, and element steps decide it.
	secret      bool
	sctx        secretCtx
	secretKnown bool
}

// classCache memoises classify per object, kind and path (list indices
// left out: rules cannot tell elements apart). Machines of one cluster
// share their schema, so a few hundred paths cover them; the cache stops
// growing at maxClassCache entries.
type classCache struct {
	mu sync.RWMutex
	m  map[string]*classResult
}

const maxClassCache = 4096

// classifyCached is classify through the Differ's cache. The result is
// shared: it must not be changed.
func (w *walker) classifyCached() *classResult {
	k := w.classKey[:0]
	k = append(k, byte(w.obj))
	k = binary.AppendUvarint(k, uint64(len(w.kind)))
	k = append(k, w.kind...)
	for _, f := range w.frames {
		switch {
		case f.noRules:
		case f.elem:
			k = append(k, 0) // a length below is never 0
		default:
			k = binary.AppendUvarint(k, uint64(len(f.name))+1)
			k = append(k, f.name...)
		}
	}
	w.classKey = k
	cc := &w.cfg.classes
	cc.mu.RLock()
	r, ok := cc.m[string(k)]
	cc.mu.RUnlock()
	if ok {
		return r
	}
	cat, sensitive, below := w.classify()
	r = &classResult{cat: cat, sensitive: sensitive, below: slices.Clone(below)}
	argsElem := false
	for i, f := range w.frames {
		if f.elem && i > 0 && isExtraArgs(w.frames[i-1].name) {
			argsElem = true
		}
	}
	if !argsElem {
		// The template prefix's steps (spec, template), which the key
		// leaves out, are no names secretPath looks for.
		r.secret, r.sctx = w.secretPath()
		r.secretKnown = true
	}
	if w.prefix == 0 && !slices.ContainsFunc(w.frames, func(f frame) bool { return f.elem }) {
		var c Change
		w.paths(&c)
		r.path, r.np = c.Path+c.Field, len(c.Path)
	}
	cc.mu.Lock()
	if cc.m == nil {
		cc.m = map[string]*classResult{}
	}
	if len(cc.m) < maxClassCache {
		cc.m[string(k)] = r
	}
	cc.mu.Unlock()
	return r
}

// classify finds the category and sensitivity of the current path, and
// returns the classification rules active there (for values below it). The
// set lives in the walker's scratch space until the next call.
func (w *walker) classify() (Category, bool, activeSet) {
	t := &w.cfg.classify[w.obj]
	set := t.start(w.cls[0], w.kind)
	w.cls[0] = set
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
	cur := 0
	for _, f := range w.frames {
		if f.noRules {
			continue
		}
		if len(set) == 0 {
			break // nothing below can match
		}
		next := w.cls[1-cur][:0]
		if f.elem {
			next = descendElem(next, set)
		} else {
			next = descendField(next, set, f.name)
		}
		cur = 1 - cur
		w.cls[cur] = next
		set = next
		visit(set)
	}
	if best == nil {
		return CategoryOther, sensitive, set
	}
	return best.category, sensitive, set
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
					out = maps.Clone(x)
				}
				out[k] = r
			}
		}
		if out != nil {
			return out
		}
	case []any:
		elemSet := descendElem(nil, set)
		return mapElems(x, func(e any) any { return redactValue(e, elemSet) })
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
	if len(cs) < 2 {
		return
	}
	slices.SortStableFunc(cs, func(a, b Change) int {
		switch {
		case a.Object != b.Object:
			return cmp.Compare(a.Object, b.Object)
		case lessPointer(a.Path, b.Path):
			return -1
		case lessPointer(b.Path, a.Path):
			return 1
		}
		return 0
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

// appendScalarText appends a scalar for a readable key selector.
func appendScalarText(b []byte, v any) []byte {
	switch x := v.(type) {
	case string:
		return append(b, x...)
	case nil:
		return b
	case int64:
		return strconv.AppendInt(b, x, 10)
	default:
		return fmt.Append(b, x)
	}
}
