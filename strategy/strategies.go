package strategy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Errors of strategies, budgets and plans, matched with errors.Is.
var (
	// ErrInvalidStrategy: a strategy that cannot be used (nil, no name,
	// rollout limits that allow nothing).
	ErrInvalidStrategy = errors.New("invalid strategy")
	// ErrInvalidBudget: a disruption budget with a malformed count,
	// percentage, schedule or duration. A plan treats such a budget as
	// allowing no disruption and reports it as a warning.
	ErrInvalidBudget = errors.New("invalid disruption budget")
	// ErrInvalidCluster: a cluster description that cannot be planned
	// (duplicate names, unparsable versions, negative counts, a machine
	// newer than the target).
	ErrInvalidCluster = errors.New("invalid cluster")
	// ErrVersionSkew: an upgrade would break Kubernetes' version skew
	// policy (a skipped minor, a kubelet newer than the API server or more
	// than three minors older).
	ErrVersionSkew = errors.New("version skew")
)

// Method is how a machine is taken to its desired state, as a Strategy
// chooses it from the machine's Decision and a RolloutPlan carries it out.
type Method string

const (
	// MethodInPlace updates the machine where it runs (drain, update,
	// uncordon).
	MethodInPlace Method = "InPlace"
	// MethodReplace replaces the machine under the rollout's maxSurge and
	// maxUnavailable: the old one may go before the new one is ready.
	MethodReplace Method = "Replace"
	// MethodReplaceFirst replaces the machine with its replacement ready
	// before the old one is drained (Karpenter's drift, KCP's surge).
	MethodReplaceFirst Method = "ReplaceFirst"
	// MethodOnDelete leaves the machine alone until someone deletes it; its
	// replacement then gets the desired state.
	MethodOnDelete Method = "OnDelete"
	// MethodBlocked means the machine needs a change no allowed method can
	// make (fail closed); nothing happens to it.
	MethodBlocked Method = "Blocked"
	// MethodSkip means nothing is done: no change is needed, or the machine
	// is protected (do-not-disrupt, a PodDisruptionBudget) or held back.
	MethodSkip Method = "Skip"
)

// Choice is a strategy's answer for one machine.
type Choice struct {
	// Method is what happens to the machine.
	Method Method `json:"method"`
	// Strategy names the strategy that chose.
	Strategy string `json:"strategy,omitempty"`
	// Reason says why, in words.
	Reason string `json:"reason"`
}

// Strategy turns a machine's Decision into a Method. A strategy that does
// not handle a decision answers ok=false, so the next strategy in a
// Strategies list gets it, the way Karpenter tries its disruption methods in
// order.
type Strategy interface {
	// Name identifies the strategy in choices and reports.
	Name() string
	// Choose answers for one machine's decision.
	Choose(d Decision) (c Choice, ok bool)
}

type funcStrategy struct {
	name   string
	choose func(d Decision) (Choice, bool)
	// builtin marks the strategies this package builds around its own
	// functions: choose keeps nothing of its Decision and returns nothing
	// that shares its memory (see scratchSafe). NewStrategy's are not.
	builtin bool
	// wraps is the strategy a built-in one hands decisions to
	// (FallbackStrategy's replace), which may be anyone's.
	wraps Strategy
}

func (s funcStrategy) Name() string { return s.name }

func (s funcStrategy) Choose(d Decision) (Choice, bool) {
	c, ok := s.choose(d)
	if ok && c.Strategy == "" {
		c.Strategy = s.name
	}
	return c, ok
}

// NewStrategy adapts a function to a Strategy, as http.HandlerFunc adapts a
// function to a Handler. Choices it returns without a Strategy name get
// name.
func NewStrategy(name string, choose func(d Decision) (Choice, bool)) (Strategy, error) {
	if name == "" || choose == nil {
		return nil, fmt.Errorf("%w: a strategy needs a name and a function", ErrInvalidStrategy)
	}
	return funcStrategy{name: name, choose: choose}, nil
}

// noChange answers Skip for a decision with nothing to do; every built-in
// strategy starts with it.
func noChange(name string, d Decision) (Choice, bool) {
	if d.Outcome == OutcomeNoChange || d.Outcome == "" {
		return Choice{Method: MethodSkip, Strategy: name, Reason: "no changes"}, true
	}
	return Choice{}, false
}

