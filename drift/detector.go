package drift

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ReasonName names why an object drifted. Names follow Karpenter's where
// the meaning is the same.
type ReasonName string

// Reason names.
const (
	// ReasonNameNodePoolDrifted ("NodePoolDrifted"): the static (hashed) part of the desired spec changed.
	ReasonNameNodePoolDrifted ReasonName = "NodePoolDrifted"
	// ReasonNameRequirementsDrifted ("RequirementsDrifted"): the object's labels no longer satisfy the
	// desired node selector requirements.
	ReasonNameRequirementsDrifted ReasonName = "RequirementsDrifted"
	// ReasonNameInstanceTypeNotFound ("InstanceTypeNotFound"): the object's instance type is no longer
	// offered (for caller-defined checks).
	ReasonNameInstanceTypeNotFound ReasonName = "InstanceTypeNotFound"
	// ReasonNameNodeClassDrift ("NodeClassDrift"): the static part of the node class changed (use a
	// StaticHash check with this reason and the node class's stamper).
	ReasonNameNodeClassDrift ReasonName = "NodeClassDrift"
	// ReasonNameAMIDrift ("AMIDrift"): the object's image is not the one a new node with the same
	// requirements would get.
	ReasonNameAMIDrift ReasonName = "AMIDrift"
	// ReasonNameSecurityGroupDrift, ReasonNameSubnetDrift,
	// ReasonNameCapacityReservationDrift and ReasonNamePlacementGroupDrift
	// are provider reasons for caller-defined checks.
	ReasonNameSecurityGroupDrift       ReasonName = "SecurityGroupDrift"
	ReasonNameSubnetDrift              ReasonName = "SubnetDrift"
	ReasonNameCapacityReservationDrift ReasonName = "CapacityReservationDrift"
	ReasonNamePlacementGroupDrift      ReasonName = "PlacementGroupDrift"
)

// EvidenceKind says what a piece of evidence is about.
type EvidenceKind string

// Evidence kinds.
const (
	EvidenceKindField EvidenceKind = "Field"
	EvidenceKindLabel EvidenceKind = "Label"
	EvidenceKindImage EvidenceKind = "Image"
	EvidenceKindHash  EvidenceKind = "Hash"
)

// Evidence is one observation supporting a Reason.
type Evidence struct {
	// Kind says what Key refers to.
	Kind EvidenceKind `json:"kind"`
	// Key is the field path, label key, or "image"/"hash".
	Key string `json:"key"`
	// Want is the desired value or constraint, when known.
	Want string `json:"want,omitempty"`
	// Got is the object's value, when known.
	Got string `json:"got,omitempty"`
	// Detail says more, e.g. "Modified" for a field or the failed
	// requirement.
	Detail string `json:"detail,omitempty"`
}

// Reason says why an object drifted.
type Reason struct {
	// Name classifies the drift (Karpenter's reason names where they exist).
	Name ReasonName `json:"name"`
	// Message is a human-readable sentence for events and logs.
	Message string `json:"message"`
	// Evidence lists the observations behind the reason, most specific first.
	Evidence []Evidence `json:"evidence"`
}

// Check is one drift check. It returns nil when it finds no drift, a
// Reason when it does, and an error when it cannot tell. A check must
// treat missing or unreadable data as "no drift", never as drifted.
type Check interface {
	Check(ctx context.Context, obj metav1.Object) (*Reason, error)
}

// CheckFunc adapts a function to Check.
type CheckFunc func(ctx context.Context, obj metav1.Object) (*Reason, error)

// Check calls f; a nil f is an ErrInvalidOption error.
func (f CheckFunc) Check(ctx context.Context, obj metav1.Object) (*Reason, error) {
	if f == nil {
		return nil, fmt.Errorf("%w: nil CheckFunc", ErrInvalidOption)
	}
	return f(ctx, obj)
}

// Detector runs checks in order. The zero Detector, and a nil *Detector,
// have no checks and find no drift.
type Detector struct {
	checks []Check
}

// NewDetector returns a Detector running checks in the given order (nil
// checks, including a nil CheckFunc, are skipped). Put cheap static checks
// first, as Karpenter does.
func NewDetector(checks ...Check) *Detector {
	d := &Detector{}
	for _, c := range checks {
		if !isNilCheck(c) {
			d.checks = append(d.checks, c)
		}
	}
	return d
}

// isNilCheck reports whether c is nil or a nil func (CheckFunc(nil) is a
// non-nil Check that would panic when called).
func isNilCheck(c Check) bool {
	if c == nil {
		return true
	}
	if f, ok := c.(CheckFunc); ok {
		return f == nil
	}
	return false
}

// With returns a new Detector with checks appended. d may be nil.
func (d *Detector) With(checks ...Check) *Detector {
	var have []Check
	if d != nil {
		have = d.checks
	}
	return NewDetector(append(append([]Check(nil), have...), checks...)...)
}

// CheckError wraps the error of one check with its position.
type CheckError struct {
	// Index is the failing check's position in the Detector.
	Index int
	// Err is the check's error.
	Err error
}

// Error implements error.
func (e *CheckError) Error() string { return fmt.Sprintf("drift: check %d: %v", e.Index, e.Err) }

// Unwrap returns the check's error.
func (e *CheckError) Unwrap() error { return e.Err }

