package diff

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/upgradekit/upgradekit/internal/errtext"
)

// Object names which of a machine's three objects a change belongs to.
type Object uint8

const (
	// ObjectMachine is the CAPI Machine (or, for templates, the MachineSet or
	// MachineDeployment's spec.template).
	ObjectMachine Object = iota
	// ObjectBootstrap is the bootstrap config (KubeadmConfig, or the
	// KubeadmConfigTemplate's spec.template).
	ObjectBootstrap
	// ObjectInfrastructure is the infrastructure machine (AWSMachine,
	// DockerMachine... or the infrastructure template's spec.template).
	ObjectInfrastructure
	numObjects
)

var objectNames = [numObjects]string{"machine", "bootstrap", "infrastructure"}

// String names the object as field paths begin: machine, bootstrap or
// infrastructure.
func (o Object) String() string {
	if o < numObjects {
		return objectNames[o]
	}
	return fmt.Sprintf("object(%d)", uint8(o))
}

// MarshalText encodes the object as its name.
func (o Object) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// UnmarshalText decodes an object name.
func (o *Object) UnmarshalText(b []byte) error {
	for i, n := range objectNames {
		if n == string(b) {
			*o = Object(i)
			return nil
		}
	}
	return fmt.Errorf("%w: unknown object %s", ErrInvalidOption, errtext.Quote(string(b)))
}

// Op is what happened to a value, named after RFC 6902's operations.
type Op string

const (
	// OpAdd: absent (or empty) in current, present in desired.
	OpAdd Op = "add"
	// OpRemove: present in current, absent (or empty) in desired.
	OpRemove Op = "remove"
	// OpReplace: present on both sides with different values.
	OpReplace Op = "replace"
)

// Category classifies a change for accept/decline decisions. The built-in
// table (see DefaultCategories) is data; add rules with WithCategories.
type Category string

// Built-in categories.
const (
	CategoryKubernetesVersion  Category = "KubernetesVersion"
	CategoryEtcdVersion        Category = "EtcdVersion"
	CategoryAddons             Category = "Addons" // CoreDNS, kube-proxy
	CategoryControlPlaneConfig Category = "ControlPlaneConfig"
	CategoryKubeletConfig      Category = "KubeletConfig"
	CategoryKubeadmConfig      Category = "KubeadmConfig" // the rest of init/join configuration
	CategoryFiles              Category = "Files"
	CategoryCommands           Category = "Commands"
	CategoryUsers              Category = "Users" // users, passwords, SSH keys
	CategoryNTP                Category = "NTP"
	CategoryDisks              Category = "Disks" // disk setup, mounts
	CategoryImage              Category = "InfrastructureImage"
	CategoryInstanceType       Category = "InfrastructureSize"
	CategoryFailureDomain      Category = "FailureDomain"
	CategoryMetadata           Category = "Metadata" // labels and annotations only
	CategoryReferences         Category = "References"
	CategoryOther              Category = "Other"
)

// Change is one difference between current and desired.
type Change struct {
	// Object is the object the change belongs to.
	Object Object `json:"object"`

	// Private fields sit here to fill what would be padding.
	reveal    bool
	partial   bool   // only parts of the values are sensitive: show red
	strict    bool   // compared under StrictEmpty: patches copy desired exactly
	strictNum bool   // compared under StrictNumbers: floats are shown as floats
	relOff    uint32 // Path[relOff:] is the path below a template's spec.template

	// Kind is the object's kind when known (Machine, KubeadmConfig,
	// AWSMachine...).
	Kind string `json:"kind,omitempty"`
	// Path is an RFC 6901 JSON pointer from the object's root, e.g.
	// "/spec/files/2/content". Inside a keyed list the index is the
	// element's index in current (in desired for an added element).
	Path string `json:"path"`
	// Field is the readable path, with list elements named by their key:
	// "bootstrap.spec.files[path=/etc/kubernetes/audit.yaml].content".
	Field string `json:"field"`
	// Op is add, remove or replace.
	Op Op `json:"op"`
	// Old is the current value as JSON data (nil for add).
	Old any `json:"-"`
	// New is the desired value as JSON data (nil for remove).
	New any `json:"-"`
	// Category is what kind of change this is.
	Category Category `json:"category"`
	// Sensitive marks values that String and MarshalJSON show only as a
	// digest (file contents, passwords, SSH keys, tokens).
	Sensitive bool `json:"sensitive,omitempty"`
	// ListPath, when the change lies inside a list, is the JSON pointer of
	// the outermost list on its path. Patches replace that list whole.
	ListPath string `json:"-"`

	red *redacted // when partial
}

