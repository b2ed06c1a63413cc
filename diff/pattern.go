package diff

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/upgradekit/upgradekit/internal/errtext"
)

// Path patterns name places in the three objects. A pattern starts with the
// object ("machine", "bootstrap", "infrastructure", or "*" for any),
// optionally restricted to one kind with "(Kind)", followed by JSON field
// names separated by dots. List elements are "[*]"; "*" matches any one
// field; "**" matches any number of fields and elements; a field name with
// dots or slashes (a label key) is written ["name"]:
//
//	bootstrap.spec.files[*].content
//	infrastructure(AWSMachine).spec.ami
//	machine.metadata.annotations["cluster.x-k8s.io/paused"]
//	*.spec.**.imageTag
//
// A pattern for a template diff is written the same way: it is matched
// against the path below spec.template, so "machine.spec.version" also
// names a MachineSet's spec.template.spec.version.

type segKind uint8

const (
	segField segKind = iota // exact field name
	segStar                 // any one field
	segElem                 // any list element
	segDStar                // any number of segments
)

type segment struct {
	kind segKind
	name string
}

type pattern struct {
	text   string
	object Object
	anyObj bool
	kind   string
	segs   []segment
}

func parsePattern(text string) (pattern, error) {
	p := pattern{text: text}
	bad := func(format string, args ...any) (pattern, error) {
		return pattern{}, fmt.Errorf("%w: path pattern %s: %s", ErrInvalidOption, errtext.Quote(text), fmt.Sprintf(format, args...))
	}
	s := text
	// Object.
	end := strings.IndexAny(s, ".[(")
	if end < 0 {
		end = len(s)
	}
	obj := s[:end]
	s = s[end:]
	switch obj {
	case "*":
		p.anyObj = true
	case "":
		return bad("missing object (machine, bootstrap, infrastructure or *)")
	default:
		found := false
		for i, n := range objectNames {
			if n == obj {
				p.object, found = Object(i), true
			}
		}
		if !found {
			return bad("unknown object %s (want machine, bootstrap, infrastructure or *)", errtext.Quote(obj))
		}
	}
	if strings.HasPrefix(s, "(") {
		close := strings.IndexByte(s, ')')
		if close < 2 {
			return bad("unterminated or empty (Kind)")
		}
		p.kind = s[1:close]
		s = s[close+1:]
	}
	for s != "" {
		switch {
		case strings.HasPrefix(s, "[*]"):
			p.segs = append(p.segs, segment{kind: segElem})
			s = s[3:]
		case strings.HasPrefix(s, `["`):
			close := strings.Index(s[2:], `"]`)
			if close < 0 {
				return bad(`unterminated ["name"]`)
			}
			p.segs = append(p.segs, segment{kind: segField, name: s[2 : 2+close]})
			s = s[2+close+2:]
		case strings.HasPrefix(s, "."):
			s = s[1:]
			end := strings.IndexAny(s, ".[")
			if end < 0 {
				end = len(s)
			}
			name := s[:end]
			s = s[end:]
			switch name {
			case "":
				return bad("empty field name")
			case "*":
				p.segs = append(p.segs, segment{kind: segStar})
			case "**":
				p.segs = append(p.segs, segment{kind: segDStar})
			default:
				p.segs = append(p.segs, segment{kind: segField, name: name})
			}
		default:
			return bad("unexpected %q", s)
		}
	}
	return p, nil
}

// node is a trie node over pattern segments. Rules sit on the node where
// their pattern ends.
type node struct {
	fields map[string]*node
	star   *node
	elem   *node
	dstar  *node // child reached by "**": matches zero or more segments
	isDS   bool  // this node was reached by "**" and stays active below

	rules []*rule
}

func (n *node) child(s segment) *node {
	var slot **node
	switch s.kind {
	case segStar:
		slot = &n.star
	case segElem:
		slot = &n.elem
	case segDStar:
		slot = &n.dstar
	default:
		if n.fields == nil {
			n.fields = map[string]*node{}
		}
		if c := n.fields[s.name]; c != nil {
			return c
		}
		c := &node{}
		n.fields[s.name] = c
		return c
	}
	if *slot == nil {
		*slot = &node{isDS: s.kind == segDStar}
	}
	return *slot
}

// trie holds the rules of one object: those for any kind and those for a
// given kind.
type trie struct {
	any    *node
	byKind map[string]*node
}

func (t *trie) insert(p pattern, r *rule) {
	root := t.any
	if p.kind != "" {
		if t.byKind == nil {
			t.byKind = map[string]*node{}
		}
		if t.byKind[p.kind] == nil {
			t.byKind[p.kind] = &node{}
		}
		root = t.byKind[p.kind]
	}
	n := root
	for _, s := range p.segs {
		n = n.child(s)
	}
	n.rules = append(n.rules, r)
}

