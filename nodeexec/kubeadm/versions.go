package kubeadm

import (
	"errors"
	"fmt"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"k8s.io/apimachinery/pkg/util/version"
)

// Version errors. kubeadm itself refuses to skip a minor version and this
// library refuses downgrades altogether (rolling a control plane back
// needs the etcd snapshot, not a plan).
var (
	ErrInvalidVersion = errors.New("invalid Kubernetes version")
	ErrDowngrade      = errors.New("downgrade refused")
	ErrSkippedMinor   = errors.New("upgrade skips a minor version")
	ErrMajorChange    = errors.New("major version change")
)

// VersionError names the versions involved in a refused upgrade.
type VersionError struct {
	From, To string
	Err      error
}

// Error implements error.
func (e *VersionError) Error() string {
	return errtext.Clip(fmt.Sprintf("kubeadm: upgrade %s -> %s: %v", errtext.Quote(e.From), errtext.Quote(e.To), e.Err))
}

// Unwrap returns the sentinel.
func (e *VersionError) Unwrap() error { return e.Err }

// parse accepts only the canonical form kubeadm prints with `kubeadm
// version -o short` and image tags use: "v" + semantic version, with an
// optional pre-release ("v1.31.2", "v1.31.2-eks-1-31-5"). The verify step
// compares the binaries' own report with this exact string, so "1.31.2",
// " v1.31.2" or build metadata ("v1.31.2+abc", which no image tag can
// carry) would pass validation and then fail on every node; they are
// refused here with the spelling to use instead.
func parse(s string) (*version.Version, error) {
	v, err := version.ParseSemantic(s)
	if err != nil {
		return nil, err
	}
	if v.BuildMetadata() != "" {
		return nil, fmt.Errorf("build metadata %q is not allowed: kubeadm and image tags never report it", "+"+v.BuildMetadata())
	}
	if canonical := "v" + v.String(); s != canonical {
		return nil, fmt.Errorf("not in canonical form; write it as %q", canonical)
	}
	return v, nil
}

// CheckUpgrade applies kubeadm's version-skew rule to an upgrade from ->
// to: same major, no downgrade (not even a patch), and at most one minor
// version step. Re-applying the same version is allowed (kubeadm upgrade
// is idempotent).
func CheckUpgrade(from, to string) error {
	f, err := parse(from)
	if err != nil {
		return &VersionError{From: from, To: to, Err: fmt.Errorf("%w: from %q: %v", ErrInvalidVersion, from, err)}
	}
	t, err := parse(to)
	if err != nil {
		return &VersionError{From: from, To: to, Err: fmt.Errorf("%w: to %q: %v", ErrInvalidVersion, to, err)}
	}
	switch {
	case t.Major() != f.Major():
		return &VersionError{From: from, To: to, Err: ErrMajorChange}
	case t.LessThan(f):
		return &VersionError{From: from, To: to, Err: ErrDowngrade}
	case t.Minor() > f.Minor()+1:
		return &VersionError{From: from, To: to, Err: fmt.Errorf("%w: %d.%d -> %d.%d; upgrade through %d.%d first",
			ErrSkippedMinor, f.Major(), f.Minor(), t.Major(), t.Minor(), f.Major(), f.Minor()+1)}
	}
	return nil
}

// atLeast reports whether v >= major.minor.
func atLeast(v *version.Version, minor uint) bool {
	return v.Major() > 1 || (v.Major() == 1 && v.Minor() >= minor)
}
