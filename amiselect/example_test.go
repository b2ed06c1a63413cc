package amiselect_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/upgradekit/upgradekit/amiselect"
	clocktesting "k8s.io/utils/clock/testing"
)

// A catalog as `aws ec2 describe-images` prints it, plus the SSM parameters
// the al2023@latest alias reads for Kubernetes 1.31.
const catalogJSON = `{
  "Images": [
    {"ImageId": "ami-0aaa", "Name": "amazon-eks-node-al2023-x86_64-standard-1.31-v20250501", "Architecture": "x86_64",
     "State": "available", "CreationDate": "2025-05-01T00:00:00.000Z", "OwnerId": "602401143452", "ImageOwnerAlias": "amazon"},
    {"ImageId": "ami-0bbb", "Name": "amazon-eks-node-al2023-x86_64-standard-1.31-v20250520", "Architecture": "x86_64",
     "State": "available", "CreationDate": "2025-05-20T00:00:00.000Z", "OwnerId": "602401143452", "ImageOwnerAlias": "amazon"},
    {"ImageId": "ami-0ccc", "Name": "amazon-eks-node-al2023-arm64-standard-1.31-v20250520", "Architecture": "arm64",
     "State": "available", "CreationDate": "2025-05-20T00:00:00.000Z", "OwnerId": "602401143452", "ImageOwnerAlias": "amazon"}
  ],
  "Parameters": [
    {"Name": "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id", "Value": "ami-0bbb"},
    {"Name": "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/standard/recommended/image_id", "Value": "ami-0ccc"}
  ]
}`

func Example() {
	ctx := context.Background()
	clock := clocktesting.NewFakePassiveClock(time.Date(2025, 5, 21, 0, 0, 0, 0, time.UTC))
	catalog, err := amiselect.LoadCatalog(strings.NewReader(catalogJSON), amiselect.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	src := amiselect.NewCache(catalog, amiselect.WithClock(clock))

	// dev follows the EKS-optimized release.
	dev, err := amiselect.Resolve(ctx, src, []amiselect.Term{{Alias: "al2023@latest"}},
		amiselect.WithKubernetesVersion("1.31"), amiselect.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, img := range dev.Images {
		fmt.Println("dev:", img.Requirements, img.ID)
	}
	newNode, _ := dev.ImageFor(amiselect.Requirements{Architecture: amiselect.ArchAMD64})
	fmt.Println("a new amd64 node gets", newNode.ID)
	drifted, reason := dev.IsDrifted("ami-0aaa", amiselect.Requirements{Architecture: amiselect.ArchAMD64})
	fmt.Println(drifted, reason)

	// Staged promotion with name terms: staging waits a week before taking
	// a new image, prod runs exactly what staging runs.
	terms := []amiselect.Term{{Name: "amazon-eks-node-al2023-*-1.31-*", Owner: "amazon"}}
	latest, err := amiselect.Resolve(ctx, src, terms, amiselect.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	staging, err := amiselect.Resolve(ctx, src, terms, amiselect.WithMinAge(7*24*time.Hour), amiselect.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range staging.Changes(latest) {
		fmt.Println("without the minimum age staging would change", c)
	}
	prod, err := amiselect.Resolve(ctx, src, terms, amiselect.WithPin(staging), amiselect.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("prod runs", prod.Images[0].ID)

	// Bad input is a typed error naming the field.
	err = amiselect.Validate([]amiselect.Term{{ID: "ami-0aaa", Name: "x"}})
	fmt.Println(err)
	// Output:
	// dev: amd64/standard ami-0bbb
	// dev: arm64/standard ami-0ccc
	// a new amd64 node gets ami-0bbb
	// true AMIDrift: node runs ami-0aaa, a new amd64 node gets ami-0bbb (amazon-eks-node-al2023-x86_64-standard-1.31-v20250520, created 2025-05-20T00:00:00Z)
	// without the minimum age staging would change amd64: ami-0aaa -> ami-0bbb
	// without the minimum age staging would change arm64: (none) -> ami-0ccc
	// prod runs ami-0aaa
	// invalid AMI selector term: amiSelectorTerms[0].id "ami-0aaa": 'id' is mutually exclusive, cannot be set with name
}
