package karpenter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/upgradekit/upgradekit/amiselect"
	"github.com/upgradekit/upgradekit/drift"
	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/strategy"
)

// AnnotationLastApplied is where `kubectl apply` keeps the configuration
// it last applied; when a NodePool was changed by other means since, it
// holds an earlier template.
const AnnotationLastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// ExplainOption configures Explain and the checks that take options.
type ExplainOption func(*explainConfig)

type explainConfig struct {
	previous      []karpv1.NodePool
	instances     InstanceLookup
	imageResolver ImageResolver
	caBundle      *string
	offerings     Offerings
}

func newExplainConfig(opts []ExplainOption) *explainConfig {
	c := &explainConfig{}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	return c
}

// WithPreviousNodePools gives earlier versions of NodePools (from git, a
// backup, an earlier dump). A NodeClaim's static drift names the template
// fields that changed when one of them, or the NodePool's
// last-applied-configuration, hashes to the NodeClaim's stamped hash:
// only then is it known to be the template the NodeClaim was made from.
func WithPreviousNodePools(pools ...karpv1.NodePool) ExplainOption {
	return func(c *explainConfig) { c.previous = append(c.previous, pools...) }
}

// WithClusterCABundle gives the cluster's CA bundle (PEM, as Karpenter's
// controller reads it from its kubeconfig or the cluster), which the AWS
// provider's EC2NodeClass hash includes. With it, NodeClassHashCheck
// computes the hash Karpenter's hash controller writes (EC2NodeClassHash)
// instead of trusting the annotation, which a hand-written or GitOps
// manifest leaves stale; without it, a NodeClaim whose verdict depends on
// a hash Karpenter has yet to write is "cannot tell", never "not
// drifted".
func WithClusterCABundle(pem string) ExplainOption {
	return func(c *explainConfig) { c.caBundle = &pem }
}

// WithInstances gives the EC2 instances behind NodeClaims, for the
// security group and subnet checks; without it those checks cannot see
// the instances and find no drift.
func WithInstances(lookup InstanceLookup) ExplainOption {
	return func(c *explainConfig) { c.instances = lookup }
}

// WithImageResolver lets AMI drift say which selector term matched the new
// image and why it won (CatalogResolver).
func WithImageResolver(r ImageResolver) ExplainOption {
	return func(c *explainConfig) { c.imageResolver = r }
}

// previousTemplate returns a known template of np whose hash is stamped,
// and where it came from.
func (c *explainConfig) previousTemplate(np *karpv1.NodePool, stamped string) (*karpv1.NodeClaimTemplate, string) {
	for i := range c.previous {
		p := &c.previous[i]
		if p.Name == np.Name && controllerHash(p) == stamped {
			return &p.Spec.Template, "the previous NodePools given"
		}
	}
	if raw, ok := np.Annotations[AnnotationLastApplied]; ok {
		var p karpv1.NodePool
		if json.Unmarshal([]byte(raw), &p) == nil && controllerHash(&p) == stamped {
			return &p.Spec.Template, AnnotationLastApplied
		}
	}
	return nil, ""
}

// ImageResolver says which image an EC2NodeClass's amiSelectorTerms give
// a node with these labels today, and why that image won.
type ImageResolver interface {
	ExplainImage(ctx context.Context, class *awsv1.EC2NodeClass, labels map[string]string) (id, why string, err error)
}

// CatalogResolver returns an ImageResolver that resolves each
// EC2NodeClass's amiSelectorTerms (and amiFamily) against src with
// amiselect.Resolve (pass amiselect.WithKubernetesVersion for aliases,
// amiselect.WithClock for a fixed "now") and explains the choice with
// strategy.AMIChooser: the term that matched, the image's creation date
// and whether it is deprecated. Resolutions are kept per EC2NodeClass for
// the resolver's life.
func CatalogResolver(src amiselect.ImageSource, opts ...amiselect.Option) (ImageResolver, error) {
	if src == nil {
		return nil, fmt.Errorf("%w: nil image source", ErrInvalidArgument)
	}
	return &catalogResolver{src: src, opts: opts, cache: map[string]*amiselect.Resolution{}}, nil
}

