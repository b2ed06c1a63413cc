package amiselect

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// VersionLatest is the alias version that follows the newest release.
const VersionLatest = "latest"

// Alias is a parsed "family@version" alias.
type Alias struct {
	// Family is the AMI family named before the "@".
	Family Family
	// Version is what follows the "@": "latest" or a pinned release.
	Version string
}

// String returns the alias in Karpenter's spelling (lower-case family).
func (a Alias) String() string { return strings.ToLower(string(a.Family)) + "@" + a.Version }

var aliasPattern = regexp.MustCompile(`^[a-zA-Z0-9]+@.+$`)

var aliasFamilies = map[string]Family{
	"al2":          FamilyAL2,
	"al2023":       FamilyAL2023,
	"bottlerocket": FamilyBottlerocket,
	"windows2019":  FamilyWindows2019,
	"windows2022":  FamilyWindows2022,
	"windows2025":  FamilyWindows2025,
}

// ParseAlias parses a Karpenter alias with Karpenter's rules: it matches
// ^[a-zA-Z0-9]+@.+$, is at most 30 characters, names one of al2, al2023,
// bottlerocket, windows2019, windows2022, windows2025 (lower case), and
// Windows families only take "latest". Two things Karpenter accepts are
// refused: a second "@" (Karpenter's controller would crash on it) and a
// Bottlerocket version made only of "v"s (it can never resolve).
func ParseAlias(s string) (Alias, error) {
	bad := func(reason string) (Alias, error) {
		return Alias{}, fieldError(ErrInvalidAlias, "alias", s, reason)
	}
	if len(s) > MaxAliasLength {
		return bad(fmt.Sprintf("%d characters, at most %d are allowed", len(s), MaxAliasLength))
	}
	if !aliasPattern.MatchString(s) {
		return bad("'alias' is improperly formatted, must match the format 'family@version'")
	}
	name, version, _ := strings.Cut(s, "@")
	if strings.Contains(version, "@") {
		return bad("the version must not contain '@'")
	}
	family, ok := aliasFamilies[name]
	if !ok {
		reason := "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'"
		if f, ok := aliasFamilies[strings.ToLower(name)]; ok {
			reason = fmt.Sprintf("alias families are lower case: did you mean %q?", strings.ToLower(string(f))+"@"+version)
		}
		return bad(reason)
	}
	if family.windows() && version != VersionLatest {
		return bad("windows families may only specify version 'latest'")
	}
	if family == FamilyBottlerocket && strings.TrimLeft(version, "v") == "" {
		// Karpenter accepts this and then reads ".../x86_64//image_id".
		return bad("the Bottlerocket version is empty once its leading 'v' is dropped")
	}
	return Alias{Family: family, Version: version}, nil
}

func (f Family) windows() bool {
	return f == FamilyWindows2019 || f == FamilyWindows2022 || f == FamilyWindows2025
}

// Variant is the accelerator variant an EKS-optimized image is built for.
type Variant string

// The variants of the EKS-optimized images. An image with no variant (custom
// images) is compatible with every instance of its architecture.
const (
	VariantStandard Variant = "standard"
	VariantNvidia   Variant = "nvidia"
	VariantNeuron   Variant = "neuron"
)

// Kubernetes architecture names, as in the kubernetes.io/arch label.
const (
	ArchAMD64 = "amd64"
	ArchARM64 = "arm64"
)

// Windows builds (node.kubernetes.io/windows-build) of the Windows families.
const (
	WindowsBuild2019 = "10.0.17763"
	WindowsBuild2022 = "10.0.20348"
	WindowsBuild2025 = "10.0.26100"
)

// Requirements is the requirement set an image carries and, with the same
// fields, the description of a node that needs an image. All fields are plain
// values so the set can be used as a map key.
//
// For an image: Architecture is always set; Variant is empty when the image
// fits any instance of its architecture; WindowsBuild is set only for Windows
// alias images.
//
// For a node: Architecture is the node's architecture, Variant the kind of
// accelerator it has (empty means none, same as VariantStandard) and
// WindowsBuild its Windows build (empty for Linux).
type Requirements struct {
	// Architecture is the Kubernetes architecture, amd64 or arm64.
	Architecture string `json:"architecture"`
	// Variant is the accelerator variant; empty means none.
	Variant Variant `json:"variant,omitempty"`
	// WindowsBuild is the Windows build, empty for Linux.
	WindowsBuild string `json:"windowsBuild,omitempty"`
}

