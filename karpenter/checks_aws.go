package karpenter

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/upgradekit/upgradekit/drift"
	"github.com/upgradekit/upgradekit/internal/errtext"
)

type karpStatusCondition = status.Condition

// AMICheck is the AWS provider's AMI drift: the NodeClaim's
// status.imageID is not the image its EC2NodeClass now gives a node like
// it, the first of status.amis (newest first, as the provider writes them)
// whose requirements the NodeClaim's labels meet. The labels stand for the
// instance type's requirements, which Karpenter labels NodeClaims with
// (architecture, GPU and accelerator counts and makers). The reason says
// which image replaced which, whether the old one is still selected (and
// lost on deprecation or age) or no longer selected at all, and, with
// WithImageResolver, which selector term matched the new image and why it
// won. An EC2NodeClass without resolved images, or a NodeClaim without an
// image id, is an error (cannot tell), as in Karpenter.
func AMICheck(l Lookup, opts ...ExplainOption) drift.Check {
	cfg := newExplainConfig(opts)
	return drift.CheckFunc(func(ctx context.Context, obj metav1.Object) (*drift.Reason, error) {
		nc, class := claimAndClass(l, obj)
		if nc == nil || class == nil {
			return nil, nil
		}
		if len(class.Status.AMIs) == 0 {
			return nil, fmt.Errorf("%w: EC2NodeClass %s: status.amis is empty (no images resolved)", ErrCannotTell, class.Name)
		}
		if nc.Status.ImageID == "" {
			return nil, fmt.Errorf("%w: NodeClaim %s: status.imageID is empty", ErrCannotTell, nc.Name)
		}
		first := -1
		for i, ami := range class.Status.AMIs {
			ok, err := meets(nc, ami.Requirements)
			if err != nil {
				return nil, fmt.Errorf("%w: EC2NodeClass %s: status.amis[%d].requirements: %w", ErrCannotTell, class.Name, i, err)
			}
			if ok {
				first = i
				break
			}
		}
		if first < 0 {
			// Karpenter maps no image to the instance type, so the
			// NodeClaim's image is not among the mapped ones: drifted.
			return &drift.Reason{
				Name: drift.ReasonNameAMIDrift,
				Message: fmt.Sprintf("EC2NodeClass %s: none of the %d images in status.amis fits this node any more (it runs %s); Karpenter would launch it on another instance type",
					class.Name, len(class.Status.AMIs), nc.Status.ImageID),
				Evidence: []drift.Evidence{{Kind: drift.EvidenceKindImage, Key: "image", Got: nc.Status.ImageID, Detail: "no image in status.amis fits"}},
			}, nil
		}
		chooser := statusChooser{class: class, want: first, current: nc.Status.ImageID, resolve: cfg.imageResolver}
		check, err := drift.NewImage(chooser, func(metav1.Object) (string, bool) { return nc.Status.ImageID, true })
		if err != nil {
			return nil, err
		}
		r, err := check.Check(ctx, nc)
		if r != nil {
			r.Message = fmt.Sprintf("EC2NodeClass %s: %s", class.Name, r.Message)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCannotTell, err)
		}
		return r, nil
	})
}

// statusChooser is drift's ImageExplainer over an EC2NodeClass's
// status.amis, whose image want (an index) AMICheck found first to fit the
// node, with an optional resolver for the full "why".
type statusChooser struct {
	class   *awsv1.EC2NodeClass
	want    int
	current string
	resolve ImageResolver
}

func (c statusChooser) ChooseImage(ctx context.Context, labels map[string]string) (string, error) {
	id, _, err := c.ExplainImage(ctx, labels)
	return id, err
}

func (c statusChooser) ExplainImage(ctx context.Context, labels map[string]string) (string, string, error) {
	amis := c.class.Status.AMIs
	want := amis[c.want]
	if want.ID == c.current {
		return want.ID, "", nil
	}
	var why []string
	why = append(why, fmt.Sprintf("%s is the first of the %d images in status.amis whose requirements the node meets (%s)",
		imageName(want.ID, want.Name), len(amis), reqString(want.Requirements)))
	if i := slices.IndexFunc(amis, func(a awsv1.AMI) bool { return a.ID == c.current }); i >= 0 {
		old := amis[i]
		switch {
		case old.Deprecated && !want.Deprecated:
			why = append(why, fmt.Sprintf("%s is still selected but deprecated", imageName(old.ID, old.Name)))
		default:
			why = append(why, fmt.Sprintf("%s is still selected but comes later (older)", imageName(old.ID, old.Name)))
		}
	} else {
		why = append(why, c.current+" is no longer selected by the EC2NodeClass's amiSelectorTerms")
	}
	if c.resolve != nil {
		id, because, err := c.resolve.ExplainImage(ctx, c.class, labels)
		switch {
		case err != nil:
			why = append(why, "the image catalog cannot say why: "+errtext.Clip(err.Error()))
		case id != want.ID:
			why = append(why, fmt.Sprintf("the image catalog now picks %s (%s); status.amis is what Karpenter uses until it resolves again", id, because))
		default:
			why = append(why, because)
		}
	}
	return want.ID, errtext.Cap(strings.Join(why, "; ")), nil
}

