package amiselect

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

func TestParseAlias(t *testing.T) {
	tests := []struct {
		in      string
		want    Alias
		wantErr string
	}{
		{in: "al2023@latest", want: Alias{FamilyAL2023, "latest"}},
		{in: "al2@v20240807", want: Alias{FamilyAL2, "v20240807"}},
		{in: "bottlerocket@v1.20.3", want: Alias{FamilyBottlerocket, "v1.20.3"}},
		{in: "windows2019@latest", want: Alias{FamilyWindows2019, "latest"}},
		{in: "windows2022@latest", want: Alias{FamilyWindows2022, "latest"}},
		{in: "windows2025@latest", want: Alias{FamilyWindows2025, "latest"}},
		{in: "al2023@" + "123456789012345678901234", wantErr: "at most 30"}, // 31 characters
		{in: "", wantErr: "family@version"},
		{in: "al2023", wantErr: "family@version"},
		{in: "al2023@", wantErr: "family@version"},
		{in: "@latest", wantErr: "family@version"},
		{in: "al-2023@latest", wantErr: "family@version"},
		{in: "al2023@a@b", wantErr: "must not contain '@'"},
		{in: "ubuntu@latest", wantErr: "family is not supported"},
		{in: "custom@latest", wantErr: "family is not supported"},
		{in: "AL2023@latest", wantErr: `did you mean "al2023@latest"`},
		{in: "windows2019@v20240101", wantErr: "only specify version 'latest'"},
		{in: "windows2025@1.0", wantErr: "only specify version 'latest'"},
		{in: "bottlerocket@v", wantErr: "Bottlerocket version is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseAlias(tt.in)
			if tt.wantErr != "" {
				require.ErrorIs(t, err, ErrInvalidAlias)
				require.Contains(t, err.Error(), tt.wantErr)
				var e *Error
				require.True(t, errors.As(err, &e))
				require.Equal(t, "alias", e.Field)
				require.Equal(t, tt.in, e.Value)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.in, got.String())
		})
	}
	// Exactly 30 characters is allowed.
	_, err := ParseAlias("al2023@" + "12345678901234567890123")
	require.NoError(t, err)
}

func TestKubernetesVersion(t *testing.T) {
	for in, want := range map[string]string{"1.31": "1.31", "v1.31": "1.31", "1.31.2": "1.31", "v1.9": "1.9"} {
		got, _, err := ParseKubernetesVersion(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got)
	}
	for _, in := range []string{"", "1", "2.31", "1.x", "1.31.2.3", "1.", "1.031", "1.-1", " 1.31", "1.31a"} {
		_, _, err := ParseKubernetesVersion(in)
		require.ErrorIs(t, err, ErrInvalidKubernetesVersion, in)
	}
}

