package karpenter

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/upgradekit/upgradekit/drift"
	"github.com/upgradekit/upgradekit/internal/errtext"
)

// Lookup finds the objects a NodeClaim's drift is judged against. A
// *Snapshot is one.
type Lookup interface {
	// NodePool returns the NodePool called name, or nil.
	NodePool(name string) *karpv1.NodePool
	// EC2NodeClass returns the EC2NodeClass called name, or nil.
	EC2NodeClass(name string) *awsv1.EC2NodeClass
}

// The checks below are drift.Checks over *karpv1.NodeClaim objects, each
// one of Karpenter's drift rules (sigs.k8s.io/karpenter's nodeclaim
// disruption controller and the AWS provider's IsDrifted, v1.14). Any
// other object, and a NodeClaim whose NodePool or EC2NodeClass the Lookup
// does not have, is not drifted: like Karpenter, they treat what they
// cannot see as no drift. Explain composes them in Karpenter's order.

// NodePoolHashCheck is Karpenter's static drift: the NodeClaim's
// karpenter.sh/nodepool-hash against its NodePool's template hash
// (NodePoolHash). It judges the steady state Karpenter converges to: the
// hash is computed from the NodePool's spec rather than read from its
// annotation (which Karpenter's hash controller rewrites on its next
// reconcile), and hash versions follow Karpenter's hash controller (see
// StampRule): a NodePool not yet at NodePoolHashVersion has its
// NodeClaims re-stamped (not drifted) unless they already carry a Drifted
// condition, which keeps their old hash, so they stay drifted; once the
// NodePool is at NodePoolHashVersion, a NodeClaim stamped with another
// version is never compared. The reason's evidence names the template
// fields that changed when a previous template with the NodeClaim's hash
// is known (WithPreviousNodePools, or the NodePool's
// kubectl.kubernetes.io/last-applied-configuration); without one, the
// hashed fields a field manager may have written after the NodeClaim was
// made, from the NodePool's managedFields (who and when, not the old
// value).
//
// A taint's timeAdded is hashed as Karpenter's controller decodes it:
// in a zero-offset time zone that is not time.UTC (its image sets no TZ),
// whatever zone this process runs in; Karpenter's hash includes the
// zone's offset. A Karpenter run with TZ set would stamp other hashes for
// NodePools whose taints carry timeAdded; that is not modelled.
func NodePoolHashCheck(l Lookup, opts ...ExplainOption) drift.Check {
	cfg := newExplainConfig(opts)
	return drift.CheckFunc(func(_ context.Context, obj metav1.Object) (*drift.Reason, error) {
		nc, np := claimAndPool(l, obj)
		if nc == nil || np == nil {
			return nil, nil
		}
		stamped, okHash := nc.Annotations[karpv1.NodePoolHashAnnotationKey]
		version, okVersion := nc.Annotations[karpv1.NodePoolHashVersionAnnotationKey]
		if !okHash || !okVersion {
			return nil, nil
		}
		if compare, _ := StampRule(np.Annotations[karpv1.NodePoolHashVersionAnnotationKey], version, NodePoolHashVersion,
			hasCondition(nc, karpv1.ConditionTypeDrifted)); !compare {
			return nil, nil
		}
		want := controllerHash(np)
		if stamped == want {
			return nil, nil
		}
		r := &drift.Reason{
			Name: drift.ReasonNameNodePoolDrifted,
			Evidence: []drift.Evidence{{Kind: drift.EvidenceKindHash, Key: karpv1.NodePoolHashAnnotationKey,
				Want: want, Got: stamped, Detail: "hash version " + version}},
		}
		if version != NodePoolHashVersion {
			r.Message = fmt.Sprintf("NodePool %s: stamped with hash version %s and already drifted before Karpenter moved to %s; Karpenter keeps it drifted",
				np.Name, errtext.Quote(version), NodePoolHashVersion)
			return r, nil
		}
		old, source := cfg.previousTemplate(np, stamped)
		if old == nil {
			r.Message = fmt.Sprintf("NodePool %s's template changed since this NodeClaim was made (hash %s, now %s); which fields is unknown: no previous NodePool with hash %s was given",
				np.Name, stamped, want, stamped)
			if written := writtenSince(np, nc.CreationTimestamp.Time); len(written) > 0 && !nc.CreationTimestamp.IsZero() {
				r.Message += "; written since it was made (managedFields): " + strings.Join(written, ", ")
				for _, w := range written {
					path, _, _ := strings.Cut(w, " ")
					r.Evidence = append(r.Evidence, drift.Evidence{Kind: drift.EvidenceKindField, Key: path, Detail: "written since: " + w[len(path)+1:]})
				}
			} else if len(np.ManagedFields) == 0 {
				r.Message += " (the NodePool has no managedFields, which say who wrote which field when: kubectl get leaves them out unless given --show-managed-fields)"
			}
			return r, nil
		}
		changes := ChangedTemplateFields(old, &np.Spec.Template)
		paths := make([]string, 0, len(changes))
		for _, c := range changes {
			paths = append(paths, c.Path)
			r.Evidence = append(r.Evidence, drift.Evidence{Kind: drift.EvidenceKindField, Key: c.Path, Want: c.New, Got: c.Old, Detail: "changed"})
		}
		r.Message = fmt.Sprintf("NodePool %s's template changed since this NodeClaim was made (previous template from %s): %s",
			np.Name, source, strings.Join(paths, ", "))
		return r, nil
	})
}

