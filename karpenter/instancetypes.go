package karpenter

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgradekit/upgradekit/drift"
	"github.com/upgradekit/upgradekit/internal/errtext"
)

// InstanceTypeNotFound is Karpenter's drift reason for a NodeClaim whose
// instance type the cloud no longer offers, or no longer offers where the
// NodeClaim runs.
const InstanceTypeNotFound drift.ReasonName = "InstanceTypeNotFound"

// Offerings are the instance types the cloud offers and where: each
// instance type's availability zones, as `aws ec2
// describe-instance-type-offerings --location-type availability-zone`
// lists them (ReadOfferings).
type Offerings map[string][]string

// ReadOfferings reads the JSON `aws ec2 describe-instance-type-offerings
// --location-type availability-zone` prints. Errors wrap ErrInvalidDump
// and name the entry.
func ReadOfferings(r io.Reader) (Offerings, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: nil reader", ErrInvalidArgument)
	}
	var in struct {
		InstanceTypeOfferings []struct {
			InstanceType string `json:"InstanceType"`
			LocationType string `json:"LocationType"`
			Location     string `json:"Location"`
		} `json:"InstanceTypeOfferings"`
	}
	if err := json.NewDecoder(r).Decode(&in); err != nil {
		return nil, fmt.Errorf("%w: describe-instance-type-offerings output: %s", ErrInvalidDump, errtext.Clip(err.Error()))
	}
	out := Offerings{}
	for i, o := range in.InstanceTypeOfferings {
		switch {
		case o.InstanceType == "":
			return nil, fmt.Errorf("%w: InstanceTypeOfferings[%d]: no InstanceType", ErrInvalidDump, i)
		case o.LocationType != "availability-zone":
			return nil, fmt.Errorf("%w: InstanceTypeOfferings[%d]: LocationType %s, want availability-zone (--location-type availability-zone)",
				ErrInvalidDump, i, errtext.Quote(o.LocationType))
		}
		if !slices.Contains(out[o.InstanceType], o.Location) {
			out[o.InstanceType] = append(out[o.InstanceType], o.Location)
		}
	}
	return out, nil
}

// WithOfferings gives the instance types the cloud offers, and where, for
// InstanceTypeCheck (Explain runs it only with them).
func WithOfferings(o Offerings) ExplainOption {
	return func(c *explainConfig) { c.offerings = o }
}

// InstanceTypeCheck is Karpenter's InstanceTypeNotFound drift: the
// NodeClaim has no instance type label, its instance type is not offered,
// or not in its zone (Karpenter's "no compatible offering"). It judges the
// steady state: Karpenter checks a NodeClaim only from an hour after it
// was created. What the offerings do not say, it does not judge: capacity
// types (on-demand, spot, reserved) are taken as offered. Without
// WithOfferings it finds nothing.
func InstanceTypeCheck(l Lookup, opts ...ExplainOption) drift.Check {
	cfg := newExplainConfig(opts)
	return drift.CheckFunc(func(_ context.Context, obj metav1.Object) (*drift.Reason, error) {
		nc, np := claimAndPool(l, obj)
		if nc == nil || np == nil || cfg.offerings == nil {
			return nil, nil
		}
		it, ok := nc.Labels[corev1.LabelInstanceTypeStable]
		if !ok || it == "" {
			return &drift.Reason{Name: InstanceTypeNotFound, Message: "the NodeClaim has no " + corev1.LabelInstanceTypeStable + " label",
				Evidence: []drift.Evidence{{Kind: drift.EvidenceKindLabel, Key: corev1.LabelInstanceTypeStable, Detail: "label missing"}}}, nil
		}
		zones, offered := cfg.offerings[it]
		if !offered {
			return &drift.Reason{Name: InstanceTypeNotFound, Message: fmt.Sprintf("instance type %s is no longer offered", it),
				Evidence: []drift.Evidence{{Kind: drift.EvidenceKindLabel, Key: corev1.LabelInstanceTypeStable, Got: it, Detail: "not among the offerings"}}}, nil
		}
		if zone, ok := nc.Labels[corev1.LabelTopologyZone]; ok && !slices.Contains(zones, zone) {
			return &drift.Reason{Name: InstanceTypeNotFound, Message: fmt.Sprintf("instance type %s is no longer offered in %s (offered in %v)", it, zone, zones),
				Evidence: []drift.Evidence{{Kind: drift.EvidenceKindLabel, Key: corev1.LabelTopologyZone, Got: zone, Detail: "no offering of " + it + " there"}}}, nil
		}
		return nil, nil
	})
}
