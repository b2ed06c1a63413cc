package karpenter

import (
	"slices"
	"testing"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	"github.com/stretchr/testify/require"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/upgradekit/upgradekit/drift"
)

// TestPlacementGroupCheck follows the provider's isPlacementGroupDrifted:
// the NodeClaim's placement group label against the group the
// EC2NodeClass resolves (none without a selector, the id of a selector by
// id; a selector by name needs EC2).
func TestPlacementGroupCheck(t *testing.T) {
	id := func(s string) *awsv1.PlacementGroupSelector { return &awsv1.PlacementGroupSelector{ID: &s} }
	name := func(s string) *awsv1.PlacementGroupSelector { return &awsv1.PlacementGroupSelector{Name: &s} }
	for _, tc := range []struct {
		name       string
		sel        *awsv1.PlacementGroupSelector
		label      string
		drifted    bool
		cannotTell bool
	}{
		{name: "no selector, no label"},
		{name: "label without a selector", label: "pg-0a1", drifted: true},
		{name: "selector by id, same group", sel: id("pg-0a1"), label: "pg-0a1"},
		{name: "selector by id, another group", sel: id("pg-0b2"), label: "pg-0a1", drifted: true},
		{name: "selector by id, no label", sel: id("pg-0b2"), drifted: true},
		{name: "selector by name, labelled", sel: name("spread"), label: "pg-0a1", cannotTell: true},
		{name: "selector by name, no label", sel: name("spread"), drifted: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := readFixture(t)
			snap.EC2NodeClass("default").Spec.PlacementGroupSelector = tc.sel
			nc := &snap.NodeClaims[slices.IndexFunc(snap.NodeClaims, func(c karpv1.NodeClaim) bool { return c.Name == "default-f" })]
			if tc.label != "" {
				nc.Labels[awsv1.LabelPlacementGroupID] = tc.label
			}
			r, err := PlacementGroupCheck(snap).Check(t.Context(), nc)
			if tc.cannotTell {
				require.ErrorIs(t, err, ErrCannotTell)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.drifted, r != nil, "%v", reasonOf(r))
			if r != nil {
				require.Equal(t, drift.ReasonNamePlacementGroupDrift, r.Name)
			}
		})
	}
}

// TestCapacityReservationCheck follows the provider's
// isCapacityReservationDrifted: a reserved NodeClaim whose instance's
// reservation the EC2NodeClass no longer lists.
func TestCapacityReservationCheck(t *testing.T) {
	for _, tc := range []struct {
		name         string
		capacityType string
		instanceCR   string
		classCRs     []string
		drifted      bool
	}{
		{name: "reserved, still selected", capacityType: karpv1.CapacityTypeReserved, instanceCR: "cr-1", classCRs: []string{"cr-1", "cr-2"}},
		{name: "reserved, no longer selected", capacityType: karpv1.CapacityTypeReserved, instanceCR: "cr-1", classCRs: []string{"cr-2"}, drifted: true},
		{name: "reserved, none selected any more", capacityType: karpv1.CapacityTypeReserved, instanceCR: "cr-1", drifted: true},
		{name: "in no reservation", capacityType: karpv1.CapacityTypeReserved, classCRs: []string{"cr-2"}},
		{name: "on-demand after the reservation", capacityType: karpv1.CapacityTypeOnDemand, instanceCR: "cr-1", classCRs: []string{"cr-2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := readFixture(t)
			class := snap.EC2NodeClass("default")
			class.Status.CapacityReservations = nil
			for _, id := range tc.classCRs {
				class.Status.CapacityReservations = append(class.Status.CapacityReservations, awsv1.CapacityReservation{ID: id, AvailabilityZone: "us-west-2a"})
			}
			nc := &snap.NodeClaims[slices.IndexFunc(snap.NodeClaims, func(c karpv1.NodeClaim) bool { return c.Name == "default-f" })]
			nc.Labels[karpv1.CapacityTypeLabelKey] = tc.capacityType
			id := nc.Status.ProviderID[len(nc.Status.ProviderID)-len("i-0f"):]
			lookup := Instances([]Instance{{ID: id, State: "running", SubnetID: "subnet-0a", CapacityReservationID: tc.instanceCR}})
			r, err := CapacityReservationCheck(snap, lookup).Check(t.Context(), nc)
			require.NoError(t, err)
			require.Equal(t, tc.drifted, r != nil, "%v", reasonOf(r))
			if r != nil {
				require.Equal(t, drift.ReasonNameCapacityReservationDrift, r.Name)
			}
		})
	}
}