// InPlaceStrategy updates in place every machine whose decision is InPlace
// and leaves Replace decisions to the next strategy.
func InPlaceStrategy() Strategy {
	const name = "in-place"
	return funcStrategy{name: name, builtin: true, choose: func(d Decision) (Choice, bool) {
		if c, ok := noChange(name, d); ok {
			return c, true
		}
		if d.Outcome == OutcomeInPlace {
			return Choice{Method: MethodInPlace, Reason: d.Message}, true
		}
		return Choice{}, false
	}}
}

// RollingUpdate holds a rollout's limits, as a MachineDeployment's
// spec.rollout.strategy.rollingUpdate: counts or percentages of the
// replicas. A nil field takes CAPI's default (maxSurge 1, maxUnavailable 0).
type RollingUpdate struct {
	// MaxSurge is how many machines may exist above the replica count.
	MaxSurge *intstr.IntOrString `json:"maxSurge,omitempty"`
	// MaxUnavailable is how many machines may be unavailable at once.
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// Limits scales the rollout's limits to replicas the way Kubernetes does
// (intstr.GetScaledValueFromIntOrPercent): surge rounds up, unavailable
// rounds down. Negative values, malformed or over-100% percentages, and
// limits that are both zero are ErrInvalidStrategy naming the field.
func (r RollingUpdate) Limits(replicas int) (surge, unavailable int, err error) {
	one, zero := intstr.FromInt32(1), intstr.FromInt32(0)
	s, u := r.MaxSurge, r.MaxUnavailable
	if s == nil {
		s = &one
	}
	if u == nil {
		u = &zero
	}
	if surge, err = scaled("maxSurge", s, replicas, true); err != nil {
		return 0, 0, err
	}
	if unavailable, err = scaled("maxUnavailable", u, replicas, false); err != nil {
		return 0, 0, err
	}
	if isZero(s) && isZero(u) {
		return 0, 0, fmt.Errorf("%w: maxSurge and maxUnavailable are both 0", ErrInvalidStrategy)
	}
	return surge, unavailable, nil
}

func isZero(v *intstr.IntOrString) bool {
	n, err := scaled("", v, 100, true)
	return err == nil && n == 0
}

func scaled(field string, v *intstr.IntOrString, total int, roundUp bool) (int, error) {
	if v.Type == intstr.String {
		p, ok := strings.CutSuffix(v.StrVal, "%")
		if !ok || !isDigits(p) || len(p) > 3 || atoi(p) > 100 {
			return 0, fmt.Errorf("%w: %s: %s is not a count or a percentage from 0%% to 100%%", ErrInvalidStrategy, field, errtext.Quote(v.StrVal))
		}
	} else if v.IntVal < 0 {
		return 0, fmt.Errorf("%w: %s: %d is negative", ErrInvalidStrategy, field, v.IntVal)
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, total, roundUp)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %w", ErrInvalidStrategy, field, err)
	}
	return n, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// atoi converts a string of at most a few digits checked by isDigits.
func atoi(s string) int {
	n := 0
	for _, r := range s {
		n = n*10 + int(r-'0')
	}
	return n
}

// RollingReplaceStrategy replaces every machine that needs a change (in
// place or not) under the rollout's limits. The limits are checked here;
// the planner applies each deployment's own RollingUpdate.
func RollingReplaceStrategy(r RollingUpdate) (Strategy, error) {
	if _, _, err := r.Limits(100); err != nil {
		return nil, err
	}
	const name = "rolling-replace"
	return funcStrategy{name: name, builtin: true, choose: func(d Decision) (Choice, bool) {
		if c, ok := noChange(name, d); ok {
			return c, true
		}
		return Choice{Method: MethodReplace, Reason: replaceReason(d)}, true
	}}, nil
}

// ReplaceFirstStrategy replaces every machine that needs a change, with the
// new machine ready before the old one is drained.
func ReplaceFirstStrategy() Strategy {
	const name = "replace-first"
	return funcStrategy{name: name, builtin: true, choose: func(d Decision) (Choice, bool) {
		if c, ok := noChange(name, d); ok {
			return c, true
		}
		return Choice{Method: MethodReplaceFirst, Reason: replaceReason(d)}, true
	}}
}

// OnDeleteStrategy leaves every machine that needs a change until it is
// deleted by someone else (CAPI's OnDelete rollout).
func OnDeleteStrategy() Strategy {
	const name = "on-delete"
	return funcStrategy{name: name, builtin: true, choose: func(d Decision) (Choice, bool) {
		if c, ok := noChange(name, d); ok {
			return c, true
		}
		return Choice{Method: MethodOnDelete, Reason: "waits for the machine to be deleted: " + d.Message}, true
	}}
}

// FallbackStrategy tries in place and, when the decision is Replace, hands
// the machine to replace (EKS Anywhere's fallbackRolling). A nil replace
// is ErrInvalidStrategy.
func FallbackStrategy(replace Strategy) (Strategy, error) {
	if replace == nil {
		return nil, fmt.Errorf("%w: fallback needs a replacing strategy", ErrInvalidStrategy)
	}
	name := "fallback(" + replace.Name() + ")"
	return funcStrategy{name: name, choose: func(d Decision) (Choice, bool) {
		if c, ok := noChange(name, d); ok {
			return c, true
		}
		if d.Outcome == OutcomeInPlace {
			return Choice{Method: MethodInPlace, Reason: d.Message}, true
		}
		c, ok := replace.Choose(d)
		if !ok {
			return Choice{}, false
		}
		c.Strategy = name
		c.Reason = "in place not possible, falling back: " + c.Reason
		return c, true
	}, builtin: true, wraps: replace}, nil
}

// NeverReplaceStrategy fails closed: machines that can be updated in place
// are, and machines that would need replacing are Blocked, naming the
// changes that forbid in place.
func NeverReplaceStrategy() Strategy {
	const name = "never-replace"
	return funcStrategy{name: name, builtin: true, choose: func(d Decision) (Choice, bool) {
		if c, ok := noChange(name, d); ok {
			return c, true
		}
		if d.Outcome == OutcomeInPlace {
			return Choice{Method: MethodInPlace, Reason: d.Message}, true
		}
		return Choice{Method: MethodBlocked, Reason: "replacement not allowed: " + d.Message}, true
	}}
}

func replaceReason(d Decision) string {
	if d.Outcome == OutcomeInPlace {
		return "replacing although in place is possible: " + d.Message
	}
	return d.Message
}

// Strategies is an ordered list of strategies: the first that handles a
// decision answers. A decision none handles is Blocked, so an incomplete
// list fails closed. It is itself a Strategy that always answers.
type Strategies []Strategy

// Name lists the member names.
func (ss Strategies) Name() string {
	names := make([]string, 0, len(ss))
	for _, s := range ss {
		if s != nil {
			names = append(names, s.Name())
		}
	}
	return "[" + strings.Join(names, ", ") + "]"
}

// Choose asks each strategy in order; nil members are passed over.
func (ss Strategies) Choose(d Decision) (Choice, bool) {
	for _, s := range ss {
		if s == nil {
			continue
		}
		if c, ok := s.Choose(d); ok {
			return c, true
		}
	}
	if c, ok := noChange(ss.Name(), d); ok {
		return c, true
	}
	return Choice{Method: MethodBlocked, Strategy: ss.Name(),
		Reason: fmt.Sprintf("no strategy handles a %s decision: %s", d.Outcome, d.Message)}, true
}

// maxScratchDepth bounds how deep scratchSafe looks into nested strategies
// (Strategies in Strategies, fallbacks): a list that holds itself is
// possible, and deeper nesting is simply not trusted.
const maxScratchDepth = 8

// scratchSafe reports whether s is known to keep nothing of the Decisions
// it chooses from and to return nothing sharing their memory: a strategy
// of this package built around its own functions, a FallbackStrategy whose
// replace is one, or a Strategies list of them. The planner then may build
// the Decision in buffers it reuses for the next machine (scratchDecider).
// Anything else may be user code, which Decide's contract promises a
// Decision of its own. The dynamic types are matched exactly: a type that
// embeds Strategies and overrides Choose is not Strategies.
func scratchSafe(s Strategy, depth int) bool {
	if depth > maxScratchDepth {
		return false
	}
	switch s := s.(type) {
	case funcStrategy:
		return s.builtin && (s.wraps == nil || scratchSafe(s.wraps, depth+1))
	case Strategies:
		for _, m := range s {
			if m != nil && !scratchSafe(m, depth+1) {
				return false
			}
		}
		return true
	}
	return false
}