// meets reports whether nc's labels (normalised) satisfy reqs
// (drift.Requirements with Karpenter's label aliases).
func meets(nc *karpv1.NodeClaim, reqs []corev1.NodeSelectorRequirement) (bool, error) {
	check, err := drift.NewRequirements(reqs, drift.WithLabelAliases(drift.KarpenterLabelAliases()), drift.WithLabelsOf(normalizedLabels))
	if err != nil {
		return false, err
	}
	r, err := check.Check(context.Background(), nc)
	return r == nil && err == nil, err
}

func imageName(id, name string) string {
	if name == "" {
		return id
	}
	return id + " (" + errtext.Clip(name) + ")"
}

func reqString(reqs []corev1.NodeSelectorRequirement) string {
	parts := make([]string, 0, len(reqs))
	for _, r := range reqs {
		s := r.Key + " " + string(r.Operator)
		if len(r.Values) > 0 {
			s += " " + strings.Join(r.Values, ",")
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "no requirements"
	}
	return strings.Join(parts, "; ")
}

// Instance is what the security group and subnet checks need to know of
// the EC2 instance behind a NodeClaim: what `aws ec2 describe-instances`
// or the EC2 API says of it.
type Instance struct {
	// ID is the instance id (i-...), the last part of the NodeClaim's
	// providerID.
	ID string
	// SubnetID is the subnet the instance runs in.
	SubnetID string
	// SecurityGroupIDs are the ids of its security groups.
	SecurityGroupIDs []string
	// ImageID is the image it was launched from.
	ImageID string
	// State is the instance state (running, stopped, terminated, ...);
	// Instances does not find terminated instances, as Karpenter's
	// instance provider does not.
	State string
	// CapacityReservationID is the capacity reservation it runs in, if
	// any.
	CapacityReservationID string
}

// InstanceLookup returns the instance with the given id; ok is false when
// it is not known (the checks then cannot tell, and do not drift).
type InstanceLookup func(ctx context.Context, id string) (inst Instance, ok bool, err error)

// Instances is an InstanceLookup over a fixed list (ReadInstances).
// Terminated instances are not found: Karpenter looks up pending,
// running, stopping, stopped and shutting-down instances only.
func Instances(list []Instance) InstanceLookup {
	byID := make(map[string]Instance, len(list))
	for _, i := range list {
		if i.State != "terminated" {
			byID[i.ID] = i
		}
	}
	return func(_ context.Context, id string) (Instance, bool, error) {
		i, ok := byID[id]
		return i, ok, nil
	}
}

// ReadInstances reads the output of `aws ec2 describe-instances` (JSON:
// Reservations[].Instances[] with InstanceId, SubnetId, ImageId and
// SecurityGroups[].GroupId). Errors wrap ErrInvalidDump.
func ReadInstances(r io.Reader) ([]Instance, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: nil reader", ErrInvalidArgument)
	}
	var out struct {
		Reservations []struct {
			Instances []struct {
				InstanceID string `json:"InstanceId"`
				SubnetID   string `json:"SubnetId"`
				ImageID    string `json:"ImageId"`
				CRID       string `json:"CapacityReservationId"`
				State      struct {
					Name string `json:"Name"`
				} `json:"State"`
				SecurityGroups []struct {
					GroupID string `json:"GroupId"`
				} `json:"SecurityGroups"`
			} `json:"Instances"`
		} `json:"Reservations"`
	}
	if err := json.NewDecoder(r).Decode(&out); err != nil {
		return nil, fmt.Errorf("%w: describe-instances output: %s", ErrInvalidDump, errtext.Clip(err.Error()))
	}
	var list []Instance
	for ri, res := range out.Reservations {
		for ii, in := range res.Instances {
			if in.InstanceID == "" {
				return nil, fmt.Errorf("%w: Reservations[%d].Instances[%d]: no InstanceId", ErrInvalidDump, ri, ii)
			}
			inst := Instance{ID: in.InstanceID, SubnetID: in.SubnetID, ImageID: in.ImageID, State: in.State.Name, CapacityReservationID: in.CRID}
			for _, sg := range in.SecurityGroups {
				inst.SecurityGroupIDs = append(inst.SecurityGroupIDs, sg.GroupID)
			}
			list = append(list, inst)
		}
	}
	return list, nil
}