// First runs the checks in order and returns the first reason found, or
// nil. A nil obj is ErrNilObject (a nil Detector has no checks and finds
// nothing). It stops at the first error (a *CheckError) or when ctx is done.
func (d *Detector) First(ctx context.Context, obj metav1.Object) (*Reason, error) {
	if d == nil {
		return nil, nil
	}
	if isNilObject(obj) {
		return nil, ErrNilObject
	}
	for i, c := range d.checks {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r, err := c.Check(ctx, obj)
		if err != nil {
			return nil, &CheckError{Index: i, Err: err}
		}
		if r != nil {
			return r, nil
		}
	}
	return nil, nil
}

// All runs every check and returns all reasons found, in check order. A
// failing check does not stop the others; the errors are joined.
func (d *Detector) All(ctx context.Context, obj metav1.Object) ([]Reason, error) {
	if d == nil {
		return nil, nil
	}
	if isNilObject(obj) {
		return nil, ErrNilObject
	}
	var out []Reason
	var errs []error
	for i, c := range d.checks {
		if err := ctx.Err(); err != nil {
			return out, errors.Join(append(errs, err)...)
		}
		r, err := c.Check(ctx, obj)
		if err != nil {
			errs = append(errs, &CheckError{Index: i, Err: err})
			continue
		}
		if r != nil {
			out = append(out, *r)
		}
	}
	return out, errors.Join(errs...)
}

// StaticHash is the static drift check: the object's stamp against the
// hash of the desired spec, with the changed fields as evidence. Construct
// it with NewStaticHash: a zero StaticHash's Check returns ErrInvalidOption.
type StaticHash struct {
	stamper *Stamper
	desired any
	stamp   Stamp
	reason  ReasonName
	oldSpec func(metav1.Object) (any, bool)
	differ  Differ
}

// StaticHashOption configures a StaticHash check.
type StaticHashOption func(*StaticHash)

// WithReason sets the reason name reported (default
// ReasonNameNodePoolDrifted; use ReasonNameNodeClassDrift for a node class
// stamp).
func WithReason(name ReasonName) StaticHashOption {
	return func(c *StaticHash) { c.reason = name }
}

// WithOldSpecs lets the check explain drift with a Differ over the spec an
// object was stamped from, when old returns one.
func WithOldSpecs(old func(metav1.Object) (any, bool), d Differ) StaticHashOption {
	return func(c *StaticHash) { c.oldSpec, c.differ = old, d }
}

// NewStaticHash returns the static drift check of objects stamped by s
// against desired. The desired stamp is computed once.
func NewStaticHash(s *Stamper, desired any, opts ...StaticHashOption) (*StaticHash, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: nil Stamper", ErrInvalidOption)
	}
	st, err := s.Compute(desired)
	if err != nil {
		return nil, err
	}
	c := &StaticHash{stamper: s, desired: desired, stamp: st, reason: ReasonNameNodePoolDrifted}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	return c, nil
}

// Desired returns the desired stamp.
func (c *StaticHash) Desired() Stamp {
	if c == nil {
		return Stamp{}
	}
	return c.stamp
}

// Check implements Check. Unstamped objects, unreadable stamps and other
// hash versions are not drifted.
func (c *StaticHash) Check(ctx context.Context, obj metav1.Object) (*Reason, error) {
	if c == nil || !c.stamper.valid() || c.stamp.Hash.IsZero() {
		return nil, fmt.Errorf("%w: StaticHash not constructed with NewStaticHash", ErrInvalidOption)
	}
	if isNilObject(obj) {
		return nil, ErrNilObject
	}
	res := c.stamper.Compare(obj, c.stamp.Hash)
	if res.State != StateDrifted {
		return nil, nil
	}
	r := &Reason{
		Name: c.reason,
		Message: fmt.Sprintf("%s %s differs from the desired %s (version %s)",
			c.stamper.HashKey(), res.Stamped, c.stamp.Hash, c.stamp.Hash.Version),
		Evidence: []Evidence{{Kind: EvidenceKindHash, Key: c.stamper.HashKey(), Want: c.stamp.Hash.String(), Got: res.Stamped.String()}},
	}
	var opts []ExplainOption
	if c.oldSpec != nil && c.differ != nil {
		if old, ok := c.oldSpec(obj); ok {
			opts = append(opts, WithOldSpec(old, c.differ))
		}
	}
	exp, err := c.stamper.Explain(ctx, obj, c.desired, opts...)
	if err != nil {
		return nil, err
	}
	paths := make([]string, 0, len(exp.Changes))
	for _, ch := range exp.Changes {
		ev := Evidence{Kind: EvidenceKindField, Key: ch.Path, Detail: string(ch.Kind)}
		if ch.Old != nil {
			ev.Got = fmt.Sprint(ch.Old)
		}
		if ch.New != nil {
			ev.Want = fmt.Sprint(ch.New)
		}
		r.Evidence = append(r.Evidence, ev)
		paths = append(paths, ch.Path)
	}
	if len(paths) > 0 {
		r.Message += fmt.Sprintf("; changed fields: %v", paths)
	}
	if exp.Unnamed > 0 {
		r.Message += fmt.Sprintf("; %d unnamed field(s) removed", exp.Unnamed)
	}
	return r, nil
}
