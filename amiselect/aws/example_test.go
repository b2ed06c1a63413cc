package aws_test

import (
	"context"
	"fmt"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/upgradekit/upgradekit/amiselect"
	amiaws "github.com/upgradekit/upgradekit/amiselect/aws"
)

// fakeEC2 stands in for *ec2.Client: one page holding every image.
type fakeEC2 struct{ images []ec2types.Image }

func (f fakeEC2) DescribeImages(_ context.Context, in *ec2.DescribeImagesInput, _ ...func(*ec2.Options)) (*ec2.DescribeImagesOutput, error) {
	// A real EC2 applies in.Filters; the ids asked for are all there is here.
	return &ec2.DescribeImagesOutput{Images: f.images}, nil
}

// fakeSSM stands in for *ssm.Client.
type fakeSSM map[string]string

func (f fakeSSM) GetParameter(_ context.Context, in *ssm.GetParameterInput, _ ...func(*ssm.Options)) (*ssm.GetParameterOutput, error) {
	v, ok := f[*in.Name]
	if !ok {
		return nil, &ssmtypes.ParameterNotFound{Message: in.Name}
	}
	return &ssm.GetParameterOutput{Parameter: &ssmtypes.Parameter{Name: in.Name, Value: &v}}, nil
}

// Resolving an EKS-optimized alias through EC2 and SSM. In production pass
// ec2.NewFromConfig(cfg) and ssm.NewFromConfig(cfg), or use NewFromConfig;
// here two fake clients answer so the example runs offline.
func Example() {
	base := "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/"
	ssmClient := fakeSSM{
		base + "x86_64/standard/recommended/image_id": "ami-0std",
		base + "arm64/standard/recommended/image_id":  "ami-0arm",
	}
	ec2Client := fakeEC2{images: []ec2types.Image{
		{ImageId: sdkaws.String("ami-0std"), Name: sdkaws.String("al2023-x86_64"), Architecture: ec2types.ArchitectureValuesX8664,
			State: ec2types.ImageStateAvailable, CreationDate: sdkaws.String("2026-01-10T00:00:00.000Z")},
		{ImageId: sdkaws.String("ami-0arm"), Name: sdkaws.String("al2023-arm64"), Architecture: ec2types.ArchitectureValuesArm64,
			State: ec2types.ImageStateAvailable, CreationDate: sdkaws.String("2026-01-09T00:00:00.000Z")},
	}}

	// Wrap the source in a cache, as Karpenter does.
	src := amiselect.NewCache(amiaws.New(ec2Client, ssmClient))
	res, err := amiselect.Resolve(context.Background(), src, []amiselect.Term{{Alias: "al2023@latest"}},
		amiselect.WithKubernetesVersion("1.31"))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, img := range res.Images {
		fmt.Println(img.Requirements, img.ID, img.Name)
	}
	for _, s := range res.Skipped {
		fmt.Println("skipped:", s.Parameter)
	}
	// Output:
	// amd64/standard ami-0std al2023-x86_64
	// arm64/standard ami-0arm al2023-arm64
	// skipped: /aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/nvidia/recommended/image_id
	// skipped: /aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/neuron/recommended/image_id
	// skipped: /aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/nvidia/recommended/image_id
}
