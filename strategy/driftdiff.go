package strategy

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/drift"
)

// DriftDiffer plugs the diff engine into package drift (which, as a leaf,
// cannot import it): with it, drift's Explain and WithOldSpecs name every
// changed field, list elements by key, with old and new values, instead of
// the two-level fingerprints. opts tune the comparison (diff.ListKey for
// your lists, diff.Ignore...), with patterns relative to the hashed spec,
// as drift names fields: a NodePool template's taints are "spec.taints"
// (diff.ListKey("spec.taints", "key", "effect")), its list elements
// "spec.taints[*].value". Paths in the result are relative the same way.
//
// Old and New in the result are for people: secrets are digests
// (diff.Redact), by the diff package's secret-name policy and the
// Sensitive patterns given in opts; only diff.ShowSecrets among opts
// shows them.
func DriftDiffer(opts ...diff.Option) (drift.Differ, error) {
	d, err := diff.New(diff.WithoutDefaults(), diff.Under("infrastructure.spec", opts...))
	if err != nil {
		return nil, err
	}
	return drift.DifferFunc(func(ctx context.Context, old, new any) ([]drift.FieldChange, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		a, err := asSpecObject(old)
		if err != nil {
			return nil, fmt.Errorf("old spec: %w", err)
		}
		b, err := asSpecObject(new)
		if err != nil {
			return nil, fmt.Errorf("new spec: %w", err)
		}
		cs, err := d.Objects(diff.ObjectInfrastructure, a, b)
		if err != nil {
			return nil, err
		}
		out := make([]drift.FieldChange, 0, cs.Len())
		for _, c := range cs.Changes {
			kind := drift.ChangeKindModified
			switch c.Op {
			case diff.OpAdd:
				kind = drift.ChangeKindAdded
			case diff.OpRemove:
				kind = drift.ChangeKindRemoved
			}
			// Evidence is read by people and written to logs and events:
			// the values as diff shows them, secrets as digests.
			old, new := c.Shown()
			out = append(out, drift.FieldChange{
				Path: strings.TrimPrefix(c.Field, "infrastructure.spec."),
				Kind: kind, Old: old, New: new,
			})
		}
		return out, nil
	}), nil
}

// asSpecObject wraps any spec value as {"spec": <its JSON form>}, the shape
// the diff engine compares.
func asSpecObject(v any) (map[string]any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var spec any
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, err
	}
	return map[string]any{"spec": spec}, nil
}
