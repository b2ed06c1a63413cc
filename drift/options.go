package drift

import (
	"fmt"
	"strings"

	"github.com/upgradekit/upgradekit/internal/errtext"
)

// Option configures a Hasher. Options compose: Options is itself an Option,
// so a caller can keep a named set of options and pass it along with others.
type Option interface {
	apply(*config) error
}

// Options is a list of options applied in order; it is itself an Option.
type Options []Option

func (o Options) apply(c *config) error {
	for _, opt := range o {
		if opt == nil {
			continue
		}
		if err := opt.apply(c); err != nil {
			return err
		}
	}
	return nil
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	root         *pathNode
	keepZero     bool
	slicesAsSets bool
	noTags       bool
	// noMemWalk keeps the hash walk on reflection (tests compare the
	// memory walk against it).
	noMemWalk bool
}

// IgnorePaths leaves the values at the given paths out of the hash, as if
// they were absent. A path is a dot-separated list of JSON field names or
// map keys relative to the hashed value, e.g. "metadata.annotations" or
// "spec.taints[*].timeAdded": package diff's path syntax, relative to the
// hashed value. List elements are transparent: a path that goes through a
// list applies to every element, so the "[*]" step may be left out
// ("spec.taints.timeAdded" is the same path) and an element cannot be
// singled out ("[key=x]" is an error). The segment "*" matches any single
// field or key. Struct fields tagged `hash:"ignore"` are always
// ignored as well.
func IgnorePaths(paths ...string) Option {
	return optionFunc(func(c *config) error {
		for _, p := range paths {
			n, err := c.root.insert(p)
			if err != nil {
				return err
			}
			n.ignore = true
		}
		return nil
	})
}

// SetPaths declares the lists at the given paths (same syntax as
// IgnorePaths) to be sets: order and duplicates do not change the hash.
// Struct fields tagged `hash:"set"` are always hashed as sets.
func SetPaths(paths ...string) Option {
	return optionFunc(func(c *config) error {
		for _, p := range paths {
			n, err := c.root.insert(p)
			if err != nil {
				return err
			}
			n.set = true
		}
		return nil
	})
}

// SlicesAsSets hashes every list as a set, like hashstructure's
// SlicesAsSets option that Karpenter uses.
func SlicesAsSets() Option {
	return optionFunc(func(c *config) error { c.slicesAsSets = true; return nil })
}

// KeepZeroValues turns zero-value folding off. By default a zero value
// (nil, "", 0, false, an empty map or list, an object whose fields are all
// zero) hashes exactly like an absent one, so nil and empty maps, and nil
// and pointer-to-zero, do not differ. With KeepZeroValues the hash follows
// the JSON form instead: null, {} and [] are values, and fields tagged
// omitempty are omitted only when JSON would omit them.
func KeepZeroValues() Option {
	return optionFunc(func(c *config) error { c.keepZero = true; return nil })
}

// KeepZeroEntries declares the maps at the given paths (same syntax as
// IgnorePaths) to be presence-significant: an entry whose value is zero
// ("", 0, false, null) still counts, so {"role": ""} differs from {}.
// Use it for label and annotation maps when an empty label value matters.
// Without it, zero-value folding treats such an entry as absent, which is
// what makes a typed struct and its unstructured form hash equal.
func KeepZeroEntries(paths ...string) Option {
	return optionFunc(func(c *config) error {
		for _, p := range paths {
			n, err := c.root.insert(p)
			if err != nil {
				return err
			}
			n.keepEntries = true
		}
		return nil
	})
}

// IgnoreHashTags makes the hasher disregard `hash:"..."` struct tags.
func IgnoreHashTags() Option {
	return optionFunc(func(c *config) error { c.noTags = true; return nil })
}

// pathNode is a compiled trie of path options. Wildcard rules are merged
// into their exact siblings at build time, so a lookup at hash time is one
// map access and never has to follow two branches.
type pathNode struct {
	children    map[string]*pathNode
	wildcard    *pathNode
	ignore      bool
	set         bool
	keepEntries bool
}

func (n *pathNode) insert(path string) (*pathNode, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: empty path", ErrInvalidOption)
	}
	cur := n
	for _, seg := range strings.Split(path, ".") {
		// diff's list step: lists are transparent here, so "taints[*]" is
		// "taints"; a list element cannot be singled out.
		for strings.HasSuffix(seg, "[*]") {
			seg = strings.TrimSuffix(seg, "[*]")
		}
		if strings.ContainsAny(seg, "[]") {
			return nil, fmt.Errorf("%w: path %s: drift cannot select list elements (lists are transparent: a path through a list applies to every element); write [*] or leave the step out", ErrInvalidOption, errtext.Quote(path))
		}
		if seg == "" {
			return nil, fmt.Errorf("%w: path %s has an empty segment", ErrInvalidOption, errtext.Quote(path))
		}
		if seg == "*" {
			if cur.wildcard == nil {
				cur.wildcard = &pathNode{}
			}
			cur = cur.wildcard
			continue
		}
		if cur.children == nil {
			cur.children = map[string]*pathNode{}
		}
		next, ok := cur.children[seg]
		if !ok {
			next = &pathNode{}
			cur.children[seg] = next
		}
		cur = next
	}
	return cur, nil
}

// finalize merges each wildcard subtree into the exact siblings, so that
// child() can pick one node.
func (n *pathNode) finalize() {
	if n == nil {
		return
	}
	if n.wildcard != nil {
		for _, c := range n.children {
			c.mergeFrom(n.wildcard)
		}
		n.wildcard.finalize()
	}
	for _, c := range n.children {
		c.finalize()
	}
}

func (n *pathNode) mergeFrom(o *pathNode) {
	n.ignore = n.ignore || o.ignore
	n.set = n.set || o.set
	n.keepEntries = n.keepEntries || o.keepEntries
	if o.wildcard != nil {
		if n.wildcard == nil {
			n.wildcard = &pathNode{}
		}
		n.wildcard.mergeFrom(o.wildcard)
	}
	for k, oc := range o.children {
		if n.children == nil {
			n.children = map[string]*pathNode{}
		}
		c, ok := n.children[k]
		if !ok {
			c = &pathNode{}
			n.children[k] = c
		}
		c.mergeFrom(oc)
	}
}

func (n *pathNode) empty() bool {
	return n == nil || (len(n.children) == 0 && n.wildcard == nil && !n.ignore && !n.set && !n.keepEntries)
}

// child returns the rules for the field or key name under n, or nil when
// no rule applies below it.
func (n *pathNode) child(name string) *pathNode {
	if n == nil {
		return nil
	}
	if c, ok := n.children[name]; ok {
		return c
	}
	return n.wildcard
}
