package karpenter_test

import (
	"context"
	"fmt"
	"os"

	"github.com/upgradekit/upgradekit/karpenter"
)

// Explain a dump of a Karpenter cluster (testdata/dump, described in its
// README): which NodeClaims drifted, and the first reason of each, the one
// Karpenter reports.
func ExampleExplain() {
	f, err := os.Open("testdata/dump/cluster.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	snap, err := karpenter.ReadDump(f)
	if err != nil {
		fmt.Println(err)
		return
	}
	rep, err := karpenter.Explain(context.Background(), snap)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range rep.NodeClaims {
		if c.Drifted() {
			fmt.Printf("%s: %s\n", c.Name, c.Reasons[0].Name)
		}
	}
	fmt.Printf("%d of %d drifted\n", rep.Drifted, len(rep.NodeClaims))
	// Output:
	// default-a: NodePoolDrifted
	// default-b: AMIDrift
	// default-c: RequirementsDrifted
	// default-g: NodeClassDrift
	// gpu-a: AMIDrift
	// legacy-b: NodePoolDrifted
	// pg-a: PlacementGroupDrift
	// reserved-a: RequirementsDrifted
	// 8 of 16 drifted
}
