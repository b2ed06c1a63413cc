package drift

import (
	"context"
	"errors"
	"fmt"
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/upgradekit/upgradekit/internal/errtext"
)

// ErrNotStamped is the reason a check is Unknown when an object lacks the
// hash or hash-version annotation.
var ErrNotStamped = errors.New("drift: object is not stamped")

// Annotation name suffixes, appended to the caller's prefix.
const (
	hashSuffix    = "/hash"
	versionSuffix = "/hash-version"
	fieldsSuffix  = "/hash-fields"
)

// Stamper writes and reads hash stamps on Kubernetes objects: the
// annotations <prefix>/hash, <prefix>/hash-version and <prefix>/hash-fields
// (the field fingerprints). It works on any metav1.Object. Construct it
// with NewStamper: a zero or nil Stamper computes nothing (ErrInvalidOption),
// checks as Unknown and writes no annotations.
type Stamper struct {
	prefix    string
	hasher    *Hasher
	maxFields int
}

// StamperOption configures a Stamper.
type StamperOption func(*Stamper)

// WithMaxFingerprintFields bounds the number of field fingerprints stamped
// (default 64). 0 disables the fields annotation.
func WithMaxFingerprintFields(n int) StamperOption {
	return func(s *Stamper) { s.maxFields = n }
}

// NewStamper returns a Stamper writing annotations under prefix (a DNS
// subdomain such as "upgradekit.io" or "karpenter.sh") with hashes from h.
func NewStamper(prefix string, h *Hasher, opts ...StamperOption) (*Stamper, error) {
	if h == nil {
		return nil, fmt.Errorf("%w: nil Hasher", ErrInvalidOption)
	}
	if errs := validation.IsDNS1123Subdomain(prefix); len(errs) > 0 {
		return nil, fmt.Errorf("%w: annotation prefix %s: %v", ErrInvalidOption, errtext.Quote(prefix), errs)
	}
	s := &Stamper{prefix: prefix, hasher: h, maxFields: defaultMaxFingerprintFields}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	if s.maxFields < 0 {
		return nil, fmt.Errorf("%w: negative fingerprint bound %d", ErrInvalidOption, s.maxFields)
	}
	return s, nil
}

// Hasher returns the stamper's hasher.
func (s *Stamper) Hasher() *Hasher {
	if s == nil {
		return nil
	}
	return s.hasher
}

// valid reports whether s was made by NewStamper.
func (s *Stamper) valid() bool { return s != nil && s.prefix != "" && s.hasher.valid() }

var errStamperNotConstructed = fmt.Errorf("%w: Stamper not constructed with NewStamper", ErrInvalidOption)

// HashKey is the hash annotation's name.
func (s *Stamper) HashKey() string { return s.key(hashSuffix) }

// key is prefix+suffix, or "" for a nil Stamper.
func (s *Stamper) key(suffix string) string {
	if s == nil {
		return ""
	}
	return s.prefix + suffix
}

// VersionKey is the hash-version annotation's name.
func (s *Stamper) VersionKey() string { return s.key(versionSuffix) }

// FieldsKey is the field-fingerprints annotation's name.
func (s *Stamper) FieldsKey() string { return s.key(fieldsSuffix) }

// Stamp is what gets written on an object: the hash and the field
// fingerprints of a desired spec.
type Stamp struct {
	// Hash is the versioned hash of the spec.
	Hash Hash
	// Fields are the spec's field fingerprints (empty when disabled).
	Fields Fingerprints
}

// Compute hashes and fingerprints spec.
func (s *Stamper) Compute(spec any) (Stamp, error) {
	if !s.valid() {
		return Stamp{}, errStamperNotConstructed
	}
	if s.maxFields == 0 {
		h, err := s.hasher.Hash(spec)
		return Stamp{Hash: h}, err
	}
	h, f, err := s.hasher.Fingerprint(spec, s.maxFields)
	if err != nil {
		return Stamp{}, err
	}
	return Stamp{Hash: h, Fields: f}, nil
}