// instanceOf finds the instance behind nc's providerID
// ("aws:///<zone>/<instance id>").
func instanceOf(ctx context.Context, nc *karpv1.NodeClaim, lookup InstanceLookup) (Instance, bool, error) {
	if lookup == nil {
		return Instance{}, false, nil
	}
	pid := nc.Status.ProviderID
	if !strings.HasPrefix(pid, "aws://") {
		return Instance{}, false, nil
	}
	id := pid[strings.LastIndex(pid, "/")+1:]
	if !strings.HasPrefix(id, "i-") {
		return Instance{}, false, nil
	}
	return lookup(ctx, id)
}

// classAndInstance returns the EC2NodeClass and instance of obj, a
// NodeClaim the provider manages; a nil class when either is unknown.
func classAndInstance(ctx context.Context, l Lookup, lookup InstanceLookup, obj metav1.Object) (*awsv1.EC2NodeClass, Instance, error) {
	nc, class := claimAndClass(l, obj)
	if nc == nil || class == nil {
		return nil, Instance{}, nil
	}
	inst, ok, err := instanceOf(ctx, nc, lookup)
	if err != nil || !ok {
		return nil, Instance{}, err
	}
	return class, inst, nil
}

// SecurityGroupCheck is the AWS provider's security group drift: the
// instance's security groups are not exactly the EC2NodeClass's
// status.securityGroups. The instance comes from lookup by the NodeClaim's
// providerID; an unknown instance is not drifted, and an EC2NodeClass
// without resolved security groups is an error (cannot tell), as in
// Karpenter. The evidence names the groups added and removed.
func SecurityGroupCheck(l Lookup, lookup InstanceLookup) drift.Check {
	return drift.CheckFunc(func(ctx context.Context, obj metav1.Object) (*drift.Reason, error) {
		class, inst, err := classAndInstance(ctx, l, lookup, obj)
		if class == nil || err != nil {
			return nil, err
		}
		want := make([]string, 0, len(class.Status.SecurityGroups))
		for _, sg := range class.Status.SecurityGroups {
			want = append(want, sg.ID)
		}
		if len(want) == 0 {
			return nil, fmt.Errorf("%w: EC2NodeClass %s: status.securityGroups is empty", ErrCannotTell, class.Name)
		}
		added, removed := setDiff(want, inst.SecurityGroupIDs)
		if len(added) == 0 && len(removed) == 0 {
			return nil, nil
		}
		r := &drift.Reason{Name: drift.ReasonNameSecurityGroupDrift}
		var parts []string
		if len(added) > 0 {
			parts = append(parts, "now also selects "+strings.Join(added, ", "))
			r.Evidence = append(r.Evidence, drift.Evidence{Kind: drift.EvidenceKindField, Key: "status.securityGroups", Want: strings.Join(added, ","), Detail: "not on the instance"})
		}
		if len(removed) > 0 {
			parts = append(parts, "no longer selects "+strings.Join(removed, ", "))
			r.Evidence = append(r.Evidence, drift.Evidence{Kind: drift.EvidenceKindField, Key: "status.securityGroups", Got: strings.Join(removed, ","), Detail: "only on the instance"})
		}
		r.Message = fmt.Sprintf("EC2NodeClass %s %s (instance %s)", class.Name, strings.Join(parts, " and "), inst.ID)
		return r, nil
	})
}

// SubnetCheck is the AWS provider's subnet drift: the instance's subnet is
// not among the EC2NodeClass's status.subnets. Unknown instances and empty
// status are handled as in SecurityGroupCheck.
func SubnetCheck(l Lookup, lookup InstanceLookup) drift.Check {
	return drift.CheckFunc(func(ctx context.Context, obj metav1.Object) (*drift.Reason, error) {
		class, inst, err := classAndInstance(ctx, l, lookup, obj)
		if class == nil || err != nil {
			return nil, err
		}
		if len(class.Status.Subnets) == 0 {
			return nil, fmt.Errorf("%w: EC2NodeClass %s: status.subnets is empty", ErrCannotTell, class.Name)
		}
		var ids []string
		for _, s := range class.Status.Subnets {
			if s.ID == inst.SubnetID {
				return nil, nil
			}
			ids = append(ids, s.ID)
		}
		sort.Strings(ids)
		return &drift.Reason{
			Name: drift.ReasonNameSubnetDrift,
			Message: fmt.Sprintf("EC2NodeClass %s no longer selects subnet %s of instance %s (selects %s)",
				class.Name, errtext.Quote(inst.SubnetID), inst.ID, strings.Join(ids, ", ")),
			Evidence: []drift.Evidence{{Kind: drift.EvidenceKindField, Key: "status.subnets", Want: strings.Join(ids, ","), Got: inst.SubnetID}},
		}, nil
	})
}

