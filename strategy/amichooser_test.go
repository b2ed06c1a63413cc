package strategy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/upgradekit/upgradekit/amiselect"
	"github.com/upgradekit/upgradekit/drift"
	"github.com/upgradekit/upgradekit/strategy"
)

const imageAnnotation = "example.com/image-id"

func catalogJSON(images ...string) string {
	return `{"Images": [` + strings.Join(images, ",") + `]}`
}

func eksImage(id, arch, date string) string {
	ec2Arch := map[string]string{"amd64": "x86_64", "arm64": "arm64"}[arch]
	return fmt.Sprintf(`{"ImageId": %q, "Name": "amazon-eks-node-al2023-%s-standard-1.31-v%s", "Architecture": %q,
	  "State": "available", "CreationDate": "%sT00:00:00.000Z", "OwnerId": "602401143452", "ImageOwnerAlias": "amazon"}`,
		id, ec2Arch, strings.ReplaceAll(date, "-", ""), ec2Arch, date)
}

// TestAMIChooserDriftsExactlyTheNodesANewImageSelects: a new amd64 image
// in the catalog drifts the amd64 nodes and no other, and each reason names
// the node's image, the new one, the term that matched, and why it won.
func TestAMIChooserDriftsExactlyTheNodesANewImageSelects(t *testing.T) {
	ctx := context.Background()
	clock := clocktesting.NewFakePassiveClock(time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC))
	terms := []amiselect.Term{{Name: "amazon-eks-node-al2023-*-standard-1.31-*", Owner: "amazon"}}
	catalog := catalogJSON(eksImage("ami-0aaa", "amd64", "2025-05-01"), eksImage("ami-0ccc", "arm64", "2025-05-01"))
	resolve := func(ctx context.Context) (*amiselect.Resolution, error) {
		cat, err := amiselect.LoadCatalog(strings.NewReader(catalog), amiselect.WithClock(clock))
		if err != nil {
			return nil, err
		}
		return amiselect.Resolve(ctx, cat, terms, amiselect.WithClock(clock))
	}
	chooser, err := strategy.AMIChooser(resolve)
	require.NoError(t, err)
	check, err := drift.NewImage(chooser, func(o metav1.Object) (string, bool) {
		id, ok := o.GetAnnotations()[imageAnnotation]
		return id, ok
	})
	require.NoError(t, err)
	node := func(name, arch, image string, extra map[string]string) metav1.Object {
		labels := map[string]string{"kubernetes.io/arch": arch}
		for k, v := range extra {
			labels[k] = v
		}
		return &metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{imageAnnotation: image}}
	}
	nodes := []metav1.Object{
		node("amd64-a", "amd64", "ami-0aaa", nil),
		node("amd64-gpu", "amd64", "ami-0aaa", map[string]string{"karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia"}), // custom images fit any variant
		node("arm64-a", "arm64", "ami-0ccc", nil),
	}
	detector := drift.NewDetector(check)
	drifted := func() map[string]*drift.Reason {
		out := map[string]*drift.Reason{}
		for _, n := range nodes {
			r, err := detector.First(ctx, n)
			require.NoError(t, err, n.GetName())
			if r != nil {
				out[n.GetName()] = r
			}
		}
		return out
	}
	require.Empty(t, drifted(), "nothing drifts while every node runs the choice")

	catalog = catalogJSON(eksImage("ami-0aaa", "amd64", "2025-05-01"), eksImage("ami-0ccc", "arm64", "2025-05-01"), eksImage("ami-0bbb", "amd64", "2025-05-20"))
	got := drifted()
	require.ElementsMatch(t, []string{"amd64-a", "amd64-gpu"}, keysOf(got), "exactly the nodes the new image is for")
	r := got["amd64-a"]
	require.Equal(t, drift.ReasonNameAMIDrift, r.Name)
	require.Equal(t, "ami-0aaa", r.Evidence[0].Got)
	require.Equal(t, "ami-0bbb", r.Evidence[0].Want)
	for _, want := range []string{"ami-0aaa", "ami-0bbb", `term 0 (name "amazon-eks-node-al2023-*-standard-1.31-*", owner "amazon")`,
		"amazon-eks-node-al2023-x86_64-standard-1.31-v20250520", "created 2025-05-20T00:00:00Z"} {
		require.Contains(t, r.Message, want)
	}
	require.Equal(t, r.Evidence[0].Detail, r.Message[strings.Index(r.Message, ": ")+2:], "the why is the evidence's detail too")
}

