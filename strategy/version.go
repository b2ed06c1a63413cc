package strategy

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/upgradekit/upgradekit/internal/errtext"
)

// ErrInvalidVersion is matched by ParseKubernetesVersion's errors.
var ErrInvalidVersion = errors.New("invalid Kubernetes version")

// KubernetesVersion is a Kubernetes version parsed once, giving each
// package the spelling it needs: Kubeadm for nodeexec/kubeadm plans,
// capi.ImagesByVersion keys and Cluster API's spec.version ("v1.31.4"),
// Minor for amiselect ("1.31"), String for people. The zero value is not
// a version.
type KubernetesVersion struct {
	minor, patch int
	hasPatch     bool
	pre          string
}

// ParseKubernetesVersion reads a Kubernetes version as people and tools
// write it: "v1.31.4", "1.31.4", "v1.31" or "1.31", with an optional
// pre-release ("v1.31.4-eks-1-31-5"). It refuses surrounding space, build
// metadata ("+..." no binary or image tag reports), a major version other
// than 1 and leading zeros, with an error naming the input.
func ParseKubernetesVersion(s string) (KubernetesVersion, error) {
	bad := func(why string) (KubernetesVersion, error) {
		return KubernetesVersion{}, fmt.Errorf("%w: %s: %s", ErrInvalidVersion, errtext.Quote(s), why)
	}
	rest := strings.TrimPrefix(s, "v")
	if strings.ContainsAny(rest, "+ \t\n") {
		return bad("no spaces or build metadata")
	}
	var v KubernetesVersion
	core, pre, hasPre := strings.Cut(rest, "-")
	if hasPre {
		if pre == "" {
			return bad("empty pre-release")
		}
		v.pre = pre
	}
	parts := strings.Split(core, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return bad("want 1.MINOR or 1.MINOR.PATCH, with an optional v")
	}
	nums := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || p == "" || (len(p) > 1 && p[0] == '0') || len(p) > 4 {
			return bad(fmt.Sprintf("part %d is not a number without leading zeros", i+1))
		}
		nums[i] = n
	}
	if nums[0] != 1 {
		return bad("the major version is 1")
	}
	if hasPre && len(parts) == 2 {
		return bad("a pre-release needs a patch version")
	}
	v.minor = nums[1]
	if len(parts) == 3 {
		v.patch, v.hasPatch = nums[2], true
	}
	return v, nil
}

// String is the canonical spelling: "v1.31.4", or "v1.31" without a patch.
func (v KubernetesVersion) String() string {
	s := "v1." + strconv.Itoa(v.minor)
	if v.hasPatch {
		s += "." + strconv.Itoa(v.patch)
	}
	if v.pre != "" {
		s += "-" + v.pre
	}
	return s
}

// HasPatch reports whether the version names a patch release.
func (v KubernetesVersion) HasPatch() bool { return v.hasPatch }

// Kubeadm is the spelling kubeadm, image tags and Cluster API use
// ("v1.31.4"): the exact release, so a version without a patch is an
// error.
func (v KubernetesVersion) Kubeadm() (string, error) {
	if !v.hasPatch {
		return "", fmt.Errorf("%w: %s names no patch release, which kubeadm plans and Cluster API need", ErrInvalidVersion, v)
	}
	return v.String(), nil
}

// Minor is the minor release, "1.31", as amiselect selects images by.
func (v KubernetesVersion) Minor() string { return "1." + strconv.Itoa(v.minor) }

// Compare orders versions by minor, then patch (a version without a
// patch sorts before that minor's patches), then pre-release (a
// pre-release before its release; pre-releases by text): -1, 0 or +1.
func (v KubernetesVersion) Compare(o KubernetesVersion) int {
	switch {
	case v.minor != o.minor:
		return cmp.Compare(v.minor, o.minor)
	case v.hasPatch != o.hasPatch:
		if v.hasPatch {
			return 1
		}
		return -1
	case v.patch != o.patch:
		return cmp.Compare(v.patch, o.patch)
	case v.pre == o.pre:
		return 0
	case v.pre == "":
		return 1
	case o.pre == "":
		return -1
	}
	return strings.Compare(v.pre, o.pre)
}
