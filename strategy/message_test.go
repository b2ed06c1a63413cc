package strategy

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/diff"
)

// The messages were built with fmt and strings.Join; they are now appended
// into one buffer. These are the old builders, kept as the oracle.

func oracleFieldList(cs diff.ChangeSet, categories bool) string {
	const show = 10
	var parts []string
	for i, c := range cs.Changes {
		if i == show {
			parts = append(parts, fmt.Sprintf("and %d more", cs.Len()-show))
			break
		}
		if categories {
			parts = append(parts, fmt.Sprintf("%s (%s)", c.Field, c.Category))
		} else {
			parts = append(parts, c.Field)
		}
	}
	return strings.Join(parts, ", ")
}

func oracleDecline(uncovered diff.ChangeSet) string {
	noun := "changes"
	if uncovered.Len() == 1 {
		noun = "change"
	}
	return fmt.Sprintf("cannot update in place: %d %s not covered: %s", uncovered.Len(), noun, oracleFieldList(uncovered, true))
}

func oracleUpdaters(coverage []Coverage) []string {
	var out []string
	seen := map[string]bool{}
	for _, c := range coverage {
		if !seen[c.Updater] {
			seen[c.Updater] = true
			out = append(out, c.Updater)
		}
	}
	return out
}

// TestMessagesAsBefore: for change sets of 0 to 25 changes (past the ten
// named) routed to up to four updaters, the decision's messages and
// Updaters are what the fmt-built ones were.
func TestMessagesAsBefore(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 1))
	cats := []diff.Category{diff.CategoryKubernetesVersion, diff.CategoryImage, diff.CategoryFiles, ""}
	for n := range 26 {
		for round := range 20 {
			cs := diff.ChangeSet{}
			for i := range n {
				cs.Changes = append(cs.Changes, diff.Change{
					Field:    fmt.Sprintf("spec.f%d%s", i, strings.Repeat("x", rng.IntN(40))),
					Category: cats[rng.IntN(len(cats))],
				})
			}
			route := func(c diff.Change) (Action, string) {
				switch k := rng.IntN(6); {
				case k < 4 || round%3 == 0:
					return ActionInPlace, fmt.Sprintf("u%d", k%4)
				case k == 4:
					return ActionReplace, ""
				default:
					return ActionIgnore, ""
				}
			}
			d := assign(cs, route, nil)
			require.Equal(t, oracleUpdaters(d.Coverage), d.Updaters(), "n=%d", n)
			switch d.Outcome {
			case OutcomeReplace:
				require.Equal(t, oracleDecline(d.Uncovered), d.Message, "n=%d", n)
			case OutcomeInPlace:
				require.Equal(t, "in place by "+strings.Join(oracleUpdaters(d.Coverage), ", ")+": "+oracleFieldList(d.InPlace, false), d.Message, "n=%d", n)
			}
			for i, c := range d.Coverage {
				require.Same(t, &d.InPlace.Changes[i], c.Change, "coverage %d points at its InPlace entry", i)
			}
		}
	}
}
