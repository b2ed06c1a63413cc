package drift_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgradekit/upgradekit/drift"
)

func req(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

func TestRequirements(t *testing.T) {
	labels := map[string]string{
		"kubernetes.io/arch":                    "amd64",
		"karpenter.sh/capacity-type":            "spot",
		"karpenter.k8s.aws/instance-generation": "6",
		"karpenter.k8s.aws/instance-family":     "m6i",
		"team":                                  "payments",
		"topology.kubernetes.io/zone":           "us-west-2a",
	}
	cases := []struct {
		name    string
		reqs    []corev1.NodeSelectorRequirement
		drifted []string // label keys named in the evidence
	}{
		{"In satisfied", []corev1.NodeSelectorRequirement{req("kubernetes.io/arch", corev1.NodeSelectorOpIn, "amd64", "arm64")}, nil},
		{"In violated", []corev1.NodeSelectorRequirement{req("kubernetes.io/arch", corev1.NodeSelectorOpIn, "arm64")}, []string{"kubernetes.io/arch"}},
		{"In on a missing label", []corev1.NodeSelectorRequirement{req("example.com/tier", corev1.NodeSelectorOpIn, "gold")}, []string{"example.com/tier"}},
		{"NotIn satisfied", []corev1.NodeSelectorRequirement{req("karpenter.k8s.aws/instance-family", corev1.NodeSelectorOpNotIn, "t3")}, nil},
		{"NotIn violated", []corev1.NodeSelectorRequirement{req("karpenter.k8s.aws/instance-family", corev1.NodeSelectorOpNotIn, "t3", "m6i")}, []string{"karpenter.k8s.aws/instance-family"}},
		{"NotIn on a missing label is fine", []corev1.NodeSelectorRequirement{req("example.com/tier", corev1.NodeSelectorOpNotIn, "gold")}, nil},
		{"Exists satisfied", []corev1.NodeSelectorRequirement{req("team", corev1.NodeSelectorOpExists)}, nil},
		{"Exists on a missing label", []corev1.NodeSelectorRequirement{req("example.com/tier", corev1.NodeSelectorOpExists)}, []string{"example.com/tier"}},
		{"DoesNotExist satisfied", []corev1.NodeSelectorRequirement{req("example.com/tier", corev1.NodeSelectorOpDoesNotExist)}, nil},
		{"DoesNotExist violated", []corev1.NodeSelectorRequirement{req("team", corev1.NodeSelectorOpDoesNotExist)}, []string{"team"}},
		{"Gt satisfied", []corev1.NodeSelectorRequirement{req("karpenter.k8s.aws/instance-generation", corev1.NodeSelectorOpGt, "5")}, nil},
		{"Gt is strict", []corev1.NodeSelectorRequirement{req("karpenter.k8s.aws/instance-generation", corev1.NodeSelectorOpGt, "6")}, []string{"karpenter.k8s.aws/instance-generation"}},
		{"Lt satisfied", []corev1.NodeSelectorRequirement{req("karpenter.k8s.aws/instance-generation", corev1.NodeSelectorOpLt, "7")}, nil},
		{"Lt is strict", []corev1.NodeSelectorRequirement{req("karpenter.k8s.aws/instance-generation", corev1.NodeSelectorOpLt, "6")}, []string{"karpenter.k8s.aws/instance-generation"}},
		{"Gt on a non-integer label", []corev1.NodeSelectorRequirement{req("team", corev1.NodeSelectorOpGt, "1")}, []string{"team"}},
		{"Gt on a missing label", []corev1.NodeSelectorRequirement{req("example.com/n", corev1.NodeSelectorOpGt, "1")}, []string{"example.com/n"}},
		{"Gt and Lt intersect", []corev1.NodeSelectorRequirement{
			req("karpenter.k8s.aws/instance-generation", corev1.NodeSelectorOpGt, "5"),
			req("karpenter.k8s.aws/instance-generation", corev1.NodeSelectorOpLt, "7"),
		}, nil},
		{"empty intersection on a missing key is DoesNotExist", []corev1.NodeSelectorRequirement{
			req("example.com/n", corev1.NodeSelectorOpGt, "7"),
			req("example.com/n", corev1.NodeSelectorOpLt, "5"),
		}, nil},
		{"In then NotIn intersect", []corev1.NodeSelectorRequirement{
			req("karpenter.sh/capacity-type", corev1.NodeSelectorOpIn, "spot", "on-demand"),
			req("karpenter.sh/capacity-type", corev1.NodeSelectorOpNotIn, "spot"),
		}, []string{"karpenter.sh/capacity-type"}},
		{"alias normalised", []corev1.NodeSelectorRequirement{req(corev1.LabelFailureDomainBetaZone, corev1.NodeSelectorOpIn, "us-west-2b")}, []string{"topology.kubernetes.io/zone"}},
		{"several keys reported", []corev1.NodeSelectorRequirement{
			req("kubernetes.io/arch", corev1.NodeSelectorOpIn, "arm64"),
			req("team", corev1.NodeSelectorOpIn, "risk"),
		}, []string{"kubernetes.io/arch", "team"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := drift.NewRequirements(tc.reqs, drift.WithLabelAliases(drift.KarpenterLabelAliases()))
			require.NoError(t, err)
			r, err := c.Check(context.Background(), &metav1.ObjectMeta{Labels: labels})
			require.NoError(t, err)
			if tc.drifted == nil {
				require.Nil(t, r)
				return
			}
			require.NotNil(t, r)
			require.Equal(t, drift.ReasonNameRequirementsDrifted, r.Name)
			var keys []string
			for _, e := range r.Evidence {
				require.Equal(t, drift.EvidenceKindLabel, e.Kind)
				keys = append(keys, e.Key)
			}
			require.Equal(t, tc.drifted, keys)
		})
	}
}

func TestRequirementsInvalid(t *testing.T) {
	for _, r := range []corev1.NodeSelectorRequirement{
		req("a", "Near", "x"),
		req("a", corev1.NodeSelectorOpGt, "x"),
		req("a", corev1.NodeSelectorOpLt),
		req("a", corev1.NodeSelectorOpLt, "1", "2"),
		req("a", corev1.NodeSelectorOpIn),
		req("", corev1.NodeSelectorOpExists),
	} {
		_, err := drift.NewRequirements([]corev1.NodeSelectorRequirement{r})
		require.ErrorIs(t, err, drift.ErrInvalidRequirement, "%+v", r)
	}
}

func TestImageCheck(t *testing.T) {
	chooser := drift.ImageChooserFunc(func(_ context.Context, labels map[string]string) (string, error) {
		switch labels["kubernetes.io/arch"] {
		case "amd64":
			return "ami-new-amd64", nil
		case "arm64":
			return "ami-new-arm64", nil
		case "none":
			return "", nil
		}
		return "", drift.ErrNoImage
	})
	imageOf := func(o metav1.Object) (string, bool) {
		v, ok := o.GetAnnotations()["example.com/image"]
		return v, ok
	}
	c, err := drift.NewImage(chooser, imageOf)
	require.NoError(t, err)
	node := func(arch, image string) *metav1.ObjectMeta {
		m := &metav1.ObjectMeta{Labels: map[string]string{"kubernetes.io/arch": arch}}
		if image != "" {
			m.Annotations = map[string]string{"example.com/image": image}
		}
		return m
	}
	ctx := context.Background()

	r, err := c.Check(ctx, node("amd64", "ami-new-amd64"))
	require.NoError(t, err)
	require.Nil(t, r)

	r, err = c.Check(ctx, node("arm64", "ami-old-arm64"))
	require.NoError(t, err)
	require.Equal(t, drift.ReasonNameAMIDrift, r.Name)
	require.Equal(t, []drift.Evidence{{Kind: drift.EvidenceKindImage, Key: "image", Want: "ami-new-arm64", Got: "ami-old-arm64"}}, r.Evidence)

	r, err = c.Check(ctx, node("amd64", ""))
	require.NoError(t, err)
	require.Nil(t, r, "unknown image is not drift")

	_, err = c.Check(ctx, node("s390x", "ami-x"))
	require.ErrorIs(t, err, drift.ErrNoImage)
	_, err = c.Check(ctx, node("none", "ami-x"))
	require.ErrorIs(t, err, drift.ErrNoImage)

	_, err = drift.NewImage(nil, imageOf)
	require.ErrorIs(t, err, drift.ErrInvalidOption)
}

func TestDetectorOrderAndComposition(t *testing.T) {
	s := mustStamper(t, mustHasher(t, "v1"))
	obj := nodeClaim("n1")
	obj.Labels = map[string]string{"kubernetes.io/arch": "amd64"}
	_, err := s.Stamp(obj, nodePoolTemplate())
	require.NoError(t, err)

	desired := nodePoolTemplate()
	desired.ObjectMeta.Labels["team"] = "risk"
	static, err := drift.NewStaticHash(s, desired)
	require.NoError(t, err)
	reqs, err := drift.NewRequirements([]corev1.NodeSelectorRequirement{req("kubernetes.io/arch", corev1.NodeSelectorOpIn, "arm64")})
	require.NoError(t, err)
	var calls []string
	custom := drift.CheckFunc(func(_ context.Context, o metav1.Object) (*drift.Reason, error) {
		calls = append(calls, o.GetName())
		return &drift.Reason{Name: drift.ReasonNameSubnetDrift, Message: "subnet gone"}, nil
	})
	failing := drift.CheckFunc(func(context.Context, metav1.Object) (*drift.Reason, error) {
		return nil, errors.New("provider down")
	})
	ctx := context.Background()

	d := drift.NewDetector(static, reqs, custom)
	first, err := d.First(ctx, obj)
	require.NoError(t, err)
	require.Equal(t, drift.ReasonNameNodePoolDrifted, first.Name)
	require.Contains(t, first.Evidence, drift.Evidence{Kind: drift.EvidenceKindField, Key: "metadata.labels", Detail: "Modified"})
	require.Empty(t, calls, "First stops at the first reason")

	all, err := d.All(ctx, obj)
	require.NoError(t, err)
	require.Equal(t, []drift.ReasonName{drift.ReasonNameNodePoolDrifted, drift.ReasonNameRequirementsDrifted, drift.ReasonNameSubnetDrift}, reasonNames(all))

	// Errors: First stops, All continues and joins.
	d2 := drift.NewDetector(failing, custom)
	_, err = d2.First(ctx, obj)
	var ce *drift.CheckError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, 0, ce.Index)
	all, err = d2.All(ctx, obj)
	require.Error(t, err)
	require.Equal(t, []drift.ReasonName{drift.ReasonNameSubnetDrift}, reasonNames(all))

	// ReasonNameNodeClassDrift: the same static check over a node class stamp.
	classStamper, err := drift.NewStamper("nodeclass.upgradekit.io", mustHasher(t, "v1"))
	require.NoError(t, err)
	_, err = classStamper.Stamp(obj, map[string]any{"amiFamily": "AL2023"})
	require.NoError(t, err)
	classCheck, err := drift.NewStaticHash(classStamper, map[string]any{"amiFamily": "Bottlerocket"}, drift.WithReason(drift.ReasonNameNodeClassDrift))
	require.NoError(t, err)
	r, err := drift.NewDetector(classCheck).First(ctx, obj)
	require.NoError(t, err)
	require.Equal(t, drift.ReasonNameNodeClassDrift, r.Name)

	// A cancelled context stops the detector.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = d.First(cctx, obj)
	require.ErrorIs(t, err, context.Canceled)

	// An empty detector finds nothing.
	r, err = drift.NewDetector().First(ctx, obj)
	require.NoError(t, err)
	require.Nil(t, r)
}

func reasonNames(rs []drift.Reason) []drift.ReasonName {
	out := make([]drift.ReasonName, len(rs))
	for i, r := range rs {
		out[i] = r.Name
	}
	return out
}
