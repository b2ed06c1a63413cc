package karpenter

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/scheduling"

	"github.com/upgradekit/upgradekit/drift"
)

// TestRequirementsCheckIsKarpenters compares RequirementsCheck with
// Karpenter's own rule (its drift controller: the NodeClaim's labels as
// requirements, Compatible with the NodePool's requirements) on random
// NodePools and NodeClaims: the same verdict every time.
func TestRequirementsCheckIsKarpenters(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	keys := []string{corev1.LabelArchStable, karpv1.CapacityTypeLabelKey, corev1.LabelTopologyZone, "team", "karpenter.k8s.aws/instance-cpu", "beta.kubernetes.io/arch"}
	values := map[string][]string{
		corev1.LabelArchStable:           {"amd64", "arm64"},
		"beta.kubernetes.io/arch":        {"amd64", "arm64"},
		karpv1.CapacityTypeLabelKey:      {"on-demand", "spot", "reserved"},
		corev1.LabelTopologyZone:         {"us-west-2a", "us-west-2b", "us-west-2c"},
		"team":                           {"a", "b"},
		"karpenter.k8s.aws/instance-cpu": {"2", "4", "8", "16"},
	}
	ops := []corev1.NodeSelectorOperator{corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn, corev1.NodeSelectorOpExists,
		corev1.NodeSelectorOpDoesNotExist, corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt}
	const runs = 5000
	drifted := 0
	for i := range runs {
		var reqs []karpv1.NodeSelectorRequirementWithMinValues
		for _, k := range keys {
			if rng.IntN(2) == 0 {
				continue
			}
			op := ops[rng.IntN(len(ops))]
			r := karpv1.NodeSelectorRequirementWithMinValues{Key: k, Operator: op}
			switch op {
			case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
				for _, v := range values[k] {
					if rng.IntN(2) == 0 {
						r.Values = append(r.Values, v)
					}
				}
				if len(r.Values) == 0 {
					r.Values = []string{values[k][0]}
				}
			case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
				if k != "karpenter.k8s.aws/instance-cpu" {
					r.Operator = corev1.NodeSelectorOpExists
					break
				}
				r.Values = []string{strconv.Itoa(rng.IntN(17))}
			}
			reqs = append(reqs, r)
		}
		labels := map[string]string{karpv1.NodePoolLabelKey: "p"}
		for _, k := range keys {
			if rng.IntN(4) != 0 {
				labels[k] = values[k][rng.IntN(len(values[k]))]
			}
		}
		// Deprecated keys beside (or instead of) the stable ones, agreeing
		// or not: Karpenter normalises them and intersects the values.
		for old, cur := range map[string]string{corev1.LabelFailureDomainBetaZone: corev1.LabelTopologyZone} {
			if rng.IntN(3) == 0 {
				labels[old] = values[cur][rng.IntN(len(values[cur]))]
			}
		}
		np := karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
		np.Spec.Template.Spec.Requirements = reqs
		np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: GroupAWS, Kind: "EC2NodeClass", Name: "c"}
		nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}}
		nc.Spec.NodeClassRef = np.Spec.Template.Spec.NodeClassRef

		r, err := RequirementsCheck(&Snapshot{NodePools: []karpv1.NodePool{np}}).Check(t.Context(), nc)
		require.NoError(t, err)
		theirs := scheduling.NewLabelRequirements(labels).Compatible(scheduling.NewNodeSelectorRequirementsWithMinValues(reqs...)) != nil
		require.Equal(t, theirs, r != nil, "run %d: requirements %s, labels %v: Karpenter drifted=%v, ours %v",
			i, fmt.Sprint(reqs), labels, theirs, reasonOf(r))
		if theirs {
			drifted++
		}
	}
	t.Logf("%d runs, %d drifted", runs, drifted)
	require.Greater(t, drifted, runs/10)
	require.Less(t, drifted, runs*9/10)
}

func reasonOf(r *drift.Reason) string {
	if r == nil {
		return "not drifted"
	}
	return r.Message
}

// TestRequirementsConflictingDeprecatedLabel: a NodeClaim labelled
// beta.kubernetes.io/arch=amd64 and kubernetes.io/arch=arm64 satisfies no
// requirement that needs an arch (Karpenter intersects the two to none),
// and the reason names both labels; NotIn and DoesNotExist accept it.
func TestRequirementsConflictingDeprecatedLabel(t *testing.T) {
	labels := map[string]string{karpv1.NodePoolLabelKey: "p", "beta.kubernetes.io/arch": "amd64", corev1.LabelArchStable: "arm64"}
	for _, tc := range []struct {
		req     karpv1.NodeSelectorRequirementWithMinValues
		drifted bool
	}{
		{karpv1.NodeSelectorRequirementWithMinValues{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"arm64"}}, true},
		{karpv1.NodeSelectorRequirementWithMinValues{Key: "beta.kubernetes.io/arch", Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}}, true},
		{karpv1.NodeSelectorRequirementWithMinValues{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpExists}, true},
		{karpv1.NodeSelectorRequirementWithMinValues{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"arm64"}}, false},
		{karpv1.NodeSelectorRequirementWithMinValues{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpDoesNotExist}, false},
	} {
		t.Run(requirementText(tc.req), func(t *testing.T) {
			np := karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
			np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{tc.req}
			np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: GroupAWS, Kind: "EC2NodeClass", Name: "c"}
			nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}}
			nc.Spec.NodeClassRef = np.Spec.Template.Spec.NodeClassRef
			theirs := scheduling.NewLabelRequirements(labels).Compatible(scheduling.NewNodeSelectorRequirementsWithMinValues(tc.req)) != nil
			require.Equal(t, tc.drifted, theirs, "Karpenter's own verdict")
			r, err := RequirementsCheck(&Snapshot{NodePools: []karpv1.NodePool{np}}).Check(t.Context(), nc)
			require.NoError(t, err)
			require.Equal(t, tc.drifted, r != nil, "%v", reasonOf(r))
			if r != nil {
				require.Equal(t, drift.ReasonNameRequirementsDrifted, r.Name)
				require.Equal(t, "beta.kubernetes.io/arch=amd64, kubernetes.io/arch=arm64", r.Evidence[0].Got)
				require.Contains(t, r.Message, "kubernetes.io/arch")
			}
		})
	}
}
