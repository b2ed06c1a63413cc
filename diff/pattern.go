package diff

import (
	"fmt"
	"strconv"
	"strings"
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
		return pattern{}, fmt.Errorf("%w: path pattern %s: %s", ErrInvalidOption, quote(text), fmt.Sprintf(format, args...))
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
			return bad("unknown object %s (want machine, bootstrap, infrastructure or *)", quote(obj))
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
	return matchPrefix(p.p.segs, parsePointer(rel))
}

// matchPrefix reports whether segs match a prefix of toks.
func matchPrefix(segs []segment, toks []string) bool {
	if len(segs) == 0 {
		return true
	}
	s := segs[0]
	if s.kind == segDStar {
		for i := 0; i <= len(toks); i++ {
			if matchPrefix(segs[1:], toks[i:]) {
				return true
			}
		}
		return false
	}
	if len(toks) == 0 {
		return false
	}
	switch s.kind {
	case segField:
		if s.name != toks[0] {
			return false
		}
	case segElem:
		if _, err := strconv.Atoi(toks[0]); err != nil {
			return false
		}
	}
	return matchPrefix(segs[1:], toks[1:])
}
