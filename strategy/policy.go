package strategy

import (
	"context"
	"fmt"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/internal/errtext"
)

// Action is what a policy Rule does with one change (a machine's Outcome
// follows from the actions of all its changes).
type Action string

const (
	// ActionInPlace applies the change in place (with the rule's updater).
	ActionInPlace Action = "InPlace"
	// ActionReplace requires replacing the machine.
	ActionReplace Action = "Replace"
	// ActionIgnore accepts the change without applying it: it is no
	// reason to replace the machine, and nothing runs on the node for it.
	// Decision.Ignored lists it; strategy/capi's Extension puts it in the
	// CanUpdate* patches, so Cluster API records the new value and finds
	// nothing left to roll.
	ActionIgnore Action = "Ignore"
)

// Rule selects changes by category and/or path pattern (both must match
// when both are given) and says what to do with them.
type Rule struct {
	// Category selects changes of this category ("" = any).
	Category diff.Category `json:"category,omitempty"`
	// Path selects changes at or below this pattern ("" = any).
	Path string `json:"path,omitempty"`
	// Action is InPlace, Replace or Ignore.
	Action Action `json:"action"`
	// Updater names the updater that applies InPlace changes; empty means
	// the first registered updater that covers the change.
	Updater string `json:"updater,omitempty"`
}

// String shows the rule as its selector and action.
func (r Rule) String() string {
	sel := ""
	if r.Category != "" {
		sel = "category " + string(r.Category)
	}
	if r.Path != "" {
		if sel != "" {
			sel += " and "
		}
		sel += "path " + r.Path
	}
	return sel + " -> " + string(r.Action)
}

// policy is the declarative Decider NewPolicy builds.
type policy struct {
	rules    []compiledRule
	def      Action
	updaters []Updater
	byName   map[string]Updater
}

type compiledRule struct {
	Rule
	pattern *diff.Pattern
}

// NewPolicy is the declarative Decider: ordered rules, first match wins,
// and def, the action for changes no rule selects (ActionReplace is the
// safe choice). InPlace rules are applied by the named
// updater, or by the first of updaters that covers the change; an InPlace
// change no updater covers is a reason to replace. With no updaters at all
// the policy itself covers its InPlace changes (updater name "policy"), for
// callers that only need the decision. Two rules with the same
// selector and different actions are an ErrInvalidRule.
func NewPolicy(rules []Rule, def Action, updaters ...Updater) (Decider, error) {
	p := &policy{def: def, byName: map[string]Updater{}}
	if !validAction(def) || def == "" {
		return nil, fmt.Errorf("%w: default action %s", ErrInvalidRule, errtext.Quote(string(def)))
	}
	for _, u := range updaters {
		if u == nil {
			return nil, fmt.Errorf("%w: nil updater", ErrInvalidRule)
		}
		if _, dup := p.byName[u.Name()]; dup {
			return nil, fmt.Errorf("%w: two updaters named %q", ErrInvalidRule, u.Name())
		}
		p.byName[u.Name()] = u
		p.updaters = append(p.updaters, u)
	}
	seen := map[[2]string]Rule{}
	for i, r := range rules {
		if r.Category == "" && r.Path == "" {
			return nil, fmt.Errorf("%w: rules[%d]: needs a category or a path", ErrInvalidRule, i)
		}
		if !validAction(r.Action) {
			return nil, fmt.Errorf("%w: rules[%d].action: %q (want InPlace, Replace or Ignore)", ErrInvalidRule, i, r.Action)
		}
		if r.Updater != "" {
			if r.Action != ActionInPlace {
				return nil, fmt.Errorf("%w: rules[%d].updater: only InPlace rules name an updater", ErrInvalidRule, i)
			}
			if p.byName[r.Updater] == nil {
				return nil, fmt.Errorf("%w: rules[%d].updater: no updater named %q", ErrInvalidRule, i, r.Updater)
			}
		}
		cr := compiledRule{Rule: r}
		if r.Path != "" {
			pat, err := diff.ParsePattern(r.Path)
			if err != nil {
				return nil, fmt.Errorf("%w: rules[%d].path: %w", ErrInvalidRule, i, err)
			}
			cr.pattern = &pat
		}
		key := [2]string{string(r.Category), r.Path}
		if prev, ok := seen[key]; ok && prev.Action != r.Action {
			return nil, fmt.Errorf("%w: rules[%d] (%s) contradicts an earlier rule (%s)", ErrInvalidRule, i, r, prev)
		}
		seen[key] = r
		p.rules = append(p.rules, cr)
	}
	return p, nil
}

func validAction(a Action) bool {
	switch a {
	case ActionInPlace, ActionReplace, ActionIgnore:
		return true
	}
	return false
}

func (r compiledRule) selects(c diff.Change) bool {
	if r.Category != "" && r.Category != c.Category {
		return false
	}
	return r.pattern == nil || r.pattern.Match(c)
}

// Decide applies the policy to one machine's changes; the Decision owns
// its change sets.
func (p *policy) Decide(ctx context.Context, cs diff.ChangeSet) (Decision, error) {
	return p.decideInto(ctx, cs, nil)
}

// decideInto is Decide with the change sets built in sc (scratchDecider).
func (p *policy) decideInto(ctx context.Context, cs diff.ChangeSet, sc *decideScratch) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	return assign(cs, func(c diff.Change) (Action, string) {
		action, updater := p.def, ""
		for _, r := range p.rules {
			if r.selects(c) {
				action, updater = r.Action, r.Updater
				break
			}
		}
		if action != ActionInPlace {
			return action, ""
		}
		if updater != "" {
			if p.byName[updater].Covers(c) {
				return ActionInPlace, updater
			}
			return ActionReplace, ""
		}
		for _, u := range p.updaters {
			if u.Covers(c) {
				return ActionInPlace, u.Name()
			}
		}
		if len(p.updaters) == 0 {
			return ActionInPlace, "policy"
		}
		return ActionReplace, ""
	}, sc), nil
}
