// Package drift decides whether Kubernetes objects have drifted from the
// spec they were created from, says why, and lets operators change how that
// is decided without replacing their fleet.
//
// It has five parts:
//
//   - Hasher: a stable, versioned 64-bit hash of any typed Go value or
//     unstructured object. Hashing goes through a canonical form of the
//     JSON representation (JSON field names, keys sorted, integers and
//     integral floats equal), so a typed CAPI object and its
//     unstructured.Unstructured form hash equal. Zero values fold by default:
//     nil and empty maps or lists, absent fields, "", 0, false, null and
//     pointers to such values all hash alike (KeepZeroValues turns that
//     off; KeepZeroEntries keeps empty-valued label entries significant).
//     Types with a JSON string form hash by that string, so an explicit
//     zero metav1.Duration ("0s") or resource.Quantity ("0") is a value,
//     exactly as in the unstructured form; a zero metav1.Time is null.
//     Struct tags `hash:"ignore"`/`hash:"set"` exist only on typed values,
//     so use IgnorePaths/SetPaths when typed and unstructured forms must
//     agree. Paths can be ignored
//     (IgnorePaths, `hash:"ignore"`) and lists declared sets (SetPaths,
//     SlicesAsSets, `hash:"set"`). Per-type reflection plans are cached and
//     scratch buffers pooled, so hashing a typed spec does not allocate in
//     the steady state. Unsupported kinds (channels, funcs), cycles, NaN and
//     infinite floats give typed errors (*PathError naming the field), never
//     a panic.
//   - Stamper: writes <prefix>/hash, <prefix>/hash-version and
//     <prefix>/hash-fields annotations on any metav1.Object and checks
//     objects against a desired hash with Karpenter's rules: a different
//     version is NeedsRestamp, never drift; missing or garbage annotations
//     are Unknown, never drift. The hash-fields annotation holds compact
//     per-field fingerprints (top-level and second-level fields, 6 bytes
//     each, bounded) so Explain can name the fields that changed since
//     stamping without storing specs on objects; given the old spec and a
//     Differ it returns the field-level change set instead.
//   - Detector: ordered, composable checks behind one interface (Check,
//     CheckFunc): StaticHash, Requirements (node labels against
//     NodeSelectorRequirements with In, NotIn, Exists, DoesNotExist, Gt,
//     Lt), Image (the node's image is not the one an ImageChooser picks
//     now) and any caller-defined check. Reasons use Karpenter's names
//     (ReasonNameNodePoolDrifted, ReasonNameRequirementsDrifted, ReasonNameAMIDrift, ReasonNameNodeClassDrift, ...)
//     and carry evidence.
//   - DryRun: which objects would drift, and why, if a proposed spec were
//     applied.
//   - VersionBump (PlanVersionBump, ApplyVersionBump): re-stamp objects for
//     a new hash version (new options, a schema migration where fields
//     move, a new EncodingVersion) with a report proving no object becomes
//     drifted and no recorded drift is cleared.
//
// The hash version carried by every Hash is the caller's version plus
// EncodingVersion, and the encoding is pinned by golden vectors, so a
// change in this package shows up as a version change (re-stamp) rather
// than a hash change (mass drift).
//
// What it is not: drift does not talk to the API server, does not persist
// anything, and does not replace nodes; callers read objects, call drift,
// and patch annotations or act on reasons themselves. It does not resolve
// images (see the ImageChooser hook, which amiselect satisfies through
// strategy.AMIChooser) and does not compute field-level diffs itself (see the Differ
// hook, which the diff package satisfies). It imports nothing from the
// rest of upgradekit. The 64-bit hash is for change detection, not for
// security: it is not collision resistant against an adversary.
package drift