// redacted holds a change's values with their sensitive parts replaced.
type redacted struct{ old, new any }

// rel is the path below a template's spec.template, or Path; "" for a
// change at the template's root.
func (c *Change) rel() string {
	if int(c.relOff) > len(c.Path) { // a copy whose Path was edited
		return c.Path
	}
	return c.Path[c.relOff:]
}

// String renders the change for a log line:
//
//	bootstrap.spec.files[path=/etc/motd].content: replace "a" -> "b" (Files)
func (c Change) String() string {
	var b strings.Builder
	b.WriteString(c.Field)
	b.WriteString(": ")
	b.WriteString(string(c.Op))
	b.WriteByte(' ')
	old, new := c.shown()
	switch c.Op {
	case OpAdd:
		b.WriteString(show(new))
	case OpRemove:
		b.WriteString(show(old))
	default:
		b.WriteString(show(old))
		b.WriteString(" -> ")
		b.WriteString(show(new))
	}
	b.WriteString(" (")
	b.WriteString(string(c.Category))
	b.WriteByte(')')
	return b.String()
}

// Shown returns the change's old and new values as String and
// MarshalJSON show them: secrets replaced by their digest (see Redact and
// Sensitive), unless the diff ran with ShowSecrets. Old and New hold the
// real values, for patches; give Shown's to anything a person reads.
func (c Change) Shown() (old, new any) { return c.shown() }

// shown returns the values as String and MarshalJSON show them. Under
// StrictNumbers floats keep a float form (8.0), so that a change of kind
// alone does not read "8 -> 8".
func (c Change) shown() (old, new any) {
	old, new = c.shownValues()
	if c.strictNum {
		old, new = floatForms(old), floatForms(new)
	}
	return old, new
}

func (c Change) shownValues() (old, new any) {
	switch {
	case !c.Sensitive || c.reveal:
		return c.Old, c.New
	case c.partial && c.red != nil:
		return c.red.old, c.red.new
	}
	if c.Old != nil {
		old = Redact(c.Old)
	}
	if c.New != nil {
		new = Redact(c.New)
	}
	return old, new
}

func show(v any) string {
	if s, ok := v.(string); ok && strings.HasPrefix(s, "<redacted ") {
		return s
	}
	return compactJSON(v, 120)
}

// MarshalJSON encodes the change with old and new values, redacted when
// sensitive unless the diff was run with ShowSecrets.
func (c Change) MarshalJSON() ([]byte, error) {
	type plain Change
	out := struct {
		plain
		Old any `json:"old,omitempty"`
		New any `json:"new,omitempty"`
	}{plain: plain(c)}
	out.Old, out.New = c.shown()
	return json.Marshal(out)
}

// Redact returns a short, stable digest of a value in place of the value:
// "<redacted sha256:1a2b3c4d, 42 bytes>". Equal values give equal digests, so
// a reader can still tell whether two redacted values are the same.
func Redact(v any) string {
	if v == nil {
		return "null"
	}
	var raw []byte
	if s, ok := v.(string); ok {
		raw = []byte(s)
	} else if cyclic(v, map[uintptr]bool{}) {
		// encoding/json would descend 1,000 levels before refusing it.
		return "<redacted cyclic value>"
	} else {
		raw, _ = json.Marshal(v)
	}
	sum := sha256.Sum256(raw)
	return fmt.Sprintf("<redacted sha256:%s, %d bytes>", hex.EncodeToString(sum[:4]), len(raw))
}

