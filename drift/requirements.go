package drift

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgradekit/upgradekit/internal/errtext"
)

// KarpenterLabelAliases returns a new map from deprecated well-known label
// keys in requirements to the keys nodes carry, as Karpenter normalises
// them. Each call returns a fresh copy the caller may modify.
func KarpenterLabelAliases() map[string]string { return maps.Clone(karpenterLabelAliases) }

var karpenterLabelAliases = map[string]string{
	corev1.LabelFailureDomainBetaZone:   corev1.LabelTopologyZone,
	"beta.kubernetes.io/arch":           corev1.LabelArchStable,
	"beta.kubernetes.io/os":             corev1.LabelOSStable,
	corev1.LabelInstanceType:            corev1.LabelInstanceTypeStable,
	corev1.LabelFailureDomainBetaRegion: corev1.LabelTopologyRegion,
}

// Extra operators Karpenter accepts besides the core ones.
const (
	OpGte corev1.NodeSelectorOperator = "Gte"
	OpLte corev1.NodeSelectorOperator = "Lte"
)

// keyReq is the intersection of all requirements on one key, in the same
// normal form Karpenter uses: a set of values or its complement, with
// optional inclusive integer bounds.
type keyReq struct {
	key        string
	complement bool
	values     map[string]struct{}
	gte, lte   *int
	// mustExist: a node without the label never satisfies the
	// requirement, even though no value does either (Lt MinInt).
	mustExist bool
	text      []string
}

func newKeyReq(r corev1.NodeSelectorRequirement) (*keyReq, error) {
	kr := &keyReq{key: r.Key, values: map[string]struct{}{}, text: []string{reqString(r)}}
	intValue := func() (int, error) {
		if len(r.Values) != 1 {
			return 0, fmt.Errorf("%w: %s: operator %s needs exactly one value", ErrInvalidRequirement, r.Key, r.Operator)
		}
		n, err := strconv.Atoi(r.Values[0])
		if err != nil {
			return 0, fmt.Errorf("%w: %s: operator %s needs an integer, got %q", ErrInvalidRequirement, r.Key, r.Operator, r.Values[0])
		}
		return n, nil
	}
	switch r.Operator {
	case corev1.NodeSelectorOpIn:
		if len(r.Values) == 0 {
			return nil, fmt.Errorf("%w: %s: operator In needs values", ErrInvalidRequirement, r.Key)
		}
		for _, v := range r.Values {
			kr.values[v] = struct{}{}
		}
	case corev1.NodeSelectorOpNotIn:
		kr.complement = true
		for _, v := range r.Values {
			kr.values[v] = struct{}{}
		}
	case corev1.NodeSelectorOpExists:
		kr.complement = true
	case corev1.NodeSelectorOpDoesNotExist:
	case corev1.NodeSelectorOpGt:
		n, err := intValue()
		if err != nil {
			return nil, err
		}
		kr.complement = true
		if n == math.MaxInt {
			// Gt MaxInt matches no value. Karpenter (v1.15
			// scheduling.NewRequirementWithFlexibility) turns it
			// into DoesNotExist, so a node without the label is
			// compatible; we follow Karpenter so that we never report
			// drift Karpenter would not.
			kr.complement = false
			break
		}
		n++
		kr.gte = &n
	case corev1.NodeSelectorOpLt:
		n, err := intValue()
		if err != nil {
			return nil, err
		}
		kr.complement = true
		if n == math.MinInt {
			// Lt MinInt matches no value, and (unlike Gt MaxInt,
			// which Karpenter special-cases) Karpenter still requires
			// the label to exist: keep that, without its overflow.
			kr.complement = false
			kr.mustExist = true
			break
		}
		n--
		kr.lte = &n
	case OpGte:
		n, err := intValue()
		if err != nil {
			return nil, err
		}
		kr.complement = true
		kr.gte = &n
	case OpLte:
		n, err := intValue()
		if err != nil {
			return nil, err
		}
		kr.complement = true
		kr.lte = &n
	default:
		return nil, fmt.Errorf("%w: %s: unknown operator %s", ErrInvalidRequirement, errtext.Quote(r.Key), errtext.Quote(string(r.Operator)))
	}
	return kr, nil
}

func reqString(r corev1.NodeSelectorRequirement) string {
	switch r.Operator {
	case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
		return r.Key + " " + string(r.Operator)
	}
	return r.Key + " " + string(r.Operator) + " [" + strings.Join(r.Values, ",") + "]"
}

// intersect narrows r by o (same key).
func (r *keyReq) intersect(o *keyReq) {
	r.text = append(r.text, o.text...)
	r.mustExist = r.mustExist || o.mustExist
	gte := maxPtr(r.gte, o.gte)
	lte := minPtr(r.lte, o.lte)
	if gte != nil && lte != nil && *gte > *lte {
		r.complement, r.values, r.gte, r.lte = false, map[string]struct{}{}, nil, nil
		return
	}
	values := map[string]struct{}{}
	switch {
	case r.complement && o.complement:
		maps.Copy(values, r.values)
		maps.Copy(values, o.values)
	case r.complement:
		for v := range o.values {
			if _, ok := r.values[v]; !ok {
				values[v] = struct{}{}
			}
		}
	case o.complement:
		for v := range r.values {
			if _, ok := o.values[v]; !ok {
				values[v] = struct{}{}
			}
		}
	default:
		for v := range r.values {
			if _, ok := o.values[v]; ok {
				values[v] = struct{}{}
			}
		}
	}
	complement := r.complement && o.complement
	if !complement {
		for v := range values {
			if !withinBounds(v, gte, lte) {
				delete(values, v)
			}
		}
		gte, lte = nil, nil
	}
	r.complement, r.values, r.gte, r.lte = complement, values, gte, lte
}

