package karpenter

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/upgradekit/upgradekit/drift"
)

// TestTimeAddedReadsAsKarpentersController: a NodePool whose taints carry
// timeAdded is stamped by Karpenter's controller, whose image sets no time
// zone; read from a dump or the API server by a process in any other zone,
// the same NodePool must not look drifted. The oracle is Karpenter's own
// decoding and np.Hash() with time.Local as its controller has it.
// (Not parallel: it sets time.Local, which metav1.Time decodes into.)
func TestTimeAddedReadsAsKarpentersController(t *testing.T) {
	const pool = `{"apiVersion":"karpenter.sh/v1","kind":"NodePool","metadata":{"name":"tainted",
	  "annotations":{"karpenter.sh/nodepool-hash-version":"v3"}},
	  "spec":{"template":{"spec":{"nodeClassRef":{"group":"karpenter.k8s.aws","kind":"EC2NodeClass","name":"default"},
	  "requirements":[],
	  "taints":[{"key":"a","effect":"NoSchedule","timeAdded":"2026-11-27T10:00:00Z"}],
	  "startupTaints":[{"key":"b","effect":"NoExecute","timeAdded":"2026-11-27T10:30:00+05:30"},{"key":"c","effect":"NoSchedule","timeAdded":null}]}}}}`
	local := time.Local
	t.Cleanup(func() { time.Local = local })

	// Karpenter's controller: no TZ, no /etc/localtime, so Go's Local is a
	// zero-offset zone that is not time.UTC.
	time.Local = time.FixedZone("UTC", 0)
	var np karpv1.NodePool
	require.NoError(t, json.Unmarshal([]byte(pool), &np))
	stamp := np.Hash()
	claim := `{"apiVersion":"karpenter.sh/v1","kind":"NodeClaim","metadata":{"name":"tainted-abc",
	  "labels":{"karpenter.sh/nodepool":"tainted"},
	  "annotations":{"karpenter.sh/nodepool-hash":"` + stamp + `","karpenter.sh/nodepool-hash-version":"v3"}},
	  "spec":{"nodeClassRef":{"group":"karpenter.k8s.aws","kind":"EC2NodeClass","name":"default"},"requirements":[]}}`
	annotated := strings.Replace(pool, `"karpenter.sh/nodepool-hash-version":"v3"`,
		`"karpenter.sh/nodepool-hash-version":"v3","karpenter.sh/nodepool-hash":"`+stamp+`"`, 1)
	dump := `{"apiVersion":"v1","kind":"List","items":[` + annotated + `,` + claim + `]}`

	for _, zone := range []*time.Location{
		time.FixedZone("UTC", 0), time.UTC,
		time.FixedZone("IST", 5*3600+30*60), time.FixedZone("NST", -(3*3600 + 30*60)), time.FixedZone("LMT", 17*60+32),
	} {
		t.Run(zone.String(), func(t *testing.T) {
			time.Local = zone
			snap, err := ReadDump(strings.NewReader(dump))
			require.NoError(t, err)
			rep, err := Explain(t.Context(), snap)
			require.NoError(t, err)
			require.Len(t, rep.NodeClaims, 1)
			for _, r := range rep.NodeClaims[0].Reasons {
				require.NotEqual(t, drift.ReasonNameNodePoolDrifted, r.Name, "read in %s: %s", zone, r.Message)
			}
			for _, n := range rep.Notes {
				require.NotContains(t, n, "stale", "read in %s", zone)
			}
		})
	}
}
