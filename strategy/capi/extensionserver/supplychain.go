package extensionserver

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/upgradekit/upgradekit/internal/errtext"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// ChecksumsByVersion maps a Kubernetes version ("v1.31.4") to the SHA-256
// of every file its upgrader bundle stages, keyed by the path relative to
// the staging directory as sha256sum writes it (kubeadm.Config.Checksums;
// kubeadm.ParseChecksums reads a SHA256SUMS file into one).
type ChecksumsByVersion map[string]map[string]string

// digestRef is an image reference pinned by digest: anything, then
// "@sha256:" and 64 lowercase hexadecimal digits.
var digestRef = regexp.MustCompile(`^[^@\s]+@sha256:[0-9a-f]{64}$`)

// PinnedByDigest reports whether an image reference names its image by
// digest ("registry.example/upgrader@sha256:<64 hex>", optionally with a
// tag before the "@"), which no push can change.
func PinnedByDigest(image string) bool { return digestRef.MatchString(image) }

// validateSupplyChain checks the options that decide what runs as root on
// the nodes: images by digest, and the bundle checksums.
func (c *config) validateSupplyChain() error {
	if !c.AllowMutableUpgraderImages {
		if c.Images != nil {
			for _, v := range slices.Sorted(maps.Keys(c.Images)) {
				if !PinnedByDigest(c.Images[v]) {
					return invalid("UpdaterOptions.Images", "%s for %s is not pinned by digest (want <image>@sha256:<64 hex>; Options.AllowMutableUpgraderImages accepts tags)", errtext.Quote(c.Images[v]), errtext.Quote(v))
				}
			}
		} else if !PinnedByDigest(c.UpgraderImage) {
			return invalid("Options.UpgraderImage", "%s is not pinned by digest (want <image>@sha256:<64 hex>; Options.AllowMutableUpgraderImages accepts tags)", errtext.Quote(c.UpgraderImage))
		}
	}
	given := 0
	for _, set := range []bool{c.BundleChecksums != nil, c.BundleChecksumsDir != "", c.AllowUnverifiedBundles} {
		if set {
			given++
		}
	}
	switch {
	case given == 0:
		return invalid("Options.BundleChecksums", "required (or Options.BundleChecksumsDir): without checksums the upgrader bundle's binaries run as root unverified; Options.AllowUnverifiedBundles accepts that")
	case given > 1:
		return invalid("Options.BundleChecksums", "Options.BundleChecksums, Options.BundleChecksumsDir and Options.AllowUnverifiedBundles: set one")
	case c.BundleChecksumsDir != "":
		if !filepath.IsAbs(c.BundleChecksumsDir) {
			return invalid("Options.BundleChecksumsDir", "%s is not an absolute path", errtext.Quote(c.BundleChecksumsDir))
		}
	case c.BundleChecksums != nil:
		return c.validateChecksums("Options.BundleChecksums")
	}
	return nil
}

// validateChecksums checks c.checksums: canonical versions, valid entries,
// one per upgrader image version.
func (c *config) validateChecksums(option string) error {
	if len(c.checksums) == 0 {
		return invalid(option, "no version")
	}
	for _, v := range slices.Sorted(maps.Keys(c.checksums)) {
		if err := kubeadm.CheckUpgrade(v, v); err != nil {
			return invalid(option, "version %s is not a version", errtext.Quote(v))
		}
		if len(c.checksums[v]) == 0 {
			return invalid(option, "version %s has no checksum", v)
		}
		if err := kubeadm.ValidateChecksums(c.checksums[v]); err != nil {
			return &capi.OptionError{Option: option, Detail: "version " + v, Err: err}
		}
		if err := c.checkBundleCarries(option, v); err != nil {
			return err
		}
	}
	for _, v := range slices.Sorted(maps.Keys(c.Images)) {
		if _, ok := c.checksums[v]; !ok {
			return invalid(option, "upgrader image version %s has no checksums", v)
		}
	}
	return nil
}

// applySkips leaves out of k the steps of Options.SkipSteps.
func (c *config) applySkips(k *kubeadm.Config) {
	for _, step := range c.SkipSteps {
		switch step {
		case kubeadm.StepContainerd:
			k.SkipContainerd = true
		case kubeadm.StepCNIPlugins:
			k.SkipCNIPlugins = true
		case kubeadm.StepEtcdSnapshot:
			k.SkipEtcdSnapshot = true
		}
	}
}

