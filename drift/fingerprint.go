package drift

import (
	"context"
	"encoding/base64"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// defaultMaxFingerprintFields bounds the number of field fingerprints kept
// in a stamp: 64 fields are 8 + 64*8 = 520 characters of annotation.
const defaultMaxFingerprintFields = 64

// fingerprintFormat is the first byte of an encoded Fingerprints value.
const (
	fingerprintFormat    = 1
	fingerprintTruncated = 0x80
	fingerprintEntrySize = 6
)

// Fingerprints are compact per-field hashes of a spec: one for every
// non-zero top-level field and one for every non-zero field of a top-level
// object (e.g. "metadata" and "metadata.labels"). Each entry is 6 bytes: 24
// bits of the field's path hash and 24 bits of its value hash. They let
// Explain name the fields that changed since stamping without storing the
// spec on every object. A 24-bit value hash misses a change with
// probability 2^-24; the whole-spec Hash, not the fingerprints, decides
// drift.
type Fingerprints struct {
	entries   []fieldPrint
	truncated bool
}

type fieldPrint struct {
	path  uint32
	value uint32
	// parent and name are known for fingerprints computed in this process;
	// parsed ones only have the hashes.
	parent, name string
	known        bool
}

func (f fieldPrint) display() string {
	if f.parent == "" {
		return f.name
	}
	return f.parent + "." + f.name
}

func pathHash(parent, name string) uint32 {
	var d xxhash.Digest
	d.Reset()
	_, _ = d.WriteString(parent)
	_, _ = d.WriteString("\x00")
	_, _ = d.WriteString(name)
	return uint32(d.Sum64() & 0xffffff)
}

func newFingerprints(_ string, fps []fpEntry, maxFields int) Fingerprints {
	if maxFields <= 0 {
		maxFields = defaultMaxFingerprintFields
	}
	var out Fingerprints
	// Level-1 entries first, then level-2, each in encounter order.
	for pass := 0; pass < 2; pass++ {
		for _, e := range fps {
			if (pass == 0) != (e.parent == "") {
				continue
			}
			if len(out.entries) >= maxFields {
				out.truncated = true
				continue
			}
			out.entries = append(out.entries, fieldPrint{
				path:   pathHash(e.parent, e.name),
				value:  uint32(e.value & 0xffffff),
				parent: e.parent,
				name:   e.name,
				known:  true,
			})
		}
	}
	return out
}

// Len returns the number of fingerprints.
func (f Fingerprints) Len() int { return len(f.entries) }

// Truncated reports whether fields were left out to respect the size bound.
func (f Fingerprints) Truncated() bool { return f.truncated }

// Paths returns the field paths of fingerprints computed in this process
// (parsed fingerprints carry no names), in stored order.
func (f Fingerprints) Paths() []string {
	var out []string
	for _, e := range f.entries {
		if e.known {
			out = append(out, e.display())
		}
	}
	return out
}

// String returns the annotation form: unpadded URL-safe base64 of a format
// byte followed by the 6-byte entries.
func (f Fingerprints) String() string {
	b := make([]byte, 1, 1+len(f.entries)*fingerprintEntrySize)
	b[0] = fingerprintFormat
	if f.truncated {
		b[0] |= fingerprintTruncated
	}
	for _, e := range f.entries {
		b = append(b, byte(e.path>>16), byte(e.path>>8), byte(e.path),
			byte(e.value>>16), byte(e.value>>8), byte(e.value))
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// parseFingerprints parses the annotation form. Errors wrap
// ErrInvalidAnnotation.
func parseFingerprints(s string) (Fingerprints, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return Fingerprints{}, fmt.Errorf("%w: fingerprints: %v", ErrInvalidAnnotation, err)
	}
	if len(b) == 0 || b[0]&^fingerprintTruncated != fingerprintFormat {
		return Fingerprints{}, fmt.Errorf("%w: fingerprints: unknown format", ErrInvalidAnnotation)
	}
	if (len(b)-1)%fingerprintEntrySize != 0 {
		return Fingerprints{}, fmt.Errorf("%w: fingerprints: length %d is not 1+6n", ErrInvalidAnnotation, len(b))
	}
	f := Fingerprints{truncated: b[0]&fingerprintTruncated != 0}
	for i := 1; i < len(b); i += fingerprintEntrySize {
		f.entries = append(f.entries, fieldPrint{
			path:  uint32(b[i])<<16 | uint32(b[i+1])<<8 | uint32(b[i+2]),
			value: uint32(b[i+3])<<16 | uint32(b[i+4])<<8 | uint32(b[i+5]),
		})
	}
	return f, nil
}

// ChangeKind says how a field changed.
type ChangeKind string

// Change kinds.
const (
	ChangeKindAdded    ChangeKind = "Added"
	ChangeKindRemoved  ChangeKind = "Removed"
	ChangeKindModified ChangeKind = "Modified"
)

// FieldChange is one changed field. Old and New are the values when known
// (from a Differ); explanations from fingerprints name fields only.
type FieldChange struct {
	// Path is the dotted JSON path of the field, relative to the spec.
	Path string
	// Kind says whether the field was added, removed or modified.
	Kind ChangeKind
	// Old is the stamped value, when known.
	Old any
	// New is the desired value, when known.
	New any
}

// Differ computes a field-level change set between an old and a new spec.
// The diff package satisfies it through a small adapter; drift itself
// imports nothing from this module.
type Differ interface {
	Diff(ctx context.Context, old, new any) ([]FieldChange, error)
}

// DifferFunc adapts a function to Differ.
type DifferFunc func(ctx context.Context, old, new any) ([]FieldChange, error)

// Diff calls f; a nil f is an ErrInvalidOption error.
func (f DifferFunc) Diff(ctx context.Context, old, new any) ([]FieldChange, error) {
	if f == nil {
		return nil, fmt.Errorf("%w: nil DifferFunc", ErrInvalidOption)
	}
	return f(ctx, old, new)
}

// compareFingerprints explains the difference between stamped (parsed from
// an object) and current (computed from the desired spec, with names).
// candidates name fields that may have been removed. It returns the
// changes, most specific first-level grouping, and the number of changed
// stamped fields whose names could not be recovered.
func compareFingerprints(stamped, current Fingerprints, candidates []fieldPrint) ([]FieldChange, int) {
	type seen struct {
		value uint32
		used  bool
	}
	byPath := make(map[uint32]*seen, len(stamped.entries))
	for _, e := range stamped.entries {
		byPath[e.path] = &seen{value: e.value}
	}
	type change struct {
		fp   fieldPrint
		kind ChangeKind
	}
	var changes []change
	for _, c := range current.entries {
		s, ok := byPath[c.path]
		if !ok {
			if stamped.truncated && c.parent != "" {
				// Not recorded at stamping time; its parent covers it.
				continue
			}
			changes = append(changes, change{c, ChangeKindAdded})
			continue
		}
		s.used = true
		if s.value != c.value {
			changes = append(changes, change{c, ChangeKindModified})
		}
	}
	candByPath := make(map[uint32]fieldPrint, len(candidates))
	for _, c := range candidates {
		candByPath[c.path] = c
	}
	unnamed := 0
	for _, e := range stamped.entries {
		if byPath[e.path].used {
			continue
		}
		if c, ok := candByPath[e.path]; ok {
			changes = append(changes, change{c, ChangeKindRemoved})
			continue
		}
		unnamed++
	}
	// Report the most specific fields: drop a top-level change when a
	// change under it is reported.
	hasChild := map[string]bool{}
	for _, c := range changes {
		if c.fp.parent != "" {
			hasChild[c.fp.parent] = true
		}
	}
	out := make([]FieldChange, 0, len(changes))
	for _, c := range changes {
		if c.fp.parent == "" && hasChild[c.fp.name] {
			continue
		}
		out = append(out, FieldChange{Path: c.fp.display(), Kind: c.kind})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, unnamed
}

// candidateFields lists the first- and second-level JSON field names the
// type of v can have (struct fields only; map keys are data), as possible
// names for fields that disappeared from the desired spec.
func candidateFields(v any, extra []string) []fieldPrint {
	var out []fieldPrint
	add := func(parent, name string) {
		out = append(out, fieldPrint{path: pathHash(parent, name), parent: parent, name: name, known: true})
	}
	for _, p := range extra {
		parent, name, ok := strings.Cut(p, ".")
		if !ok {
			add("", p)
			continue
		}
		add(parent, name)
	}
	if v == nil {
		return out
	}
	root := structPlanOf(planFor(reflect.TypeOf(v)))
	if root == nil {
		return out
	}
	for _, f := range root.fields {
		add("", f.name)
		if sp := structPlanOf(f.plan); sp != nil {
			for _, g := range sp.fields {
				add(f.name, g.name)
			}
		}
	}
	return out
}

func structPlanOf(p *plan) *plan {
	for i := 0; p != nil && i < 8; i++ {
		switch p.kind {
		case pkStruct:
			return p
		case pkPtr:
			p = p.elem
		default:
			return nil
		}
	}
	return nil
}