type catalogResolver struct {
	src   amiselect.ImageSource
	opts  []amiselect.Option
	mu    sync.Mutex
	cache map[string]*amiselect.Resolution
}

func (r *catalogResolver) resolution(ctx context.Context, class *awsv1.EC2NodeClass) (*amiselect.Resolution, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if res, ok := r.cache[class.Name]; ok {
		return res, nil
	}
	b, err := json.Marshal(class.Spec.AMISelectorTerms)
	if err != nil {
		return nil, fmt.Errorf("%w: EC2NodeClass %s: spec.amiSelectorTerms: %s", ErrInvalidArgument, class.Name, errtext.Clip(err.Error()))
	}
	var terms []amiselect.Term
	if err := json.Unmarshal(b, &terms); err != nil {
		return nil, fmt.Errorf("%w: EC2NodeClass %s: spec.amiSelectorTerms: %s", ErrInvalidArgument, class.Name, errtext.Clip(err.Error()))
	}
	opts := append([]amiselect.Option(nil), r.opts...)
	if class.Spec.AMIFamily != nil {
		f, err := amiselect.ParseFamily(*class.Spec.AMIFamily)
		if err != nil {
			return nil, fmt.Errorf("EC2NodeClass %s: spec.amiFamily: %w", class.Name, err)
		}
		opts = append(opts, amiselect.WithFamily(f))
	}
	res, err := amiselect.Resolve(ctx, r.src, terms, opts...)
	if err != nil {
		return nil, fmt.Errorf("EC2NodeClass %s: %w", class.Name, err)
	}
	r.cache[class.Name] = res
	return res, nil
}

func (r *catalogResolver) ExplainImage(ctx context.Context, class *awsv1.EC2NodeClass, labels map[string]string) (string, string, error) {
	if r == nil || class == nil {
		return "", "", fmt.Errorf("%w: nil resolver or EC2NodeClass", ErrInvalidArgument)
	}
	res, err := r.resolution(ctx, class)
	if err != nil {
		return "", "", err
	}
	chooser, err := strategy.AMIChooser(func(context.Context) (*amiselect.Resolution, error) { return res, nil })
	if err != nil {
		return "", "", err
	}
	return chooser.ExplainImage(ctx, labels)
}

// Report is Explain's answer for a whole snapshot.
type Report struct {
	// NodeClaims has one entry per NodeClaim, by name.
	NodeClaims []ClaimReport `json:"nodeClaims"`
	// Drifted counts the NodeClaims with at least one reason.
	Drifted int `json:"drifted"`
	// Notes say what about the snapshot affects the answer: objects
	// converted from v1beta1, NodePools whose hash annotation Karpenter
	// has yet to rewrite.
	Notes []string `json:"notes"`
	// NodePools sums the NodeClaims up per NodePool, by name: the rollout
	// progress of a drift.
	NodePools []NodePoolSummary `json:"nodePools"`
}

// NodePoolSummary counts one NodePool's NodeClaims in a Report.
type NodePoolSummary struct {
	// Name is the NodePool's name ("" for NodeClaims without one).
	Name string `json:"name"`
	// NodeClaims counts its NodeClaims.
	NodeClaims int `json:"nodeClaims"`
	// Drifted counts those found drifted.
	Drifted int `json:"drifted"`
	// Unknown counts those Explain cannot tell.
	Unknown int `json:"unknown"`
	// Replacing counts its NodeClaims being deleted: drifted ones
	// Karpenter has started to replace, among others.
	Replacing int `json:"replacing"`
	// ByReason counts the drifted ones by the reason Karpenter reports
	// (their first).
	ByReason map[drift.ReasonName]int `json:"byReason"`
}

