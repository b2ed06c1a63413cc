package karpenter_test

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/upgradekit/upgradekit/karpenter"
)

// A NodePool's hash is the one Karpenter stamps on its NodeClaims; when it
// changes, ChangedTemplateFields tells which fields changed it.
func ExampleChangedTemplateFields() {
	np := &karpv1.NodePool{}
	np.Spec.Template = karpv1.NodeClaimTemplate{
		ObjectMeta: karpv1.ObjectMeta{Labels: map[string]string{"team": "payments"}},
		Spec: karpv1.NodeClaimTemplateSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: "karpenter.k8s.aws", Kind: "EC2NodeClass", Name: "default"},
			ExpireAfter:  karpv1.MustParseNillableDuration("720h"),
			Requirements: []karpv1.NodeSelectorRequirementWithMinValues{
				{Key: "kubernetes.io/arch", Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}},
			},
		},
	}
	fmt.Println(karpenter.NodePoolHash(np), karpenter.NodePoolHash(np) == np.Hash())

	edited := np.DeepCopy()
	edited.Spec.Template.Labels["team"] = "checkout"
	edited.Spec.Template.Spec.ExpireAfter = karpv1.MustParseNillableDuration("Never")
	edited.Spec.Template.Spec.Requirements[0].Values = []string{"arm64"} // not hashed: no static drift
	fmt.Println(karpenter.NodePoolHash(edited))
	for _, c := range karpenter.ChangedTemplateFields(&np.Spec.Template, &edited.Spec.Template) {
		fmt.Printf("%s: %s -> %s\n", c.Path, c.Old, c.New)
	}
	// Output:
	// 17872807352120296448 true
	// 6252020545698114311
	// metadata.labels["team"]: payments -> checkout
	// spec.expireAfter: 720h0m0s -> Never
}