// String renders the requirement set as "arch[/variant][/windows-build]".
func (r Requirements) String() string {
	s := r.Architecture
	if r.Variant != "" {
		s += "/" + string(r.Variant)
	}
	if r.WindowsBuild != "" {
		s += "/windows-" + r.WindowsBuild
	}
	return s
}

// compatible reports whether an image carrying r fits a node described by
// node, following Karpenter's requirement semantics: the standard variant
// needs an instance without GPUs and accelerators, nvidia needs a GPU, neuron
// needs an accelerator, and an image without a variant fits any instance.
func (r Requirements) compatible(node Requirements) bool {
	if r.Architecture != node.Architecture {
		return false
	}
	nv := node.Variant
	if nv == "" {
		nv = VariantStandard
	}
	if r.Variant != "" && r.Variant != nv {
		return false
	}
	if r.WindowsBuild != "" && r.WindowsBuild != node.WindowsBuild {
		return false
	}
	return true
}

func (r Requirements) less(o Requirements) bool {
	if r.Architecture != o.Architecture {
		return r.Architecture < o.Architecture
	}
	if r.Variant != o.Variant {
		return r.Variant < o.Variant
	}
	return r.WindowsBuild < o.WindowsBuild
}

// Parameter is one SSM parameter an alias resolves through, with what the
// image it names is known to be for. The architecture is not part of it: like
// Karpenter, Resolve takes the architecture from the described image.
type Parameter struct {
	// Path is the SSM parameter name.
	Path string `json:"path"`
	// Variants are the accelerator variants the named image serves; empty
	// means any.
	Variants []Variant `json:"variants,omitempty"`
	// WindowsBuild is the Windows build the named image is, empty for
	// Linux.
	WindowsBuild string `json:"windowsBuild,omitempty"`
	// Mutable is true for "latest"/"recommended" parameters whose value
	// changes with each release.
	Mutable bool `json:"mutable"`
}

// ParseKubernetesVersion normalises a Kubernetes version to "1.N" (accepting a
// leading "v" and a patch number) and returns the minor number.
func ParseKubernetesVersion(s string) (string, int, error) {
	v := strings.TrimPrefix(s, "v")
	parts := strings.Split(v, ".")
	if len(parts) < 2 || len(parts) > 3 || parts[0] != "1" {
		return "", 0, fieldError(ErrInvalidKubernetesVersion, "kubernetesVersion", s, "expected 1.N, e.g. 1.31")
	}
	for _, p := range parts[1:] {
		if p == "" || len(p) > 4 || strings.TrimLeft(p, "0123456789") != "" || (len(p) > 1 && p[0] == '0') {
			return "", 0, fieldError(ErrInvalidKubernetesVersion, "kubernetesVersion", s, "expected 1.N, e.g. 1.31")
		}
	}
	minor, _ := strconv.Atoi(parts[1])
	return "1." + parts[1], minor, nil
}