// summarise fills rep.NodePools from rep.NodeClaims; deleting names the
// NodeClaims being deleted.
func summarise(rep *Report, deleting map[string]bool) {
	idx := map[string]int{}
	for _, c := range rep.NodeClaims {
		i, ok := idx[c.NodePool]
		if !ok {
			i = len(rep.NodePools)
			idx[c.NodePool] = i
			rep.NodePools = append(rep.NodePools, NodePoolSummary{Name: c.NodePool, ByReason: map[drift.ReasonName]int{}})
		}
		sum := &rep.NodePools[i]
		sum.NodeClaims++
		switch {
		case c.Drifted():
			sum.Drifted++
			sum.ByReason[c.Reasons[0].Name]++
		case len(c.CannotTell) > 0:
			sum.Unknown++
		}
		if deleting[c.Name] {
			sum.Replacing++
		}
	}
	slices.SortFunc(rep.NodePools, func(a, b NodePoolSummary) int { return strings.Compare(a.Name, b.Name) })
}

// ClaimReport is what Explain says of one NodeClaim.
type ClaimReport struct {
	// Name is the NodeClaim's name.
	Name string `json:"name"`
	// Node is its node's name.
	Node string `json:"node,omitempty"`
	// NodePool is the NodePool its drift is judged against.
	NodePool string `json:"nodePool,omitempty"`
	// NodeClass is the EC2NodeClass its drift is judged against.
	NodeClass string `json:"nodeClass,omitempty"`
	// Reasons are every drift found, in Karpenter's order: Reasons[0] is
	// the reason Karpenter reports (it stops at the first).
	Reasons []drift.Reason `json:"reasons"`
	// CannotTell lists the checks that could not judge, and why.
	CannotTell []string `json:"cannotTell"`
	// Notes say what else matters: not launched, not managed by the AWS
	// provider, a hash version Karpenter re-stamps.
	Notes []string `json:"notes"`
	// Condition is the Drifted condition's reason in the snapshot, or ""
	// when it has none: what Karpenter had concluded when it was taken.
	Condition string `json:"condition,omitempty"`
}

// Drifted reports whether Explain found the NodeClaim drifted.
func (c ClaimReport) Drifted() bool { return len(c.Reasons) > 0 }