// Stamp computes the stamp of spec and writes it on obj.
//
// A nil obj is ErrNilObject and nothing is computed.
func (s *Stamper) Stamp(obj metav1.Object, spec any) (Stamp, error) {
	if isNilObject(obj) {
		return Stamp{}, ErrNilObject
	}
	st, err := s.Compute(spec)
	if err != nil {
		return Stamp{}, err
	}
	s.Apply(obj, st)
	return st, nil
}

// Apply writes st on obj's annotations. The annotation map is replaced by
// an updated copy, so maps shared with other objects are not modified.
// A Stamper not made by NewStamper, or a nil obj, writes nothing.
func (s *Stamper) Apply(obj metav1.Object, st Stamp) {
	if !s.valid() || isNilObject(obj) {
		return
	}
	ann := maps.Clone(obj.GetAnnotations())
	if ann == nil {
		ann = map[string]string{}
	}
	s.applyTo(ann, st)
	obj.SetAnnotations(ann)
}

func (s *Stamper) applyTo(ann map[string]string, st Stamp) {
	ann[s.HashKey()] = st.Hash.String()
	ann[s.VersionKey()] = st.Hash.Version
	if st.Fields.Len() > 0 {
		ann[s.FieldsKey()] = st.Fields.String()
	} else {
		delete(ann, s.FieldsKey())
	}
}

// State is the outcome of checking a stamped object against a desired hash.
type State int

// States. Only StateDrifted means drifted: StateUnknown and
// StateNeedsRestamp never do.
const (
	// StateUnknown: the object is not stamped, or its stamp is unreadable.
	StateUnknown State = iota
	// StateCurrent: the stamp matches the desired hash.
	StateCurrent
	// StateDrifted: same hash version, different hash.
	StateDrifted
	// StateNeedsRestamp: the stamp has another hash version. As in Karpenter,
	// hashes of different versions are never compared, so the object is
	// not drifted by hash; it must be re-stamped (see VersionBump).
	StateNeedsRestamp
)

// String returns the state's name.
func (s State) String() string {
	switch s {
	case StateCurrent:
		return "Current"
	case StateDrifted:
		return "Drifted"
	case StateNeedsRestamp:
		return "NeedsRestamp"
	default:
		return "Unknown"
	}
}

// Comparison is the outcome of Stamper.Compare: an object's stamp against
// a desired hash. (A Check, by contrast, answers a drift Reason.)
type Comparison struct {
	// State is the verdict; only Drifted means drifted.
	State State
	// Stamped is the hash read from the object; its Value is meaningful
	// only when the annotation parsed.
	Stamped Hash
	// Desired is the hash compared against.
	Desired Hash
	// Err says why the state is Unknown (wraps ErrNotStamped or
	// ErrInvalidAnnotation); nil otherwise.
	Err error
}

// Compare compares obj's stamp with desired, following Karpenter's rules:
// missing annotations mean Unknown; a different hash version means
// NeedsRestamp (not drifted); unreadable annotations mean Unknown; only the
// same version with a different value is Drifted.
//
// A nil obj is Unknown with Err ErrNilObject.
func (s *Stamper) Compare(obj metav1.Object, desired Hash) Comparison {
	if !s.valid() {
		return Comparison{Desired: desired, Err: errStamperNotConstructed}
	}
	if isNilObject(obj) {
		return Comparison{Desired: desired, Err: ErrNilObject}
	}
	return s.checkAnnotations(obj.GetAnnotations(), desired)
}