// activeSet is the set of trie nodes matching the path walked so far.
type activeSet []*node

// start returns the roots for an object of the given kind.
func (t *trie) start(dst activeSet, kind string) activeSet {
	dst = dst[:0]
	if t == nil {
		return dst
	}
	if t.any != nil {
		dst = addNode(dst, t.any)
	}
	if n := t.byKind[kind]; n != nil {
		dst = addNode(dst, n)
	}
	return dst
}

func addNode(dst activeSet, n *node) activeSet {
	dst = append(dst, n)
	if n.dstar != nil {
		dst = addNode(dst, n.dstar)
	}
	return dst
}

// descendField appends to dst the nodes reached from src by field name.
func descendField(dst, src activeSet, name string) activeSet {
	for _, n := range src {
		if n.isDS {
			dst = append(dst, n)
		}
		if c := n.fields[name]; c != nil {
			dst = addNode(dst, c)
		}
		if n.star != nil {
			dst = addNode(dst, n.star)
		}
	}
	return dst
}

// descendElem appends to dst the nodes reached from src by a list element.
func descendElem(dst, src activeSet) activeSet {
	for _, n := range src {
		if n.isDS {
			dst = append(dst, n)
		}
		if n.elem != nil {
			dst = addNode(dst, n.elem)
		}
	}
	return dst
}

// Pattern is a compiled path pattern, in the syntax described above, for
// matching changes outside a diff (a strategy deciding which changes an
// updater covers).
type Pattern struct {
	p pattern
}

// ParsePattern compiles a path pattern.
func ParsePattern(s string) (Pattern, error) {
	p, err := parsePattern(s)
	if err != nil {
		return Pattern{}, err
	}
	return Pattern{p: p}, nil
}

// String returns the pattern as written.
func (p Pattern) String() string { return p.p.text }

// Match reports whether the change lies at or below a path the pattern
// names: "bootstrap.spec.files" matches a change to
// bootstrap.spec.files[path=/etc/motd].content, not the other way round.
// List indices in the change's path match "[*]" (and "*"). For template
// diffs the pattern is matched below spec.template, as in options.
func (p Pattern) Match(c Change) bool {
	if !p.p.anyObj && p.p.object != c.Object {
		return false
	}
	if p.p.kind != "" && p.p.kind != c.Kind {
		return false
	}
	rel := c.rel()
	if rel == "" {
		rel = c.Path // a Change built by hand
	}
	if rel == "" {
		return matchPointer(p.p.segs, "", false)
	}
	return matchPointer(p.p.segs, strings.TrimPrefix(rel, "/"), true)
}

// matchPointer reports whether segs match a prefix of the tokens of an
// RFC 6901 pointer, read in place: rest is the pointer after its leading
// "/" and more says whether it still holds a token (an empty rest with
// more set is one empty token). It allocates only for a token with a "~"
// escape.
func matchPointer(segs []segment, rest string, more bool) bool {
	if len(segs) == 0 {
		return true
	}
	s := segs[0]
	if s.kind == segDStar {
		for {
			if matchPointer(segs[1:], rest, more) {
				return true
			}
			if !more {
				return false
			}
			_, rest, more = cutToken(rest)
		}
	}
	if !more {
		return false
	}
	tok, rest, more := cutToken(rest)
	switch s.kind {
	case segField:
		if strings.IndexByte(tok, '~') >= 0 {
			tok = unescapeToken(tok)
		}
		if s.name != tok {
			return false
		}
	case segElem:
		if !isInt(tok) {
			return false
		}
	}
	return matchPointer(segs[1:], rest, more)
}

// cutToken splits the first token (still escaped) off rest.
func cutToken(rest string) (tok, after string, more bool) {
	i := strings.IndexByte(rest, '/')
	if i < 0 {
		return rest, "", false
	}
	return rest[:i], rest[i+1:], true
}

// unescapeToken undoes RFC 6901's "~1" and "~0".
func unescapeToken(t string) string {
	return strings.NewReplacer("~1", "/", "~0", "~").Replace(t)
}

// maxIntDigits is the most decimal digits that always fit an int.
const maxIntDigits = 9 + 9*(strconv.IntSize/64)

// isInt reports whether strconv.Atoi accepts t (a list index in a path),
// without the error value Atoi allocates for the tokens it refuses.
func isInt(t string) bool {
	digits := t
	if len(digits) > 0 && (digits[0] == '+' || digits[0] == '-') {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > maxIntDigits {
		_, err := strconv.Atoi(t) // empty, or long enough to overflow: Atoi decides
		return err == nil
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return false
		}
	}
	return true
}
