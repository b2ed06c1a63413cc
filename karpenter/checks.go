package karpenter

import (
	"context"
	"fmt"
	"slices"
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
// (NodePoolHash), compared only when both carry the same hash version. It
// judges the steady state Karpenter converges to: the hash is computed
// from the NodePool's spec rather than read from its annotation (which
// Karpenter's hash controller rewrites on its next reconcile), and a
// NodeClaim stamped with an older hash version (v1beta1's v2) is
// re-stamped by Karpenter, so it is not drifted, unless it already
// carries a Drifted condition: then Karpenter keeps its old hash and it
// stays drifted. The reason's evidence names the template fields that
// changed when a previous template with the NodeClaim's hash is known
// (WithPreviousNodePools, or the NodePool's
// kubectl.kubernetes.io/last-applied-configuration); without one, the
// hashed fields a field manager wrote after the NodeClaim was made, from
// the NodePool's managedFields (who and when, not the old value).
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
		if version != NodePoolHashVersion && !hasCondition(nc, karpv1.ConditionTypeDrifted) {
			return nil, nil
		}
		want := NodePoolHash(np)
		if stamped == want {
			return nil, nil
		}
		r := &drift.Reason{
			Name: drift.NodePoolDrifted,
			Evidence: []drift.Evidence{{Kind: drift.EvidenceHash, Key: karpv1.NodePoolHashAnnotationKey,
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
					r.Evidence = append(r.Evidence, drift.Evidence{Kind: drift.EvidenceField, Key: path, Detail: "written since: " + w[len(path)+1:]})
				}
			}
			return r, nil
		}
		changes := ChangedTemplateFields(old, &np.Spec.Template)
		paths := make([]string, 0, len(changes))
		for _, c := range changes {
			paths = append(paths, c.Path)
			r.Evidence = append(r.Evidence, drift.Evidence{Kind: drift.EvidenceField, Key: c.Path, Want: c.New, Got: c.Old, Detail: "changed"})
		}
		r.Message = fmt.Sprintf("NodePool %s's template changed since this NodeClaim was made (previous template from %s): %s",
			np.Name, source, strings.Join(paths, ", "))
		return r, nil
	})
}

// RequirementsCheck is Karpenter's requirements drift: the NodeClaim's
// labels no longer satisfy its NodePool's spec.template.spec.requirements
// (drift.Requirements with Karpenter's label aliases; minValues is not a
// constraint on one NodeClaim and is ignored, as Karpenter does here).
// Operators drift.Requirements does not know (Gte, Lte) make the check an
// error: it cannot tell.
func RequirementsCheck(l Lookup) drift.Check {
	return drift.CheckFunc(func(ctx context.Context, obj metav1.Object) (*drift.Reason, error) {
		nc, np := claimAndPool(l, obj)
		if nc == nil || np == nil {
			return nil, nil
		}
		reqs := make([]corev1.NodeSelectorRequirement, 0, len(np.Spec.Template.Spec.Requirements))
		for _, r := range np.Spec.Template.Spec.Requirements {
			reqs = append(reqs, corev1.NodeSelectorRequirement{Key: r.Key, Operator: r.Operator, Values: r.Values})
		}
		check, err := drift.NewRequirements(reqs, drift.WithLabelAliases(drift.KarpenterLabelAliases()))
		if err != nil {
			return nil, fmt.Errorf("NodePool %s: spec.template.spec.requirements: %w", np.Name, err)
		}
		r, err := check.Check(ctx, nc)
		if r != nil {
			r.Message = fmt.Sprintf("NodePool %s: %s", np.Name, r.Message)
		}
		return r, err
	})
}

// NodeClassHashCheck is the AWS provider's static drift: the NodeClaim's
// karpenter.k8s.aws/ec2nodeclass-hash against its EC2NodeClass's, read
// from the annotations as Karpenter does (the EC2NodeClass hash includes
// the cluster's CA bundle, which a dump does not hold; EC2NodeClassHash
// computes it when the caller knows it). An older hash version is
// re-stamped, not drifted, unless the NodeClaim is already drifted.
func NodeClassHashCheck(l Lookup) drift.Check {
	return drift.CheckFunc(func(_ context.Context, obj metav1.Object) (*drift.Reason, error) {
		nc, class := claimAndClass(l, obj)
		if nc == nil || class == nil {
			return nil, nil
		}
		want, okWant := class.Annotations[awsv1.AnnotationEC2NodeClassHash]
		wantVersion, okWantVersion := class.Annotations[awsv1.AnnotationEC2NodeClassHashVersion]
		got, okGot := nc.Annotations[awsv1.AnnotationEC2NodeClassHash]
		gotVersion, okGotVersion := nc.Annotations[awsv1.AnnotationEC2NodeClassHashVersion]
		if !okWant || !okWantVersion || !okGot || !okGotVersion || want == got {
			return nil, nil
		}
		if gotVersion != wantVersion && !hasCondition(nc, karpv1.ConditionTypeDrifted) {
			return nil, nil
		}
		return &drift.Reason{
			Name: drift.NodeClassDrift,
			Message: fmt.Sprintf("EC2NodeClass %s's spec changed since this NodeClaim was made (hash %s, now %s)",
				class.Name, errtext.Quote(got), errtext.Quote(want)),
			Evidence: []drift.Evidence{{Kind: drift.EvidenceHash, Key: awsv1.AnnotationEC2NodeClassHash, Want: want, Got: got,
				Detail: "hash version " + gotVersion}},
		}, nil
	})
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
	return nc, l.EC2NodeClass(np.Spec.Template.Spec.NodeClassRef.Name)
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