func (s *Stamper) checkAnnotations(ann map[string]string, desired Hash) Comparison {
	res := Comparison{Desired: desired}
	if desired.IsZero() {
		res.Err = fmt.Errorf("%w: no desired hash", ErrInvalidOption)
		return res
	}
	value, okHash := ann[s.HashKey()]
	version, okVersion := ann[s.VersionKey()]
	if !okHash || !okVersion {
		res.Err = fmt.Errorf("%w: missing %s or %s", ErrNotStamped, s.HashKey(), s.VersionKey())
		return res
	}
	res.Stamped.Version = version
	if err := validateVersion(version); err != nil {
		res.Err = fmt.Errorf("%w: %s %s: %v", ErrInvalidAnnotation, s.VersionKey(), errtext.Quote(version), err)
		return res
	}
	if version != desired.Version {
		res.State = StateNeedsRestamp
		if h, err := parseHash(version, value); err == nil {
			res.Stamped = h
		}
		return res
	}
	h, err := parseHash(version, value)
	if err != nil {
		res.Err = fmt.Errorf("%s: %w", s.HashKey(), err)
		return res
	}
	res.Stamped = h
	if h.Value == desired.Value {
		res.State = StateCurrent
	} else {
		res.State = StateDrifted
	}
	return res
}

// Explanation says which fields changed between an object's stamp and the
// desired spec.
type Explanation struct {
	// Source is "diff" when the change set came from a Differ over the old
	// spec, "fingerprints" when it came from the stamped field
	// fingerprints, and "none" when neither was available.
	Source string
	// Changes are the changed fields, by path.
	Changes []FieldChange
	// Unnamed counts stamped fields that changed or disappeared but whose
	// names could not be recovered (e.g. a removed map key).
	Unnamed int
	// Truncated reports that the stamp kept only some second-level fields;
	// changes below an unrecorded field are reported at its parent.
	Truncated bool
}

// ExplainOption configures Explain.
type ExplainOption func(*explainConfig)

type explainConfig struct {
	old        any
	hasOld     bool
	differ     Differ
	candidates []string
}

// WithOldSpec makes Explain return the field-level change set from d over
// the old spec (the one the object was stamped from) and the desired spec.
func WithOldSpec(old any, d Differ) ExplainOption {
	return func(c *explainConfig) { c.old, c.hasOld, c.differ = old, true, d }
}

// WithKnownFields names extra "field" or "parent.field" paths that may
// have been removed from the desired spec, for specs whose names cannot be
// derived from a Go type (unstructured objects).
func WithKnownFields(paths ...string) ExplainOption {
	return func(c *explainConfig) { c.candidates = append(c.candidates, paths...) }
}

// Explain names the fields of desired that differ from what obj was
// stamped with. With WithOldSpec it returns the Differ's change set;
// otherwise it compares the stamped field fingerprints with those of
// desired. An object with no readable fingerprints of the current version
// gets Source "none" and no error.
func (s *Stamper) Explain(ctx context.Context, obj metav1.Object, desired any, opts ...ExplainOption) (Explanation, error) {
	if !s.valid() {
		return Explanation{}, errStamperNotConstructed
	}
	if isNilObject(obj) {
		return Explanation{}, ErrNilObject
	}
	var cfg explainConfig
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.hasOld && cfg.differ != nil {
		changes, err := cfg.differ.Diff(ctx, cfg.old, desired)
		if err != nil {
			return Explanation{}, fmt.Errorf("drift: explaining with differ: %w", err)
		}
		return Explanation{Source: "diff", Changes: changes}, nil
	}
	return s.explainFingerprints(obj.GetAnnotations(), desired, cfg.candidates)
}

func (s *Stamper) explainFingerprints(ann map[string]string, desired any, extra []string) (Explanation, error) {
	if ann[s.VersionKey()] != s.hasher.Version() {
		return Explanation{Source: "none"}, nil
	}
	raw, ok := ann[s.FieldsKey()]
	if !ok {
		return Explanation{Source: "none"}, nil
	}
	stamped, err := parseFingerprints(raw)
	if err != nil {
		return Explanation{Source: "none"}, nil //nolint:nilerr // garbage annotations explain nothing; never an error
	}
	_, current, err := s.hasher.Fingerprint(desired, 1<<30)
	if err != nil {
		return Explanation{}, err
	}
	changes, unnamed := compareFingerprints(stamped, current, candidateFields(desired, extra))
	return Explanation{Source: "fingerprints", Changes: changes, Unnamed: unnamed, Truncated: stamped.Truncated()}, nil
}