// has reports whether value v satisfies r.
func (r *keyReq) has(v string) bool {
	_, in := r.values[v]
	if r.complement {
		return !in && withinBounds(v, r.gte, r.lte)
	}
	return in && withinBounds(v, r.gte, r.lte)
}

// allowsAbsent reports whether a node without the label satisfies r: true
// for NotIn and DoesNotExist (Karpenter's "custom labels must be defined
// unless the requirement is NotIn or DoesNotExist").
func (r *keyReq) allowsAbsent() bool {
	if r.mustExist {
		return false
	}
	if r.complement {
		return len(r.values) > 0
	}
	return len(r.values) == 0
}

func withinBounds(v string, gte, lte *int) bool {
	if gte == nil && lte == nil {
		return true
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return false
	}
	return (gte == nil || n >= *gte) && (lte == nil || n <= *lte)
}

func maxPtr(a, b *int) *int {
	if a == nil {
		return b
	}
	if b == nil || *a >= *b {
		return a
	}
	return b
}

func minPtr(a, b *int) *int {
	if a == nil {
		return b
	}
	if b == nil || *a <= *b {
		return a
	}
	return b
}

// Requirements is the requirements-compatibility check: the object's
// labels (a NodeClaim's or Node's) against the desired node selector
// requirements, with Karpenter's semantics: requirements on one key
// intersect; a label the node lacks is drift unless its requirement is
// NotIn or DoesNotExist; a label the node has must satisfy the requirement
// (Gt/Lt compare integers; a non-integer value never satisfies them).
type Requirements struct {
	keys     []string
	byKey    map[string]*keyReq
	labelsOf func(metav1.Object) map[string]string
}

// RequirementsOption configures a Requirements check.
type RequirementsOption func(*requirementsConfig)

type requirementsConfig struct {
	aliases  map[string]string
	labelsOf func(metav1.Object) map[string]string
}

// WithLabelAliases rewrites requirement keys before evaluation (see
// KarpenterLabelAliases). The map is copied.
func WithLabelAliases(aliases map[string]string) RequirementsOption {
	aliases = maps.Clone(aliases)
	return func(c *requirementsConfig) { c.aliases = aliases }
}

// WithLabelsOf reads the labels to check from somewhere other than the
// object's own labels.
func WithLabelsOf(f func(metav1.Object) map[string]string) RequirementsOption {
	return func(c *requirementsConfig) { c.labelsOf = f }
}

// NewRequirements compiles reqs. Errors wrap ErrInvalidRequirement.
func NewRequirements(reqs []corev1.NodeSelectorRequirement, opts ...RequirementsOption) (*Requirements, error) {
	cfg := requirementsConfig{}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	c := &Requirements{byKey: map[string]*keyReq{}, labelsOf: cfg.labelsOf}
	for _, r := range reqs {
		if r.Key == "" {
			return nil, fmt.Errorf("%w: empty key", ErrInvalidRequirement)
		}
		if a, ok := cfg.aliases[r.Key]; ok {
			r.Key = a
		}
		kr, err := newKeyReq(r)
		if err != nil {
			return nil, err
		}
		if prev, ok := c.byKey[r.Key]; ok {
			prev.intersect(kr)
			continue
		}
		c.byKey[r.Key] = kr
		c.keys = append(c.keys, r.Key)
	}
	slices.Sort(c.keys)
	return c, nil
}

// Check implements Check.
func (c *Requirements) Check(_ context.Context, obj metav1.Object) (*Reason, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: Requirements not constructed with NewRequirements", ErrInvalidOption)
	}
	if isNilObject(obj) {
		return nil, ErrNilObject
	}
	labels := obj.GetLabels()
	if c.labelsOf != nil {
		labels = c.labelsOf(obj)
	}
	var ev []Evidence
	for _, k := range c.keys {
		kr := c.byKey[k]
		want := strings.Join(kr.text, " and ")
		v, ok := labels[k]
		if !ok {
			if !kr.allowsAbsent() {
				ev = append(ev, Evidence{Kind: EvidenceKindLabel, Key: k, Want: want, Detail: "label missing"})
			}
			continue
		}
		if !kr.has(v) {
			ev = append(ev, Evidence{Kind: EvidenceKindLabel, Key: k, Want: want, Got: v, Detail: "value not allowed"})
		}
	}
	if len(ev) == 0 {
		return nil, nil
	}
	keys := make([]string, len(ev))
	for i, e := range ev {
		keys[i] = e.Key
	}
	return &Reason{
		Name:     ReasonNameRequirementsDrifted,
		Message:  fmt.Sprintf("labels no longer satisfy the requirements on %s", strings.Join(keys, ", ")),
		Evidence: ev,
	}, nil
}