// Explain says, for every NodeClaim of s, whether Karpenter (v1.14 core
// and AWS provider) finds it drifted and why, by running Karpenter's
// drift rules as drift.Checks in Karpenter's order: NodePoolHashCheck,
// RequirementsCheck, InstanceTypeCheck (only with WithOfferings),
// NodeClassHashCheck, AMICheck, SecurityGroupCheck, SubnetCheck and
// CapacityReservationCheck (those three only with WithInstances) and
// PlacementGroupCheck. Unlike Karpenter,
// which stops at the first reason, it reports them all; like Karpenter, it
// runs none of the provider's checks after one that cannot tell (the
// Drifted condition then stays as it was, ClaimReport.Condition). NodeClaims
// being deleted, and EC2NodeClasses being deleted, are not judged. Where
// Karpenter's condition names a reason the input cannot check, the
// NodeClaim is "cannot tell". A NodeClaim that is not launched is
// never drifted (Karpenter clears the condition). Errors: ErrInvalidArgument
// for a nil snapshot; ctx ends the run.
func Explain(ctx context.Context, s *Snapshot, opts ...ExplainOption) (*Report, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: nil snapshot", ErrInvalidArgument)
	}
	cfg := newExplainConfig(opts)
	core := drift.NewDetector(NodePoolHashCheck(s, opts...), RequirementsCheck(s), InstanceTypeCheck(s, opts...))
	provider := []drift.Check{NodeClassHashCheck(s, opts...), AMICheck(s, opts...)}
	if cfg.instances != nil {
		provider = append(provider, SecurityGroupCheck(s, cfg.instances), SubnetCheck(s, cfg.instances), CapacityReservationCheck(s, cfg.instances))
	}
	provider = append(provider, PlacementGroupCheck(s))
	rep := &Report{NodeClaims: make([]ClaimReport, 0, len(s.NodeClaims))}
	for _, c := range s.Converted {
		rep.Notes = append(rep.Notes, c+" was read in its v1beta1 form and converted to v1")
	}
	for i := range s.NodePools {
		np := &s.NodePools[i]
		got, ok := np.Annotations[karpv1.NodePoolHashAnnotationKey]
		want := controllerHash(np)
		switch {
		case !ok:
			rep.Notes = append(rep.Notes, fmt.Sprintf("NodePool %s has no hash annotation yet; Karpenter will stamp %s", np.Name, want))
		case got != want || np.Annotations[karpv1.NodePoolHashVersionAnnotationKey] != NodePoolHashVersion:
			rep.Notes = append(rep.Notes, fmt.Sprintf("NodePool %s's hash annotation %s is stale; Karpenter will rewrite it to %s (%s)",
				np.Name, errtext.Quote(got), want, NodePoolHashVersion))
		}
	}
	if cfg.caBundle != nil {
		for i := range s.EC2NodeClasses {
			class := &s.EC2NodeClasses[i]
			got, ok := class.Annotations[awsv1.AnnotationEC2NodeClassHash]
			want := EC2NodeClassHash(class, cfg.caBundle)
			switch {
			case !ok:
				rep.Notes = append(rep.Notes, fmt.Sprintf("EC2NodeClass %s has no hash annotation yet; Karpenter will stamp %s", class.Name, want))
			case got != want || class.Annotations[awsv1.AnnotationEC2NodeClassHashVersion] != EC2NodeClassHashVersion:
				rep.Notes = append(rep.Notes, fmt.Sprintf("EC2NodeClass %s's hash annotation %s is stale; Karpenter will rewrite it to %s (%s)",
					class.Name, errtext.Quote(got), want, EC2NodeClassHashVersion))
			}
		}
	}
	judged := 0
	for i := range s.NodeClaims {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		nc := &s.NodeClaims[i]
		cr := ClaimReport{Name: nc.Name, Node: nc.Status.NodeName, NodePool: nc.Labels[karpv1.NodePoolLabelKey]}
		if np := s.NodePool(cr.NodePool); np != nil && np.Spec.Template.Spec.NodeClassRef != nil {
			cr.NodeClass = np.Spec.Template.Spec.NodeClassRef.Name
		}
		for _, c := range nc.Status.Conditions {
			if c.Type == karpv1.ConditionTypeDrifted && c.Status == "True" {
				cr.Condition = c.Reason
			}
		}
		switch {
		case !managed(nc):
			cr.Notes = append(cr.Notes, "not managed by the AWS provider (nodeClassRef is not an EC2NodeClass): not checked")
		case cr.NodePool == "" || s.NodePool(cr.NodePool) == nil:
			cr.Notes = append(cr.Notes, "its NodePool "+errtext.Quote(cr.NodePool)+" is not in the snapshot: not checked")
		case !conditionTrue(nc, karpv1.ConditionTypeLaunched):
			cr.Notes = append(cr.Notes, "not launched: Karpenter does not judge drift until it is")
		case nc.DeletionTimestamp != nil:
			cr.Notes = append(cr.Notes, "being deleted: Karpenter does not judge its drift")
		default:
			if err := explainClaim(ctx, core, provider, nc, &cr); err != nil {
				return nil, err
			}
			np := s.NodePool(cr.NodePool)
			drifted := hasCondition(nc, karpv1.ConditionTypeDrifted)
			if v, ok := nc.Annotations[karpv1.NodePoolHashVersionAnnotationKey]; ok {
				if _, note := StampRule(np.Annotations[karpv1.NodePoolHashVersionAnnotationKey], v, NodePoolHashVersion, drifted); note != "" {
					cr.Notes = append(cr.Notes, "NodePool "+note)
				}
			}
			if class := s.EC2NodeClass(cr.NodeClass); class != nil {
				if v, ok := nc.Annotations[awsv1.AnnotationEC2NodeClassHashVersion]; ok {
					if _, note := StampRule(class.Annotations[awsv1.AnnotationEC2NodeClassHashVersion], v, EC2NodeClassHashVersion, drifted); note != "" {
						cr.Notes = append(cr.Notes, "EC2NodeClass "+note)
					}
				}
			}
			judged++
			if !cr.Drifted() && cr.Condition != "" {
				if why := unchecked(cr.Condition, cfg); why != "" {
					cr.CannotTell = append(cr.CannotTell, fmt.Sprintf("Karpenter's Drifted condition says %s, which %s", cr.Condition, why))
				}
			}
		}
		if cr.Drifted() {
			rep.Drifted++
		}
		rep.NodeClaims = append(rep.NodeClaims, cr)
	}
	deleting := map[string]bool{}
	for i := range s.NodeClaims {
		if s.NodeClaims[i].DeletionTimestamp != nil {
			deleting[s.NodeClaims[i].Name] = true
		}
	}
	summarise(rep, deleting)
	if cfg.instances == nil && judged > 0 {
		// Once for the report: it holds for every NodeClaim judged.
		rep.Notes = append(rep.Notes, "security groups and subnets not checked: no instances given")
	}
	return rep, nil
}

