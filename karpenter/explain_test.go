package karpenter

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/upgradekit/upgradekit/drift"
)

func readFixture(t *testing.T) *Snapshot {
	t.Helper()
	f, err := os.Open("testdata/dump/cluster.yaml")
	require.NoError(t, err)
	defer f.Close()
	s, err := ReadDump(f)
	require.NoError(t, err)
	return s
}

func fixtureInstances(t *testing.T) InstanceLookup {
	t.Helper()
	f, err := os.Open("testdata/dump/instances.json")
	require.NoError(t, err)
	defer f.Close()
	list, err := ReadInstances(f)
	require.NoError(t, err)
	require.Len(t, list, 17)
	return Instances(list)
}

// fixtureOfferings are the fixture's instance type offerings: every
// instance type its NodeClaims run but m4.retired.
func fixtureOfferings(t *testing.T) Offerings {
	t.Helper()
	f, err := os.Open("testdata/dump/offerings.json")
	require.NoError(t, err)
	defer f.Close()
	o, err := ReadOfferings(f)
	require.NoError(t, err)
	require.NotContains(t, o, "m4.retired")
	return o
}

// reasonNames maps each NodeClaim to the names of its reasons.
func reasonNames(rep *Report) map[string][]drift.ReasonName {
	out := map[string][]drift.ReasonName{}
	for _, c := range rep.NodeClaims {
		var names []drift.ReasonName
		for _, r := range c.Reasons {
			names = append(names, r.Name)
		}
		out[c.Name] = names
	}
	return out
}

// TestExplainTheFixtureCluster runs Explain on a dump of a Karpenter
// cluster holding one NodeClaim per drift rule, NodeClaims that must not
// drift (up to date, not launched, re-stamped after a hash version change,
// an arm64 node on the arm64 image) and v1beta1 objects, and checks the
// reasons of every NodeClaim: each drifted one for the right reason, no
// false drift.
func TestExplainTheFixtureCluster(t *testing.T) {
	snap := readFixture(t)
	require.ElementsMatch(t, []string{"NodePool/legacy", "EC2NodeClass/legacy", "NodeClaim/legacy-a"}, snap.Converted)

	withoutInstances := map[string][]drift.ReasonName{
		"arm-a":      nil,
		"default-a":  {drift.ReasonNameNodePoolDrifted},
		"default-b":  {drift.ReasonNameAMIDrift},
		"default-c":  {drift.ReasonNameRequirementsDrifted},
		"default-d":  nil,
		"default-e":  nil,
		"default-f":  nil,
		"default-g":  {drift.ReasonNameNodeClassDrift},
		"default-h":  nil,
		"default-i":  nil,
		"legacy-a":   nil,
		"legacy-b":   {drift.ReasonNameNodePoolDrifted, drift.ReasonNameNodeClassDrift, drift.ReasonNameAMIDrift},
		"gpu-a":      {drift.ReasonNameAMIDrift},
		"pg-a":       {drift.ReasonNamePlacementGroupDrift},
		"reserved-a": {drift.ReasonNameRequirementsDrifted},
		"gone-a":     nil,
	}
	withInstances := map[string][]drift.ReasonName{}
	for k, v := range withoutInstances {
		withInstances[k] = v
	}
	withInstances["default-d"] = []drift.ReasonName{drift.ReasonNameSecurityGroupDrift}
	withInstances["default-e"] = []drift.ReasonName{drift.ReasonNameSubnetDrift}
	withInstances["reserved-a"] = []drift.ReasonName{drift.ReasonNameRequirementsDrifted, drift.ReasonNameCapacityReservationDrift}
	withOfferings := map[string][]drift.ReasonName{}
	for k, v := range withInstances {
		withOfferings[k] = v
	}
	withOfferings["gone-a"] = []drift.ReasonName{InstanceTypeNotFound}

	for _, tc := range []struct {
		name    string
		opts    []ExplainOption
		want    map[string][]drift.ReasonName
		drifted int
	}{
		{"dump only", nil, withoutInstances, 8},
		{"with instances", []ExplainOption{WithInstances(fixtureInstances(t))}, withInstances, 10},
		{"with instances and offerings", []ExplainOption{WithInstances(fixtureInstances(t)), WithOfferings(fixtureOfferings(t))}, withOfferings, 11},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := Explain(t.Context(), snap, tc.opts...)
			require.NoError(t, err)
			require.Empty(t, cmp.Diff(tc.want, reasonNames(rep)))
			require.Equal(t, tc.drifted, rep.Drifted)
			for _, c := range rep.NodeClaims {
				if c.Name == "gone-a" && tc.want["gone-a"] == nil {
					// Karpenter says InstanceTypeNotFound; without offerings
					// that cannot be checked.
					require.Len(t, c.CannotTell, 1, c.Name)
					continue
				}
				require.Empty(t, c.CannotTell, c.Name)
				for _, r := range c.Reasons {
					require.NotEmpty(t, r.Message, "%s %s", c.Name, r.Name)
				}
			}
		})
	}
}

