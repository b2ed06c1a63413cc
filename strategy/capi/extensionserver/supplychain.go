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

// AllowMutableUpgraderImages accepts upgrader image references without a
// digest (a tag such as ":v1.31.1" or ":latest"). Whoever can push that tag
// then chooses what runs as root on every node; New logs a warning through
// WithLogger's logger. Meant for development clusters only.
func AllowMutableUpgraderImages() Option { return func(c *config) { c.allowMutableImages = true } }

// WithBundleChecksums sets, per Kubernetes version, the SHA-256 of every
// file the upgrader bundle stages (see kubeadm.Config.Checksums). Each
// update's bundle step verifies its target version's on the node, with
// sha256sum, before it runs anything staged or installs any tree; a
// version change to a version without checksums is declined at CanUpdate*.
// The checksums must come from your release process (the SHA256SUMS the
// bundle's builder writes, kept apart from the image), never from the
// image they check. They are also the list of what each bundle carries:
// a version whose bundle lacks kubeadm, kubelet or kubectl, or what a step
// not left out by WithSkipSteps needs (etcd/etcdctl for the first control
// plane's etcd snapshot, a containerd/ or cni-plugins/ tree), is refused,
// since its update would fail on a drained node. hack/bundle.sh builds a
// bundle and its SHA256SUMS. Required, or WithBundleChecksumsDir, or
// WithoutBundleChecksums.
func WithBundleChecksums(sums ChecksumsByVersion) Option {
	return func(c *config) {
		c.checksumsSet = true
		c.checksums = make(ChecksumsByVersion, len(sums))
		for v, m := range sums {
			c.checksums[v] = maps.Clone(m)
		}
	}
}

// WithBundleChecksumsDir reads the checksums of WithBundleChecksums from
// dir when New runs: one file per version, named by the version
// ("v1.31.4"), in sha256sum's format; other names (a mounted ConfigMap's
// "..data" links, say) are ignored. Validate checks only that dir is an
// absolute path; New fails on a file it cannot read or parse, or on an
// upgrader image version (WithUpgraderImages) without a file, and on a
// bundle that lacks what the steps need (see WithBundleChecksums). Restart
// the extension after adding a version.
func WithBundleChecksumsDir(dir string) Option { return func(c *config) { c.checksumsDir = dir } }

// WithoutBundleChecksums runs upgrader bundles without verifying their
// content: the staged kubeadm, kubelet, kubectl and etcdctl run as root on
// the node, and the containerd and CNI trees are copied onto /, exactly as
// the image delivered them. New logs a warning through WithLogger's logger.
// Meant for development clusters only.
func WithoutBundleChecksums() Option { return func(c *config) { c.withoutChecksums = true } }

// validateSupplyChain checks the options that decide what runs as root on
// the nodes: images by digest, and the bundle checksums.
func (c *config) validateSupplyChain() error {
	if !c.allowMutableImages {
		if c.images != nil {
			for _, v := range slices.Sorted(maps.Keys(c.images)) {
				if !PinnedByDigest(c.images[v]) {
					return invalid("WithUpgraderImages", "%s for %s is not pinned by digest (want <image>@sha256:<64 hex>; AllowMutableUpgraderImages accepts tags)", errtext.Quote(c.images[v]), errtext.Quote(v))
				}
			}
		} else if !PinnedByDigest(c.image) {
			return invalid("WithUpgraderImage", "%s is not pinned by digest (want <image>@sha256:<64 hex>; AllowMutableUpgraderImages accepts tags)", errtext.Quote(c.image))
		}
	}
	given := 0
	for _, set := range []bool{c.checksumsSet, c.checksumsDir != "", c.withoutChecksums} {
		if set {
			given++
		}
	}
	switch {
	case given == 0:
		return invalid("WithBundleChecksums", "required (or WithBundleChecksumsDir): without checksums the upgrader bundle's binaries run as root unverified; WithoutBundleChecksums accepts that")
	case given > 1:
		return invalid("WithBundleChecksums", "WithBundleChecksums, WithBundleChecksumsDir and WithoutBundleChecksums: set one")
	case c.checksumsDir != "":
		if !filepath.IsAbs(c.checksumsDir) {
			return invalid("WithBundleChecksumsDir", "%s is not an absolute path", errtext.Quote(c.checksumsDir))
		}
	case c.checksumsSet:
		return c.validateChecksums("WithBundleChecksums")
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
			return &OptionError{Option: option, Detail: "version " + v, Err: err}
		}
		if err := c.checkBundleCarries(option, v); err != nil {
			return err
		}
	}
	for _, v := range slices.Sorted(maps.Keys(c.images)) {
		if _, ok := c.checksums[v]; !ok {
			return invalid(option, "upgrader image version %s has no checksums", v)
		}
	}
	return nil
}

// applySkips leaves out of k the steps of WithSkipSteps.
func (c *config) applySkips(k *kubeadm.Config) {
	for _, step := range c.skip {
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
		fix += ", or WithSkipSteps(" + n.Step + ") leaves the step out"
	}
	return invalid(option, "version %s: the bundle carries no %s, which the %s step needs (%s)", version, what, n.Step, fix)
}

// loadChecksums reads WithBundleChecksumsDir's directory, and logs the
// opt-outs in use.
func (c *config) loadChecksums() error {
	if !c.decideOnly && c.allowMutableImages {
		c.log.Info("WARNING: upgrader images are not required to be pinned by digest (AllowMutableUpgraderImages): whoever can push their tags chooses what runs as root on the nodes")
	}
	if c.decideOnly || c.checksumsDir == "" {
		if !c.decideOnly && c.withoutChecksums {
			c.log.Info("WARNING: upgrader bundles are not verified (WithoutBundleChecksums): staged binaries run as root on the nodes as the image delivered them")
		}
		return nil
	}
	entries, err := os.ReadDir(c.checksumsDir)
	if err != nil {
		return &OptionError{Option: "WithBundleChecksumsDir", Err: err}
	}
	c.checksums = ChecksumsByVersion{}
	for _, e := range entries {
		v := e.Name()
		if kubeadm.CheckUpgrade(v, v) != nil {
			continue // not a version: a ConfigMap's ..data, a README
		}
		b, err := os.ReadFile(path.Join(c.checksumsDir, v))
		if err != nil {
			return &OptionError{Option: "WithBundleChecksumsDir", Err: err}
		}
		sums, err := kubeadm.ParseChecksums(string(b))
		if err != nil {
			return &OptionError{Option: "WithBundleChecksumsDir", Detail: "file " + v, Err: err}
		}
		c.checksums[v] = sums
	}
	if err := c.validateChecksums("WithBundleChecksumsDir"); err != nil {
		return err
	}
	c.log.Info("bundle checksums loaded", "dir", c.checksumsDir, "versions", strings.Join(slices.Sorted(maps.Keys(c.checksums)), ","))
	return nil
}

// checksumsCheck answers a version change to a version that has no bundle
// checksums with a Failure (capi.ErrVersionNotConfigured): its update
// could not verify its bundle and would fail, and once the checksums are
// configured Cluster API's next question is accepted (a decline would be
// remembered for a MachineSet for 24 hours).
func (c *config) checksumsCheck() capi.Check {
	if c.decideOnly || c.withoutChecksums {
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
// unless WithoutBundleChecksums: a version without checksums then fails
// to plan, before the node is touched.
func (c *config) planChecksums(k *kubeadm.Config) {
	if c.withoutChecksums {
		return
	}
	k.RequireChecksums = true
	k.Checksums = maps.Clone(c.checksums[k.ToVersion])
}
