package diff

import (
	"fmt"
)

// Option tunes a diff. Options compose: a preset such as
// KubeadmControlPlane is itself an Option made of smaller ones.
type Option interface {
	apply(*config)
}

// Options is a list of options applied in order; it is itself an Option.
type Options []Option

func (o Options) apply(c *config) {
	for _, opt := range o {
		if opt != nil {
			opt.apply(c)
		}
	}
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type ruleKind uint8

const (
	ruleIgnore ruleKind = iota
	ruleListKey
	ruleStrictEmpty
	ruleDefault
	ruleOrdered
	ruleSensitive
	ruleCategory
)

type rule struct {
	kind     ruleKind
	pattern  string
	order    int // lower wins; user options come before built-in defaults
	keys     []string
	value    any
	category Category
}

// TransformFunc rewrites the JSON forms of one object's current and desired
// values before they are compared, for normalisations that are not a matter
// of single paths (KubeadmControlPlane's "compare InitConfiguration as
// JoinConfiguration"). It receives private copies and may change them in
// place. Objects with a transform are always compared in their JSON form.
type TransformFunc func(current, desired map[string]any) error

type transform struct {
	name string
	fn   TransformFunc
}

type config struct {
	compare    [numObjects]trie // ignore, list keys, strict empty, defaults, ordered
	classify   [numObjects]trie // categories, sensitivity
	transforms [numObjects][]transform
	classes    classCache // classify's results, filled as diffs run
	reveal     bool
	ordered    bool
	strictAll  bool // StrictEmpty() without patterns: everywhere
	strictNum  bool // StrictNumbers(): integers differ from floats
	maxDepth   int
	order      int
	errs       []error
	prefix     string // Under's: prepended to every pattern
}

func (c *config) addRule(kind ruleKind, text string, r rule) {
	if c.prefix != "" {
		text = c.prefix + "." + text
	}
	p, err := parsePattern(text)
	if err != nil {
		c.errs = append(c.errs, err)
		return
	}
	r.kind, r.pattern, r.order = kind, text, c.order
	c.order++
	rp := &r
	tries := &c.compare
	if kind == ruleSensitive || kind == ruleCategory {
		tries = &c.classify
	}
	for o := Object(0); o < numObjects; o++ {
		if p.anyObj || p.object == o {
			if tries[o].any == nil {
				tries[o].any = &node{}
			}
			tries[o].insert(p, rp)
		}
	}
}

// Under applies opts with prefix in front of every pattern they name: a
// caller that knows its values only from inside an object writes patterns
// relative to it. strategy.DriftDiffer applies its options under
// "infrastructure.spec", so they name fields as drift reports them
// ("spec.taints", not "infrastructure.spec.spec.taints"). Under nests
// (prefixes join with "."); prefix must be a pattern itself, such as
// "infrastructure.spec" or "bootstrap(KubeadmConfig).spec".
func Under(prefix string, opts ...Option) Option {
	return optionFunc(func(c *config) {
		if prefix == "" {
			c.errs = append(c.errs, fmt.Errorf("%w: Under: empty prefix", ErrInvalidOption))
			return
		}
		saved := c.prefix
		if saved != "" {
			c.prefix = saved + "." + prefix
		} else {
			c.prefix = prefix
		}
		defer func() { c.prefix = saved }()
		Options(opts).apply(c)
	})
}

// Ignore leaves the values at these paths, and everything below them, out of
// the comparison.
func Ignore(patterns ...string) Option {
	return optionFunc(func(c *config) {
		for _, p := range patterns {
			c.addRule(ruleIgnore, p, rule{})
		}
	})
}

// ListKey matches the elements of the list at pattern by the values of the
// named fields instead of by index, so inserting one element reports one
// added element. With no keys the list is a set of scalars, matched by value.
// A list whose elements repeat a key is compared by index.
func ListKey(pattern string, keys ...string) Option {
	return optionFunc(func(c *config) {
		c.addRule(ruleListKey, pattern, rule{keys: append([]string(nil), keys...)})
	})
}

// ListIndex compares the list at pattern by index, overriding a ListKey
// (including a built-in one).
func ListIndex(pattern string) Option {
	return optionFunc(func(c *config) { c.addRule(ruleListKey, pattern, rule{keys: nil, value: indexMarker{}}) })
}

type indexMarker struct{}

// StrictEmpty makes an empty value (empty string, list or object) at these
// paths differ from an absent one (a pattern ending in ".**" covers a
// whole subtree). By default they are the
// same, as omitempty makes them on the wire; Kubernetes has a few places
// where the difference matters, such as a kubeadm nodeRegistration.taints
// of [] (no taints) against absent (the default control-plane taint).
//
// Without patterns it applies everywhere: the comparison is then as strict
// as go-cmp's on JSON data ("" against absent, [] against absent, {} against
// absent and {"a": {}} against absent all differ), which is how Cluster API
// compares after an in-place extension's patches (see InPlaceUpdate). Under
// it, a value that becomes "" is a replacement, not a removal, and the
// patches (JSONPatch, MergePatch) write the empty value rather than delete
// the field, so applying them gives exactly the desired value. An explicit
// JSON null still equals absent.
func StrictEmpty(patterns ...string) Option {
	return optionFunc(func(c *config) {
		if len(patterns) == 0 {
			c.strictAll = true
		}
		for _, p := range patterns {
			c.addRule(ruleStrictEmpty, p, rule{})
		}
	})
}

// StrictNumbers makes an integer differ from a float of the same value, as
// go-cmp tells an int64 from a float64 in unstructured content: 8 against
// 8.0 (or 8e0) is a change, and so is 0 against -0.0. Raw JSON is decoded
// as Kubernetes decodes it (a literal with neither fraction nor exponent
// that fits in an int64 is an integer, any other number a float); Go
// integers are integers and Go floats floats. By default numbers are
// compared by value only. Two floats are still compared by value (-0.0
// equals 0.0), and so are two integers, exactly (2^53+1 differs from
// 2^53). A number never equals a string ("8").
//
// Patches (JSONPatch, MergePatch, PatchOps) then keep the kind: a float is
// written with a fraction or an exponent ("8.0", not encoding/json's "8"),
// so that the patched object decodes to exactly desired's numbers. As
// Cluster API re-marshals the current object with encoding/json before it
// applies a patch, which turns an integral float into an integer, a patch
// also rewrites such floats of current's spec in their float form; a set
// of changes with nothing to patch still gives an empty patch. InPlaceUpdate
// includes StrictNumbers.
func StrictNumbers() Option {
	return optionFunc(func(c *config) { c.strictNum = true })
}

// Default makes an absent or empty value at pattern equal to value, for
// fields an API server or webhook defaults (CAPI defaults a KubeadmConfig's
// format to "cloud-config"). value must be JSON data: string, bool, float64,
// int64, []any or map[string]any.
func Default(pattern string, value any) Option {
	return optionFunc(func(c *config) {
		if err := checkJSONData(value, 0); err != nil {
			c.errs = append(c.errs, fmt.Errorf("%w: Default(%q): %v", ErrInvalidOption, pattern, err))
			return
		}
		c.addRule(ruleDefault, pattern, rule{value: normalizeJSON(value)})
	})
}

// OrderedLists makes a change of order in keyed lists a change (reported as
// a replacement of the whole list), as CAPI's own comparisons, which match
// lists by index, see it. Without patterns it applies to every keyed list.
func OrderedLists(patterns ...string) Option {
	return optionFunc(func(c *config) {
		if len(patterns) == 0 {
			c.ordered = true
		}
		for _, p := range patterns {
			c.addRule(ruleOrdered, p, rule{})
		}
	})
}

// Sensitive marks the values at these paths, and below them, as secret:
// String and JSON show a digest instead of the value.
func Sensitive(patterns ...string) Option {
	return optionFunc(func(c *config) {
		for _, p := range patterns {
			c.addRule(ruleSensitive, p, rule{})
		}
	})
}

// Categorize classifies changes at these paths, and below them, as cat.
// User rules take precedence over the built-in table (DefaultCategories);
// among user rules the first one given wins.
func Categorize(cat Category, patterns ...string) Option {
	return optionFunc(func(c *config) {
		for _, p := range patterns {
			c.addRule(ruleCategory, p, rule{category: cat})
		}
	})
}

// Transform registers a normalisation of one object's JSON forms, run
// before the comparison (see TransformFunc).
func Transform(obj Object, name string, fn TransformFunc) Option {
	return optionFunc(func(c *config) {
		if obj >= numObjects || fn == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: Transform %q: bad object or nil func", ErrInvalidOption, name))
			return
		}
		c.transforms[obj] = append(c.transforms[obj], transform{name: name, fn: fn})
	})
}

// ShowSecrets makes String, JSON and Change.Shown give sensitive values in
// full: the one way to turn redaction off. Use it only where the output is
// as protected as the objects themselves.
func ShowSecrets() Option { return optionFunc(func(c *config) { c.reveal = true }) }

// MaxDepth bounds how deeply values may nest (default 100); deeper values,
// such as cyclic ones, are an ErrTooDeep error.
func MaxDepth(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("%w: MaxDepth(%d): must be at least 1", ErrInvalidOption, n))
			return
		}
		c.maxDepth = n
	})
}

// WithoutDefaults drops the built-in list keys, categories and sensitive
// paths, for callers who want to declare every rule themselves. It must come
// first. Secrets by name (see the package doc) are still redacted.
func WithoutDefaults() Option { return withoutDefaults{} }

type withoutDefaults struct{}

func (withoutDefaults) apply(*config) {}