// explainClaim runs the checks on one NodeClaim: every core check, then
// the provider's in order until one cannot tell, where Karpenter's
// IsDrifted stops with an error (and leaves the Drifted condition as it
// was).
func explainClaim(ctx context.Context, core *drift.Detector, provider []drift.Check, nc *karpv1.NodeClaim, cr *ClaimReport) error {
	reasons, err := core.All(ctx, nc)
	cr.Reasons = reasons
	if err := cannotTell(err, cr); err != nil {
		return err
	}
	for i, c := range provider {
		r, err := c.Check(ctx, nc)
		if r != nil {
			cr.Reasons = append(cr.Reasons, *r)
		}
		if err != nil {
			if err := cannotTell(err, cr); err != nil {
				return err
			}
			if errors.As(err, new(hashUnknownError)) {
				continue // Karpenter judges the others: static drift is no error there
			}
			if i < len(provider)-1 {
				cr.Notes = append(cr.Notes, "the provider's later checks not run: Karpenter stops at the first it cannot judge and keeps the Drifted condition as it was")
			}
			break
		}
	}
	return nil
}

// cannotTell records a check's error in cr, or returns it when it is the
// context's.
func cannotTell(err error, cr *ClaimReport) error {
	for _, e := range splitJoined(err) {
		if errors.Is(e, context.Canceled) || errors.Is(e, context.DeadlineExceeded) {
			return e
		}
		cr.CannotTell = append(cr.CannotTell, errtext.Clip(e.Error()))
	}
	return nil
}

// splitJoined unwraps errors.Join'd errors (and drift.CheckErrors) into
// their parts.
func splitJoined(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, splitJoined(e)...)
		}
		return out
	}
	var ce *drift.CheckError
	if errors.As(err, &ce) && ce.Err != nil {
		return []error{ce.Err}
	}
	return []error{err}
}

// unchecked says why Explain could not have found a drift reason
// Karpenter reported, or "" when it checks that reason with what it was
// given (then "not drifted" is its verdict against Karpenter's).
func unchecked(reason string, cfg *explainConfig) string {
	switch drift.ReasonName(reason) {
	case drift.ReasonNameSecurityGroupDrift, drift.ReasonNameSubnetDrift, drift.ReasonNameCapacityReservationDrift:
		if cfg.instances == nil {
			return "needs the instances (WithInstances, drift-explain --instances), not given"
		}
	case InstanceTypeNotFound:
		if cfg.offerings == nil {
			return "needs the instance type offerings (WithOfferings, drift-explain --offerings), not given"
		}
	}
	return ""
}
