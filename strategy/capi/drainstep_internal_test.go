package capi

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgradekit/upgradekit/nodeexec/drain"
)

func TestDescribeDrain(t *testing.T) {
	pdb := drain.PDBStatus{Namespace: "apps", Name: "web-pdb", CurrentHealthy: 2, DesiredHealthy: 2, ExpectedPods: 2}
	other := drain.PDBStatus{Namespace: "apps", Name: "db-pdb", CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	many := make([]drain.BlockedPod, 7)
	for i := range many {
		many[i] = drain.BlockedPod{Namespace: "apps", Name: fmt.Sprintf("web-%d", i), Reason: "eviction refused by PodDisruptionBudget", PDBs: []drain.PDBStatus{pdb}}
	}
	cases := []struct {
		name    string
		err     *drain.DrainError
		want    string
		blocked bool
	}{
		{
			name: "PDBs with the pods they hold, then the other pods",
			err: &drain.DrainError{Node: "n", Err: drain.ErrDrainTimeout, Blocked: []drain.BlockedPod{
				{Namespace: "apps", Name: "web-0", Reason: "eviction refused by PodDisruptionBudget", PDBs: []drain.PDBStatus{pdb}},
				{Namespace: "apps", Name: "db-0", Reason: "eviction refused by PodDisruptionBudget", PDBs: []drain.PDBStatus{other}},
				{Namespace: "apps", Name: "web-1", Reason: "eviction refused by PodDisruptionBudget", PDBs: []drain.PDBStatus{pdb}},
				{Namespace: "apps", Name: "slow", Reason: "evicted, still terminating"},
			}},
			want: "PDB apps/web-pdb (disruptionsAllowed=0, healthy 2/2, desired 2) holds apps/web-0, apps/web-1; " +
				"PDB apps/db-pdb (disruptionsAllowed=0, healthy 1/1, desired 1) holds apps/db-0; " +
				"pods left: apps/slow (evicted, still terminating)",
			blocked: true,
		},
		{
			name:    "only slow pods: draining, not blocked",
			err:     &drain.DrainError{Node: "n", Err: drain.ErrDrainTimeout, Blocked: []drain.BlockedPod{{Namespace: "a", Name: "p", Reason: "evicted, still terminating"}}},
			want:    "pods left: a/p (evicted, still terminating)",
			blocked: false,
		},
		{
			name:    "long lists are cut",
			err:     &drain.DrainError{Node: "n", Err: drain.ErrDrainTimeout, Blocked: many},
			want:    "PDB apps/web-pdb (disruptionsAllowed=0, healthy 2/2, desired 2) holds apps/web-0, apps/web-1, apps/web-2, apps/web-3, apps/web-4 and 2 more",
			blocked: true,
		},
		{
			name:    "pods kubectl will not evict: its own list",
			err:     &drain.DrainError{Node: "n", Err: drain.ErrDrainBlocked, Detail: "cannot delete Pods that declare no controller (use --force to override): default/bare"},
			want:    "cannot delete Pods that declare no controller (use --force to override): default/bare",
			blocked: true,
		},
		{
			name: "opted out",
			err: &drain.DrainError{Node: "n", Err: drain.ErrOptedOut, Detail: "cannot delete Pods that opted out of disruption (karpenter.sh/do-not-disrupt=true): default/precious",
				Blocked: []drain.BlockedPod{{Namespace: "default", Name: "precious", Reason: "annotation karpenter.sh/do-not-disrupt=true"}}},
			want:    "cannot delete Pods that opted out of disruption (karpenter.sh/do-not-disrupt=true): default/precious",
			blocked: true,
		},
		{
			name:    "nothing diagnosed: the error and its detail",
			err:     &drain.DrainError{Node: "n", Err: drain.ErrEvictionFailed, Detail: "error when evicting pods/\"x\": boom"},
			want:    "eviction failed: error when evicting pods/\"x\": boom",
			blocked: false,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, describeDrain(tc.err))
			require.Equal(t, tc.blocked, drainBlocked(tc.err))
		})
	}
}

func TestTruncate(t *testing.T) {
	require.Equal(t, "short", truncate("short", 10))
	long := truncate("0123456789abcdef", 10)
	require.Equal(t, "0123456…", long)
	require.LessOrEqual(t, len(long), 10)
	require.Equal(t, "ab…", truncate("abéééé", 6), "never half a rune")
}
