package karpenter

import (
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

// NodePoolHashVersion is the value of Karpenter's v1.NodePoolHashVersion
// whose NodePool hash TemplateHash and NodePoolHash reproduce. Karpenter
// stores it in the karpenter.sh/nodepool-hash-version annotation; hashes are
// only comparable when the versions are equal. A test asserts that it equals
// the constant of the Karpenter release this module builds against.
const NodePoolHashVersion = "v3"

// Karpenter hashes with github.com/mitchellh/hashstructure/v2 (FormatV2,
// SlicesAsSets, IgnoreZeroValue, ZeroNil). That walker builds every hash
// from FNV-1 (not FNV-1a) 64-bit hashes of short byte strings:
//
//   - a string is the FNV-1 of its bytes;
//   - an int or int64 (time.Duration too) is the FNV-1 of its 8
//     little-endian bytes, an int32 of its 4, a bool of one byte (0 or 1);
//   - a time.Time is the FNV-1 of its MarshalBinary encoding;
//   - a struct starts from the hash of its type's name, and each exported,
//     not hash:"ignore"d field that is not reflect-zero updates it to
//     finish(h XOR ordered(hash(field name), hash(value))), in field order;
//   - a map is finish(XOR over entries of ordered(hash(key), hash(value)));
//   - a slice (all slices are sets) is the XOR of its elements' hashes,
//     with no finishing step, so equal elements cancel in pairs;
//   - a nil pointer met outside a struct field (a slice element) hashes as
//     the zero value of its element type;
//
// where ordered(a, b) is the FNV-1 of a's then b's 8 little-endian bytes
// and finish(a) the FNV-1 of a's 8 little-endian bytes. The functions below
// compute the same values directly on the typed structs, on a uint64 state,
// without reflection or allocation.

const (
	fnvOffset64 uint64 = 14695981039346656037
	fnvPrime64  uint64 = 1099511628211
)

// fnvString is the FNV-1 64 hash of s's bytes.
func fnvString(s string) uint64 {
	h := fnvOffset64
	for i := 0; i < len(s); i++ {
		h *= fnvPrime64
		h ^= uint64(s[i])
	}
	return h
}

// fnvBytes continues the FNV-1 64 hash h over b.
func fnvBytes(h uint64, b []byte) uint64 {
	for _, c := range b {
		h *= fnvPrime64
		h ^= uint64(c)
	}
	return h
}

// fnvWord continues the FNV-1 64 hash h over v's 8 little-endian bytes.
func fnvWord(h, v uint64) uint64 {
	for range 8 {
		h *= fnvPrime64
		h ^= v & 0xff
		v >>= 8
	}
	return h
}

// hashUint64 is the hash of a 64-bit integer (and of an int, widened to
// int64); it is also hashstructure's finishing step for unordered groups.
func hashUint64(v uint64) uint64 { return fnvWord(fnvOffset64, v) }

// hashInt32 is the hash of an int32: its 4 little-endian bytes.
func hashInt32(v int32) uint64 {
	h := fnvOffset64
	u := uint32(v)
	for range 4 {
		h *= fnvPrime64
		h ^= uint64(u & 0xff)
		u >>= 8
	}
	return h
}

// hashBool is the hash of a bool, which hashstructure turns into an int8.
func hashBool(b bool) uint64 {
	h := fnvOffset64
	h *= fnvPrime64
	if b {
		h ^= 1
	}
	return h
}

// ordered combines two hashes in order (hashstructure's hashUpdateOrdered).
func ordered(a, b uint64) uint64 { return fnvWord(fnvWord(fnvOffset64, a), b) }

// fieldName is a struct field's name prepared for ordered: the FNV-1
// state after the 8 bytes of the name's hash (a constant per field), so
// that folding a field only hashes the value's 8 bytes.
type fieldName uint64

func newFieldName(name string) fieldName { return fieldName(fnvWord(fnvOffset64, fnvString(name))) }

// field folds one hashed struct field into the struct's running hash h:
// finish(h XOR ordered(hash(name), value)).
func field(h uint64, name fieldName, value uint64) uint64 {
	return hashUint64(h ^ fnvWord(uint64(name), value))
}

// hashStringMap is the hash of a map[string]string. A nil map hashes like an
// empty one; whether it is hashed at all is the caller's (zero-value) call.
func hashStringMap(m map[string]string) uint64 {
	var x uint64
	for k, v := range m {
		x ^= ordered(fnvString(k), fnvString(v))
	}
	return hashUint64(x)
}

// hashTime is the hash of a time.Time: the FNV-1 of its MarshalBinary bytes.
// MarshalBinary fails for zone offsets it cannot encode (a whole-minute
// offset of -1, or beyond ±32767 minutes); hashstructure then fails and
// Karpenter panics. This package never panics: such a time is hashed as the
// same instant in UTC.
func hashTime(t time.Time) uint64 {
	var buf [16]byte
	b, err := t.AppendBinary(buf[:0])
	if err != nil {
		b, _ = t.UTC().AppendBinary(buf[:0])
	}
	return fnvBytes(fnvOffset64, b)
}

// The type and field names the walker meets. A struct's hash starts from
// the hash of its type name (t...); each field contributes the hash of its
// Go field name (f..., an embedded field is named after its type).
var (
	tNodeClaimTemplate      = fnvString("NodeClaimTemplate")
	tObjectMeta             = fnvString("ObjectMeta")
	fObjectMeta             = newFieldName("ObjectMeta")
	fLabels                 = newFieldName("Labels")
	fAnnotations            = newFieldName("Annotations")
	fSpec                   = newFieldName("Spec")
	tNodeClaimTemplateSpec  = fnvString("NodeClaimTemplateSpec")
	fTaints                 = newFieldName("Taints")
	fStartupTaints          = newFieldName("StartupTaints")
	fNodeClassRef           = newFieldName("NodeClassRef")
	tNodeClassReference     = fnvString("NodeClassReference")
	fKind                   = newFieldName("Kind")
	fName                   = newFieldName("Name")
	fGroup                  = newFieldName("Group")
	fTerminationGracePeriod = newFieldName("TerminationGracePeriod")
	tDuration               = fnvString("Duration")    // metav1.Duration
	fDuration               = newFieldName("Duration") // metav1.Duration's field; NillableDuration's embedded *time.Duration
	fExpireAfter            = newFieldName("ExpireAfter")
	tNillableDuration       = fnvString("NillableDuration")
	tTaint                  = fnvString("Taint")
	fKey                    = newFieldName("Key")
	fValue                  = newFieldName("Value")
	fEffect                 = newFieldName("Effect")
	fTimeAdded              = newFieldName("TimeAdded")
	tTime                   = fnvString("Time")    // metav1.Time
	fTime                   = newFieldName("Time") // metav1.Time's embedded time.Time
)

// hashMetaTime is the hash of a metav1.Time: a struct whose one field, the
// embedded time.Time, counts only when it is not reflect-zero (a zero
// instant with a non-nil location is not zero).
func hashMetaTime(t *metav1.Time) uint64 {
	h := tTime
	if t.Time != (time.Time{}) {
		h = field(h, fTime, hashTime(t.Time))
	}
	return h
}

// hashTaint is the hash of one corev1.Taint.
func hashTaint(t *corev1.Taint) uint64 {
	h := tTaint
	if t.Key != "" {
		h = field(h, fKey, fnvString(t.Key))
	}
	if t.Value != "" {
		h = field(h, fValue, fnvString(t.Value))
	}
	if t.Effect != "" {
		h = field(h, fEffect, fnvString(string(t.Effect)))
	}
	if t.TimeAdded != nil {
		h = field(h, fTimeAdded, hashMetaTime(t.TimeAdded))
	}
	return h
}

// hashTaints is the hash of a taint list, hashed as a set: the XOR of the
// taints' hashes. Duplicate taints cancel out.
func hashTaints(ts []corev1.Taint) uint64 {
	var x uint64
	for i := range ts {
		x ^= hashTaint(&ts[i])
	}
	return x
}

// hashNodeClassRef is the hash of a non-nil NodeClassReference.
func hashNodeClassRef(r *karpv1.NodeClassReference) uint64 {
	h := tNodeClassReference
	if r.Kind != "" {
		h = field(h, fKind, fnvString(r.Kind))
	}
	if r.Name != "" {
		h = field(h, fName, fnvString(r.Name))
	}
	if r.Group != "" {
		h = field(h, fGroup, fnvString(r.Group))
	}
	return h
}

// hashMetaDuration is the hash of a non-nil metav1.Duration; a zero
// duration leaves only the type name.
func hashMetaDuration(d *metav1.Duration) uint64 {
	h := tDuration
	if d.Duration != 0 {
		h = field(h, fDuration, hashUint64(uint64(d.Duration)))
	}
	return h
}

// hashNillableDuration is the hash of a NillableDuration that is not
// reflect-zero. Raw is hash:"ignore", so "Never" (nil Duration) leaves only
// the type name; a pointer to a zero duration is hashed as 0.
func hashNillableDuration(d *karpv1.NillableDuration) uint64 {
	h := tNillableDuration
	if d.Duration != nil {
		h = field(h, fDuration, hashUint64(uint64(*d.Duration)))
	}
	return h
}

// part is one struct field's contribution to a hash: whether the field is
// hashed (hashstructure skips reflect-zero fields) and its value's hash.
type part struct {
	present bool
	h       uint64
}

// fold folds the part, when present, into a struct's running hash h.
func (p part) fold(h uint64, name fieldName) uint64 {
	if !p.present {
		return h
	}
	return field(h, name, p.h)
}

// templateParts are the contributions of a NodeClaimTemplate's hashed
// fields. TemplateHash folds them; ChangedTemplateFields compares them, so
// the two judge by exactly the same rules.
type templateParts struct {
	labels, annotations part
	// specPresent reports that Spec is not reflect-zero. It can be true
	// with every hashed spec field absent: Requirements is hash:"ignore"
	// but still makes Spec non-zero.
	specPresent            bool
	taints, startupTaints  part
	nodeClassRef           part
	terminationGracePeriod part
	expireAfter            part
}

// partsOf computes t's contributions; nil is the zero template.
func partsOf(t *karpv1.NodeClaimTemplate) templateParts {
	var p templateParts
	if t == nil {
		return p
	}
	if t.Labels != nil {
		p.labels = part{true, hashStringMap(t.Labels)}
	}
	if t.Annotations != nil {
		p.annotations = part{true, hashStringMap(t.Annotations)}
	}
	s := &t.Spec
	if s.Taints != nil {
		p.taints = part{true, hashTaints(s.Taints)}
	}
	if s.StartupTaints != nil {
		p.startupTaints = part{true, hashTaints(s.StartupTaints)}
	}
	if s.NodeClassRef != nil {
		p.nodeClassRef = part{true, hashNodeClassRef(s.NodeClassRef)}
	}
	if s.TerminationGracePeriod != nil {
		p.terminationGracePeriod = part{true, hashMetaDuration(s.TerminationGracePeriod)}
	}
	// NillableDuration is reflect-zero only when both its Duration and its
	// (ignored) Raw are nil.
	if s.ExpireAfter.Duration != nil || s.ExpireAfter.Raw != nil {
		p.expireAfter = part{true, hashNillableDuration(&s.ExpireAfter)}
	}
	p.specPresent = p.taints.present || p.startupTaints.present || p.nodeClassRef.present ||
		p.terminationGracePeriod.present || p.expireAfter.present || s.Requirements != nil
	return p
}

// sum folds the contributions into the template's hash.
func (p *templateParts) sum() uint64 {
	h := tNodeClaimTemplate
	if p.labels.present || p.annotations.present {
		m := p.labels.fold(tObjectMeta, fLabels)
		m = p.annotations.fold(m, fAnnotations)
		h = field(h, fObjectMeta, m)
	}
	if p.specPresent {
		s := p.taints.fold(tNodeClaimTemplateSpec, fTaints)
		s = p.startupTaints.fold(s, fStartupTaints)
		s = p.nodeClassRef.fold(s, fNodeClassRef)
		s = p.terminationGracePeriod.fold(s, fTerminationGracePeriod)
		s = p.expireAfter.fold(s, fExpireAfter)
		h = field(h, fSpec, s)
	}
	return h
}

// TemplateHash returns the 64-bit hash Karpenter computes for a NodePool's
// template (the value (*v1.NodePool).Hash formats in decimal), without
// reflection and without allocating. A nil t hashes as the zero template.
//
// Like Karpenter it ignores spec.requirements, treats taint lists as sets
// (duplicate taints cancel out) and skips nil maps, slices and pointers,
// but not empty ones: labels: {} hashes differently from no labels.
func TemplateHash(t *karpv1.NodeClaimTemplate) uint64 {
	p := partsOf(t)
	return p.sum()
}

// NodePoolHash returns the hash Karpenter stores in a NodePool's
// karpenter.sh/nodepool-hash annotation: np.Hash(), the decimal form of
// TemplateHash(&np.Spec.Template). A nil np hashes as the zero template.
func NodePoolHash(np *karpv1.NodePool) string {
	if np == nil {
		return strconv.FormatUint(TemplateHash(nil), 10)
	}
	return strconv.FormatUint(TemplateHash(&np.Spec.Template), 10)
}

// controllerZone is time.Local in Karpenter's controller as its image runs
// it: no TZ and no /etc/localtime, so Go's Local is a zero-offset zone
// that is not time.UTC. metav1.Time decodes into time.Local and
// Karpenter's hash includes the zone's offset (hashstructure hashes a
// time.Time by MarshalBinary), so the hash Karpenter stamps is that of
// its taints' timeAdded in this zone, whatever zone the reader of a dump
// runs in.
var controllerZone = time.FixedZone("UTC", 0)

// controllerHash is the hash Karpenter's controller computes for np as it
// reads np from the API server: NodePoolHash with every taint's timeAdded
// in controllerZone. Objects decoded here (a dump, a live read, a
// last-applied annotation) carry this process's time.Local instead, which
// would make the same NodePool hash differently outside UTC.
func controllerHash(np *karpv1.NodePool) string {
	if np == nil || !hasTimeAdded(np.Spec.Template.Spec.Taints) && !hasTimeAdded(np.Spec.Template.Spec.StartupTaints) {
		return NodePoolHash(np)
	}
	cp := *np
	cp.Spec.Template.Spec.Taints = inControllerZone(np.Spec.Template.Spec.Taints)
	cp.Spec.Template.Spec.StartupTaints = inControllerZone(np.Spec.Template.Spec.StartupTaints)
	return NodePoolHash(&cp)
}

func hasTimeAdded(ts []corev1.Taint) bool {
	for i := range ts {
		if ts[i].TimeAdded != nil {
			return true
		}
	}
	return false
}

// inControllerZone returns a copy of ts with each timeAdded in
// controllerZone; a null timeAdded (the zero time.Time) stays as it is,
// as metav1.Time decodes null.
func inControllerZone(ts []corev1.Taint) []corev1.Taint {
	if ts == nil {
		return nil
	}
	out := slices.Clone(ts)
	for i := range out {
		if t := out[i].TimeAdded; t != nil && t.Time != (time.Time{}) {
			out[i].TimeAdded = &metav1.Time{Time: t.In(controllerZone)}
		}
	}
	return out
}