func keysOf(m map[string]*drift.Reason) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestRequirementsFromLabels maps Karpenter's node labels.
func TestRequirementsFromLabels(t *testing.T) {
	for _, tc := range []struct {
		labels map[string]string
		want   amiselect.Requirements
		err    bool
	}{
		{labels: map[string]string{"kubernetes.io/arch": "amd64"}, want: amiselect.Requirements{Architecture: "amd64"}},
		{labels: map[string]string{"kubernetes.io/arch": "arm64", "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia"}, want: amiselect.Requirements{Architecture: "arm64", Variant: amiselect.VariantNvidia}},
		{labels: map[string]string{"kubernetes.io/arch": "amd64", "karpenter.k8s.aws/instance-accelerator-manufacturer": "aws"}, want: amiselect.Requirements{Architecture: "amd64", Variant: amiselect.VariantNeuron}},
		{labels: map[string]string{"kubernetes.io/arch": "amd64", "node.kubernetes.io/windows-build": "10.0.20348"}, want: amiselect.Requirements{Architecture: "amd64", WindowsBuild: "10.0.20348"}},
		{labels: map[string]string{}, err: true},
		{labels: map[string]string{"kubernetes.io/arch": "s390x"}, err: true},
	} {
		got, err := strategy.RequirementsFromLabels(tc.labels)
		if tc.err {
			require.ErrorIs(t, err, strategy.ErrNoRequirements)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
	}
}

// TestAMIChooserCannotTell: no architecture label, a failed resolution, no
// fitting image: errors (drift's "cannot tell"), never a drift.
func TestAMIChooserCannotTell(t *testing.T) {
	ctx := context.Background()
	_, err := strategy.AMIChooser(nil)
	require.ErrorIs(t, err, drift.ErrInvalidOption)
	boom := errors.New("ec2 unavailable")
	c, err := strategy.AMIChooser(func(context.Context) (*amiselect.Resolution, error) { return nil, boom })
	require.NoError(t, err)
	_, err = c.ChooseImage(ctx, map[string]string{"kubernetes.io/arch": "amd64"})
	require.ErrorIs(t, err, boom)
	_, err = c.ChooseImage(ctx, nil)
	require.ErrorIs(t, err, strategy.ErrNoRequirements)
	empty, err := strategy.AMIChooser(func(context.Context) (*amiselect.Resolution, error) { return &amiselect.Resolution{}, nil })
	require.NoError(t, err)
	_, err = empty.ChooseImage(ctx, map[string]string{"kubernetes.io/arch": "amd64"})
	require.ErrorIs(t, err, drift.ErrNoImage)
}

// Drift of a node's machine image, explained: amiselect resolves
// Karpenter-style selector terms, and drift's image check asks it which
// image a node with these labels would get now.
func ExampleAMIChooser() {
	ctx := context.Background()
	clock := clocktesting.NewFakePassiveClock(time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC))
	catalog, _ := amiselect.LoadCatalog(strings.NewReader(catalogJSON(
		eksImage("ami-0aaa", "amd64", "2025-05-01"), eksImage("ami-0bbb", "amd64", "2025-05-20"))), amiselect.WithClock(clock))
	terms := []amiselect.Term{{Name: "amazon-eks-node-al2023-*", Owner: "amazon"}}
	chooser, _ := strategy.AMIChooser(func(ctx context.Context) (*amiselect.Resolution, error) {
		return amiselect.Resolve(ctx, catalog, terms, amiselect.WithClock(clock))
	})
	check, _ := drift.NewImage(chooser, func(o metav1.Object) (string, bool) {
		id, ok := o.GetAnnotations()[imageAnnotation]
		return id, ok
	})
	node := &metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"kubernetes.io/arch": "amd64"},
		Annotations: map[string]string{imageAnnotation: "ami-0aaa"}}
	reason, err := check.Check(ctx, node)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(reason.Name)
	fmt.Println(reason.Message)
	// Output:
	// AMIDrift
	// image ami-0aaa is not the current choice ami-0bbb for this node's requirements: term 0 (name "amazon-eks-node-al2023-*", owner "amazon") matched ami-0bbb amazon-eks-node-al2023-x86_64-standard-1.31-v20250520, created 2025-05-20T00:00:00Z, the newest image that is not deprecated for amd64
}

// TestAMIChooserSaysWhatItPassedOver: with a minimum age, the reason says
// a newer image was passed over, and why.
func TestAMIChooserSaysWhatItPassedOver(t *testing.T) {
	ctx := context.Background()
	clock := clocktesting.NewFakePassiveClock(time.Date(2025, 5, 22, 0, 0, 0, 0, time.UTC))
	catalog, err := amiselect.LoadCatalog(strings.NewReader(catalogJSON(
		eksImage("ami-0old", "amd64", "2025-04-01"), eksImage("ami-0mid", "amd64", "2025-05-01"), eksImage("ami-0new", "amd64", "2025-05-20"))), amiselect.WithClock(clock))
	require.NoError(t, err)
	terms := []amiselect.Term{{Name: "amazon-eks-node-al2023-*"}}
	c, err := strategy.AMIChooser(func(ctx context.Context) (*amiselect.Resolution, error) {
		return amiselect.Resolve(ctx, catalog, terms, amiselect.WithClock(clock), amiselect.WithMinAge(7*24*time.Hour))
	})
	require.NoError(t, err)
	img, why, err := c.ExplainImage(ctx, map[string]string{"kubernetes.io/arch": "amd64"})
	require.NoError(t, err)
	require.Equal(t, "ami-0mid", img, "the newest image at least a week old")
	require.Contains(t, why, "passed over: ")
	require.Contains(t, why, "ami-0new")
}