// Parameters returns the SSM parameters the alias resolves through for a
// Kubernetes version, with Karpenter's gates: AL2 is refused for Kubernetes
// >= 1.33 and Windows2025 for < 1.35 (both ErrUnsupported). Pinned versions map
// to the versioned parameter names (al2023@v20240807 ->
// .../amazon-eks-node-al2023-x86_64-standard-1.31-v20240807/image_id).
// The order is stable: x86_64 before arm64, standard before nvidia before
// neuron.
func (a Alias) Parameters(kubernetesVersion string) ([]Parameter, error) {
	k8s, minor, err := ParseKubernetesVersion(kubernetesVersion)
	if err != nil {
		return nil, err
	}
	if _, ok := aliasFamilies[strings.ToLower(string(a.Family))]; !ok || a.Version == "" {
		return nil, fieldError(ErrInvalidAlias, "alias", a.String(), "not a parsed alias: use ParseAlias")
	}
	latest := a.Version == VersionLatest
	switch a.Family {
	case FamilyAL2:
		if minor >= 33 {
			return nil, &Error{Kind: ErrUnsupported, Path: "alias", Index: -1, Field: "alias", Value: a.String(),
				Reason: "AL2 aliases are no longer supported on EKS 1.33+ (Kubernetes " + k8s + "): use al2023@latest or bottlerocket@latest"}
		}
		name := func(kind string) string {
			if latest {
				return "recommended"
			}
			return fmt.Sprintf("amazon-eks-%snode-%s-%s", kind, k8s, a.Version)
		}
		base := "/aws/service/eks/optimized-ami/" + k8s
		return []Parameter{
			{Path: base + "/amazon-linux-2/" + name("") + "/image_id", Variants: []Variant{VariantStandard}, Mutable: latest},
			{Path: base + "/amazon-linux-2-arm64/" + name("arm64-") + "/image_id", Variants: []Variant{VariantStandard}, Mutable: latest},
			{Path: base + "/amazon-linux-2-gpu/" + name("gpu-") + "/image_id", Variants: []Variant{VariantNvidia, VariantNeuron}, Mutable: latest},
		}, nil
	case FamilyAL2023:
		var out []Parameter
		for _, av := range []struct {
			arch     string
			variants []Variant
		}{
			{"x86_64", []Variant{VariantStandard, VariantNvidia, VariantNeuron}},
			{"arm64", []Variant{VariantStandard, VariantNvidia}},
		} {
			for _, v := range av.variants {
				name := "recommended"
				if !latest {
					name = fmt.Sprintf("amazon-eks-node-al2023-%s-%s-%s-%s", av.arch, v, k8s, a.Version)
				}
				out = append(out, Parameter{
					Path:     fmt.Sprintf("/aws/service/eks/optimized-ami/%s/amazon-linux-2023/%s/%s/%s/image_id", k8s, av.arch, v, name),
					Variants: []Variant{v},
					Mutable:  latest,
				})
			}
		}
		return out, nil
	case FamilyBottlerocket:
		// Bottlerocket versions carry a "v" on GitHub but not in SSM; both
		// spellings are accepted, as Karpenter does.
		v := strings.TrimLeft(a.Version, "v")
		if v == "" {
			return nil, fieldError(ErrInvalidAlias, "alias", a.String(), "the Bottlerocket version is empty once its leading 'v' is dropped")
		}
		p := func(flavour, arch string, variants ...Variant) Parameter {
			return Parameter{Path: fmt.Sprintf("/aws/service/bottlerocket/aws-k8s-%s%s/%s/%s/image_id", k8s, flavour, arch, v), Variants: variants, Mutable: latest}
		}
		return []Parameter{
			p("", "x86_64", VariantStandard, VariantNeuron),
			p("", "arm64", VariantStandard),
			p("-nvidia", "x86_64", VariantNvidia),
			p("-nvidia", "arm64", VariantNvidia),
		}, nil
	case FamilyWindows2019, FamilyWindows2022, FamilyWindows2025:
		year, build := "2019", WindowsBuild2019
		switch a.Family {
		case FamilyWindows2022:
			year, build = "2022", WindowsBuild2022
		case FamilyWindows2025:
			year, build = "2025", WindowsBuild2025
			if minor < 35 {
				return nil, &Error{Kind: ErrUnsupported, Path: "alias", Index: -1, Field: "alias", Value: a.String(),
					Reason: "Windows Server 2025 requires EKS version 1.35 or higher, current version: " + k8s}
			}
		}
		if !latest {
			return nil, fieldError(ErrInvalidAlias, "alias", a.String(), "windows families may only specify version 'latest'")
		}
		return []Parameter{{
			Path:         fmt.Sprintf("/aws/service/ami-windows-latest/Windows_Server-%s-English-Core-EKS_Optimized-%s/image_id", year, k8s),
			WindowsBuild: build,
			Mutable:      true,
		}}, nil
	}
	return nil, fieldError(ErrInvalidAlias, "alias", a.String(), "family has no alias")
}