// TestExplainSaysWhy checks the evidence and messages of the fixture's
// drifted NodeClaims.
func TestExplainSaysWhy(t *testing.T) {
	snap := readFixture(t)
	rep, err := Explain(t.Context(), snap, WithInstances(fixtureInstances(t)))
	require.NoError(t, err)
	by := map[string]ClaimReport{}
	for _, c := range rep.NodeClaims {
		by[c.Name] = c
	}

	// Static drift names the field, from the last-applied configuration
	// that hashes to the NodeClaim's stamp.
	a := by["default-a"].Reasons[0]
	require.Contains(t, a.Message, "kubectl.kubernetes.io/last-applied-configuration")
	var fields []drift.Evidence
	for _, e := range a.Evidence {
		if e.Kind == drift.EvidenceKindField {
			fields = append(fields, e)
		}
	}
	require.Len(t, fields, 1, "only the label changed; the requirements are not hashed")
	require.Contains(t, fields[0].Key, "team")
	require.Equal(t, "a", fields[0].Got)
	require.Equal(t, "b", fields[0].Want)

	b := by["default-b"].Reasons[0]
	require.Contains(t, b.Message, "ami-0old")
	require.Contains(t, b.Message, "ami-0new")
	require.Contains(t, b.Message, "still selected but comes later")
	require.Equal(t, "AMIDrift", by["default-b"].Condition)

	require.Contains(t, by["default-c"].Reasons[0].Message, "karpenter.sh/capacity-type")
	require.Contains(t, by["default-d"].Reasons[0].Message, "now also selects sg-02")
	require.Contains(t, by["default-e"].Reasons[0].Message, "subnet-0z")
	require.Contains(t, by["default-g"].Reasons[0].Message, "3333333333333333333")

	lb := by["legacy-b"]
	require.Contains(t, lb.Reasons[0].Message, "keeps it drifted")
	require.Contains(t, lb.Reasons[1].Message, "keeps its old hash")
	require.Contains(t, lb.Reasons[2].Message, "ami-0l0 is no longer selected")

	require.Contains(t, by["gpu-a"].Reasons[0].Message, "none of the 3 images in status.amis fits")

	require.Contains(t, strings.Join(by["legacy-a"].Notes, "\n"), "NodePool stamped with hash version \"v2\": Karpenter re-stamps it")
	require.Contains(t, strings.Join(by["legacy-a"].Notes, "\n"), "EC2NodeClass stamped with hash version \"v2\": Karpenter re-stamps it")
	require.Contains(t, strings.Join(by["default-i"].Notes, "\n"), "never compares them")
	require.Contains(t, strings.Join(by["default-h"].Notes, "\n"), "not launched")
	require.Contains(t, strings.Join(rep.Notes, "\n"), "NodePool legacy's hash annotation")
}

// TestExplainWithPreviousNodePools: a previous NodePool given by the
// caller explains static drift when it hashes to the stamp, and is
// ignored when it does not.
func TestExplainWithPreviousNodePools(t *testing.T) {
	snap := readFixture(t)
	np := snap.NodePool("default")
	delete(np.Annotations, AnnotationLastApplied)

	rep, err := Explain(t.Context(), snap)
	require.NoError(t, err)
	a := rep.NodeClaims[indexOf(rep, "default-a")].Reasons[0]
	require.Contains(t, a.Message, "which fields is unknown")
	if len(np.ManagedFields) == 0 {
		require.Contains(t, a.Message, "--show-managed-fields", "says how to get the fallback")
	} else {
		np.ManagedFields = nil
		rep, err = Explain(t.Context(), snap)
		require.NoError(t, err)
		require.Contains(t, rep.NodeClaims[indexOf(rep, "default-a")].Reasons[0].Message, "--show-managed-fields", "says how to get the fallback")
		snap = readFixture(t)
		np = snap.NodePool("default")
		delete(np.Annotations, AnnotationLastApplied)
	}

	prev := *np.DeepCopy()
	prev.Spec.Template.Labels = map[string]string{"team": "a"}
	unrelated := *np.DeepCopy()
	unrelated.Spec.Template.Labels = map[string]string{"team": "c"}
	rep, err = Explain(t.Context(), snap, WithPreviousNodePools(unrelated, prev))
	require.NoError(t, err)
	a = rep.NodeClaims[indexOf(rep, "default-a")].Reasons[0]
	require.Contains(t, a.Message, "the previous NodePools given")
	require.Contains(t, a.Message, "team")
}

