package capi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/strategy"
)

// ErrInfeasible is wrapped by a Check's error to say "this change cannot be
// applied in place": the Extension then declines, naming the error, and
// Cluster API replaces the machine instead. Any other error from a check
// is answered as a Failure, and Cluster API asks again.
var ErrInfeasible = errors.New("infeasible in place")

// CheckRequest is what a feasibility check sees: one CanUpdateMachine or
// CanUpdateMachineSet request whose changes the Decider would apply in
// place.
type CheckRequest struct {
	// Current and Desired are the request's objects. For a MachineSet
	// request (Templates) Machine holds the *clusterv1.MachineSet and the
	// others are templates.
	Current, Desired diff.State
	// FromVersion and ToVersion are the current and desired
	// spec.version (spec.template.spec.version for a MachineSet), as sent.
	FromVersion, ToVersion string
	// Templates is true for CanUpdateMachineSet.
	Templates bool
	// Decision is the Decider's InPlace decision; Decision.InPlace holds
	// the changes that would be applied.
	Decision strategy.Decision
}

// VersionChanged reports whether the request changes the Kubernetes
// version in place.
func (r CheckRequest) VersionChanged() bool {
	return r.FromVersion != r.ToVersion && slices.ContainsFunc(r.Decision.InPlace.Changes, func(c diff.Change) bool {
		return c.Category == diff.CategoryKubernetesVersion
	})
}

// Check is a feasibility check the Extension runs before it accepts an
// in-place update: accepting is a promise, since Cluster API cannot fall
// back to a replacement once UpdateMachine has started, so everything that
// can be known to fail must be refused here. A Check returns nil to allow,
// an error wrapping ErrInfeasible to decline (the message is shown on the
// Machine), or another error for "cannot tell now".
type Check interface {
	Check(ctx context.Context, req CheckRequest) error
}

// CheckFunc adapts a function to a Check.
type CheckFunc func(ctx context.Context, req CheckRequest) error

// Check calls f; a nil f is an ErrInvalidOption error.
func (f CheckFunc) Check(ctx context.Context, req CheckRequest) error {
	if f == nil {
		return fmt.Errorf("%w: nil CheckFunc", ErrInvalidOption)
	}
	return f(ctx, req)
}

// VersionCheck declines a Kubernetes version change that no kubeadm plan
// can make: a downgrade, a skipped minor version, a major change, or a
// version not in the canonical "vX.Y.Z" form kubeadm reports
// (kubeadm.CheckUpgrade, the same rule UpdateMachine's plan applies). The
// Extension always runs it first.
func VersionCheck() Check {
	return CheckFunc(func(_ context.Context, r CheckRequest) error {
		if !r.VersionChanged() {
			return nil
		}
		if err := kubeadm.CheckUpgrade(r.FromVersion, r.ToVersion); err != nil {
			return fmt.Errorf("%w: spec.version: %w", ErrInfeasible, err)
		}
		return nil
	})
}

// ImagesByVersion maps a Kubernetes version ("v1.31.4") to the upgrader
// image that carries its binaries (nodepod.WithImage). The Extension
// answers a version change to a version the map does not have with a
// Failure (ExtensionOptions.Images), and MachineUpdater runs each update with the image
// of its target version.
type ImagesByVersion map[string]string

// Validate checks that every entry has a canonical version and an image.
func (m ImagesByVersion) Validate() error { return m.validate("ImagesByVersion") }

// validate is Validate, its errors naming option.
func (m ImagesByVersion) validate(option string) error {
	if len(m) == 0 {
		return &OptionError{Option: option, Detail: "no version"}
	}
	for _, v := range m.versions() {
		if err := kubeadm.CheckUpgrade(v, v); err != nil {
			return &OptionError{Option: option, Detail: fmt.Sprintf("version %s is not a version", errtext.Quote(v))}
		}
		if strings.TrimSpace(m[v]) == "" {
			return &OptionError{Option: option, Detail: fmt.Sprintf("version %s has no image", errtext.Quote(v))}
		}
	}
	return nil
}

// Image returns the image for version, and whether there is one.
func (m ImagesByVersion) Image(version string) (string, bool) {
	img, ok := m[version]
	return img, ok && img != ""
}

func (m ImagesByVersion) versions() []string {
	vs := make([]string, 0, len(m))
	for v := range m {
		vs = append(vs, v)
	}
	slices.Sort(vs)
	return vs
}

// ErrVersionNotConfigured is matched by the Failure answered to a version
// change the extension is not configured for: no upgrader image for the
// target version (ExtensionOptions.Images), or no bundle checksums for it
// (extensionserver). It is a Failure and not a decline because it passes
// once the operator configures the version: Cluster API asks again about
// a Failure (the MachineDeployment or KubeadmControlPlane waits, changing
// nothing), while it would remember a MachineSet's decline for 24 hours
// and replace the whole MachineDeployment. To have such machines replaced
// instead, set SettingDisabled.
var ErrVersionNotConfigured = errors.New("the extension is not configured for the version")

// imagesCheck answers a version change to a version that has no upgrader
// image in images with a Failure (ErrVersionNotConfigured): the check of
// ExtensionOptions.Images.
func imagesCheck(images ImagesByVersion) Check {
	return CheckFunc(func(_ context.Context, r CheckRequest) error {
		if !r.VersionChanged() {
			return nil
		}
		if _, ok := images.Image(r.ToVersion); !ok {
			return fmt.Errorf("%w: spec.version: no upgrader image for %s (have: %s); Cluster API asks again once it is configured",
				ErrVersionNotConfigured, r.ToVersion, strings.Join(images.versions(), ", "))
		}
		return nil
	})
}
