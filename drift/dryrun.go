package drift

import (
	"context"
	"fmt"
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func objectName(obj metav1.Object) string {
	if isNilObject(obj) {
		return "<nil>"
	}
	if ns := obj.GetNamespace(); ns != "" {
		return ns + "/" + obj.GetName()
	}
	return obj.GetName()
}

// ObjectReport is the drift verdict for one object.
type ObjectReport struct {
	// Name is "namespace/name" (or "name" for cluster-scoped objects).
	Name string
	// Reasons are all reasons found; empty when not drifted.
	Reasons []Reason
	// Err is a check failure for this object (the other checks still ran).
	Err error
}

// DryRunReport says which objects would drift, and why, before anything is
// applied.
type DryRunReport struct {
	// Total is the number of objects checked.
	Total int
	// Drifted counts objects with at least one reason.
	Drifted int
	// Failed counts objects for which a check returned an error.
	Failed int
	// Objects lists every object, in input order.
	Objects []ObjectReport
}

// DryRun runs every check of d on every object and reports which would
// drift and why. Nothing is modified. Build d from the proposed spec (for
// example NewStaticHash(stamper, proposed) and NewRequirements(proposed
// requirements)) to answer "what would drift if I apply this?". A nil d
// has no checks: nothing drifts.
func DryRun(ctx context.Context, d *Detector, objs []metav1.Object) (DryRunReport, error) {
	rep := DryRunReport{Total: len(objs), Objects: make([]ObjectReport, 0, len(objs))}
	for _, obj := range objs {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		reasons, err := d.All(ctx, obj)
		or := ObjectReport{Name: objectName(obj), Reasons: reasons, Err: err}
		if len(reasons) > 0 {
			rep.Drifted++
		}
		if err != nil {
			rep.Failed++
		}
		rep.Objects = append(rep.Objects, or)
	}
	return rep, nil
}

// DryRun is the static-hash dry run for a proposed spec: which objects
// stamped by s would drift if proposed were applied, with the changed
// fields, plus any extra checks (requirements, image, ...).
func (s *Stamper) DryRun(ctx context.Context, proposed any, objs []metav1.Object, extra ...Check) (DryRunReport, error) {
	static, err := NewStaticHash(s, proposed)
	if err != nil {
		return DryRunReport{}, err
	}
	return DryRun(ctx, NewDetector(append([]Check{static}, extra...)...), objs)
}

// VersionBump describes a change of hash version: a new Hasher (new
// options, new schema, or a new EncodingVersion) replacing the one the
// existing stamps were made with.
type VersionBump struct {
	// From stamps the existing objects (same annotation prefix as To).
	From *Stamper
	// To is the new stamper.
	To *Stamper
	// FromSpec is the desired spec as the From hasher saw it: the spec
	// current objects were stamped from.
	FromSpec any
	// ToSpec is the same desired spec in the new schema. It must be the
	// faithful translation of FromSpec: a semantic change applied during
	// the migration belongs in the next desired spec, and is then detected
	// as drift against the re-stamped objects.
	ToSpec any
	// RecordedDrift, when set, reports objects whose drift was already
	// recorded elsewhere (e.g. a Drifted condition). Their drift is kept
	// even if their stamp matches FromSpec.
	RecordedDrift func(metav1.Object) bool
}

// BumpAction is what a version bump does to one object.
type BumpAction string

// Bump actions.
const (
	// BumpActionRestamp: current under From; stamped with the ToSpec stamp.
	BumpActionRestamp BumpAction = "Restamp"
	// BumpActionKeepDrift: drifted under From (or recorded drifted); the
	// version is updated and the hash is replaced by one that cannot match
	// the ToSpec hash, so it stays drifted.
	BumpActionKeepDrift BumpAction = "KeepDrift"
	// BumpActionNone: already at the To version, unstamped, unreadable, or
	// stamped by a version other than From; left alone.
	BumpActionNone BumpAction = "None"
)

// BumpEntry is the bump's effect on one object.
type BumpEntry struct {
	// Name is "namespace/name" (or "name" for cluster-scoped objects).
	Name string
	// Action is what the bump does to the object.
	Action BumpAction
	// Before is the object's state under From against FromSpec (for
	// objects already at the To version: under To against ToSpec).
	Before State
	// After is the state of the re-stamped object under To against ToSpec,
	// computed by checking the rewritten annotations.
	After State
}

// BumpReport is the proof that a version bump drifts nothing new: it
// counts what the bump touches and checks every object before and after.
type BumpReport struct {
	// FromVersion is the From hasher's version.
	FromVersion string
	// ToVersion is the To hasher's version.
	ToVersion string
	// Total is the number of objects examined.
	Total int
	// Touched counts objects whose annotations change.
	Touched int
	// Restamped counts objects current under From, stamped with ToSpec.
	Restamped int
	// KeptDrifted counts drifted objects moved to ToVersion still drifted.
	KeptDrifted int
	// AlreadyCurrent counts objects already stamped with ToVersion (left
	// alone, whatever their state).
	AlreadyCurrent int
	// Unknown counts unstamped or unreadable objects (left alone).
	Unknown int
	// OtherVersion counts objects stamped by neither From nor To (left
	// alone; they stay NeedsRestamp, which is never drifted).
	OtherVersion int
	// NewlyDrifted counts objects not drifted before but drifted after.
	// Safe() requires 0.
	NewlyDrifted int
	// ClearedDrift counts objects drifted before but not after. Safe()
	// requires 0.
	ClearedDrift int
	// Objects lists every object's entry, in input order.
	Objects []BumpEntry
}

// Safe reports whether the bump neither creates nor clears drift.
func (r BumpReport) Safe() bool { return r.NewlyDrifted == 0 && r.ClearedDrift == 0 }

// PlanVersionBump reports what ApplyVersionBump would do, without
// modifying anything.
func PlanVersionBump(ctx context.Context, objs []metav1.Object, b VersionBump) (BumpReport, error) {
	return runBump(ctx, objs, b, false)
}

// ApplyVersionBump re-stamps objs in place (annotations only; persisting
// them is the caller's job) and returns the same report as
// PlanVersionBump. Re-stamping never clears recorded drift: objects
// drifted under From, or reported by RecordedDrift, stay drifted.
func ApplyVersionBump(ctx context.Context, objs []metav1.Object, b VersionBump) (BumpReport, error) {
	return runBump(ctx, objs, b, true)
}

func runBump(ctx context.Context, objs []metav1.Object, b VersionBump, apply bool) (BumpReport, error) {
	if !b.From.valid() || !b.To.valid() {
		return BumpReport{}, fmt.Errorf("%w: version bump needs From and To stampers made by NewStamper", ErrInvalidOption)
	}
	if b.From.prefix != b.To.prefix {
		return BumpReport{}, fmt.Errorf("%w: From prefix %q and To prefix %q differ", ErrInvalidOption, b.From.prefix, b.To.prefix)
	}
	if b.From.hasher.Version() == b.To.hasher.Version() {
		return BumpReport{}, fmt.Errorf("%w: From and To have the same version %q", ErrInvalidOption, b.To.hasher.Version())
	}
	fromHash, err := b.From.hasher.Hash(b.FromSpec)
	if err != nil {
		return BumpReport{}, fmt.Errorf("drift: hashing FromSpec: %w", err)
	}
	toStamp, err := b.To.Compute(b.ToSpec)
	if err != nil {
		return BumpReport{}, fmt.Errorf("drift: hashing ToSpec: %w", err)
	}
	rep := BumpReport{FromVersion: fromHash.Version, ToVersion: toStamp.Hash.Version, Total: len(objs)}
	for _, obj := range objs {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		entry := BumpEntry{Name: objectName(obj), Action: BumpActionNone}
		if isNilObject(obj) {
			// Nothing to read or re-stamp: reported like an unstamped object.
			entry.Before, entry.After = StateUnknown, StateUnknown
			rep.Unknown++
			rep.Objects = append(rep.Objects, entry)
			continue
		}
		ann := obj.GetAnnotations()
		version, hasVersion := ann[b.To.VersionKey()]
		switch {
		case hasVersion && version == toStamp.Hash.Version:
			entry.Before = b.To.checkAnnotations(ann, toStamp.Hash).State
			entry.After = entry.Before
			rep.AlreadyCurrent++
		case hasVersion && version == fromHash.Version:
			before := b.From.checkAnnotations(ann, fromHash)
			entry.Before = before.State
			recorded := b.RecordedDrift != nil && b.RecordedDrift(obj)
			if before.State == StateUnknown {
				entry.After = b.To.checkAnnotations(ann, toStamp.Hash).State
				rep.Unknown++
				break
			}
			next := maps.Clone(ann)
			if before.State == StateCurrent && !recorded {
				b.To.applyTo(next, toStamp)
				entry.Action = BumpActionRestamp
				rep.Restamped++
			} else {
				// Keep the drift: new version, a hash that cannot equal
				// the new one, and no fingerprints of the old version.
				if before.State == StateCurrent {
					entry.Before = StateDrifted // recorded elsewhere
				}
				kept := before.Stamped.Value
				if kept == toStamp.Hash.Value {
					kept ^= 1
				}
				next[b.To.HashKey()] = Hash{Version: toStamp.Hash.Version, Value: kept}.String()
				next[b.To.VersionKey()] = toStamp.Hash.Version
				delete(next, b.To.FieldsKey())
				entry.Action = BumpActionKeepDrift
				rep.KeptDrifted++
			}
			entry.After = b.To.checkAnnotations(next, toStamp.Hash).State
			rep.Touched++
			if apply {
				obj.SetAnnotations(next)
			}
		case hasVersion:
			entry.Before = StateNeedsRestamp
			entry.After = StateNeedsRestamp
			rep.OtherVersion++
		default:
			entry.Before, entry.After = StateUnknown, StateUnknown
			rep.Unknown++
		}
		if entry.Before != StateDrifted && entry.After == StateDrifted {
			rep.NewlyDrifted++
		}
		if entry.Before == StateDrifted && entry.After != StateDrifted {
			rep.ClearedDrift++
		}
		rep.Objects = append(rep.Objects, entry)
	}
	return rep, nil
}
