package karpenter

import (
	"slices"
	"testing"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	"github.com/stretchr/testify/require"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/upgradekit/upgradekit/drift"
)

// TestNodeClassHashCheckAsKarpenterWillStampIt: the EC2NodeClass hash is
// judged as Karpenter's hash controller will write it, with the
// provider's own nc.Hash(caBundle) as the oracle: computed when the CA
// bundle is given (a stale or missing annotation hides nothing), "cannot
// tell" without it where the verdict depends on a hash not yet written.
func TestNodeClassHashCheckAsKarpenterWillStampIt(t *testing.T) {
	const ca = "-----BEGIN CERTIFICATE-----\nMIIBdummy\n-----END CERTIFICATE-----\n"
	caPtr := new(string)
	*caPtr = ca
	for _, tc := range []struct {
		name string
		// class: the EC2NodeClass's hash annotation ("" none, "karpenter"
		// Karpenter's hash of it, else the value) and version; claim: its
		// stamp (same spelling).
		classHash, classVersion, claimHash string
		edit                               bool // the spec edited after the class's annotation was written
		withCA                             bool
		want                               []drift.ReasonName
		cannotTell                         bool
	}{
		{name: "no annotation yet, no CA bundle", claimHash: "karpenter", cannotTell: true},
		{name: "no annotation yet, CA bundle, same hash", claimHash: "karpenter", withCA: true},
		{name: "no annotation yet, CA bundle, other hash", claimHash: "123", withCA: true, want: []drift.ReasonName{drift.ReasonNameNodeClassDrift}},
		{name: "annotation at an old version, no CA bundle", classHash: "999", classVersion: "v4", claimHash: "karpenter", cannotTell: true},
		{name: "annotation at an old version, CA bundle", classHash: "999", classVersion: "v4", claimHash: "karpenter", withCA: true},
		{name: "stale annotation, CA bundle", classHash: "karpenter", classVersion: EC2NodeClassHashVersion, claimHash: "karpenter", edit: true, withCA: true,
			want: []drift.ReasonName{drift.ReasonNameNodeClassDrift}},
		{name: "current annotation, no CA bundle: trusted", classHash: "karpenter", classVersion: EC2NodeClassHashVersion, claimHash: "karpenter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := readFixture(t)
			class := snap.EC2NodeClass("default")
			delete(class.Annotations, awsv1.AnnotationEC2NodeClassHash)
			delete(class.Annotations, awsv1.AnnotationEC2NodeClassHashVersion)
			karpenters := class.Hash(caPtr) // the provider's own hash, before any edit
			spell := func(v string) string {
				if v == "karpenter" {
					return karpenters
				}
				return v
			}
			if tc.classHash != "" {
				class.Annotations[awsv1.AnnotationEC2NodeClassHash] = spell(tc.classHash)
				class.Annotations[awsv1.AnnotationEC2NodeClassHashVersion] = tc.classVersion
			}
			if tc.edit {
				class.Spec.Role = "edited-" + class.Spec.Role
				require.NotEqual(t, karpenters, class.Hash(caPtr), "the edit changes Karpenter's hash")
			}
			nc := &snap.NodeClaims[slices.IndexFunc(snap.NodeClaims, func(c karpv1.NodeClaim) bool { return c.Name == "default-f" })]
			nc.Annotations[awsv1.AnnotationEC2NodeClassHash] = spell(tc.claimHash)
			nc.Annotations[awsv1.AnnotationEC2NodeClassHashVersion] = EC2NodeClassHashVersion
			var opts []ExplainOption
			if tc.withCA {
				opts = append(opts, WithClusterCABundle(ca))
			}
			r, err := NodeClassHashCheck(snap, opts...).Check(t.Context(), nc)
			if tc.cannotTell {
				require.ErrorIs(t, err, ErrCannotTell)
				require.Contains(t, err.Error(), "CA bundle")
			} else {
				require.NoError(t, err)
			}
			var got []drift.ReasonName
			if r != nil {
				got = append(got, r.Name)
				require.Equal(t, class.Hash(caPtr), r.Evidence[0].Want, "Karpenter's hash of the class as it is")
			}
			require.Equal(t, tc.want, got)

			// Explain runs the provider's other checks after it, as
			// Karpenter does after static drift.
			rep, err := Explain(t.Context(), snap, opts...)
			require.NoError(t, err)
			cr := rep.NodeClaims[slices.IndexFunc(rep.NodeClaims, func(c ClaimReport) bool { return c.Name == "default-f" })]
			for _, n := range cr.Notes {
				require.NotContains(t, n, "later checks not run")
			}
			require.Equal(t, tc.cannotTell, len(cr.CannotTell) > 0, "%v", cr.CannotTell)
		})
	}
}