func compactJSON(v any, limit int) string {
	var b strings.Builder
	if !writeJSON(&b, v, limit) {
		// Not JSON data (NaN, a func in a hand-built Change): never print
		// the value itself, fmt would recurse through a cycle.
		return fmt.Sprintf("<%T: not JSON data>", v)
	}
	if b.Len() > limit {
		cut := b.String()[:limit]
		for !utf8.ValidString(cut) {
			cut = cut[:len(cut)-1]
		}
		return cut + "…"
	}
	return b.String()
}

// writeJSON writes v as compact JSON (map keys sorted, HTML not escaped,
// as encoding/json with SetEscapeHTML(false)), and stops once b holds more
// than limit bytes: the lists and maps of unstructured data are walked
// here, so a huge or cyclic value costs no more than the bytes shown
// (every level writes at least one). Other values are encoded whole by
// encoding/json. It reports false for what is not JSON data.
func writeJSON(b *strings.Builder, v any, limit int) bool {
	if b.Len() > limit {
		return true
	}
	switch t := v.(type) {
	case []any:
		b.WriteByte('[')
		for i, e := range t {
			if b.Len() > limit {
				return true
			}
			if i > 0 {
				b.WriteByte(',')
			}
			if !writeJSON(b, e, limit) {
				return false
			}
		}
		b.WriteByte(']')
		return true
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if b.Len() > limit {
				return true
			}
			if i > 0 {
				b.WriteByte(',')
			}
			if !writeJSON(b, k, limit) {
				return false
			}
			b.WriteByte(':')
			if !writeJSON(b, t[k], limit) {
				return false
			}
		}
		b.WriteByte('}')
		return true
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return false
	}
	b.Write(bytes.TrimSpace(buf.Bytes()))
	return true
}

// cyclic reports whether the lists and maps of v contain themselves
// (onPath holds the ones being walked).
func cyclic(v any, onPath map[uintptr]bool) bool {
	var id uintptr
	var elems []any
	switch t := v.(type) {
	case []any:
		if len(t) == 0 {
			return false
		}
		id, elems = reflect.ValueOf(t).Pointer(), t
	case map[string]any:
		if len(t) == 0 {
			return false
		}
		id = reflect.ValueOf(t).Pointer()
		elems = make([]any, 0, len(t))
		for _, e := range t {
			elems = append(elems, e)
		}
	default:
		return false
	}
	if onPath[id] {
		return true
	}
	onPath[id] = true
	defer delete(onPath, id)
	for _, e := range elems {
		if cyclic(e, onPath) {
			return true
		}
	}
	return false
}

// ChangeSet is the ordered, deterministic result of a diff. The order is by
// object (machine, bootstrap, infrastructure), then by path, whatever form
// (typed or unstructured) the inputs had.
type ChangeSet struct {
	// Changes lists the differences.
	Changes []Change `json:"changes"`

	docs *documents
}

// Empty reports whether there are no changes.
func (cs ChangeSet) Empty() bool { return len(cs.Changes) == 0 }

// Len returns the number of changes.
func (cs ChangeSet) Len() int { return len(cs.Changes) }

// Filter returns the changes for which keep returns true. The result can
// still produce patches.
//
// A nil keep keeps nothing.
func (cs ChangeSet) Filter(keep func(Change) bool) ChangeSet {
	out := ChangeSet{docs: cs.docs}
	if keep == nil {
		return out
	}
	for _, c := range cs.Changes {
		if keep(c) {
			out.Changes = append(out.Changes, c)
		}
	}
	return out
}

// Categories returns the distinct categories in the set, in first-seen order.
func (cs ChangeSet) Categories() []Category {
	var out []Category
	seen := map[Category]bool{}
	for _, c := range cs.Changes {
		if !seen[c.Category] {
			seen[c.Category] = true
			out = append(out, c.Category)
		}
	}
	return out
}

// String renders one change per line.
func (cs ChangeSet) String() string {
	if len(cs.Changes) == 0 {
		return "no changes"
	}
	var b strings.Builder
	for i, c := range cs.Changes {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(c.String())
	}
	return b.String()
}