func indexOf(rep *Report, name string) int {
	for i, c := range rep.NodeClaims {
		if c.Name == name {
			return i
		}
	}
	return -1
}

// TestExplainCannotTell: an EC2NodeClass without resolved images makes
// the AMI check unable to judge; that is reported, not drift, and, as in
// Karpenter, the provider's later checks (security groups, subnets) are
// not run: default-d's security group drift is not reported.
func TestExplainCannotTell(t *testing.T) {
	snap := readFixture(t)
	snap.EC2NodeClass("default").Status.AMIs = nil
	rep, err := Explain(t.Context(), snap, WithInstances(fixtureInstances(t)))
	require.NoError(t, err)
	for _, name := range []string{"default-f", "default-d"} {
		c := rep.NodeClaims[indexOf(rep, name)]
		require.False(t, c.Drifted(), name)
		require.Len(t, c.CannotTell, 1)
		require.ErrorContains(t, errors.New(c.CannotTell[0]), "status.amis is empty")
		require.Contains(t, strings.Join(c.Notes, "\n"), "later checks not run")
	}
	_, err = AMICheck(snap).Check(t.Context(), &snap.NodeClaims[indexOf(rep, "default-f")])
	require.ErrorIs(t, err, ErrCannotTell)
}

// TestExplainHashVersions follows Karpenter's hash controllers through a
// provider upgrade that changes the EC2NodeClass hash version: before the
// EC2NodeClass is re-stamped, a NodeClaim with another hash is re-stamped
// (not drifted) unless already drifted; after, a NodeClaim left at an old
// version is never compared.
func TestExplainHashVersions(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		classVersion, claimVersion string
		drifted                    bool
		want                       []drift.ReasonName
	}{
		{"class not yet re-stamped, claim not drifted", "v3", "v3", false, nil},
		{"class not yet re-stamped, claim drifted", "v3", "v3", true, []drift.ReasonName{drift.ReasonNameNodeClassDrift}},
		{"class re-stamped, claim at an old version", "v5", "v3", true, nil},
		{"both current, hashes differ", "v5", "v5", false, []drift.ReasonName{drift.ReasonNameNodeClassDrift}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := readFixture(t)
			class := snap.EC2NodeClass("default")
			class.Annotations[awsv1.AnnotationEC2NodeClassHashVersion] = tc.classVersion
			nc := &snap.NodeClaims[slices.IndexFunc(snap.NodeClaims, func(c karpv1.NodeClaim) bool { return c.Name == "default-f" })]
			nc.Annotations[awsv1.AnnotationEC2NodeClassHash] = "5555555555555555555"
			nc.Annotations[awsv1.AnnotationEC2NodeClassHashVersion] = tc.claimVersion
			if tc.drifted {
				nc.Status.Conditions = append(nc.Status.Conditions, karpStatusCondition{Type: karpv1.ConditionTypeDrifted, Status: metav1.ConditionTrue, Reason: "AMIDrift"})
			}
			r, err := NodeClassHashCheck(snap).Check(t.Context(), nc)
			require.NoError(t, err)
			var got []drift.ReasonName
			if r != nil {
				got = append(got, r.Name)
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestExplainArguments(t *testing.T) {
	_, err := Explain(t.Context(), nil)
	require.ErrorIs(t, err, ErrInvalidArgument)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = Explain(ctx, readFixture(t))
	require.True(t, errors.Is(err, context.Canceled), err)
}

// TestExplainSaysNotCheckedOnce: without instances the security group and
// subnet checks are skipped for every NodeClaim; the report says so once.
func TestExplainSaysNotCheckedOnce(t *testing.T) {
	const note = "security groups and subnets not checked: no instances given"
	rep, err := Explain(t.Context(), readFixture(t))
	require.NoError(t, err)
	n := 0
	for _, s := range rep.Notes {
		if s == note {
			n++
		}
	}
	require.Equal(t, 1, n, "%q", rep.Notes)
	for _, c := range rep.NodeClaims {
		require.NotContains(t, c.Notes, note, c.Name)
	}
	rep, err = Explain(t.Context(), readFixture(t), WithInstances(fixtureInstances(t)))
	require.NoError(t, err)
	require.NotContains(t, rep.Notes, note)
}

// TestExplainUnknownWhereKarpenterSaysDrifted: a NodeClaim Karpenter
// marked SecurityGroupDrift is "cannot tell" without instances, not "not
// drifted"; with them it is drifted for that reason.
func TestExplainUnknownWhereKarpenterSaysDrifted(t *testing.T) {
	snap := readFixture(t)
	nc := &snap.NodeClaims[slices.IndexFunc(snap.NodeClaims, func(c karpv1.NodeClaim) bool { return c.Name == "default-d" })]
	nc.Status.Conditions = append(nc.Status.Conditions, karpStatusCondition{Type: karpv1.ConditionTypeDrifted, Status: metav1.ConditionTrue, Reason: string(drift.ReasonNameSecurityGroupDrift)})

	rep, err := Explain(t.Context(), snap)
	require.NoError(t, err)
	cr := rep.NodeClaims[indexOf(rep, "default-d")]
	require.False(t, cr.Drifted())
	require.Len(t, cr.CannotTell, 1)
	require.Contains(t, cr.CannotTell[0], "Karpenter's Drifted condition says SecurityGroupDrift, which needs the instances")

	rep, err = Explain(t.Context(), snap, WithInstances(fixtureInstances(t)))
	require.NoError(t, err)
	cr = rep.NodeClaims[indexOf(rep, "default-d")]
	require.True(t, cr.Drifted())
	require.Equal(t, drift.ReasonNameSecurityGroupDrift, cr.Reasons[0].Name)
	require.Empty(t, cr.CannotTell)
}

// TestExplainSummarisesPerNodePool: the report counts each NodePool's
// NodeClaims, drifted ones by the reason Karpenter reports, unknown ones
// and those being replaced.
func TestExplainSummarisesPerNodePool(t *testing.T) {
	snap := readFixture(t)
	now := metav1.Now()
	snap.NodeClaims[slices.IndexFunc(snap.NodeClaims, func(c karpv1.NodeClaim) bool { return c.Name == "default-b" })].DeletionTimestamp = &now
	rep, err := Explain(t.Context(), snap, WithInstances(fixtureInstances(t)))
	require.NoError(t, err)
	want := map[string]NodePoolSummary{}
	for _, c := range rep.NodeClaims {
		sum := want[c.NodePool]
		sum.Name = c.NodePool
		sum.NodeClaims++
		if sum.ByReason == nil {
			sum.ByReason = map[drift.ReasonName]int{}
		}
		if c.Drifted() {
			sum.Drifted++
			sum.ByReason[c.Reasons[0].Name]++
		} else if len(c.CannotTell) > 0 {
			sum.Unknown++
		}
		if c.Name == "default-b" {
			sum.Replacing++
		}
		want[c.NodePool] = sum
	}
	require.Len(t, rep.NodePools, len(want))
	total := 0
	for _, got := range rep.NodePools {
		require.Equal(t, want[got.Name], got)
		total += got.Drifted
	}
	require.Equal(t, rep.Drifted, total)
	// The fixture's figures (default-b, being deleted, is not judged;
	// gone-a, without offerings, is unknown).
	require.Equal(t, []NodePoolSummary{
		{Name: "default", NodeClaims: 14, Drifted: 8, Unknown: 1, Replacing: 1, ByReason: map[drift.ReasonName]int{
			drift.ReasonNameAMIDrift: 1, drift.ReasonNameNodeClassDrift: 1, drift.ReasonNameNodePoolDrifted: 1, drift.ReasonNameRequirementsDrifted: 2, drift.ReasonNameSecurityGroupDrift: 1,
			drift.ReasonNameSubnetDrift: 1, drift.ReasonNamePlacementGroupDrift: 1}},
		{Name: "legacy", NodeClaims: 2, Drifted: 1, ByReason: map[drift.ReasonName]int{drift.ReasonNameNodePoolDrifted: 1}},
	}, rep.NodePools)
}