// RequirementsCheck is Karpenter's requirements drift: the NodeClaim's
// labels (deprecated well-known keys normalised, as Karpenter does) no
// longer satisfy its NodePool's spec.template.spec.requirements
// (drift.Requirements with Karpenter's label aliases; minValues is not a
// constraint on one NodeClaim and is ignored, as Karpenter does here). A
// requirement drift.Requirements cannot read makes the check an error
// wrapping ErrCannotTell.
func RequirementsCheck(l Lookup) drift.Check {
	return drift.CheckFunc(func(ctx context.Context, obj metav1.Object) (*drift.Reason, error) {
		nc, np := claimAndPool(l, obj)
		if nc == nil || np == nil {
			return nil, nil
		}
		aliases := drift.KarpenterLabelAliases()
		conflicts := conflictingLabels(nc.GetLabels(), aliases)
		reqs := make([]corev1.NodeSelectorRequirement, 0, len(np.Spec.Template.Spec.Requirements))
		onConflict := map[string][]karpv1.NodeSelectorRequirementWithMinValues{}
		for _, r := range np.Spec.Template.Spec.Requirements {
			key := r.Key
			if cur, ok := aliases[key]; ok {
				key = cur
			}
			if _, ok := conflicts[key]; ok {
				onConflict[key] = append(onConflict[key], r)
				continue
			}
			reqs = append(reqs, corev1.NodeSelectorRequirement{Key: r.Key, Operator: r.Operator, Values: r.Values})
		}
		var ev []drift.Evidence
		for _, key := range slices.Sorted(maps.Keys(onConflict)) {
			// Karpenter intersects the two labels' values, which leaves
			// none; the NodePool's requirements on the key, intersected
			// too, accept that only as NotIn or DoesNotExist.
			if acceptsNoValue(onConflict[key]) {
				continue
			}
			texts := make([]string, len(onConflict[key]))
			for i, r := range onConflict[key] {
				texts[i] = requirementText(r)
			}
			ev = append(ev, drift.Evidence{Kind: drift.EvidenceKindLabel, Key: key, Want: strings.Join(texts, " and "), Got: conflicts[key],
				Detail: "deprecated and stable labels disagree: Karpenter intersects them to no value"})
		}
		check, err := drift.NewRequirements(reqs, drift.WithLabelAliases(aliases), drift.WithLabelsOf(normalizedLabels))
		if err != nil {
			return nil, fmt.Errorf("%w: NodePool %s: spec.template.spec.requirements: %w", ErrCannotTell, np.Name, err)
		}
		r, err := check.Check(ctx, nc)
		if err != nil {
			return nil, err
		}
		if len(ev) > 0 {
			if r == nil {
				r = &drift.Reason{Name: drift.ReasonNameRequirementsDrifted}
			}
			r.Evidence = append(ev, r.Evidence...)
			keys := make([]string, len(r.Evidence))
			for i, e := range r.Evidence {
				keys[i] = e.Key
			}
			r.Message = fmt.Sprintf("labels no longer satisfy the requirements on %s", strings.Join(keys, ", "))
		}
		if r != nil {
			r.Message = fmt.Sprintf("NodePool %s: %s", np.Name, r.Message)
		}
		return r, nil
	})
}

