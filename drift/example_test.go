package drift_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/upgradekit/upgradekit/drift"
)

// Example stamps two nodes with a pool's template, then asks what would
// drift if a changed template and new requirements were applied, and why.
func Example() {
	ctx := context.Background()
	hasher, _ := drift.NewHasher("v1")
	stamper, _ := drift.NewStamper("example.com", hasher)

	template := map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"team": "payments"}},
		"spec": map[string]any{
			"taints":       []any{map[string]any{"key": "dedicated", "value": "payments", "effect": "NoSchedule"}},
			"nodeClassRef": map[string]any{"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
			"expireAfter":  "720h0m0s",
		},
	}
	var nodes []metav1.Object
	for _, arch := range []string{"amd64", "arm64"} {
		n := &metav1.ObjectMeta{Name: "node-" + arch, Labels: map[string]string{"kubernetes.io/arch": arch}}
		if _, err := stamper.Stamp(n, template); err != nil {
			fmt.Println(err)
			return
		}
		nodes = append(nodes, n)
	}

	// Check a node against the desired stamp (an unstructured object
	// hashes like the same map, or the same typed struct).
	desired, _ := stamper.Compute(&unstructured.Unstructured{Object: template})
	fmt.Println("node-amd64:", stamper.Compare(nodes[0], desired.Hash).State)

	// Proposed: a new expiry, and arm64 no longer allowed.
	proposed := map[string]any{
		"metadata": template["metadata"],
		"spec": map[string]any{
			"taints":       template["spec"].(map[string]any)["taints"],
			"nodeClassRef": template["spec"].(map[string]any)["nodeClassRef"],
			"expireAfter":  "336h0m0s",
		},
	}
	reqs, _ := drift.NewRequirements([]corev1.NodeSelectorRequirement{
		{Key: "kubernetes.io/arch", Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}},
	})
	report, err := stamper.DryRun(ctx, proposed, nodes, reqs)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d of %d nodes would drift\n", report.Drifted, report.Total)
	for _, o := range report.Objects {
		for _, r := range o.Reasons {
			var keys []string
			for _, e := range r.Evidence {
				if e.Kind != drift.EvidenceKindHash {
					keys = append(keys, e.Key)
				}
			}
			fmt.Printf("%s: %s %v\n", o.Name, r.Name, keys)
		}
	}
	// Output:
	// node-amd64: Current
	// 2 of 2 nodes would drift
	// node-amd64: NodePoolDrifted [spec.expireAfter]
	// node-arm64: NodePoolDrifted [spec.expireAfter]
	// node-arm64: RequirementsDrifted [kubernetes.io/arch]
}

// ExampleHasher shows zero-value folding and typed/unstructured equality.
func ExampleHasher() {
	h, _ := drift.NewHasher("v1")
	typed := &corev1.Taint{Key: "dedicated", Effect: corev1.TaintEffectNoSchedule}
	a, _ := h.Hash(typed)
	b, _ := h.Hash(map[string]any{"key": "dedicated", "effect": "NoSchedule", "value": "", "timeAdded": nil})
	fmt.Println(a == b, a.Version)
	// Output: true v1+uk1
}
