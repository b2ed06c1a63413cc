package karpenter

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/scheduling"
)

const offeringsJSON = `{"InstanceTypeOfferings": [
  {"InstanceType": "m5.large", "LocationType": "availability-zone", "Location": "us-west-2a"},
  {"InstanceType": "m5.large", "LocationType": "availability-zone", "Location": "us-west-2b"},
  {"InstanceType": "c7g.large", "LocationType": "availability-zone", "Location": "us-west-2a"}]}`

func TestReadOfferings(t *testing.T) {
	o, err := ReadOfferings(strings.NewReader(offeringsJSON))
	require.NoError(t, err)
	require.Equal(t, Offerings{"m5.large": {"us-west-2a", "us-west-2b"}, "c7g.large": {"us-west-2a"}}, o)
	for in, want := range map[string]string{
		`{"InstanceTypeOfferings": [{"LocationType": "availability-zone", "Location": "x"}]}`:                          "InstanceTypeOfferings[0]: no InstanceType",
		`{"InstanceTypeOfferings": [{"InstanceType": "m5.large", "LocationType": "region", "Location": "us-west-2"}]}`: `LocationType "region"`,
		`[`: "describe-instance-type-offerings output",
	} {
		_, err := ReadOfferings(strings.NewReader(in))
		require.ErrorIs(t, err, ErrInvalidDump)
		require.ErrorContains(t, err, want)
	}
	_, err = ReadOfferings(nil)
	require.ErrorIs(t, err, ErrInvalidArgument)
}

// TestInstanceTypeCheckIsKarpenters: InstanceTypeNotFound when Karpenter's
// own test says so: the type among the instance types, and an offering
// compatible with the NodeClaim's labels (cloudprovider.Offerings.
// HasCompatible, with each offering's zone as Karpenter's AWS provider
// writes it).
func TestInstanceTypeCheckIsKarpenters(t *testing.T) {
	offerings, err := ReadOfferings(strings.NewReader(offeringsJSON))
	require.NoError(t, err)
	// Karpenter's view of the same data.
	var its []*cloudprovider.InstanceType
	for name, zones := range offerings {
		it := &cloudprovider.InstanceType{Name: name}
		for _, z := range zones {
			it.Offerings = append(it.Offerings, &cloudprovider.Offering{Available: true, Requirements: scheduling.NewRequirements(
				scheduling.NewRequirement(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, z),
				scheduling.NewRequirement(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, karpv1.CapacityTypeOnDemand, karpv1.CapacityTypeSpot))})
		}
		its = append(its, it)
	}
	karpenters := func(labels map[string]string) bool { // drifted?
		for _, it := range its {
			if it.Name == labels[corev1.LabelInstanceTypeStable] {
				return !it.Offerings.HasCompatible(scheduling.NewLabelRequirements(labels))
			}
		}
		return true
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
	}{
		{"offered in its zone", map[string]string{corev1.LabelInstanceTypeStable: "m5.large", corev1.LabelTopologyZone: "us-west-2b"}},
		{"offered, another zone", map[string]string{corev1.LabelInstanceTypeStable: "c7g.large", corev1.LabelTopologyZone: "us-west-2b"}},
		{"no longer offered", map[string]string{corev1.LabelInstanceTypeStable: "m4.large", corev1.LabelTopologyZone: "us-west-2a"}},
		{"no instance type label", map[string]string{corev1.LabelTopologyZone: "us-west-2a"}},
		{"spot, offered", map[string]string{corev1.LabelInstanceTypeStable: "m5.large", corev1.LabelTopologyZone: "us-west-2a", karpv1.CapacityTypeLabelKey: "spot"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			labels := map[string]string{karpv1.NodePoolLabelKey: "p"}
			for k, v := range tc.labels {
				labels[k] = v
			}
			np := karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
			np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: GroupAWS, Kind: "EC2NodeClass", Name: "c"}
			nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}}
			nc.Spec.NodeClassRef = np.Spec.Template.Spec.NodeClassRef
			snap := &Snapshot{NodePools: []karpv1.NodePool{np}}
			r, err := InstanceTypeCheck(snap, WithOfferings(offerings)).Check(t.Context(), nc)
			require.NoError(t, err)
			require.Equal(t, karpenters(tc.labels), r != nil, "%v", reasonOf(r))
			if r != nil {
				require.Equal(t, InstanceTypeNotFound, r.Name)
			}
			r, err = InstanceTypeCheck(snap).Check(t.Context(), nc)
			require.NoError(t, err)
			require.Nil(t, r, "without offerings it finds nothing")
		})
	}
}

// TestExplainInstanceTypeNotFound: with offerings, Explain finds a
// NodeClaim whose instance type is gone drifted for InstanceTypeNotFound;
// without them, Karpenter's condition saying so is "cannot tell".
func TestExplainInstanceTypeNotFound(t *testing.T) {
	snap := readFixture(t)
	offerings := fixtureOfferings(t)
	// default-f runs an instance type the cloud no longer offers.
	nc := &snap.NodeClaims[indexOfClaim(snap, "default-f")]
	nc.Labels[corev1.LabelInstanceTypeStable] = "m4.retired"
	rep, err := Explain(t.Context(), snap, WithOfferings(offerings))
	require.NoError(t, err)
	cr := rep.NodeClaims[indexOf(rep, "default-f")]
	require.True(t, cr.Drifted())
	require.Equal(t, InstanceTypeNotFound, cr.Reasons[0].Name)

	nc.Status.Conditions = append(nc.Status.Conditions, karpStatusCondition{Type: karpv1.ConditionTypeDrifted, Status: metav1.ConditionTrue, Reason: string(InstanceTypeNotFound)})
	rep, err = Explain(t.Context(), snap)
	require.NoError(t, err)
	cr = rep.NodeClaims[indexOf(rep, "default-f")]
	require.False(t, cr.Drifted())
	require.Contains(t, strings.Join(cr.CannotTell, "\n"), "needs the instance type offerings")
}

func indexOfClaim(s *Snapshot, name string) int {
	for i := range s.NodeClaims {
		if s.NodeClaims[i].Name == name {
			return i
		}
	}
	return -1
}