// conflictingLabels returns, by stable key, the well-known labels that a
// NodeClaim carries under both its deprecated and its stable key with
// different values ("beta.kubernetes.io/arch=amd64,
// kubernetes.io/arch=arm64"). Karpenter's label requirements normalise
// the deprecated key and intersect the two values, which leaves none.
func conflictingLabels(labels map[string]string, aliases map[string]string) map[string]string {
	var out map[string]string
	for old, cur := range aliases {
		ov, okOld := labels[old]
		cv, okCur := labels[cur]
		if !okOld || !okCur || ov == cv {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[cur] = old + "=" + ov + ", " + cur + "=" + cv
	}
	return out
}

// acceptsNoValue reports whether requirements on one key, intersected as
// Karpenter's scheduling.Requirements does, leave an operator that a label
// with no value satisfies: DoesNotExist (no value allowed) or NotIn (all
// but some values). Exists, Gt and Lt need a value; In needs one of its
// values. A label with both keys and different values is what makes the
// intersection empty; this says whether the NodePool minds.
func acceptsNoValue(rs []karpv1.NodeSelectorRequirementWithMinValues) bool {
	complement, values := true, map[string]bool{} // Exists: every value
	for _, r := range rs {
		switch r.Operator {
		case corev1.NodeSelectorOpIn:
			in := map[string]bool{}
			for _, v := range r.Values {
				if complement != values[v] { // allowed so far
					in[v] = true
				}
			}
			complement, values = false, in
		case corev1.NodeSelectorOpNotIn:
			for _, v := range r.Values {
				if complement {
					values[v] = true
				} else {
					delete(values, v)
				}
			}
		case corev1.NodeSelectorOpDoesNotExist:
			complement, values = false, map[string]bool{}
		case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt, drift.OpGte, drift.OpLte:
			// Bounds leave a complement as it is (its operator stays
			// NotIn or Exists) and filter a finite set.
			if complement || len(r.Values) != 1 {
				continue
			}
			bound, err := strconv.Atoi(r.Values[0])
			for v := range values {
				n, nerr := strconv.Atoi(v)
				keep := err == nil && nerr == nil && map[corev1.NodeSelectorOperator]bool{
					corev1.NodeSelectorOpGt: n > bound, corev1.NodeSelectorOpLt: n < bound, drift.OpGte: n >= bound, drift.OpLte: n <= bound}[r.Operator]
				if !keep {
					delete(values, v)
				}
			}
		}
		// Exists intersects as the identity.
	}
	if complement {
		return len(values) > 0 // NotIn; with no exclusion it is Exists
	}
	return len(values) == 0 // DoesNotExist; In otherwise
}

// requirementText writes a requirement as the table shows it.
func requirementText(r karpv1.NodeSelectorRequirementWithMinValues) string {
	if len(r.Values) == 0 {
		return r.Key + " " + string(r.Operator)
	}
	return r.Key + " " + string(r.Operator) + " " + strings.Join(r.Values, ",")
}

// NodeClassHashCheck is the AWS provider's static drift: the NodeClaim's
// karpenter.k8s.aws/ec2nodeclass-hash against its EC2NodeClass's, judged
// in the steady state Karpenter's hash controller converges to (it
// rewrites the EC2NodeClass's annotation to nc.Hash(caBundle) at the
// current hash version on every reconcile, and re-stamps NodeClaims as
// StampRule says). The hash includes the cluster's CA bundle, which a dump
// does not hold:
//
//   - with WithClusterCABundle, the EC2NodeClass's hash is computed
//     (EC2NodeClassHash), so an annotation not yet rewritten (an edited
//     spec, a GitOps manifest) does not hide drift;
//   - without it, the annotation is used when it is at the current hash
//     version; when the verdict depends on a hash Karpenter has yet to
//     write (no annotation, or another version, against a NodeClaim
//     stamped at the current one), the check says it cannot tell
//     (ErrCannotTell), and Explain still runs the provider's other checks,
//     as Karpenter does after static drift.
//
// A NodeClaim stamped with an old version and already drifted stays
// drifted whatever the hash.
func NodeClassHashCheck(l Lookup, opts ...ExplainOption) drift.Check {
	cfg := newExplainConfig(opts)
	return drift.CheckFunc(func(_ context.Context, obj metav1.Object) (*drift.Reason, error) {
		nc, class := claimAndClass(l, obj)
		if nc == nil || class == nil {
			return nil, nil
		}
		annotated, okAnnotated := class.Annotations[awsv1.AnnotationEC2NodeClassHash]
		classVersion := class.Annotations[awsv1.AnnotationEC2NodeClassHashVersion]
		got, okGot := nc.Annotations[awsv1.AnnotationEC2NodeClassHash]
		gotVersion, okGotVersion := nc.Annotations[awsv1.AnnotationEC2NodeClassHashVersion]
		if !okGot || !okGotVersion {
			return nil, nil
		}
		drifted := hasCondition(nc, karpv1.ConditionTypeDrifted)
		if compare, _ := StampRule(classVersion, gotVersion, EC2NodeClassHashVersion, drifted); !compare {
			return nil, nil
		}
		if gotVersion != EC2NodeClassHashVersion {
			// Compared only because it is drifted and keeps its old hash,
			// which no current hash equals.
			return &drift.Reason{
				Name: drift.ReasonNameNodeClassDrift,
				Message: fmt.Sprintf("EC2NodeClass %s: stamped with hash version %s and already drifted before Karpenter moved to %s; Karpenter keeps its old hash, so it stays drifted",
					class.Name, errtext.Quote(gotVersion), EC2NodeClassHashVersion),
				Evidence: []drift.Evidence{{Kind: drift.EvidenceKindHash, Key: awsv1.AnnotationEC2NodeClassHash, Got: got, Detail: "hash version " + gotVersion}},
			}, nil
		}
		want, source := annotated, ""
		switch {
		case cfg.caBundle != nil:
			want, source = EC2NodeClassHash(class, cfg.caBundle), ", computed with the cluster CA bundle"
		case !okAnnotated || classVersion != EC2NodeClassHashVersion:
			return nil, hashUnknownError{fmt.Sprintf("EC2NodeClass %s has no %s hash annotation yet, and its hash includes the cluster CA bundle, which was not given",
				class.Name, EC2NodeClassHashVersion)}
		}
		if want == got {
			return nil, nil
		}
		return &drift.Reason{
			Name: drift.ReasonNameNodeClassDrift,
			Message: fmt.Sprintf("EC2NodeClass %s's spec changed since this NodeClaim was made (hash %s, now %s%s)",
				class.Name, errtext.Quote(got), errtext.Quote(want), source),
			Evidence: []drift.Evidence{{Kind: drift.EvidenceKindHash, Key: awsv1.AnnotationEC2NodeClassHash, Want: want, Got: got,
				Detail: "hash version " + gotVersion}},
		}, nil
	})
}

// hashUnknownError is a check that cannot tell because a hash Karpenter
// has yet to write is unknown here; unlike the provider's other checks'
// errors, it does not stop the ones after it. It wraps ErrCannotTell.
type hashUnknownError struct{ msg string }

func (e hashUnknownError) Error() string { return ErrCannotTell.Error() + ": " + e.msg }
func (e hashUnknownError) Unwrap() error { return ErrCannotTell }

// StampRule says whether Karpenter compares a NodeClaim's stamped hash
// with its owner's (NodePool or EC2NodeClass) current one, given the
// owner's hash-version annotation, the NodeClaim's, the version Karpenter
// writes today (current) and whether the NodeClaim carries a Drifted
// condition, as Karpenter's hash controllers and drift rules do:
//
//   - an owner not at current is re-stamped on the controller's next
//     reconcile, and with it every NodeClaim not at current: those without
//     a Drifted condition get the owner's new hash (not compared: not
//     drifted), drifted ones keep their old hash (compared: still
//     drifted);
//   - an owner at current compares only NodeClaims at current; one
//     stamped with another version is never compared again.
//
// note says, when not compared, why, for a report.
func StampRule(ownerVersion, claimVersion, current string, drifted bool) (compare bool, note string) {
	switch {
	case claimVersion == current:
		return true, ""
	case ownerVersion != current && drifted:
		return true, ""
	case ownerVersion != current:
		return false, fmt.Sprintf("stamped with hash version %s: Karpenter re-stamps it with %s and the current hash, not drift",
			errtext.Quote(claimVersion), current)
	default:
		return false, fmt.Sprintf("stamped with hash version %s while its owner is at %s: Karpenter never compares them, not drift",
			errtext.Quote(claimVersion), current)
	}
}

// normalizedLabels returns obj's labels with deprecated well-known keys
// (beta.kubernetes.io/arch, ...) also under their current names, as
// Karpenter's label requirements normalise them.
func normalizedLabels(obj metav1.Object) map[string]string {
	labels := obj.GetLabels()
	var out map[string]string
	for old, cur := range drift.KarpenterLabelAliases() {
		v, ok := labels[old]
		if _, has := labels[cur]; !ok || has {
			continue
		}
		if out == nil {
			out = maps.Clone(labels)
		}
		out[cur] = v
	}
	if out == nil {
		return labels
	}
	return out
}

// claimAndPool returns obj as a NodeClaim managed by the AWS provider and
// its NodePool, or nils.
func claimAndPool(l Lookup, obj metav1.Object) (*karpv1.NodeClaim, *karpv1.NodePool) {
	nc, ok := obj.(*karpv1.NodeClaim)
	if !ok || nc == nil || l == nil || !managed(nc) {
		return nil, nil
	}
	name, ok := nc.Labels[karpv1.NodePoolLabelKey]
	if !ok {
		return nil, nil
	}
	return nc, l.NodePool(name)
}

// claimAndClass returns obj as a NodeClaim managed by the AWS provider and
// its EC2NodeClass (through its NodePool's nodeClassRef, as the provider
// resolves it), or nils.
func claimAndClass(l Lookup, obj metav1.Object) (*karpv1.NodeClaim, *awsv1.EC2NodeClass) {
	nc, np := claimAndPool(l, obj)
	if nc == nil || np == nil || np.Spec.Template.Spec.NodeClassRef == nil {
		return nil, nil
	}
	class := l.EC2NodeClass(np.Spec.Template.Spec.NodeClassRef.Name)
	if class == nil || class.DeletionTimestamp != nil { // a terminating EC2NodeClass resolves as not found
		return nil, nil
	}
	return nc, class
}

// managed reports whether the AWS provider manages nc: its nodeClassRef
// names an EC2NodeClass.
func managed(nc *karpv1.NodeClaim) bool {
	ref := nc.Spec.NodeClassRef
	return ref != nil && ref.Group == GroupAWS && ref.Kind == "EC2NodeClass"
}

// hasCondition reports whether nc has a condition of type t (any status).
func hasCondition(nc *karpv1.NodeClaim, t string) bool {
	return slices.ContainsFunc(nc.Status.Conditions, func(c karpStatusCondition) bool { return c.Type == t })
}

// conditionTrue reports whether nc's condition t is True.
func conditionTrue(nc *karpv1.NodeClaim, t string) bool {
	return slices.ContainsFunc(nc.Status.Conditions, func(c karpStatusCondition) bool {
		return c.Type == t && c.Status == metav1.ConditionTrue
	})
}