// Paths as in karpenter-provider-aws v1.15.1 pkg/providers/amifamily.
func TestAliasParameters(t *testing.T) {
	tests := []struct {
		alias string
		k8s   string
		want  []Parameter
	}{
		{alias: "al2023@latest", k8s: "1.31", want: []Parameter{
			{Path: "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id", Variants: []Variant{VariantStandard}, Mutable: true},
			{Path: "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/nvidia/recommended/image_id", Variants: []Variant{VariantNvidia}, Mutable: true},
			{Path: "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/neuron/recommended/image_id", Variants: []Variant{VariantNeuron}, Mutable: true},
			{Path: "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/standard/recommended/image_id", Variants: []Variant{VariantStandard}, Mutable: true},
			{Path: "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/nvidia/recommended/image_id", Variants: []Variant{VariantNvidia}, Mutable: true},
		}},
		{alias: "al2023@v20240807", k8s: "v1.30.4", want: []Parameter{
			{Path: "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.30-v20240807/image_id", Variants: []Variant{VariantStandard}},
			{Path: "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/nvidia/amazon-eks-node-al2023-x86_64-nvidia-1.30-v20240807/image_id", Variants: []Variant{VariantNvidia}},
			{Path: "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/neuron/amazon-eks-node-al2023-x86_64-neuron-1.30-v20240807/image_id", Variants: []Variant{VariantNeuron}},
			{Path: "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/arm64/standard/amazon-eks-node-al2023-arm64-standard-1.30-v20240807/image_id", Variants: []Variant{VariantStandard}},
			{Path: "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/arm64/nvidia/amazon-eks-node-al2023-arm64-nvidia-1.30-v20240807/image_id", Variants: []Variant{VariantNvidia}},
		}},
		{alias: "al2@latest", k8s: "1.32", want: []Parameter{
			{Path: "/aws/service/eks/optimized-ami/1.32/amazon-linux-2/recommended/image_id", Variants: []Variant{VariantStandard}, Mutable: true},
			{Path: "/aws/service/eks/optimized-ami/1.32/amazon-linux-2-arm64/recommended/image_id", Variants: []Variant{VariantStandard}, Mutable: true},
			{Path: "/aws/service/eks/optimized-ami/1.32/amazon-linux-2-gpu/recommended/image_id", Variants: []Variant{VariantNvidia, VariantNeuron}, Mutable: true},
		}},
		{alias: "al2@v20240807", k8s: "1.29", want: []Parameter{
			{Path: "/aws/service/eks/optimized-ami/1.29/amazon-linux-2/amazon-eks-node-1.29-v20240807/image_id", Variants: []Variant{VariantStandard}},
			{Path: "/aws/service/eks/optimized-ami/1.29/amazon-linux-2-arm64/amazon-eks-arm64-node-1.29-v20240807/image_id", Variants: []Variant{VariantStandard}},
			{Path: "/aws/service/eks/optimized-ami/1.29/amazon-linux-2-gpu/amazon-eks-gpu-node-1.29-v20240807/image_id", Variants: []Variant{VariantNvidia, VariantNeuron}},
		}},
		{alias: "bottlerocket@latest", k8s: "1.31", want: []Parameter{
			{Path: "/aws/service/bottlerocket/aws-k8s-1.31/x86_64/latest/image_id", Variants: []Variant{VariantStandard, VariantNeuron}, Mutable: true},
			{Path: "/aws/service/bottlerocket/aws-k8s-1.31/arm64/latest/image_id", Variants: []Variant{VariantStandard}, Mutable: true},
			{Path: "/aws/service/bottlerocket/aws-k8s-1.31-nvidia/x86_64/latest/image_id", Variants: []Variant{VariantNvidia}, Mutable: true},
			{Path: "/aws/service/bottlerocket/aws-k8s-1.31-nvidia/arm64/latest/image_id", Variants: []Variant{VariantNvidia}, Mutable: true},
		}},
		{alias: "bottlerocket@v1.20.3", k8s: "1.31", want: []Parameter{
			{Path: "/aws/service/bottlerocket/aws-k8s-1.31/x86_64/1.20.3/image_id", Variants: []Variant{VariantStandard, VariantNeuron}},
			{Path: "/aws/service/bottlerocket/aws-k8s-1.31/arm64/1.20.3/image_id", Variants: []Variant{VariantStandard}},
			{Path: "/aws/service/bottlerocket/aws-k8s-1.31-nvidia/x86_64/1.20.3/image_id", Variants: []Variant{VariantNvidia}},
			{Path: "/aws/service/bottlerocket/aws-k8s-1.31-nvidia/arm64/1.20.3/image_id", Variants: []Variant{VariantNvidia}},
		}},
		{alias: "windows2019@latest", k8s: "1.31", want: []Parameter{
			{Path: "/aws/service/ami-windows-latest/Windows_Server-2019-English-Core-EKS_Optimized-1.31/image_id", WindowsBuild: WindowsBuild2019, Mutable: true},
		}},
		{alias: "windows2022@latest", k8s: "1.31", want: []Parameter{
			{Path: "/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-1.31/image_id", WindowsBuild: WindowsBuild2022, Mutable: true},
		}},
		{alias: "windows2025@latest", k8s: "1.35", want: []Parameter{
			{Path: "/aws/service/ami-windows-latest/Windows_Server-2025-English-Core-EKS_Optimized-1.35/image_id", WindowsBuild: WindowsBuild2025, Mutable: true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.alias+"/"+tt.k8s, func(t *testing.T) {
			a, err := ParseAlias(tt.alias)
			require.NoError(t, err)
			got, err := a.Parameters(tt.k8s)
			require.NoError(t, err)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Fatalf("parameters (-want +got):\n%s", d)
			}
		})
	}
}

func TestAliasParametersNoARM64Neuron(t *testing.T) {
	a, _ := ParseAlias("al2023@latest")
	ps, err := a.Parameters("1.31")
	require.NoError(t, err)
	for _, p := range ps {
		require.NotContains(t, p.Path, "arm64/neuron")
	}
}

func TestAliasParametersGates(t *testing.T) {
	tests := []struct {
		alias, k8s string
		wantKind   error
		wantText   string
	}{
		{"al2@latest", "1.33", ErrUnsupported, "no longer supported on EKS 1.33+"},
		{"al2@v20240807", "1.34", ErrUnsupported, "1.33+"},
		{"windows2025@latest", "1.34", ErrUnsupported, "1.35 or higher"},
		{"al2023@latest", "one.thirty", ErrInvalidKubernetesVersion, "expected 1.N"},
	}
	for _, tt := range tests {
		t.Run(tt.alias+"/"+tt.k8s, func(t *testing.T) {
			a, err := ParseAlias(tt.alias)
			require.NoError(t, err)
			_, err = a.Parameters(tt.k8s)
			require.ErrorIs(t, err, tt.wantKind)
			require.Contains(t, err.Error(), tt.wantText)
		})
	}
	// AL2 is fine just below the gate, Windows2025 at it.
	a, _ := ParseAlias("al2@latest")
	_, err := a.Parameters("1.32")
	require.NoError(t, err)
	w, err := ParseAlias("windows2025@latest")
	require.NoError(t, err)
	params, err := w.Parameters("1.35")
	require.NoError(t, err)
	require.NotEmpty(t, params)
	require.Contains(t, params[0].Path, "2025")
	// An Alias not made by ParseAlias is refused, not resolved.
	_, err = Alias{Family: FamilyCustom, Version: "latest"}.Parameters("1.31")
	require.ErrorIs(t, err, ErrInvalidAlias)
	_, err = Alias{Family: FamilyWindows2022, Version: "v1"}.Parameters("1.31")
	require.ErrorIs(t, err, ErrInvalidAlias)
	// Karpenter accepts bottlerocket@v but would read ".../x86_64//image_id".
	_, err = Alias{Family: FamilyBottlerocket, Version: "vv"}.Parameters("1.31")
	require.ErrorIs(t, err, ErrInvalidAlias)
}

func TestRequirementsCompatible(t *testing.T) {
	amd := func(v Variant) Requirements { return Requirements{Architecture: ArchAMD64, Variant: v} }
	tests := []struct {
		name       string
		image      Requirements
		node       Requirements
		compatible bool
	}{
		{"custom image fits any amd64 node", amd(""), amd(VariantNvidia), true},
		{"arch mismatch", amd(""), Requirements{Architecture: ArchARM64}, false},
		{"standard fits plain node", amd(VariantStandard), amd(""), true},
		{"standard refuses gpu node", amd(VariantStandard), amd(VariantNvidia), false},
		{"nvidia needs gpu", amd(VariantNvidia), amd(""), false},
		{"nvidia fits gpu", amd(VariantNvidia), amd(VariantNvidia), true},
		{"neuron fits accelerator", amd(VariantNeuron), amd(VariantNeuron), true},
		{"windows image refuses linux node", Requirements{Architecture: ArchAMD64, WindowsBuild: WindowsBuild2022}, amd(""), false},
		{"windows image fits same build", Requirements{Architecture: ArchAMD64, WindowsBuild: WindowsBuild2022}, Requirements{Architecture: ArchAMD64, WindowsBuild: WindowsBuild2022}, true},
		{"windows image refuses other build", Requirements{Architecture: ArchAMD64, WindowsBuild: WindowsBuild2022}, Requirements{Architecture: ArchAMD64, WindowsBuild: WindowsBuild2019}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.compatible, tt.image.compatible(tt.node))
		})
	}
}