// checkBundleCarries refuses a version whose checksums (the list of what
// its bundle carries) lack a binary or tree a plan step of the extension
// needs: without it the update would fail on the node, after the drain
// and after Cluster API accepted it. The first control plane's plan needs
// the most (etcdctl for the snapshot), and the extension cannot know at
// start-up which clusters have none, so that is the plan checked.
func (c *config) checkBundleCarries(option, version string) error {
	k := kubeadm.Config{Role: kubeadm.RoleFirstControlPlane}
	c.applySkips(&k)
	missing := kubeadm.MissingFrom(kubeadm.StagedNeeds(k), c.checksums[version])
	if len(missing) == 0 {
		return nil
	}
	n := missing[0]
	what := n.Path
	if n.Tree {
		what += "/ (a tree copied onto /)"
	}
	fix := "the bundle must carry it"
	if slices.Contains(SkippableSteps(), n.Step) {
		fix += ", or Options.SkipSteps with " + n.Step + " leaves the step out"
	}
	return invalid(option, "version %s: the bundle carries no %s, which the %s step needs (%s)", version, what, n.Step, fix)
}

// loadChecksums reads Options.BundleChecksumsDir, and logs the
// opt-outs in use.
func (c *config) loadChecksums() error {
	if !c.DecideOnly && c.AllowMutableUpgraderImages {
		c.Logger.Info("WARNING: upgrader images are not required to be pinned by digest (Options.AllowMutableUpgraderImages): whoever can push their tags chooses what runs as root on the nodes")
	}
	if c.DecideOnly || c.BundleChecksumsDir == "" {
		if !c.DecideOnly && c.AllowUnverifiedBundles {
			c.Logger.Info("WARNING: upgrader bundles are not verified (Options.AllowUnverifiedBundles): staged binaries run as root on the nodes as the image delivered them")
		}
		return nil
	}
	entries, err := os.ReadDir(c.BundleChecksumsDir)
	if err != nil {
		return &capi.OptionError{Option: "Options.BundleChecksumsDir", Err: err}
	}
	c.checksums = ChecksumsByVersion{}
	for _, e := range entries {
		v := e.Name()
		if kubeadm.CheckUpgrade(v, v) != nil {
			continue // not a version: a ConfigMap's ..data, a README
		}
		b, err := os.ReadFile(path.Join(c.BundleChecksumsDir, v))
		if err != nil {
			return &capi.OptionError{Option: "Options.BundleChecksumsDir", Err: err}
		}
		sums, err := kubeadm.ParseChecksums(string(b))
		if err != nil {
			return &capi.OptionError{Option: "Options.BundleChecksumsDir", Detail: "file " + v, Err: err}
		}
		c.checksums[v] = sums
	}
	if err := c.validateChecksums("Options.BundleChecksumsDir"); err != nil {
		return err
	}
	c.Logger.Info("bundle checksums loaded", "dir", c.BundleChecksumsDir, "versions", strings.Join(slices.Sorted(maps.Keys(c.checksums)), ","))
	return nil
}

// checksumsCheck answers a version change to a version that has no bundle
// checksums with a Failure (capi.ErrVersionNotConfigured): its update
// could not verify its bundle and would fail, and once the checksums are
// configured Cluster API's next question is accepted (a decline would be
// remembered for a MachineSet for 24 hours).
func (c *config) checksumsCheck() capi.Check {
	if c.DecideOnly || c.AllowUnverifiedBundles {
		return nil
	}
	return capi.CheckFunc(func(_ context.Context, r capi.CheckRequest) error {
		if !r.VersionChanged() {
			return nil
		}
		if _, ok := c.checksums[r.ToVersion]; !ok {
			return fmt.Errorf("%w: spec.version: no upgrader bundle checksums for %s (have: %s); Cluster API asks again once they are configured",
				capi.ErrVersionNotConfigured, r.ToVersion, strings.Join(slices.Sorted(maps.Keys(c.checksums)), ", "))
		}
		return nil
	})
}

// planChecksums sets the checksums of a kubeadm plan, and requires them
// unless Options.AllowUnverifiedBundles: a version without checksums then fails
// to plan, before the node is touched.
func (c *config) planChecksums(k *kubeadm.Config) {
	if c.AllowUnverifiedBundles {
		return
	}
	k.RequireChecksums = true
	k.Checksums = maps.Clone(c.checksums[k.ToVersion])
}