// CapacityReservationCheck is the AWS provider's capacity reservation
// drift: a reserved NodeClaim's instance runs in a capacity reservation
// its EC2NodeClass no longer selects (status.capacityReservations). An
// instance in no reservation is not judged, as in the provider.
func CapacityReservationCheck(l Lookup, lookup InstanceLookup) drift.Check {
	return drift.CheckFunc(func(ctx context.Context, obj metav1.Object) (*drift.Reason, error) {
		class, inst, err := classAndInstance(ctx, l, lookup, obj)
		if class == nil || err != nil || inst.CapacityReservationID == "" {
			return nil, err
		}
		nc, _ := obj.(*karpv1.NodeClaim)
		if nc == nil || nc.Labels[karpv1.CapacityTypeLabelKey] != karpv1.CapacityTypeReserved {
			return nil, nil // the provider looks at reserved instances only
		}
		ids := make([]string, 0, len(class.Status.CapacityReservations))
		for _, cr := range class.Status.CapacityReservations {
			if cr.ID == inst.CapacityReservationID {
				return nil, nil
			}
			ids = append(ids, cr.ID)
		}
		sort.Strings(ids)
		return &drift.Reason{
			Name: drift.ReasonNameCapacityReservationDrift,
			Message: fmt.Sprintf("EC2NodeClass %s no longer selects capacity reservation %s of instance %s (selects %s)",
				class.Name, errtext.Quote(inst.CapacityReservationID), inst.ID, orNone(ids)),
			Evidence: []drift.Evidence{{Kind: drift.EvidenceKindField, Key: "status.capacityReservations", Want: strings.Join(ids, ","), Got: inst.CapacityReservationID}},
		}, nil
	})
}

// PlacementGroupCheck is the AWS provider's placement group drift: the
// NodeClaim's karpenter.k8s.aws/placement-group-id label is not the
// placement group its EC2NodeClass resolves. Without a
// placementGroupSelector the class resolves none, so a labelled NodeClaim
// is drifted; a selector by id resolves that id; a selector by name needs
// EC2 to resolve it, so the check cannot tell unless the NodeClaim has no
// label (then it is drifted: the class resolves some group).
func PlacementGroupCheck(l Lookup) drift.Check {
	return drift.CheckFunc(func(_ context.Context, obj metav1.Object) (*drift.Reason, error) {
		nc, class := claimAndClass(l, obj)
		if nc == nil || class == nil {
			return nil, nil
		}
		label := nc.Labels[awsv1.LabelPlacementGroupID]
		sel := class.Spec.PlacementGroupSelector
		var want string
		switch {
		case sel == nil:
		case sel.ID != nil:
			want = *sel.ID
		case label == "":
			want = "the group named " + errtext.Quote(ptrOr(sel.Name))
		default:
			return nil, fmt.Errorf("%w: EC2NodeClass %s selects its placement group by name (%s), which only EC2 resolves to an id",
				ErrCannotTell, class.Name, errtext.Quote(ptrOr(sel.Name)))
		}
		if label == want {
			return nil, nil
		}
		return &drift.Reason{
			Name: drift.ReasonNamePlacementGroupDrift,
			Message: fmt.Sprintf("EC2NodeClass %s's placement group is %s, the NodeClaim's %s",
				class.Name, orNone([]string{want}), orNone([]string{label})),
			Evidence: []drift.Evidence{{Kind: drift.EvidenceKindLabel, Key: awsv1.LabelPlacementGroupID, Want: orNone([]string{want}), Got: label,
				Detail: "the EC2NodeClass's placement group"}},
		}, nil
	})
}

func ptrOr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// orNone writes a list, or "none" when it is empty (or holds "").
func orNone(ids []string) string {
	if len(ids) == 0 || len(ids) == 1 && ids[0] == "" {
		return "none"
	}
	return strings.Join(ids, ", ")
}

// setDiff returns the members of want missing from got, and of got missing
// from want, sorted.
func setDiff(want, got []string) (added, removed []string) {
	for _, w := range want {
		if !slices.Contains(got, w) && !slices.Contains(added, w) {
			added = append(added, w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) && !slices.Contains(removed, g) {
			removed = append(removed, g)
		}
	}
	sort.Strings(added)
	sort.Strings(removed)
	return added, removed
}
