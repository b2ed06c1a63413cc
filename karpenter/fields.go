package karpenter

import (
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

// FieldChange is one field of a NodePool template whose contribution to
// Karpenter's NodePool hash differs between two templates.
type FieldChange struct {
	// Path is the field's path in the template, with the CRD's JSON field
	// names: metadata.labels["team"], metadata.annotations["k"] (one per
	// changed key), metadata.labels and metadata.annotations (nil against
	// empty), spec.taints, spec.startupTaints, spec.nodeClassRef,
	// spec.terminationGracePeriod and spec.expireAfter, or spec when only
	// the presence of fields Karpenter does not hash (requirements) changed
	// whether the spec is hashed at all.
	Path string
	// Old and New render the field's value in the old and the new template,
	// clipped to 128 bytes: a map value as is, "(absent)" for a key the map
	// does not hold, "(unset)" for a nil map, list or pointer, "{}" and "[]"
	// for an empty map or list, taints as key=value:Effect, durations in
	// Go's form (720h0m0s), an unset expireAfter as Never.
	Old, New string
}

// Markers used in FieldChange renderings.
const (
	renderAbsent = "(absent)"
	renderUnset  = "(unset)"
	maxRendered  = 128
)

// ChangedTemplateFields returns the fields of the NodePool templates old and
// cur whose contribution to Karpenter's NodePool hash differs, sorted by
// Path, or nil when there are none. It judges by Karpenter's rules, so it
// is empty exactly when TemplateHash(old) == TemplateHash(cur) (barring
// 64-bit collisions): spec.requirements is never listed; taint lists are
// sets, so reordered or duplicated taints are not changes; a nil map
// against an empty one is. A nil template is the zero template.
func ChangedTemplateFields(old, cur *karpv1.NodeClaimTemplate) []FieldChange {
	var o, n karpv1.NodeClaimTemplate
	if old != nil {
		o = *old
	}
	if cur != nil {
		n = *cur
	}
	po, pn := partsOf(&o), partsOf(&n)

	var out []FieldChange
	if po.labels != pn.labels {
		out = mapChanges(out, "metadata.labels", o.Labels, n.Labels)
	}
	if po.annotations != pn.annotations {
		out = mapChanges(out, "metadata.annotations", o.Annotations, n.Annotations)
	}
	specFieldChanged := false
	add := func(path string, po, pn part, render func(*karpv1.NodeClaimTemplateSpec) string) {
		if po != pn {
			specFieldChanged = true
			out = append(out, FieldChange{Path: path, Old: clip(render(&o.Spec)), New: clip(render(&n.Spec))})
		}
	}
	add("spec.taints", po.taints, pn.taints, func(s *karpv1.NodeClaimTemplateSpec) string { return renderTaints(s.Taints) })
	add("spec.startupTaints", po.startupTaints, pn.startupTaints, func(s *karpv1.NodeClaimTemplateSpec) string { return renderTaints(s.StartupTaints) })
	add("spec.nodeClassRef", po.nodeClassRef, pn.nodeClassRef, func(s *karpv1.NodeClaimTemplateSpec) string { return renderNodeClassRef(s.NodeClassRef) })
	add("spec.terminationGracePeriod", po.terminationGracePeriod, pn.terminationGracePeriod, func(s *karpv1.NodeClaimTemplateSpec) string {
		return renderMetaDuration(s.TerminationGracePeriod)
	})
	add("spec.expireAfter", po.expireAfter, pn.expireAfter, func(s *karpv1.NodeClaimTemplateSpec) string { return renderNillableDuration(s.ExpireAfter) })
	if !specFieldChanged && po.specPresent != pn.specPresent {
		out = append(out, FieldChange{Path: "spec", Old: renderSpecPresence(po.specPresent), New: renderSpecPresence(pn.specPresent)})
	}
	slices.SortFunc(out, func(a, b FieldChange) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// mapChanges appends one change per key whose value differs between o and
// n, or, when the maps hold the same entries (one nil, the other empty), a
// change of the whole map.
func mapChanges(out []FieldChange, path string, o, n map[string]string) []FieldChange {
	before := len(out)
	for k, ov := range o {
		nv, ok := n[k]
		switch {
		case !ok:
			out = append(out, FieldChange{Path: mapKeyPath(path, k), Old: clip(ov), New: renderAbsent})
		case nv != ov:
			out = append(out, FieldChange{Path: mapKeyPath(path, k), Old: clip(ov), New: clip(nv)})
		}
	}
	for k, nv := range n {
		if _, ok := o[k]; !ok {
			out = append(out, FieldChange{Path: mapKeyPath(path, k), Old: renderAbsent, New: clip(nv)})
		}
	}
	if len(out) == before {
		out = append(out, FieldChange{Path: path, Old: renderMapPresence(o), New: renderMapPresence(n)})
	}
	return out
}

func mapKeyPath(path, key string) string { return path + "[" + strconv.Quote(key) + "]" }

func renderMapPresence(m map[string]string) string {
	switch {
	case m == nil:
		return renderUnset
	case len(m) == 0:
		return "{}"
	default:
		return "(" + strconv.Itoa(len(m)) + " entries)"
	}
}

func renderSpecPresence(present bool) string {
	if present {
		return "(only fields Karpenter does not hash are set)"
	}
	return "(empty)"
}

// renderTaints renders a taint list like kubectl: key=value:Effect, with
// @time for a TimeAdded.
func renderTaints(ts []corev1.Taint) string {
	if ts == nil {
		return renderUnset
	}
	var b strings.Builder
	b.WriteByte('[')
	for i := range ts {
		if i > 0 {
			b.WriteString(", ")
		}
		if b.Len() > maxRendered {
			break // clip cuts here anyway
		}
		t := &ts[i]
		b.WriteString(t.Key)
		if t.Value != "" {
			b.WriteByte('=')
			b.WriteString(t.Value)
		}
		if t.Effect != "" {
			b.WriteByte(':')
			b.WriteString(string(t.Effect))
		}
		if t.TimeAdded != nil {
			b.WriteByte('@')
			b.WriteString(renderMetaTime(t.TimeAdded))
		}
	}
	b.WriteByte(']')
	return b.String()
}

func renderMetaTime(t *metav1.Time) string {
	if t.Time == (time.Time{}) {
		return "(zero time)"
	}
	return t.Format(time.RFC3339Nano)
}

func renderNodeClassRef(r *karpv1.NodeClassReference) string {
	if r == nil {
		return renderUnset
	}
	var parts []string
	if r.Group != "" {
		parts = append(parts, "group="+r.Group)
	}
	if r.Kind != "" {
		parts = append(parts, "kind="+r.Kind)
	}
	if r.Name != "" {
		parts = append(parts, "name="+r.Name)
	}
	if len(parts) == 0 {
		return "{}"
	}
	return strings.Join(parts, " ")
}

func renderMetaDuration(d *metav1.Duration) string {
	if d == nil {
		return renderUnset
	}
	return d.Duration.String()
}

// renderNillableDuration renders expireAfter: Never when no duration is
// set. A NillableDuration with no duration but a Raw value hashes
// differently from one with neither, so the two render differently.
func renderNillableDuration(d karpv1.NillableDuration) string {
	switch {
	case d.Duration != nil:
		return d.Duration.String()
	case d.Raw != nil:
		return karpv1.Never + " (raw " + strconv.Quote(string(d.Raw)) + ")"
	default:
		return karpv1.Never
	}
}

// clip shortens s to at most maxRendered bytes, cutting at a rune boundary
// and marking the cut with "…".
func clip(s string) string {
	if len(s) <= maxRendered {
		return s
	}
	cut := maxRendered - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
