package drain

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/internal/errtext"
)

// allocated is the fewest heap bytes one call of f allocated over three
// calls (the fewest, so that another goroutine's allocations do not count).
func allocated(f func()) uint64 {
	least := uint64(math.MaxUint64)
	var before, after runtime.MemStats
	for range 3 {
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

func pdbs(n int) []PDBStatus {
	out := make([]PDBStatus, n)
	for i := range out {
		out[i] = PDBStatus{Namespace: "default", Name: fmt.Sprintf("pdb-%d", i), ExpectedPods: 3, CurrentHealthy: 3, DesiredHealthy: 3}
	}
	return out
}

func blocked(n int) []BlockedPod {
	out := make([]BlockedPod, n)
	for i := range out {
		out[i] = BlockedPod{Namespace: "default", Name: fmt.Sprintf("web-%d", i), Reason: "PodDisruptionBudget allows no disruption", PDBs: pdbs(3)}
	}
	return out
}

// TestStringsDoNotGrowQuadratically: describing a pod blocked by 4,000
// budgets, or a drain blocked by 4,000 pods, costs no more than
// describing 500 of them does, give or take: the work is measured in
// bytes allocated, not time, so a loaded machine cannot make it flake.
// (BlockedPod.String built its line with += and allocated 64 times more
// for 8 times the input; the entry-point harness timed out on it.)
func TestStringsDoNotGrowQuadratically(t *testing.T) {
	small, large := 500, 4000
	for _, tc := range []struct {
		name string
		// input builds an n-entry value, whose description call makes.
		input func(n int) any
		call  func(v any) string
	}{
		{"BlockedPod.String",
			func(n int) any {
				return BlockedPod{Namespace: "default", Name: "web", Reason: "blocked", PDBs: pdbs(n)}
			},
			func(v any) string { return v.(BlockedPod).String() }},
		{"DrainError.Error",
			func(n int) any { return &DrainError{Node: "n1", Err: ErrDrainTimeout, Blocked: blocked(n)} },
			func(v any) string { return v.(*DrainError).Error() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inSmall, inLarge := tc.input(small), tc.input(large)
			var out string
			bSmall := allocated(func() { out = tc.call(inSmall) })
			bLarge := allocated(func() { out = tc.call(inLarge) })
			ratio := float64(bLarge+1) / float64(bSmall+1)
			require.Less(t, ratio, 20.0, "%d bytes allocated for %d entries, %d for %d: %.1fx for 8x the input", bLarge, large, bSmall, small, ratio)
			require.LessOrEqual(t, len(out), errtext.MaxMessage+64, "the message is capped")
			require.Contains(t, out, "more", "what is left out is counted")
		})
	}
}

// TestBlockedPodStringShowsWhatFits: the pod, its reason and the first
// budgets are described; the rest counted.
func TestBlockedPodStringShowsWhatFits(t *testing.T) {
	s := BlockedPod{Namespace: "default", Name: "web", Reason: "blocked", PDBs: pdbs(100)}.String()
	require.True(t, strings.HasPrefix(s, "default/web: blocked; blocked by PDB default/pdb-0 (disruptionsAllowed=0, healthy 3/3, desired 3)"), s)
	require.Regexp(t, `; and \d+ more PDB\(s\)$`, s)
	require.Equal(t, "default/web: blocked; blocked by PDB default/pdb-0 (disruptionsAllowed=0, healthy 3/3, desired 3)",
		BlockedPod{Namespace: "default", Name: "web", Reason: "blocked", PDBs: pdbs(1)}.String())
}
